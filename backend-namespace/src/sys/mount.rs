//! Mounts and roots in a cloned child.

use std::ffi::{CStr, c_int, c_ulong};
use std::ptr;

use nix::libc;

use super::fd::Fd;
use super::{Errno, check, check_long};

/// `mount(source, target, fstype, flags, data)`; `None` for a null argument.
pub(crate) fn mount(
    source: Option<&CStr>,
    target: &CStr,
    fstype: Option<&CStr>,
    flags: c_ulong,
    data: Option<&CStr>,
) -> Result<(), Errno> {
    let or_null = |s: Option<&CStr>| s.map_or(ptr::null(), CStr::as_ptr);
    // SAFETY: every pointer is null or a NUL-terminated string alive for the call.
    check(unsafe {
        libc::mount(
            or_null(source),
            target.as_ptr(),
            or_null(fstype),
            flags,
            or_null(data).cast(),
        )
    })
    .map(drop)
}

/// Makes every mount of this namespace private (`MS_REC | MS_PRIVATE` on `/`).
pub(crate) fn make_all_private() -> Result<(), Errno> {
    mount(None, c"/", None, libc::MS_REC | libc::MS_PRIVATE, None)
}

/// `mkdir(path, mode)`.
pub(crate) fn mkdir(path: &CStr, mode: libc::mode_t) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::mkdir(path.as_ptr(), mode) }).map(drop)
}

/// `pivot_root(new_root, put_old)`.
pub(crate) fn pivot_root(new_root: &CStr, put_old: &CStr) -> Result<(), Errno> {
    // SAFETY: two NUL-terminated paths.
    check_long(unsafe { libc::syscall(libc::SYS_pivot_root, new_root.as_ptr(), put_old.as_ptr()) })
        .map(drop)
}

/// Detaches the mount at `path` (`umount2(path, MNT_DETACH)`).
pub(crate) fn detach(path: &CStr) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::umount2(path.as_ptr(), libc::MNT_DETACH) }).map(drop)
}

/// `chdir(path)`.
pub(crate) fn chdir(path: &CStr) -> Result<(), Errno> {
    // SAFETY: a NUL-terminated path.
    check(unsafe { libc::chdir(path.as_ptr()) }).map(drop)
}

/// `fchdir(dir)`.
pub(crate) fn fchdir(dir: &Fd) -> Result<(), Errno> {
    // SAFETY: an open descriptor, owned by `dir`.
    check(unsafe { libc::fchdir(dir.raw()) }).map(drop)
}

/// A path descriptor of the directory `path` (`O_PATH | O_DIRECTORY`).
pub(crate) fn open_dir(path: &CStr) -> Result<Fd, Errno> {
    // SAFETY: a NUL-terminated path.
    Fd::from_new(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// Sets this process's file creation mask.
pub(crate) fn set_umask(mask: libc::mode_t) {
    // SAFETY: umask has no memory arguments and cannot fail.
    unsafe { libc::umask(mask) };
}

/// Moves this process into new namespaces of `flags` (`unshare`).
pub(crate) fn unshare(flags: c_int) -> Result<(), Errno> {
    // SAFETY: integer arguments; affects this process only.
    check(unsafe { libc::unshare(flags) }).map(drop)
}
