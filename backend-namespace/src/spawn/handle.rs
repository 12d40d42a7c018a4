//! [`SpawnedChild`]: the host's handle on a run's namespace init.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

use nix::errno::Errno;
use nix::libc;
use workspace_core::evidence::ExitStatusRecord;

use super::error::SpawnError;
use crate::sys::{pidfd, process};

/// A command running in its own namespaces, seen from the host.
///
/// `pid` is the namespace's pid 1 (the init that forked the command). Dropping the
/// handle without [`wait`](Self::wait) kills the whole namespace and reaps it, so a
/// forgotten handle never leaks processes.
#[derive(Debug)]
pub struct SpawnedChild {
    pid: i32,
    pidfd: Arc<OwnedFd>,
    status_read: OwnedFd,
    exit: Option<ExitStatusRecord>,
    /// Let go by [`SpawnedChild::release`]: dropping it kills nothing.
    released: bool,
}

/// Kills a run's namespace from anywhere, even while another thread waits.
///
/// It signals through a pidfd, so once the init has been reaped a late kill is a
/// harmless no-op rather than a signal to a recycled pid.
#[derive(Clone, Debug)]
pub struct ChildKiller {
    pid: i32,
    pidfd: Arc<OwnedFd>,
}

impl ChildKiller {
    /// Sends `SIGKILL` to the namespace's init, which ends every process in the
    /// pid namespace. Killing an init that already ended is not an error.
    pub fn kill(&self) -> Result<(), SpawnError> {
        self.signal(libc::SIGKILL)
    }

    /// Sends `signal` to the namespace's init, through the pidfd (never to a
    /// recycled pid). `SIGKILL` ends the whole namespace; one of
    /// [`FORWARDED_SIGNALS`](super::FORWARDED_SIGNALS) is passed on to the command,
    /// so it can stop cleanly; any other is discarded by init. Signalling an init
    /// that already ended is not an error.
    pub fn signal(&self, signal: libc::c_int) -> Result<(), SpawnError> {
        match pidfd::send_signal(&*self.pidfd, signal) {
            Ok(()) | Err(libc::ESRCH) => Ok(()),
            Err(errno) => Err(SpawnError::Wait {
                step: "pidfd_send_signal",
                pid: self.pid,
                source: Errno::from_raw(errno),
            }),
        }
    }
}

impl SpawnedChild {
    pub(crate) fn new(pid: i32, pidfd: OwnedFd, status_read: OwnedFd) -> Self {
        Self {
            pid,
            pidfd: Arc::new(pidfd),
            status_read,
            exit: None,
            released: false,
        }
    }

    /// Lets go of the process without killing it: the handle's descriptors are
    /// closed and the process goes on (a live sandbox's pid 1 outlives the runner
    /// that started it). This process stays its parent until it exits; whoever
    /// ends it later finds it by pid ([`Sandbox::open`](super::Sandbox::open)).
    pub fn release(mut self) {
        self.released = true;
    }

    /// The host pid of the namespace's init (pid 1 inside).
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// A pidfd of the init: it becomes readable when the init (and with it every
    /// process of the run) has ended, so an async caller can poll it and then call
    /// [`wait`](Self::wait) without blocking.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// A handle that can kill the namespace while this one is waited on.
    pub fn killer(&self) -> ChildKiller {
        ChildKiller {
            pid: self.pid,
            pidfd: Arc::clone(&self.pidfd),
        }
    }

    /// Sends `SIGKILL` to the namespace's init: every process of the run ends.
    pub fn kill(&self) -> Result<(), SpawnError> {
        self.killer().kill()
    }

    /// Blocks until the command and every process of its namespace have ended;
    /// returns the command's exit status (or `Signal(9)` when the namespace was
    /// killed before the command ended). Call it from a blocking thread
    /// (`tokio::task::spawn_blocking`).
    pub fn wait(&mut self) -> Result<ExitStatusRecord, SpawnError> {
        self.wait_flags(0)
            .map(|exit| exit.unwrap_or(ExitStatusRecord::Unknown))
    }

    /// Like [`wait`](Self::wait) without blocking: `None` while the run is alive.
    pub fn try_wait(&mut self) -> Result<Option<ExitStatusRecord>, SpawnError> {
        self.wait_flags(libc::WNOHANG)
    }

    fn wait_flags(&mut self, flags: libc::c_int) -> Result<Option<ExitStatusRecord>, SpawnError> {
        if let Some(exit) = self.exit {
            return Ok(Some(exit));
        }
        let status = loop {
            match process::wait_for_child(self.pid, flags) {
                Ok(Some(status)) => break status,
                Ok(None) => return Ok(None),
                Err(libc::EINTR) => {}
                Err(errno) => {
                    return Err(SpawnError::Wait {
                        step: "waitpid",
                        pid: self.pid,
                        source: Errno::from_raw(errno),
                    });
                }
            }
        };
        let exit = self.command_status().unwrap_or_else(|| decode(status));
        self.exit = Some(exit);
        Ok(Some(exit))
    }

    /// The command's wait status as pid 1 reported it (every writer has ended once
    /// pid 1 is reaped, so this read cannot block).
    fn command_status(&self) -> Option<ExitStatusRecord> {
        let mut buf = [0u8; 4];
        let mut got = 0;
        while got < buf.len() {
            match nix::unistd::read(self.status_read.as_fd(), &mut buf[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
        (got == buf.len()).then(|| decode(i32::from_ne_bytes(buf)))
    }
}

/// A raw wait status as an [`ExitStatusRecord`].
fn decode(status: libc::c_int) -> ExitStatusRecord {
    if libc::WIFEXITED(status) {
        ExitStatusRecord::Code(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        ExitStatusRecord::Signal(libc::WTERMSIG(status))
    } else {
        ExitStatusRecord::Unknown
    }
}

impl Drop for SpawnedChild {
    fn drop(&mut self) {
        if self.exit.is_none() && !self.released {
            let _ = self.kill();
            let _ = self.wait();
        }
    }
}

const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SpawnedChild>();
    assert_send_sync::<ChildKiller>();
};
