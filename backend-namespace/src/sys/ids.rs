//! Ids, capabilities and process flags in a cloned child: raw system calls,
//! never glibc's wrappers (which would broadcast an id change to threads that
//! exist only in the process this one was cloned from).

use std::ffi::{CStr, c_int};
use std::ptr;

use nix::libc;

use super::errno::{self, Errno, check, check_long};

/// `CAP_LAST_CAP` is below this on every kernel so far; the drop stops at the
/// first `EINVAL`.
const CAP_PROBE_LIMIT: c_int = 64;

/// Clears the supplementary groups (`setgroups(0, NULL)`).
pub(crate) fn clear_groups() -> Result<(), Errno> {
    // SAFETY: a zero count and a null list.
    check_long(unsafe { libc::syscall(libc::SYS_setgroups, 0usize, ptr::null::<libc::gid_t>()) })
        .map(drop)
}

/// Sets the file system ids used for permission checks and new files, leaving
/// the other ids and the capabilities as they are.
pub(crate) fn set_fs_ids(uid: libc::uid_t, gid: libc::gid_t) {
    // SAFETY: integer arguments; these calls cannot fail (they return the old id).
    unsafe {
        libc::syscall(libc::SYS_setfsgid, gid);
        libc::syscall(libc::SYS_setfsuid, uid);
    }
}

/// Sets the real, effective and saved group id to `gid`.
pub(crate) fn set_gid(gid: libc::gid_t) -> Result<(), Errno> {
    // SAFETY: integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) }).map(drop)
}

/// Sets the real, effective and saved user id to `uid`.
pub(crate) fn set_uid(uid: libc::uid_t) -> Result<(), Errno> {
    // SAFETY: integer arguments.
    check_long(unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) }).map(drop)
}

/// Drops every capability of the bounding set this kernel has.
pub(crate) fn drop_bounding_set() -> Result<(), Errno> {
    for cap in 0..CAP_PROBE_LIMIT {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } < 0 {
            return match errno::last() {
                libc::EINVAL => Ok(()),
                other => Err(other),
            };
        }
    }
    Ok(())
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empties the effective, permitted and inheritable capability sets.
pub(crate) fn clear_capabilities() -> Result<(), Errno> {
    let header = CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: a v3 header and the two data structs capset(2) reads for it.
    check_long(unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) })
        .map(drop)
}

/// Clears the ambient capability set (a kernel without one answers `EINVAL`,
/// which is success here).
pub(crate) fn clear_ambient() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    match ret {
        0.. => Ok(()),
        _ if errno::last() == libc::EINVAL => Ok(()),
        _ => Err(errno::last()),
    }
}

/// Sets `no_new_privs`: no `execve` grants privileges again.
pub(crate) fn set_no_new_privs() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments.
    check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) }).map(drop)
}

/// Makes this process non-dumpable (`PR_SET_DUMPABLE` 0).
pub(crate) fn set_undumpable() {
    // SAFETY: prctl with integer arguments; it cannot fail for these values.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
}

/// Renames the calling thread (at most 15 bytes are kept).
pub(crate) fn set_thread_name(name: &CStr) {
    // SAFETY: PR_SET_NAME reads a NUL-terminated string, which `name` is.
    unsafe { libc::prctl(libc::PR_SET_NAME, name.as_ptr(), 0, 0, 0) };
}
