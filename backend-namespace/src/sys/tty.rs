//! Pseudo-terminal pairs: unlocking, sizing and opening the slave of a master.

use std::ffi::c_int;
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};

use nix::libc;

use super::errno::{Errno, check};

/// Unlocks the slave of `master` (`TIOCSPTLCK` 0, what `unlockpt` does).
pub(crate) fn unlock(master: impl AsFd) -> Result<(), Errno> {
    let unlock: c_int = 0;
    // SAFETY: TIOCSPTLCK reads an int from a valid pointer.
    check(unsafe {
        libc::ioctl(
            master.as_fd().as_raw_fd(),
            libc::TIOCSPTLCK,
            &raw const unlock,
        )
    })
    .map(drop)
}

/// Sets the window size of the terminal (`TIOCSWINSZ`).
pub(crate) fn set_window_size(master: impl AsFd, rows: u16, cols: u16) -> Result<(), Errno> {
    let size = libc::winsize {
        ws_row: rows,
        ws_col: cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads a `struct winsize`, which `size` is.
    check(unsafe {
        libc::ioctl(
            master.as_fd().as_raw_fd(),
            libc::TIOCSWINSZ,
            &raw const size,
        )
    })
    .map(drop)
}

/// Opens the slave of `master` with `flags`: `TIOCGPTPEER` (Linux 4.13+, no path
/// lookup), else by the name `ptsname_r` gives.
pub(crate) fn open_slave(
    master: impl AsFd,
    flags: c_int,
) -> Result<OwnedFd, (&'static str, Errno)> {
    let master = master.as_fd().as_raw_fd();
    // SAFETY: TIOCGPTPEER takes the open flags as an integer and returns a new
    // descriptor.
    let fd = unsafe { libc::ioctl(master, libc::TIOCGPTPEER, flags) };
    if fd >= 0 {
        // SAFETY: a new descriptor nothing else owns.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
    }
    let errno = super::errno::last();
    if !matches!(errno, libc::EINVAL | libc::ENOTTY) {
        return Err(("opening the slave (TIOCGPTPEER)", errno));
    }
    let mut name = [0 as libc::c_char; 64];
    // SAFETY: the buffer and its length are valid; ptsname_r NUL-terminates.
    let ret = unsafe { libc::ptsname_r(master, name.as_mut_ptr(), name.len()) };
    if ret != 0 {
        return Err(("ptsname_r", ret));
    }
    // SAFETY: `name` was NUL-terminated by ptsname_r.
    let fd = check(unsafe { libc::open(name.as_ptr(), flags) })
        .map_err(|errno| ("opening the slave by name", errno))?;
    // SAFETY: a new descriptor nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
