//! A command's standard output and error as files the runner names
//! ([`CommandOutput`]), read as they grow.
//!
//! What a command leaves running in the container keeps the stdout and stderr
//! it inherited after the command ended (a server's log): with pipes the
//! runner reads, the runner would wait for them to close, and a pipe nobody
//! reads blocks its writer. So the process's output reaches files: through
//! pipes an output keeper copies into them ([`OutputKeepers`], from
//! [`ContainerOptions::output_keepers`](super::ContainerOptions::output_keepers):
//! a host process in the container's `output` cgroup, out of its reach, which
//! outlives the runner), so that what a process wrote stays written whatever
//! it does to its descriptor afterwards; without keepers, the process writes
//! to the files themselves (opened for appending, owner-only), and can
//! truncate them. Each stream follows its file until the command ended (and,
//! with a keeper, until the keeper copied what the pipes held then), then ends
//! at the size the file had at that moment; what background processes write
//! later stays in the file for the runner to keep.
//!
//! A file with a bound (the command's output cap) is released behind its
//! stream as it is read (see `workspace_core::boundary::output_keeper`): the
//! stream still carries every byte, the file holds the head, the last bytes
//! read and what the keeper is ahead by.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use workspace_core::boundary::{
    CommandOutput, OutputKeepers, OutputStream, RELEASE_STEP, releasable,
};
use workspace_core::evidence::HeadTail;

use super::cgroups::ContainerCgroups;
use crate::error::ContainerError;

/// The container sub-cgroup the output keepers run in.
pub(crate) const OUTPUT_CGROUP: &str = "output";
/// How long teardown gives the keepers to copy what is left.
const SETTLE_WAIT: Duration = Duration::from_secs(5);

/// How often a stream looks for more output while the command runs.
const POLL: Duration = Duration::from_millis(10);
/// How much a stream buffers between the file and its reader.
const BUFFER: usize = 64 << 10;

/// One command's output files: the write ends for the process, the read ends
/// for its streams.
pub(crate) struct OutputFiles {
    pub(crate) stdout: (OwnedFd, File),
    pub(crate) stderr: (OwnedFd, File),
}

impl OutputFiles {
    /// Opens `output`'s files for appending (created when missing, mode 0600).
    pub(crate) fn open(output: &CommandOutput) -> Result<Self, ContainerError> {
        Ok(Self {
            stdout: open_pair(&output.stdout)?,
            stderr: open_pair(&output.stderr)?,
        })
    }
}

/// The write end, and a read end at the file's end when opened (what the
/// command writes from then on is what its stream shows), which may release
/// what it read (so it is open for writing too, never written through).
fn open_pair(path: &Path) -> Result<(OwnedFd, File), ContainerError> {
    let write = OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(ContainerError::io("opening a command's output file", path))?;
    let mut read = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(nix::libc::O_NOFOLLOW)
        .open(path)
        .map_err(ContainerError::io("opening a command's output file", path))?;
    read.seek(SeekFrom::End(0))
        .map_err(ContainerError::io("opening a command's output file", path))?;
    Ok((write.into(), read))
}

/// A stream of `file` from its current position as it grows, until `ended`
/// says the command ended: then up to the size the file has at that moment.
/// With a `bound`, what was read is released behind the stream (see the
/// module docs), and reading goes on when the stream is dropped, so that the
/// keeper is never left waiting.
pub(crate) fn follow(
    mut file: File,
    mut ended: watch::Receiver<bool>,
    bound: Option<HeadTail>,
) -> OutputStream {
    let (reader, mut writer) = tokio::io::duplex(BUFFER);
    tokio::spawn(async move {
        let start = file.stream_position().unwrap_or(0);
        let mut offset = start;
        let mut released = 0u64;
        let mut passing = true;
        let mut warned = false;
        let mut buf = vec![0u8; BUFFER];
        loop {
            let done = *ended.borrow_and_update();
            let size = file.metadata().map_or(0, |m| m.len());
            if size < offset {
                // Truncated under the stream: that is the end of it.
                break;
            }
            while offset < size {
                let want = usize::try_from(size - offset)
                    .unwrap_or(usize::MAX)
                    .min(buf.len());
                let Ok(n) = file.read(&mut buf[..want]) else {
                    return;
                };
                if n == 0 {
                    break;
                }
                offset += n as u64;
                if let Some(held) = bound {
                    // A failed release is tried again at the next step (its
                    // keeper would otherwise wait for it); said once.
                    match release_read(&file, held, (start, offset), released) {
                        Ok(to) => released = to,
                        Err(e) if !warned => {
                            warned = true;
                            tracing::warn!(error = %e, "releasing what was read of a command's output file failed");
                        }
                        Err(_) => {}
                    }
                }
                if passing && writer.write_all(&buf[..n]).await.is_err() {
                    // Nobody reads the stream: a bound file is still read
                    // (and released), or its keeper would wait.
                    if bound.is_none() {
                        return;
                    }
                    passing = false;
                }
            }
            if done {
                break;
            }
            let _ = tokio::time::timeout(POLL, ended.changed()).await;
        }
        let _ = writer.shutdown().await;
    });
    Box::pin(reader)
}

/// Releases what the stream read of `file` (from `start` up to `offset`)
/// between the bound's head and its last `tail_bytes`, in steps of
/// [`RELEASE_STEP`]; returns how far it is released.
fn release_read(
    file: &File,
    bound: HeadTail,
    (start, offset): (u64, u64),
    released: u64,
) -> nix::Result<u64> {
    use nix::fcntl::{FallocateFlags, fallocate};
    let (from, to) = releasable(bound, start, offset, released);
    if to - from < RELEASE_STEP {
        return Ok(released);
    }
    let (Ok(at), Ok(len)) = (i64::try_from(from), i64::try_from(to - from)) else {
        return Err(nix::errno::Errno::EINVAL);
    };
    let flags = FallocateFlags::FALLOC_FL_PUNCH_HOLE | FallocateFlags::FALLOC_FL_KEEP_SIZE;
    fallocate(file, flags, at, len).map(|()| to)
}

/// Kills the processes of every command group of `cgroups` (what holds the
/// pipes' write ends), then gives the output keepers [`SETTLE_WAIT`] to copy
/// what the pipes still hold and end, and has `keepers` reap the ended ones
/// it started. Blocking; for teardown, before the container is killed.
pub(crate) fn settle(cgroups: &ContainerCgroups, keepers: Option<&dyn OutputKeepers>) {
    let names = cgroups.children();
    if !names.iter().any(|name| name == OUTPUT_CGROUP) {
        return;
    }
    for name in names.iter().filter(|name| *name != OUTPUT_CGROUP) {
        if let Err(e) = cgroups.child(name).kill_all() {
            tracing::warn!(group = %name, error = %e, "ending a command group before its output is kept failed");
        }
    }
    let group = cgroups.child(OUTPUT_CGROUP);
    let deadline = std::time::Instant::now() + SETTLE_WAIT;
    while !group.pids().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
    if let (Some(keepers), Some(dir)) = (keepers, group.procs_files().first()) {
        keepers.reap(dir.parent().unwrap_or(dir));
    }
}
