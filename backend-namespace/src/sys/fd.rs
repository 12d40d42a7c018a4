//! Descriptors in a cloned child: owned, read and written without glibc's
//! buffers.

use std::ffi::c_int;
use std::os::fd::{AsFd, BorrowedFd};

use nix::libc;

use super::errno::{self, Errno, check};

/// A descriptor closed on drop (`close` is async-signal-safe).
///
/// The field is private: the only way to get one is [`Fd::from_new`] on the return
/// value of a call that just created the descriptor, so one descriptor number is
/// never wrapped (and closed) twice, and a negative number is never wrapped.
#[derive(Debug)]
pub(crate) struct Fd(c_int);

impl Fd {
    /// Takes ownership of the descriptor a call (`open`, `socket`, ...) just
    /// returned; a negative return value is that call's failure (`errno`).
    pub(crate) fn from_new(ret: c_int) -> Result<Self, Errno> {
        check(ret).map(Self)
    }

    /// The descriptor number, still owned by `self`.
    pub(crate) fn raw(&self) -> c_int {
        self.0
    }

    /// Gives up ownership: the caller closes the returned descriptor.
    pub(crate) fn into_raw(self) -> c_int {
        let fd = self.0;
        std::mem::forget(self);
        fd
    }
}

impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        // SAFETY: `self.0` is open for as long as `self` lives (see `from_new`).
        unsafe { BorrowedFd::borrow_raw(self.0) }
    }
}

impl Drop for Fd {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a descriptor this value owns (created by the call
        // whose result `from_new` took); closing it twice is impossible because
        // `Fd` is neither `Clone` nor constructible from an existing number.
        unsafe { libc::close(self.0) };
    }
}

/// Writes all of `bytes` to `fd`, retrying on `EINTR`.
pub(crate) fn write_all(fd: c_int, mut bytes: &[u8]) -> Result<(), Errno> {
    while !bytes.is_empty() {
        // SAFETY: the pointer and length describe a live slice.
        let n = unsafe { libc::write(fd, bytes.as_ptr().cast(), bytes.len()) };
        if n < 0 {
            let e = errno::last();
            if e == libc::EINTR {
                continue;
            }
            return Err(e);
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// Reads one byte; `Ok(None)` at end of file.
pub(crate) fn read_byte(fd: c_int) -> Result<Option<u8>, Errno> {
    let mut byte = 0u8;
    loop {
        // SAFETY: reading at most one byte into a live local.
        let n = unsafe { libc::read(fd, (&raw mut byte).cast(), 1) };
        match n {
            1 => return Ok(Some(byte)),
            0 => return Ok(None),
            _ if errno::last() == libc::EINTR => continue,
            _ => return Err(errno::last()),
        }
    }
}

/// Closes descriptor `fd` of this process: one the child's descriptor layout
/// placed at a fixed number (stdio, the protocol's pipes), which no [`Fd`] owns.
pub(crate) fn close(fd: c_int) {
    // SAFETY: closing a number has no memory effect; the layout says which
    // numbers the caller holds, and none of them is owned by an `Fd`.
    unsafe { libc::close(fd) };
}

/// A close-on-exec duplicate of `fd` at the lowest free number from `lowest`.
pub(crate) fn dup_from(fd: c_int, lowest: c_int) -> Result<c_int, Errno> {
    // SAFETY: duplicating a descriptor has no memory effect.
    check(unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, lowest) })
}

/// Marks `fd` close-on-exec.
pub(crate) fn set_cloexec(fd: c_int) -> Result<(), Errno> {
    // SAFETY: changes a descriptor flag; no memory effect.
    check(unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) }).map(drop)
}

/// Makes `target` a duplicate of `fd` (`dup3`; `flags` 0 or `O_CLOEXEC`).
pub(crate) fn dup_onto(fd: c_int, target: c_int, flags: c_int) -> Result<(), Errno> {
    // SAFETY: as above; whatever `target` was is closed by the kernel, and the
    // caller's descriptor layout says it is free to replace.
    check(unsafe { libc::dup3(fd, target, flags) }).map(drop)
}

/// Closes every descriptor from `first` on (`close_range`; a kernel without it
/// gets a loop up to the soft `RLIMIT_NOFILE`, at least `at_least`).
pub(crate) fn close_from(first: c_int, at_least: c_int) -> Result<(), Errno> {
    // SAFETY: closes descriptors of this process above the ones it keeps; no
    // memory effect.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, first as u32, u32::MAX, 0u32) };
    if closed >= 0 {
        return Ok(());
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: a valid out-pointer.
    check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) })?;
    let end = (limit.rlim_cur.min(1 << 20) as c_int).max(at_least);
    for fd in first..end {
        close(fd);
    }
    Ok(())
}

/// `poll(fds, timeout_ms)`: how many entries have events (`EINTR` returned as is).
pub(crate) fn poll(fds: &mut [libc::pollfd], timeout_ms: c_int) -> Result<c_int, Errno> {
    // SAFETY: the pointer and length describe a live, writable slice.
    check(unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout_ms) })
}

/// Opens `path` with `flags` (close-on-exec added).
pub(crate) fn open(path: &std::ffi::CStr, flags: c_int) -> Result<Fd, Errno> {
    // SAFETY: a NUL-terminated path; the call returns a new descriptor.
    Fd::from_new(unsafe { libc::open(path.as_ptr(), flags | libc::O_CLOEXEC) })
}
