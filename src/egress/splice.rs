//! Tunnels copied in the kernel: `splice(2)` moves each direction's bytes from
//! one socket through a pipe into the other, never through the proxy's memory
//! (a tunnel's bytes are counted, not read).
//!
//! Each direction drains its pipe completely before it reads from its socket
//! again, so a `splice` into the pipe can only wait for the socket: the
//! readiness it clears is always the socket's.

use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

use nix::fcntl::{FcntlArg, OFlag, SpliceFFlags, fcntl, splice};
use nix::sys::socket::{Shutdown, shutdown};
use tokio::io::Interest;
use tokio::net::TcpStream;

/// The pipe of each direction is asked for this much (the kernel's default
/// limit for an unprivileged process).
const PIPE_SIZE: i32 = 1 << 20;

/// Copies both ways between `a` and `b` until each direction ended (and was
/// passed on as a write shutdown): the bytes from `a` to `b`, and back.
pub(crate) async fn both_ways(a: &TcpStream, b: &TcpStream) -> io::Result<(u64, u64)> {
    tokio::try_join!(one_way(a, b), one_way(b, a))
}

async fn one_way(from: &TcpStream, to: &TcpStream) -> io::Result<u64> {
    let (pipe_out, pipe_in): (OwnedFd, OwnedFd) =
        nix::unistd::pipe2(OFlag::O_NONBLOCK | OFlag::O_CLOEXEC)?;
    // A smaller pipe only means smaller steps.
    let _ = fcntl(&pipe_in, FcntlArg::F_SETPIPE_SZ(PIPE_SIZE));
    let flags = SpliceFFlags::SPLICE_F_MOVE | SpliceFFlags::SPLICE_F_NONBLOCK;
    let mut total = 0u64;
    loop {
        let moved = loop {
            from.readable().await?;
            match from.try_io(Interest::READABLE, || {
                splice(
                    from.as_fd(),
                    None,
                    &pipe_in,
                    None,
                    PIPE_SIZE as usize,
                    flags,
                )
                .map_err(io::Error::from)
            }) {
                Ok(moved) => break moved,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        };
        if moved == 0 {
            // The other side's end of this direction: pass it on.
            let _ = shutdown(to.as_raw_fd(), Shutdown::Write);
            return Ok(total);
        }
        let mut left = moved;
        while left > 0 {
            to.writable().await?;
            match to.try_io(Interest::WRITABLE, || {
                splice(&pipe_out, None, to.as_fd(), None, left, flags).map_err(io::Error::from)
            }) {
                Ok(sent) => left -= sent,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
        }
        total += moved as u64;
    }
}
