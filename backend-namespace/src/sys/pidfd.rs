//! Pid file descriptors: a process named so that its number cannot be reused
//! under the caller (Linux 5.3+).

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

use super::errno::{Errno, check_long};

/// A pidfd of process `pid` (`pidfd_open`). Used on a child not yet reaped, or
/// on a process whose identity is checked through the descriptor afterwards.
pub(crate) fn open(pid: libc::pid_t) -> Result<OwnedFd, Errno> {
    // SAFETY: a pid and no flags; the call returns a new descriptor.
    let fd = check_long(unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) })?;
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}

/// Sends `signal` to the process `pidfd` refers to (`pidfd_send_signal`, no
/// siginfo): never to another one that reused its number.
pub(crate) fn send_signal(pidfd: impl AsFd, signal: c_int) -> Result<(), Errno> {
    // SAFETY: an open descriptor, a signal number, a null siginfo and no flags.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_fd().as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0u32,
        )
    })
    .map(drop)
}
