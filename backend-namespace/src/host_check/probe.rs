//! The host side of the checks: reading files, raw syscalls and the forked
//! namespace-creation probe. Everything here feeds [`super::parse`].

use std::ffi::CString;
use std::fs;
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

use super::parse::{self, IdmapStep, NS_KINDS, UserNsInputs};
use super::{Check, Finding};
use crate::sys::{self, Birth, fd, mount, process};

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
    // The child only makes raw system calls on constants (see `sys::fork_like`).
    let pid = sys::fork_like(0, None, &(), creation_child).ok()?;
    let failed = wait_exit(pid)?;
    let mut kinds = [false; 6];
    for (i, k) in kinds.iter_mut().enumerate() {
        *k = failed & (1 << (i + 1)) == 0;
    }
    Some(Created {
        user: failed & 1 == 0,
        kinds,
    })
}

/// The creation probe's child: `unshare` of each kind, a bit per failure in its
/// exit status.
fn creation_child((): &(), _: Birth) -> ! {
    let mut failed: libc::c_int = 0;
    if process::unshare(libc::CLONE_NEWUSER).is_err() {
        failed |= 1;
    }
    for (i, flag) in NS_FLAGS.iter().enumerate() {
        if process::unshare(*flag).is_err() {
            failed |= 1 << (i + 1);
        }
    }
    process::exit(failed)
}

/// The exit code of our child `pid`; `None` if the wait failed or it did not
/// exit normally.
fn wait_exit(pid: libc::pid_t) -> Option<libc::c_int> {
    let status = loop {
        match process::wait_for_child(pid, 0) {
            Ok(Some(status)) => break status,
            Err(libc::EINTR) => {}
            _ => return None,
        }
    };
    libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
}

/// The probe child's report on the pipe: step (0: none failed, else
/// `1 + IdmapStep` in declaration order) and errno.
type IdmapReport = [libc::c_int; 2];

/// Fork one child that makes a detached idmapped mount of `dir`, as the spawn code
/// does for an overlay's lower layer (`spawn/idmapped.rs`), and reports the first
/// step that failed over a pipe. The mount is never attached anywhere and goes
/// away with the child. `None` when the fork, the pipe or the wait failed.
pub(crate) fn probe_idmapped_mount(dir: &Path) -> Option<Result<(), (IdmapStep, i32)>> {
    let path = CString::new(dir.as_os_str().as_bytes()).ok()?;
    let (read_end, write_end) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).ok()?;
    // The child only makes raw system calls on data prepared here.
    let child = IdmapChild {
        path,
        report_fd: write_end.as_raw_fd(),
    };
    let pid = sys::fork_like(0, None, &child, idmap_child);
    drop(write_end);
    let pid = pid.ok()?;
    let mut report: IdmapReport = [0; 2];
    let mut bytes = [0u8; std::mem::size_of::<IdmapReport>()];
    let read = nix::unistd::read(&read_end, &mut bytes);
    let exited = wait_exit(pid);
    if read.ok()? != bytes.len() || exited != Some(0) {
        return None;
    }
    for (value, chunk) in report.iter_mut().zip(bytes.chunks_exact(4)) {
        *value = libc::c_int::from_ne_bytes(chunk.try_into().ok()?);
    }
    let step = match report[0] {
        0 => return Some(Ok(())),
        1 => IdmapStep::OpenTree,
        2 => IdmapStep::UserNamespace,
        _ => IdmapStep::SetAttr,
    };
    Some(Err((step, report[1])))
}

/// What the idmapped-mount probe's child works on.
struct IdmapChild {
    path: CString,
    report_fd: libc::c_int,
}

/// The forked probe child: `open_tree(OPEN_TREE_CLONE)` of `path`, a user
/// namespace from a grandchild that shares this child's descriptor table
/// (`CLONE_FILES`: it opens `/proc/self/ns/user` into a slot of it and exits),
/// then `mount_setattr(MOUNT_ATTR_IDMAP)` of the detached copy with that
/// namespace.
fn idmap_child(child: &IdmapChild, _: Birth) -> ! {
    let report = |step: libc::c_int, errno: libc::c_int| -> ! {
        let [a, b] = [step.to_ne_bytes(), errno.to_ne_bytes()];
        let bytes = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
        let _ = sys::write_all(child.report_fd, &bytes);
        process::exit(0)
    };
    let tree = match mount::clone_tree(&child.path) {
        Ok(tree) => tree,
        Err(errno) => report(1, errno),
    };
    // The slot the grandchild puts the namespace descriptor in.
    let userns = match fd::open(c"/dev/null", libc::O_RDONLY) {
        Ok(slot) => slot,
        Err(errno) => report(2, errno),
    };
    let flags = libc::CLONE_NEWUSER | libc::CLONE_FILES;
    let pid = match sys::fork_like(flags, None, &userns.raw(), user_namespace_child) {
        Ok(pid) => pid,
        Err(errno) => report(2, errno),
    };
    match wait_exit(pid) {
        Some(0) => {}
        Some(e) => report(2, e),
        None => report(2, libc::ECHILD),
    }
    let set = libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_RDONLY;
    if let Err(errno) = mount::set_attributes(tree.as_fd(), set, 0, Some(userns.as_fd()), false) {
        report(3, errno);
    }
    report(0, 0)
}

/// The grandchild, in a new user namespace and sharing its parent's descriptor
/// table: maps its root to host root (the only id this process may map itself;
/// kernels refuse an idmapping without a map), puts its namespace in `slot`,
/// and exits with 0 or the errno that stopped it.
fn user_namespace_child(slot: &libc::c_int, _: Birth) -> ! {
    for (file, contents) in [
        (c"/proc/self/setgroups", &b"deny"[..]),
        (c"/proc/self/uid_map", &b"0 0 1\n"[..]),
        (c"/proc/self/gid_map", &b"0 0 1\n"[..]),
    ] {
        let written =
            fd::open(file, libc::O_WRONLY).and_then(|f| sys::write_all(f.raw(), contents));
        if let Err(e) = written {
            process::exit(e.clamp(1, 255));
        }
    }
    let moved = fd::open(c"/proc/self/ns/user", libc::O_RDONLY)
        .and_then(|ns| fd::dup_onto(ns.raw(), *slot, libc::O_CLOEXEC));
    process::exit(moved.map_or_else(|e| e.clamp(1, 255), |()| 0))
}

/// Where [`run_all`] probes idmapped mounts: the root directory's file system.
pub(crate) const IDMAPPED_PROBE_DIR: &str = "/";

/// The idmapped-mounts finding for `dir`.
pub(crate) fn idmapped_mounts(dir: &Path, is_root: bool) -> Finding {
    if !is_root {
        // An ordinary user's runs map to its own ids and the base-tree cache it
        // makes is its own: the lower layer needs no idmapped mount.
        return Finding::ok(
            Check::IdmappedMounts,
            "not needed: an ordinary user's runs map to its own ids, and the base-tree cache is its own",
        );
    }
    parse::idmapped_mounts(
        &dir.to_string_lossy(),
        read("/proc/sys/kernel/osrelease").as_deref(),
        probe_idmapped_mount(dir),
        is_root,
    )
}

/// Run every check, in `Check::ALL` order.
pub(crate) fn run_all(cgroup_parent: &str) -> Vec<Finding> {
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
        process::seccomp_errno_action_available(),
    ));
    findings.push(parse::overlayfs(read("/proc/filesystems").as_deref()));
    findings.push(idmapped_mounts(Path::new(IDMAPPED_PROBE_DIR), is_root));
    findings.push(parse::landlock(process::landlock_abi()));

    let user = nix::unistd::User::from_uid(uid)
        .ok()
        .flatten()
        .map_or_else(|| uid.to_string(), |u| u.name);
    let layout = crate::cgroup::CgroupLayout::detect();
    let pure_v2 = layout
        .as_ref()
        .is_ok_and(|layout| crate::cgroup::v2_alone(layout).is_some());
    let missing = layout
        .and_then(|layout| crate::cgroup::delegation(&layout, cgroup_parent, uid.as_raw()))
        .map_err(|err| err.to_string());
    findings.push(parse::cgroup_delegation(
        is_root,
        &user,
        uid.as_raw(),
        cgroup_parent,
        pure_v2,
        missing,
    ));
    findings.push(parse::disk_caps(
        is_root,
        crate::disk::mkfs_path().as_deref(),
        Path::new("/dev/loop-control").exists(),
    ));
    findings
}
