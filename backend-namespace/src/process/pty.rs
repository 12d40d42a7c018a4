//! The pseudo-terminal of a command spawned with `tty = true`.
//!
//! The parent allocates the pair before `clone` ([`Pty::open`]): the master
//! (close-on-exec, non-blocking) stays with the runner and becomes the
//! execution's stdout ([`PtyReader`]) and stdin ([`PtyWriter`]); the slave
//! (close-on-exec, `O_NOCTTY`, so it never becomes the *runner's* controlling
//! terminal) is the command's stdin, stdout and stderr, and the command makes it
//! its controlling terminal after `setsid`
//! ([`SpawnRequest::controlling_terminal`](crate::spawn::SpawnRequest::controlling_terminal)).
//!
//! The pair is opened on the sandbox's own devpts instance (its
//! `/dev/pts/ptmx`, reached from the host through the sandbox's pid 1 as
//! `/proc/<pid>/root/dev/pts/ptmx` and checked to be a `ptmx` device), so the
//! slave is `/dev/pts/N` inside: `ttyname` and `tty` name it. Where that cannot
//! be opened the pair comes from the host's `/dev/ptmx`; then the slave is a
//! path of the host's instance the run cannot name (`tty` prints `not a tty`,
//! while `isatty`, `stty` and `/dev/tty` work).

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use nix::errno::Errno;
use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::libc;
use tokio::io::unix::AsyncFd;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::error::ProcessError;
use crate::sys::{reactor, tty};

/// The window size (rows, columns) of every command's pseudo-terminal: the
/// classic 80x24, set with `TIOCSWINSZ` on the master before the command starts
/// (what `stty size` prints inside is `24 80`). Resizing is not offered yet.
pub const PTY_WINDOW_SIZE: (u16, u16) = (24, 80);

/// A freshly allocated pseudo-terminal pair.
#[derive(Debug)]
pub(crate) struct Pty {
    /// The runner's side: close-on-exec and non-blocking.
    pub(crate) master: OwnedFd,
    /// The command's side: close-on-exec (the child `dup3`s it onto 0..=2).
    pub(crate) slave: OwnedFd,
}

/// [`error`] for a raw `errno` of the sys seam.
fn errno_error(step: &'static str) -> impl Fn(crate::sys::Errno) -> ProcessError {
    move |errno| error(step)(Errno::from_raw(errno))
}

fn error(step: &'static str) -> impl Fn(Errno) -> ProcessError {
    move |errno| ProcessError::Pty {
        step,
        source: io::Error::from(errno),
    }
}

impl Pty {
    /// Opens a pair on the devpts instance of the sandbox whose pid 1 is
    /// `sandbox_pid` (the host's when that cannot be opened), with a
    /// [`PTY_WINDOW_SIZE`] window.
    ///
    /// # Ambient authority
    /// Opens the sandbox's `ptmx` through `/proc`, or the host's `/dev/ptmx`.
    pub(crate) fn open(sandbox_pid: u32) -> Result<Self, ProcessError> {
        let master = match sandbox_ptmx(sandbox_pid) {
            Some(master) => master,
            None => {
                // O_CLOEXEC at once: another thread may fork and exec at any moment.
                let master =
                    nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)
                        .map_err(error("opening /dev/ptmx"))?;
                nix::pty::grantpt(&master).map_err(error("grantpt"))?;
                OwnedFd::from(master)
            }
        };
        tty::unlock(&master).map_err(errno_error("unlockpt"))?;
        let slave = tty::open_slave(&master, libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC)
            .map_err(|(step, errno)| errno_error(step)(errno))?;
        let (rows, cols) = PTY_WINDOW_SIZE;
        tty::set_window_size(&master, rows, cols)
            .map_err(errno_error("setting the window size (TIOCSWINSZ)"))?;
        // Non-blocking for tokio; the flag belongs to the master's open file only,
        // the slave stays blocking for the command.
        let flags =
            OFlag::from_bits_retain(fcntl(&master, FcntlArg::F_GETFL).map_err(error("F_GETFL"))?);
        fcntl(&master, FcntlArg::F_SETFL(flags | OFlag::O_NONBLOCK))
            .map_err(error("making the master non-blocking"))?;
        Ok(Self { master, slave })
    }
}

/// A new master on the sandbox's devpts instance, or `None`. The last path
/// component is not followed, and what is opened must be a `ptmx` device
/// (character device 5:2): nothing the run planted is used.
fn sandbox_ptmx(sandbox_pid: u32) -> Option<OwnedFd> {
    use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOCTTY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(format!("/proc/{sandbox_pid}/root/dev/pts/ptmx"))
        .ok()?;
    let meta = file.metadata().ok()?;
    let ptmx = meta.file_type().is_char_device() && meta.rdev() == libc::makedev(5, 2);
    ptmx.then(|| OwnedFd::from(file))
}

/// The command's output, read from the master. `EIO`, which a master returns once
/// every slave descriptor is closed (the command's whole tree ended), is the end
/// of the stream, as is every read after it.
#[derive(Debug)]
pub(crate) struct PtyReader {
    fd: AsyncFd<OwnedFd>,
    done: bool,
}

impl PtyReader {
    /// Registers `master` (non-blocking) with the tokio reactor.
    pub(crate) fn new(master: OwnedFd) -> io::Result<Self> {
        Ok(Self {
            fd: reactor::register(master, tokio::io::Interest::READABLE)?,
            done: false,
        })
    }
}

impl AsyncRead for PtyReader {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        loop {
            if this.done || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let mut guard = ready!(this.fd.poll_read_ready(cx))?;
            let unfilled = buf.initialize_unfilled();
            match guard
                .try_io(|fd| nix::unistd::read(fd.as_fd(), unfilled).map_err(io::Error::from))
            {
                Ok(Ok(n)) => {
                    if n == 0 {
                        this.done = true;
                    }
                    buf.advance(n);
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                    this.done = true;
                    return Poll::Ready(Ok(()));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Err(e)) => return Poll::Ready(Err(e)),
                Err(_would_block) => continue,
            }
        }
    }
}

/// The command's input, written to the master (a duplicate of the reader's
/// descriptor). The terminal's line discipline sees it as typed: it is echoed to
/// the output, and closing this stream does not end the input: send `^D` (`0x04`)
/// at the start of a line for end-of-file.
#[derive(Debug)]
pub(crate) struct PtyWriter {
    fd: AsyncFd<OwnedFd>,
    /// Whether the end of the input (`^D`) was written.
    ended: bool,
    /// Whether what was written so far ends a line (or nothing was).
    at_line_start: bool,
}

impl PtyWriter {
    /// Registers `master` (non-blocking) with the tokio reactor.
    pub(crate) fn new(master: OwnedFd) -> io::Result<Self> {
        Ok(Self {
            fd: reactor::register(master, tokio::io::Interest::WRITABLE)?,
            ended: false,
            at_line_start: true,
        })
    }
}

impl AsyncWrite for PtyWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            let mut guard = ready!(this.fd.poll_write_ready(cx))?;
            match guard.try_io(|fd| nix::unistd::write(fd.get_ref(), data).map_err(io::Error::from))
            {
                // The command's side is gone: like a pipe without a reader.
                Ok(Err(e)) if e.raw_os_error() == Some(libc::EIO) => {
                    return Poll::Ready(Err(io::Error::from(io::ErrorKind::BrokenPipe)));
                }
                Ok(Err(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
                Ok(Ok(n)) => {
                    if n > 0 {
                        this.at_line_start = matches!(data[n - 1], b'\n' | b'\r');
                    }
                    return Poll::Ready(Ok(n));
                }
                Ok(result) => return Poll::Ready(result),
                Err(_would_block) => continue,
            }
        }
    }

    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    /// The end of the input: a terminal has no end of file of its own, so the
    /// line discipline's end-of-file character (`^D`) is written: once at the
    /// start of a line, twice after a partial one (the first only hands that
    /// line over).
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while !self.ended {
            let last = self.at_line_start;
            match ready!(self.as_mut().poll_write(cx, &[0x04])) {
                // A partial line handed over: now at the start of one.
                Ok(_) if !last => self.at_line_start = true,
                // The command's side is gone or the end is written.
                Ok(_) | Err(_) => self.ended = true,
            }
        }
        Poll::Ready(Ok(()))
    }
}
