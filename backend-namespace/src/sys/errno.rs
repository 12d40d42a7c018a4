//! How the seam reports a failed call: the raw `errno`, read right after it.

use std::ffi::c_int;

use nix::libc;

/// An `errno` value.
pub(crate) type Errno = i32;

/// The calling thread's `errno`.
pub(crate) fn last() -> Errno {
    nix::errno::Errno::last_raw()
}

/// `Ok(ret)` for a non-negative return value, else `Err(errno)`.
pub(crate) fn check(ret: c_int) -> Result<c_int, Errno> {
    if ret < 0 { Err(last()) } else { Ok(ret) }
}

/// `Ok(ret)` for a non-negative `syscall(2)` return value, else `Err(errno)`.
pub(crate) fn check_long(ret: libc::c_long) -> Result<libc::c_long, Errno> {
    if ret < 0 { Err(last()) } else { Ok(ret) }
}
