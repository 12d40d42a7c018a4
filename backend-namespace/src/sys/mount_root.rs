//! Whether a directory entry is the root of a mount (`statx`'s
//! `STATX_ATTR_MOUNT_ROOT`), which `stat` cannot tell for a bind mount of
//! the same file system.

use std::ffi::CStr;
use std::os::fd::{AsRawFd, BorrowedFd};

use nix::libc;

/// Whether `name` in the directory `dir` (never followed if it is a link) is
/// the root of a mount. `None` when the kernel does not say (before Linux
/// 5.8, or a file system that does not report it).
pub(crate) fn is_mount_root(dir: BorrowedFd<'_>, name: &CStr) -> std::io::Result<Option<bool>> {
    // SAFETY: an all-zero `statx` is a valid value of the plain C struct.
    let mut buf: libc::statx = unsafe { std::mem::zeroed() };
    // SAFETY: `dir` is an open descriptor, `name` a NUL-terminated string and
    // `buf` a writable `statx` that outlives the call.
    let done = unsafe {
        libc::statx(
            dir.as_raw_fd(),
            name.as_ptr(),
            libc::AT_SYMLINK_NOFOLLOW,
            libc::STATX_BASIC_STATS,
            &mut buf,
        )
    };
    if done != 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flag = libc::STATX_ATTR_MOUNT_ROOT as u64;
    Ok((buf.stx_attributes_mask & flag != 0).then_some(buf.stx_attributes & flag != 0))
}
