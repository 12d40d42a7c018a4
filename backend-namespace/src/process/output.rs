//! A command's standard output and error as files of the run, read as they grow.
//!
//! A command of a live sandbox may leave processes behind that keep writing to
//! the stdout and stderr they inherited, after the command ended and after the
//! runner that started it exited. A pipe would break under them then (`EPIPE`,
//! or a write blocked forever on a full pipe nobody reads); so each command
//! writes to two files of the run instead (`<run dir>/output/<name>.stdout`,
//! `.stderr`, owned by host root, mode 0600, opened for appending): a write
//! never blocks and never fails for want of a reader. The execution's streams
//! follow the files until the command itself ended and then end at the size the
//! files had at that moment; what background processes write later stays in the
//! files.
//!
//! The command holds a writable descriptor of a host file. It cannot reopen it
//! for reading (`/proc/self/fd/1` is a root file of mode 0600 to it) nor reach
//! the directory; it can truncate its own output, which the streams report as the
//! end of it.

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;
use std::time::Duration;

use nix::libc;
use tokio::io::AsyncWriteExt;
use workspace_core::boundary::OutputStream;

use super::error::ProcessError;

/// How often a stream looks for more output while the command runs.
const POLL: Duration = Duration::from_millis(10);
/// The directory of the run's output files.
pub(crate) const OUTPUT_DIR: &str = "output";

/// The files of one command: the write ends for the command, the read ends for
/// its streams.
pub(crate) struct OutputFiles {
    pub(crate) stdout: (OwnedFd, File),
    pub(crate) stderr: (OwnedFd, File),
}

impl OutputFiles {
    /// Creates `<run_dir>/output/<name>.stdout` and `.stderr` (new files).
    pub(crate) fn create(run_dir: &Path, name: &str) -> Result<Self, ProcessError> {
        let dir = run_dir.join(OUTPUT_DIR);
        std::fs::create_dir_all(&dir).map_err(io("creating the output directory", &dir))?;
        Ok(Self {
            stdout: open_pair(&dir.join(format!("{name}.stdout")), Existing::Refused)?,
            stderr: open_pair(&dir.join(format!("{name}.stderr")), Existing::Refused)?,
        })
    }

    /// Opens `stdout` and `stderr` for appending (created when missing, in
    /// directories the runner chose): a service started again after its sandbox
    /// was lost goes on in the same log.
    pub(crate) fn create_at(stdout: &Path, stderr: &Path) -> Result<Self, ProcessError> {
        Ok(Self {
            stdout: open_pair(stdout, Existing::Appended)?,
            stderr: open_pair(stderr, Existing::Appended)?,
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

/// An appending write end of `path` and a read end.
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
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
        .map_err(io("opening a command's output file", path))?;
    Ok((write.into(), read))
}

/// A stream of `file` as it grows, until `ended` (a pidfd of the command's
/// supervisor) is readable; then up to the size the file had at that moment.
/// Must be called inside a tokio runtime (it spawns the reader task).
pub(crate) fn follow(file: File, ended: OwnedFd) -> Result<OutputStream, ProcessError> {
    let ended =
        crate::sys::reactor::register(ended, tokio::io::Interest::READABLE).map_err(|source| {
            ProcessError::Pipe {
                step: "registering the command's pidfd",
                source,
            }
        })?;
    let (mut writer, reader) = tokio::io::duplex(64 << 10);
    tokio::spawn(async move {
        let mut file = file;
        let mut buffer = vec![0u8; 64 << 10];
        let mut offset = 0u64;
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
                if writer.write_all(&buffer[..read]).await.is_err() {
                    break;
                }
                continue;
            }
            if end.is_some() {
                // Truncated below what it was when the command ended.
                break;
            }
            if truncated(&mut file, offset) {
                break;
            }
            tokio::select! {
                ready = ended.readable() => {
                    let size = file.metadata().map_or(offset, |m| m.len());
                    end = Some(size);
                    if ready.is_err() {
                        break;
                    }
                }
                () = tokio::time::sleep(POLL) => {}
            }
        }
        let _ = writer.shutdown().await;
    });
    Ok(Box::pin(reader))
}

/// Whether the file is now shorter than what was read (the command truncated
/// its own output).
fn truncated(file: &mut File, offset: u64) -> bool {
    let size = file.metadata().map_or(offset, |m| m.len());
    if size < offset {
        let _ = file.seek(SeekFrom::End(0));
        return true;
    }
    false
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
