//! The credentials of one thread of the runner, narrowed to a run's: the
//! files API acts on a sandbox's files from a thread of its own that is,
//! for every permission check, the run's user and nothing more.
//!
//! Linux keeps credentials per thread; glibc's wrappers broadcast an id
//! change to every thread of the process, so these are raw system calls,
//! which change the calling thread alone. The thread is never given back to
//! a pool: it ends after its one operation.

use nix::libc;

use super::errno::{Errno, check_long};
use super::ids;

/// `CAP_SETGID` (`linux/capability.h`).
const CAP_SETGID: u32 = 6;

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Makes the calling thread act on files as host `uid`:`gid` and nothing
/// more: its supplementary groups cleared (where it may clear them: a caller
/// without `CAP_SETGID` keeps its own, as the run's commands it starts do),
/// `uid` and `gid` its file system ids (which, from root, drops the file
/// capabilities from its effective set), then every capability of every set
/// dropped (`CAP_SYS_PTRACE` and `CAP_SYS_ADMIN` too, which the kernel asks
/// for beside the file's mode: `/proc/<pid>/environ`, `/proc/<pid>/mem`),
/// each checked afterwards. For the rest of the thread's life.
pub(crate) fn act_as(uid: u32, gid: u32) -> Result<(), Errno> {
    let may_clear_groups = has_effective(CAP_SETGID)?;
    if may_clear_groups {
        ids::clear_groups()?;
    }
    ids::set_fs_ids(uid, gid);
    // `setfs*id` returns the id before the call and never fails loudly: an id
    // it refused leaves the old one, which asking with an invalid id tells.
    if fs_uid() != uid || fs_gid() != gid {
        return Err(libc::EPERM);
    }
    ids::clear_capabilities()?;
    let left = capabilities()?;
    if left
        .iter()
        .any(|d| d.effective | d.permitted | d.inheritable != 0)
    {
        return Err(libc::EPERM);
    }
    Ok(())
}

/// The calling thread's file system uid (`setfsuid(-1)` changes nothing and
/// returns it).
fn fs_uid() -> u32 {
    // SAFETY: an integer argument; an invalid id changes nothing.
    unsafe { libc::syscall(libc::SYS_setfsuid, u32::MAX) as u32 }
}

/// The calling thread's file system gid.
fn fs_gid() -> u32 {
    // SAFETY: an integer argument; an invalid id changes nothing.
    unsafe { libc::syscall(libc::SYS_setfsgid, u32::MAX) as u32 }
}

/// The calling thread's capability sets (`capget`).
fn capabilities() -> Result<[CapData; 2], Errno> {
    let mut header = CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    // SAFETY: a v3 header and the two data structs capget(2) fills for it.
    check_long(unsafe { libc::syscall(libc::SYS_capget, &raw mut header, data.as_mut_ptr()) })?;
    Ok(data)
}

/// Whether capability `cap` is in the calling thread's effective set.
fn has_effective(cap: u32) -> Result<bool, Errno> {
    let data = capabilities()?;
    let word = data.get((cap / 32) as usize).ok_or(libc::EINVAL)?;
    Ok(word.effective & (1 << (cap % 32)) != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_acting_as_a_run_has_its_ids_no_groups_and_no_capability_and_the_others_keep_theirs()
    {
        let before = capabilities().unwrap();
        let seen = std::thread::spawn(|| {
            act_as(4242, 4343).map(|()| (fs_uid(), fs_gid(), capabilities().ok()))
        })
        .join()
        .unwrap();
        let (uid, gid, caps) = seen.unwrap();
        assert_eq!((uid, gid), (4242, 4343));
        let caps = caps.unwrap();
        assert!(caps.iter().all(|d| d.effective | d.permitted == 0));
        // The process and this thread are as they were.
        let after = capabilities().unwrap();
        assert_eq!(
            before.map(|d| (d.effective, d.permitted)),
            after.map(|d| (d.effective, d.permitted))
        );
        assert_eq!(fs_uid(), nix::unistd::geteuid().as_raw());
    }
}
