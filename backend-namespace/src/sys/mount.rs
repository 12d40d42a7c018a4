//! Mounts and roots in a cloned child.

use std::ffi::{CStr, c_int, c_ulong};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr;

use nix::libc;

use super::errno::{Errno, check, check_long};
use super::fd::Fd;

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
    super::fd::open(path, libc::O_PATH | libc::O_DIRECTORY)
}

/// Attaches the detached mount `tree` (from `open_tree`) on the directory `at`,
/// then closes `tree`.
pub(crate) fn move_mount(tree: Fd, at: &Fd) -> Result<(), Errno> {
    // SAFETY: `tree` is a detached mount's descriptor, `at` an open directory;
    // empty paths name both.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.raw(),
            c"".as_ptr(),
            at.raw(),
            c"".as_ptr(),
            libc::MOVE_MOUNT_F_EMPTY_PATH | libc::MOVE_MOUNT_T_EMPTY_PATH,
        )
    })
    .map(drop)
}

/// Sets and clears `MOUNT_ATTR_*` attributes (and with `userns`, an id mapping)
/// on the mount whose root `top` is, and on every mount under it if
/// `recursive` (`mount_setattr`, Linux 5.12+).
pub(crate) fn set_attributes(
    top: BorrowedFd<'_>,
    set: u64,
    clear: u64,
    userns: Option<BorrowedFd<'_>>,
    recursive: bool,
) -> Result<(), Errno> {
    let attr = libc::mount_attr {
        attr_set: set,
        attr_clr: clear,
        propagation: 0,
        userns_fd: userns.map_or(0, |fd| fd.as_raw_fd() as u64),
    };
    let flags = libc::AT_EMPTY_PATH | if recursive { libc::AT_RECURSIVE } else { 0 };
    // SAFETY: `attr` is a valid `struct mount_attr` of the size passed; the path is
    // an empty literal used with AT_EMPTY_PATH on an open descriptor.
    check_long(unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            top.as_raw_fd(),
            c"".as_ptr(),
            flags as c_ulong,
            &raw const attr,
            std::mem::size_of::<libc::mount_attr>(),
        )
    })
    .map(drop)
}

/// The `ST_*` flags of the mount `fd` is on (`fstatvfs`; glibc takes them from
/// fstatfs's `f_flags`, present since Linux 2.6.36: no allocation).
pub(crate) fn mount_flags(fd: &Fd) -> Result<c_ulong, Errno> {
    // SAFETY: `statvfs` is plain data; fstatvfs fills it.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `fd` is open; `st` is a valid out-pointer.
    check(unsafe { libc::fstatvfs(fd.raw(), &mut st) })?;
    Ok(st.f_flag as c_ulong)
}

/// A detached copy of the mount at `path` (its subtree only, no submounts;
/// `open_tree` with `OPEN_TREE_CLONE`, the last component not followed),
/// close-on-exec.
pub(crate) fn clone_tree(path: &CStr) -> Result<OwnedFd, Errno> {
    // SAFETY: a NUL-terminated path and integer flags; the call returns a new
    // descriptor.
    let fd = check_long(unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path.as_ptr(),
            libc::OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
        )
    })?;
    // SAFETY: `fd` was just created and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}
