//! A command's standard output and error: pipes that the run's output keeper
//! (`keeper.rs`) copies into files of the run, and streams that follow the
//! files as they grow.
//!
//! A command of a live sandbox may leave processes behind that keep writing to
//! the stdout and stderr they inherited, after the command ended and after the
//! runner that started it exited. What they write is still recorded: their
//! pipes are read by the keeper, a host process outside the sandbox that lives
//! until the last writer is gone, and appended to two files of the run
//! (`<run dir>/output/<name>.stdout`, `.stderr`, or the files the runner
//! names; owned by host root, mode 0600). A pipe cannot be truncated, sought
//! or written at an offset, so nothing a process does to its descriptor after
//! a write takes back what it wrote (it could to a file it held for
//! appending: `ftruncate`, or clearing `O_APPEND` and writing at 0). The
//! command holds no descriptor of the files at all.
//!
//! The execution's streams follow the files until the command itself ended:
//! then the keeper is asked to copy everything the pipes hold at that moment
//! (all the command wrote), and the streams end at the files' sizes; what
//! background processes write later stays in the files.
//!
//! A file with a bound (the command's output cap) is released behind its
//! stream as it is read (see `workspace_core::boundary::output_keeper`): the
//! stream still carries every byte, the file holds the head, the last bytes
//! read and what the keeper is ahead by.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use nix::libc;
use tokio::io::AsyncWriteExt;
use tokio::sync::watch;
use workspace_core::boundary::OutputStream;

use super::error::ProcessError;
use super::keeper::{self, Flush, Holding};
use crate::cgroup::RunCgroup;
use crate::sys::pipe_io;
use workspace_core::boundary::{RELEASE_STEP, releasable};
use workspace_core::evidence::HeadTail;

/// How often a stream looks for more output while the command runs.
const POLL: Duration = Duration::from_millis(10);
/// The directory of the run's output files.
pub(crate) const OUTPUT_DIR: &str = "output";

/// The output of one command: the write ends of its pipes for the command,
/// the files' read ends for its streams, and the keeper's flush.
pub(crate) struct OutputFiles {
    pub(crate) stdout: (OwnedFd, File),
    pub(crate) stderr: (OwnedFd, File),
    pub(crate) flush: Flush,
}

impl OutputFiles {
    /// Creates `<run_dir>/output/<name>.stdout` and `.stderr` (new files),
    /// kept by a keeper in `run`'s output group, held as `holding` says.
    pub(crate) fn create(
        run_dir: &Path,
        name: &str,
        holding: Holding,
        run: &RunCgroup,
    ) -> Result<Self, ProcessError> {
        let dir = run_dir.join(OUTPUT_DIR);
        std::fs::create_dir_all(&dir).map_err(io("creating the output directory", &dir))?;
        let stdout = open_pair(&dir.join(format!("{name}.stdout")), Existing::Refused)?;
        let stderr = open_pair(&dir.join(format!("{name}.stderr")), Existing::Refused)?;
        Self::kept(stdout, stderr, holding, run)
    }

    /// Opens `stdout` and `stderr` for appending (created when missing, in
    /// directories the runner chose): a service started again after its sandbox
    /// was lost goes on in the same log.
    pub(crate) fn create_at(
        stdout: &Path,
        stderr: &Path,
        holding: Holding,
        run: &RunCgroup,
    ) -> Result<Self, ProcessError> {
        let stdout = open_pair(stdout, Existing::Appended)?;
        let stderr = open_pair(stderr, Existing::Appended)?;
        Self::kept(stdout, stderr, holding, run)
    }

    /// The files' keeper started; the files' appending write ends are its
    /// alone.
    fn kept(
        (stdout, stdout_read): (OwnedFd, File),
        (stderr, stderr_read): (OwnedFd, File),
        holding: Holding,
        run: &RunCgroup,
    ) -> Result<Self, ProcessError> {
        let keeper = keeper::start([&stdout, &stderr], holding, run)?;
        Ok(Self {
            stdout: (keeper.stdout, stdout_read),
            stderr: (keeper.stderr, stderr_read),
            flush: keeper.flush,
        })
    }
}

fn io(step: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> ProcessError {
    let path = path.to_path_buf();
    move |source| ProcessError::Io { step, path, source }
}

/// Whether an output file must be new (one the backend names per command) or
/// may already hold a log to append to (one the runner chose).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Existing {
    Refused,
    Appended,
}

/// An appending write end of `path` and a read end (which may release what
/// it read, so it is open for writing too, never written through).
fn open_pair(path: &Path, existing: Existing) -> Result<(OwnedFd, File), ProcessError> {
    let mut write = OpenOptions::new();
    write.append(true).mode(0o600);
    match existing {
        Existing::Refused => write.create_new(true),
        Existing::Appended => write.create(true),
    };
    let write = write
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io("opening a command's output file for writing", path))?;
    let read = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io("opening a command's output file", path))?;
    Ok((write.into(), read))
}

/// When the command ended and its output is in the files: a pidfd of the
/// command's supervisor, readable once it ended, then the keeper's answer
/// that it copied what the pipes held. Must be called inside a tokio runtime
/// (it spawns the task that waits).
pub(crate) fn ended(
    supervisor: OwnedFd,
    flush: Flush,
) -> Result<watch::Receiver<bool>, ProcessError> {
    let supervisor = crate::sys::reactor::register(supervisor, tokio::io::Interest::READABLE)
        .map_err(|source| ProcessError::Pipe {
            step: "registering the command's pidfd",
            source,
        })?;
    let (sender, receiver) = watch::channel(false);
    tokio::spawn(async move {
        let _ = supervisor.readable().await;
        if !flush.wait_flushed().await {
            tracing::warn!(
                "the output keeper did not answer: the command's streams end at what reached its files"
            );
        }
        sender.send_replace(true);
    });
    Ok(receiver)
}

/// A stream of `file` as it grows, until `ended` says the command ended and
/// its output is in the file; then up to the size the file has at that
/// moment. With a `bound`, what was read is released behind the stream (see
/// the module docs), and reading goes on when the stream is dropped, so that
/// the keeper is never left waiting. Must be called inside a tokio runtime
/// (it spawns the reader task).
pub(crate) fn follow(
    file: File,
    mut ended: watch::Receiver<bool>,
    bound: Option<HeadTail>,
) -> OutputStream {
    let (mut writer, reader) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        let mut file = file;
        let mut buffer = vec![0u8; 64 << 10];
        let mut offset = 0u64;
        let mut released = 0u64;
        let mut passing = true;
        let mut warned = false;
        let mut end: Option<u64> = None;
        loop {
            let want = match end {
                Some(end) if offset >= end => break,
                Some(end) => buffer
                    .len()
                    .min(usize::try_from(end - offset).unwrap_or(usize::MAX)),
                None => buffer.len(),
            };
            let read = match file.read(&mut buffer[..want]) {
                Ok(read) => read,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(_) => break,
            };
            if read > 0 {
                offset += read as u64;
                if let Some(held) = bound {
                    // A failed release is tried again at the next step (its
                    // keeper would otherwise wait for it); said once.
                    match release_read(&file, held, offset, released) {
                        Ok(to) => released = to,
                        Err(errno) if !warned => {
                            warned = true;
                            tracing::warn!(
                                errno,
                                "releasing what was read of a command's output file failed"
                            );
                        }
                        Err(_) => {}
                    }
                }
                if passing && writer.write_all(&buffer[..read]).await.is_err() {
                    // Nobody reads the stream: a bound file is still read
                    // (and released), or its keeper would wait.
                    if bound.is_none() {
                        break;
                    }
                    passing = false;
                }
                continue;
            }
            if end.is_some() {
                // Shorter than it was when the command ended: only the
                // runner could have cut it.
                break;
            }
            if *ended.borrow_and_update() {
                end = Some(file.metadata().map_or(offset, |m| m.len()));
                continue;
            }
            tokio::select! {
                changed = ended.changed() => {
                    if changed.is_err() {
                        // The waiting task is gone (the runtime ends).
                        break;
                    }
                }
                () = tokio::time::sleep(POLL) => {}
            }
        }
        let _ = writer.shutdown().await;
    });
    Box::pin(reader)
}

/// Releases what the stream read of `file` (up to `offset`) between the
/// bound's head and its last `tail_bytes`, in steps of [`RELEASE_STEP`];
/// returns how far it is released.
fn release_read(
    file: &File,
    bound: HeadTail,
    offset: u64,
    released: u64,
) -> Result<u64, crate::sys::Errno> {
    use std::os::fd::AsRawFd;
    let (from, to) = releasable(bound, 0, offset, released);
    if to - from < RELEASE_STEP {
        return Ok(released);
    }
    pipe_io::release(file.as_raw_fd(), from, to).map(|()| to)
}

/// Removes the run's output files, once every process of the run has ended. The
/// directory is the runner's own (nothing in a sandbox can reach it), so it holds
/// only the regular files made here.
pub(crate) fn remove(run_dir: &Path) -> Result<(), ProcessError> {
    let dir = run_dir.join(OUTPUT_DIR);
    match std::fs::remove_dir_all(&dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ProcessError::Io {
            step: "removing the command output files",
            path: dir,
            source,
        }),
    }
}
