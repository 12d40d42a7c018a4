//! The host side of the checks: reading files, raw syscalls and the forked
//! namespace-creation probe. Everything here feeds [`super::parse`].

use std::fs;
use std::path::Path;

use nix::libc;

use super::Finding;
use super::parse::{self, NS_KINDS, UserNsInputs};

fn read(path: impl AsRef<Path>) -> Option<String> {
    fs::read_to_string(path).ok()
}

/// The namespace flags the probe child tries after `CLONE_NEWUSER`, in
/// [`NS_KINDS`] order.
const NS_FLAGS: [libc::c_int; 6] = [
    libc::CLONE_NEWNS,
    libc::CLONE_NEWPID,
    libc::CLONE_NEWNET,
    libc::CLONE_NEWUTS,
    libc::CLONE_NEWIPC,
    libc::CLONE_NEWCGROUP,
];

/// Outcome of the creation probe: for the user namespace and each of [`NS_KINDS`],
/// whether `unshare` worked.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Created {
    pub(crate) user: bool,
    pub(crate) kinds: [bool; 6],
}

/// Fork one child that calls `unshare(CLONE_NEWUSER)` and then `unshare` of each other
/// kind, and exits with a bit per failure (bit 0: user; bit 1 + i: `NS_FLAGS[i]`).
/// `None` when the fork or the wait failed, or the child did not exit normally.
fn probe_creation() -> Option<Created> {
    // SAFETY: after fork the child runs only `unshare` and `_exit`, both
    // async-signal-safe raw syscalls on constants: no allocation, no locks, so this is
    // sound even when the caller is multi-threaded. The parent only waits.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        let mut failed: libc::c_int = 0;
        // SAFETY: unshare affects only this child, which exits right after.
        if unsafe { libc::unshare(libc::CLONE_NEWUSER) } != 0 {
            failed |= 1;
        }
        for (i, flag) in NS_FLAGS.iter().enumerate() {
            // SAFETY: as above.
            if unsafe { libc::unshare(*flag) } != 0 {
                failed |= 1 << (i + 1);
            }
        }
        // SAFETY: ends the child without running the parent's atexit handlers or
        // destructors.
        unsafe { libc::_exit(failed) };
    }
    if pid < 0 {
        return None;
    }
    let mut status: libc::c_int = 0;
    loop {
        // SAFETY: waiting for our own child with a valid pointer to a local.
        let r = unsafe { libc::waitpid(pid, &mut status, 0) };
        if r == pid {
            break;
        }
        if r < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
            continue;
        }
        return None;
    }
    if !libc::WIFEXITED(status) {
        return None;
    }
    let failed = libc::WEXITSTATUS(status);
    let mut kinds = [false; 6];
    for (i, k) in kinds.iter_mut().enumerate() {
        *k = failed & (1 << (i + 1)) == 0;
    }
    Some(Created {
        user: failed & 1 == 0,
        kinds,
    })
}

/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &SECCOMP_RET_ERRNO)`.
fn seccomp_action_avail() -> Result<(), i32> {
    const SECCOMP_GET_ACTION_AVAIL: libc::c_long = 2;
    let action: u32 = 0x0005_0000; // SECCOMP_RET_ERRNO
    // SAFETY: the kernel reads one u32 from a pointer to a live local.
    let r = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            SECCOMP_GET_ACTION_AVAIL,
            0,
            &action as *const u32,
        )
    };
    if r == 0 { Ok(()) } else { Err(last_errno()) }
}

/// `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`.
fn landlock_abi() -> Result<i64, i32> {
    const LANDLOCK_CREATE_RULESET_VERSION: libc::c_uint = 1;
    // SAFETY: with a NULL attribute and size 0 the kernel reads nothing and only
    // returns the ABI version.
    let r = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<u8>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if r >= 0 { Ok(r) } else { Err(last_errno()) }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EINVAL)
}

/// Run every check, in `Check::ALL` order.
pub(crate) fn run_all() -> Vec<Finding> {
    let uid = nix::unistd::geteuid();
    let is_root = uid.is_root();
    let created = probe_creation();
    if created.is_none() {
        tracing::warn!("host check: the namespace creation probe could not run");
    }

    let max = read("/proc/sys/user/max_user_namespaces");
    let clone = read("/proc/sys/kernel/unprivileged_userns_clone");
    let apparmor = read("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    let mut findings = vec![parse::user_namespaces(&UserNsInputs {
        max_user_namespaces: max.as_deref(),
        unprivileged_userns_clone: clone.as_deref(),
        apparmor_restrict: apparmor.as_deref(),
        created: created.map(|c| c.user),
        is_root,
    })];

    for (i, kind) in NS_KINDS.into_iter().enumerate() {
        let present = Path::new("/proc/self/ns").join(kind.1).exists();
        findings.push(parse::namespace_kind(
            kind,
            present,
            created.map(|c| c.kinds[i]),
            created.map(|c| c.user),
        ));
    }

    let mounts = parse::mountinfo(&read("/proc/self/mountinfo").unwrap_or_default());
    let v2: Vec<(String, Option<String>)> = parse::cgroup2_mount_points(&mounts)
        .into_iter()
        .map(|mp| {
            let controllers = read(Path::new(&mp).join("cgroup.controllers"));
            (mp, controllers)
        })
        .collect();
    findings.extend(parse::cgroup_controllers(&mounts, &v2));

    findings.push(parse::seccomp(
        read("/proc/self/status").as_deref(),
        seccomp_action_avail(),
    ));
    findings.push(parse::overlayfs(read("/proc/filesystems").as_deref()));
    findings.push(parse::landlock(landlock_abi()));

    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    findings.push(parse::subordinate_ids(
        is_root,
        &user,
        uid.as_raw(),
        read("/etc/subuid").as_deref(),
        read("/etc/subgid").as_deref(),
    ));
    findings
}
