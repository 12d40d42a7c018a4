//! Non-blocking TCP sockets and a signal descriptor in a cloned child (pid 1's
//! port forwarder).

use std::ffi::c_int;
use std::mem;
use std::net::Ipv4Addr;
use std::ptr;

use nix::libc;

use super::errno::{self, Errno, check};
use super::signal::SignalSet;

/// A non-blocking, close-on-exec descriptor that reads the signals of `set`
/// (which must be blocked) instead of their delivery.
pub(crate) fn signal_fd(set: &SignalSet) -> Result<c_int, Errno> {
    // SAFETY: a valid set; the call returns a new descriptor.
    check(unsafe { libc::signalfd(-1, set.as_raw(), libc::SFD_NONBLOCK | libc::SFD_CLOEXEC) })
}

/// Reads every pending signal from the signal descriptor `fd`, discarding them.
pub(crate) fn drain_signal_fd(fd: c_int) {
    // SAFETY: `signalfd_siginfo` is plain data.
    let mut info: libc::signalfd_siginfo = unsafe { mem::zeroed() };
    loop {
        // SAFETY: reads into a local buffer of the right size.
        let read = unsafe {
            libc::read(
                fd,
                (&raw mut info).cast(),
                mem::size_of::<libc::signalfd_siginfo>(),
            )
        };
        if read <= 0 {
            return;
        }
    }
}

/// Accepts a connection on `listener`, non-blocking and close-on-exec.
pub(crate) fn accept(listener: c_int) -> Result<c_int, Errno> {
    // SAFETY: a listening socket, no address asked for.
    check(unsafe {
        libc::accept4(
            listener,
            ptr::null_mut(),
            ptr::null_mut(),
            libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
        )
    })
}

/// A non-blocking TCP socket connecting to `127.0.0.1:port`: `Ok((fd, true))`
/// while the connection is still being made (`EINPROGRESS`), `Ok((fd, false))`
/// once it is. On failure nothing stays open.
pub(crate) fn connect_loopback(port: u16) -> Result<(c_int, bool), Errno> {
    // SAFETY: constant arguments; a new descriptor.
    let socket = check(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_STREAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    let address = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(Ipv4Addr::LOCALHOST).to_be(),
        },
        sin_zero: [0; 8],
    };
    // SAFETY: a valid `sockaddr_in` and its size.
    let connected = unsafe {
        libc::connect(
            socket,
            (&raw const address).cast(),
            mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    };
    match connected {
        0.. => Ok((socket, false)),
        _ if errno::last() == libc::EINPROGRESS => Ok((socket, true)),
        _ => {
            let error = errno::last();
            super::fd::close(socket);
            Err(error)
        }
    }
}

/// Whether the non-blocking connect of `socket` succeeded (`SO_ERROR` is 0).
pub(crate) fn connected(socket: c_int) -> bool {
    let mut error: c_int = 0;
    let mut length = mem::size_of::<c_int>() as libc::socklen_t;
    // SAFETY: SO_ERROR into a local int of the given length.
    let ret = unsafe {
        libc::getsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_ERROR,
            (&raw mut error).cast(),
            &mut length,
        )
    };
    ret == 0 && error == 0
}

/// Receives into `buffer`: how many bytes (0: the peer ended its side).
pub(crate) fn recv(socket: c_int, buffer: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: the pointer and length describe a live, writable slice.
    let read = unsafe { libc::recv(socket, buffer.as_mut_ptr().cast(), buffer.len(), 0) };
    if read < 0 {
        Err(errno::last())
    } else {
        Ok(read as usize)
    }
}

/// Sends from `bytes`: how many were sent. `MSG_NOSIGNAL`: a closed peer is
/// `EPIPE`, never a signal.
pub(crate) fn send(socket: c_int, bytes: &[u8]) -> Result<usize, Errno> {
    // SAFETY: the pointer and length describe a live slice.
    let sent = unsafe {
        libc::send(
            socket,
            bytes.as_ptr().cast(),
            bytes.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    if sent < 0 {
        Err(errno::last())
    } else {
        Ok(sent as usize)
    }
}

/// Ends the sending side of `socket` (`shutdown(SHUT_WR)`).
pub(crate) fn shutdown_write(socket: c_int) {
    // SAFETY: integer arguments.
    unsafe { libc::shutdown(socket, libc::SHUT_WR) };
}
