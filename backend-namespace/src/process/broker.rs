//! Connections into an ordinary user's sandbox, made by its pid 1.
//!
//! A runner without `CAP_SYS_ADMIN` over the sandbox's user namespace cannot
//! enter its network namespace, not even from a thread of its own (see
//! [`in_sandbox`](super::in_sandbox)), so the sandbox's pid 1 connects for it:
//! at seal the runner binds a unix `SOCK_SEQPACKET` listener, [`SOCKET`] in the
//! run's own directory (the caller's, closed to other users; nothing in the
//! sandbox sees it), and pid 1 keeps it (`SpawnRequest::broker`). Any later
//! runner of the same user connects to it, asks for a port, and receives a TCP
//! socket of the sandbox's network namespace connecting to that port on its
//! loopback: whether the port accepted, it learns from the socket itself.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use nix::sys::socket::{
    AddressFamily, Backlog, MsgFlags, SockFlag, SockType, UnixAddr, bind, connect as unix_connect,
    listen as unix_listen, send, socket,
};

use super::error::ProcessError;

/// The broker's socket, in the run's directory.
pub(super) const SOCKET: &str = "connect.sock";

/// `run_dir/SOCKET` as a path short enough for a socket address whatever
/// `run_dir`'s length: through `/proc/self/fd` of the directory, held open in
/// `dir`.
fn address(run_dir: &Path) -> Result<(OwnedFd, PathBuf), std::io::Error> {
    let dir: OwnedFd = std::fs::File::open(run_dir)?.into();
    let path = PathBuf::from(format!("/proc/self/fd/{}/{SOCKET}", dir.as_raw_fd()));
    Ok((dir, path))
}

/// Binds the broker's listener in `run_dir` (non-blocking, close-on-exec),
/// readable and writable by its owner only.
pub(super) fn listen(run_dir: &Path) -> Result<OwnedFd, ProcessError> {
    let io = |source: std::io::Error| ProcessError::Pipe {
        step: "making the sandbox's connection broker",
        source,
    };
    let listener = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_NONBLOCK | SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| io(e.into()))?;
    // The file `bind` makes takes the socket's own mode: owner-only from the
    // start, never open to another user for a moment (pid 1 checks the
    // asker's uid too).
    nix::sys::stat::fchmod(&listener, nix::sys::stat::Mode::from_bits_truncate(0o600))
        .map_err(|e| io(e.into()))?;
    let (_dir, path) = address(run_dir).map_err(io)?;
    let _ = std::fs::remove_file(run_dir.join(SOCKET));
    let unix = UnixAddr::new(&path).map_err(|e| io(e.into()))?;
    bind(listener.as_raw_fd(), &unix).map_err(|e| io(e.into()))?;
    let listened = Backlog::new(16)
        .and_then(|backlog| unix_listen(&listener, backlog))
        .map_err(|e| io(e.into()));
    if let Err(e) = listened {
        let _ = remove(run_dir);
        return Err(e);
    }
    Ok(listener)
}

/// A TCP socket of the sandbox of `run_dir` connecting to `port` on its
/// loopback, as its pid 1 made it. Blocking, for at most `timeout`.
pub(super) fn socket_for(
    run_dir: &Path,
    port: u16,
    timeout: Duration,
) -> Result<std::net::TcpStream, ProcessError> {
    let failed = |source: std::io::Error| ProcessError::Connect { port, source };
    let asker = socket(
        AddressFamily::Unix,
        SockType::SeqPacket,
        SockFlag::SOCK_CLOEXEC,
        None,
    )
    .map_err(|e| failed(e.into()))?;
    let asker = std::os::unix::net::UnixStream::from(asker);
    // A connect waits while the listener's backlog is full (pid 1 frozen):
    // bounded by the send timeout, the answer by the receive timeout.
    asker.set_read_timeout(Some(timeout)).map_err(failed)?;
    asker.set_write_timeout(Some(timeout)).map_err(failed)?;
    let (_dir, path) = address(run_dir).map_err(failed)?;
    let unix = UnixAddr::new(&path).map_err(|e| failed(e.into()))?;
    unix_connect(asker.as_raw_fd(), &unix).map_err(|e| failed(e.into()))?;
    send(asker.as_raw_fd(), &port.to_be_bytes(), MsgFlags::empty())
        .map_err(|e| failed(e.into()))?;
    let received = crate::sys::socket::recv_fd(asker.as_fd()).map_err(failed)?;
    let Some(socket) = received else {
        return Err(failed(std::io::Error::other(
            "the sandbox's pid 1 sent no socket (it could not make one)",
        )));
    };
    Ok(std::net::TcpStream::from(socket))
}

/// Removes the broker's socket from `run_dir` (gone already is fine).
pub(super) fn remove(run_dir: &Path) -> Result<(), ProcessError> {
    match std::fs::remove_file(run_dir.join(SOCKET)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(ProcessError::Pipe {
            step: "removing the sandbox's connection broker",
            source: e,
        }),
        _ => Ok(()),
    }
}
