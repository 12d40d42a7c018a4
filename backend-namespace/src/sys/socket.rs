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

/// Receives one packet of the `SOCK_SEQPACKET` socket `socket` into
/// `buffer`: its whole length (`MSG_TRUNC`), which is more than was kept
/// when the packet did not fit.
pub(crate) fn recv_packet(socket: c_int, buffer: &mut [u8]) -> Result<usize, Errno> {
    // SAFETY: the pointer and length describe a live, writable slice.
    let read = unsafe {
        libc::recv(
            socket,
            buffer.as_mut_ptr().cast(),
            buffer.len(),
            libc::MSG_TRUNC | libc::MSG_DONTWAIT,
        )
    };
    if read < 0 {
        Err(errno::last())
    } else {
        Ok(read as usize)
    }
}

/// The uid (as this process's user namespace sees it) of the process that
/// connected the unix socket `socket` (`SO_PEERCRED`).
pub(crate) fn peer_uid(socket: c_int) -> Result<libc::uid_t, Errno> {
    // SAFETY: `ucred` is plain data.
    let mut credentials: libc::ucred = unsafe { mem::zeroed() };
    let mut length = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED into a local `ucred` of the given length.
    let ret = unsafe {
        libc::getsockopt(
            socket,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut credentials).cast(),
            &mut length,
        )
    };
    check(ret).map(|_| credentials.uid)
}

/// Sends one byte on the unix socket `socket` with `fd` attached
/// (`SCM_RIGHTS`): the peer receives its own descriptor of the same open file.
/// The control message is built on the stack.
pub(crate) fn send_fd(socket: c_int, fd: c_int) -> Result<(), Errno> {
    /// A `cmsghdr` with room for one descriptor, aligned as the kernel reads it.
    #[repr(C)]
    struct OneFd {
        header: libc::cmsghdr,
        fd: c_int,
    }
    // SAFETY: `cmsghdr` is plain data; every field is set below.
    let mut control: OneFd = unsafe { mem::zeroed() };
    // SAFETY: CMSG_LEN only computes a length.
    control.header.cmsg_len = unsafe { libc::CMSG_LEN(mem::size_of::<c_int>() as u32) } as _;
    control.header.cmsg_level = libc::SOL_SOCKET;
    control.header.cmsg_type = libc::SCM_RIGHTS;
    control.fd = fd;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    // SAFETY: `msghdr` is plain data; the fields that matter are set below.
    let mut message: libc::msghdr = unsafe { mem::zeroed() };
    message.msg_iov = &raw mut iov;
    message.msg_iovlen = 1;
    message.msg_control = (&raw mut control).cast();
    // SAFETY: CMSG_SPACE only computes a length.
    message.msg_controllen = unsafe { libc::CMSG_SPACE(mem::size_of::<c_int>() as u32) } as _;
    // SAFETY: every pointer in `message` points at a live local of the size given.
    let sent = unsafe { libc::sendmsg(socket, &raw const message, libc::MSG_NOSIGNAL) };
    if sent < 0 { Err(errno::last()) } else { Ok(()) }
}

/// Receives one message on the unix socket `socket` and the descriptor it
/// carries (`SCM_RIGHTS`, close-on-exec): `None` when it carried none (then the
/// peer ended, or sent no descriptor). Blocking (up to the socket's receive
/// timeout). Not for a cloned child: it allocates.
pub(crate) fn recv_fd(
    socket: std::os::fd::BorrowedFd<'_>,
) -> Result<Option<std::os::fd::OwnedFd>, std::io::Error> {
    use nix::sys::socket::{ControlMessageOwned, MsgFlags, recvmsg};
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
    let mut byte = [0u8; 1];
    let mut iov = [std::io::IoSliceMut::new(&mut byte)];
    let mut space = nix::cmsg_space!(RawFd);
    let message = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )?;
    let mut received = None;
    for cmsg in message.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = cmsg {
            for fd in fds {
                // SAFETY: the kernel just installed `fd` in this process for
                // this message; nothing else owns it.
                let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                received.get_or_insert(fd);
            }
        }
    }
    // Only a stream socket is what was asked for.
    match received {
        Some(fd)
            if nix::sys::socket::getsockopt(&fd, nix::sys::socket::sockopt::SockType)
                == Ok(nix::sys::socket::SockType::Stream) =>
        {
            Ok(Some(fd))
        }
        Some(_) => Err(std::io::Error::other(
            "what came back is not a stream socket",
        )),
        None => Ok(None),
    }
}

/// Ends the sending side of `socket` (`shutdown(SHUT_WR)`).
pub(crate) fn shutdown_write(socket: c_int) {
    // SAFETY: integer arguments.
    unsafe { libc::shutdown(socket, libc::SHUT_WR) };
}
