//! [`NamespaceFiles`]: a live sandbox's files, reached from the host as the
//! run's user, through the sandbox's own mounts.
//!
//! # How
//!
//! Each operation runs on a thread of its own, made for it and ended after
//! it, which:
//!
//! 1. opens the sandbox's root as its processes see it,
//!    `/proc/<entry>/root` of the sandbox's pid 1 (or of its door, for an
//!    ordinary user), checked afterwards to be that live process's
//!    ([`Sandbox::open_root`]);
//! 2. becomes the run's user for every permission check, on that thread
//!    alone: no supplementary groups, the run's host uid and gid as its file
//!    system ids, and no capability in any set (so neither the file
//!    capabilities nor `CAP_SYS_PTRACE` or `CAP_SYS_ADMIN` answer for it);
//! 3. resolves every path from that root with `openat2(RESOLVE_IN_ROOT |
//!    RESOLVE_NO_MAGICLINKS)`: `/`, `..` and absolute links stay inside the
//!    sandbox's root, links are followed inside as a command would follow
//!    them, mounts inside (the workspace's overlay, `/tmp`, a writable
//!    cache) are crossed (no `RESOLVE_NO_XDEV`), and a `/proc` magic link
//!    (`/proc/1/root`, `/proc/N/fd/M`, `/proc/N/cwd`), which would lead to
//!    another root or a host file, is refused;
//! 4. opens what must not be followed (`stat`, a removal, a rename, each
//!    entry of a listing) with `O_NOFOLLOW` or by name relative to its
//!    directory's descriptor, and what it reads or writes first with
//!    `O_PATH`: its type is checked on that descriptor (a FIFO, socket or
//!    device is refused without ever being opened, so a read never blocks
//!    and no device acts), and only a regular file is opened again through
//!    `/proc/thread-self/fd/N` (the same inode, whatever the path names
//!    meanwhile: no window between the check and the use), with the open's
//!    permission check done as the run.
//!
//! The data then moves through the opened descriptor on tokio's blocking
//! pool, in chunks: the permission decision was the open's.
//!
//! # Why not a helper inside the sandbox
//!
//! A process joined to the sandbox (as a command is) would get the run's
//! seccomp filter and namespaces too, but costs a clone, a join and a
//! handshake per operation (milliseconds), must stream through pipes, and,
//! forked from a multi-threaded runner, may only make raw system calls until
//! it `exec`s a program, which would have to be in the sandbox. The thread
//! costs tens of microseconds, and the kernel's own resolution rules keep it
//! inside: it never walks a path string itself. The seccomp filter is the
//! run's processes' (it forbids `openat2` inside); the thread is the
//! runner's, and what it may do to files is what the run's user may.

mod ops;
#[cfg(test)]
mod tests;

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;

use async_trait::async_trait;
use workspace_core::boundary::{
    FileAccess, FileError, FileInfo, ReadFile, WriteFile, WriteOptions,
};

use crate::spawn::Sandbox;
use crate::sys::thread_creds;

/// A live sandbox's files, acted on as the run's user (see the
/// [module docs](crate::files)). Made by [`NamespaceProcess`](crate::process::NamespaceProcess)
/// for a sealed run; cheap, holds the sandbox.
#[derive(Debug, Clone)]
pub struct NamespaceFiles {
    sandbox: Arc<Sandbox>,
    uid: u32,
    gid: u32,
}

impl NamespaceFiles {
    /// The files of `sandbox`, acted on as host uid `uid` and gid `gid` (the
    /// run's ids on the host).
    pub fn new(sandbox: Arc<Sandbox>, uid: u32, gid: u32) -> Self {
        Self { sandbox, uid, gid }
    }

    /// Runs `work` on the sandbox's root, on a thread of its own acting as
    /// the run's user (see the module docs); `path` names the operation's
    /// path in an error of the thread itself.
    async fn as_the_run<T: Send + 'static>(
        &self,
        path: &str,
        work: impl FnOnce(&OwnedFd) -> Result<T, FileError> + Send + 'static,
    ) -> Result<T, FileError> {
        let (answer, answered) = tokio::sync::oneshot::channel();
        let sandbox = Arc::clone(&self.sandbox);
        let (uid, gid) = (self.uid, self.gid);
        let named = path.to_owned();
        std::thread::Builder::new()
            .name("aw-files".into())
            .spawn(move || {
                let result = sandbox
                    .open_root()
                    .map_err(|e| FileError::SandboxGone {
                        source: Box::new(e),
                    })
                    .and_then(|root| {
                        // Never past this point with the runner's rights.
                        thread_creds::act_as(uid, gid).map_err(|errno| FileError::Io {
                            op: "taking the run's identity",
                            path: named,
                            source: io::Error::from_raw_os_error(errno),
                        })?;
                        work(&root)
                    });
                let _ = answer.send(result);
            })
            .map_err(|source| FileError::Io {
                op: "starting a thread",
                path: path.to_owned(),
                source,
            })?;
        answered.await.map_err(|_| FileError::Io {
            op: "waiting for the file thread",
            path: path.to_owned(),
            source: io::Error::other("it ended without an answer"),
        })?
    }
}

#[async_trait]
impl FileAccess for NamespaceFiles {
    async fn open_read(&self, path: &str, offset: u64) -> Result<ReadFile, FileError> {
        let owned = path.to_owned();
        let (info, file) = self
            .as_the_run(path, move |root| ops::open_read(root, &owned, offset))
            .await?;
        Ok(ReadFile {
            info,
            content: Box::pin(tokio::fs::File::from_std(file)),
        })
    }

    async fn open_write(&self, path: &str, options: &WriteOptions) -> Result<WriteFile, FileError> {
        let (owned, options) = (path.to_owned(), *options);
        let (created, file) = self
            .as_the_run(path, move |root| ops::open_write(root, &owned, &options))
            .await?;
        Ok(WriteFile {
            created,
            content: Box::pin(tokio::fs::File::from_std(file)),
        })
    }

    async fn stat(&self, path: &str) -> Result<FileInfo, FileError> {
        let owned = path.to_owned();
        self.as_the_run(path, move |root| ops::stat(root, &owned))
            .await
    }

    async fn list(&self, path: &str, depth: u32, limit: usize) -> Result<Vec<FileInfo>, FileError> {
        let owned = path.to_owned();
        self.as_the_run(path, move |root| ops::list(root, &owned, depth, limit))
            .await
    }

    async fn remove(&self, path: &str, recursive: bool) -> Result<u64, FileError> {
        let owned = path.to_owned();
        self.as_the_run(path, move |root| ops::remove(root, &owned, recursive))
            .await
    }

    async fn mkdir(&self, path: &str, parents: bool) -> Result<(), FileError> {
        let owned = path.to_owned();
        self.as_the_run(path, move |root| ops::mkdir(root, &owned, parents))
            .await
    }

    async fn rename(&self, from: &str, to: &str) -> Result<(), FileError> {
        let (from_owned, to_owned) = (from.to_owned(), to.to_owned());
        self.as_the_run(from, move |root| ops::rename(root, &from_owned, &to_owned))
            .await
    }
}
