//! The host side of the checks: reading files, raw syscalls and the forked
//! namespace-creation probe. Everything here feeds [`super::parse`].

use std::ffi::CString;
use std::fs;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::libc;

use super::Finding;
use super::parse::{self, IdmapStep, NS_KINDS, UserNsInputs};

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

/// The exit code of our child `pid`; `None` when the wait failed or the child did
/// not exit normally.
fn wait_exit(pid: libc::pid_t) -> Option<libc::c_int> {
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
    // SAFETY: after fork the child runs only raw system calls on data prepared
    // before the fork (no allocation, no locks, nothing that can panic) and
    // `_exit`s, so this is sound even when the caller is multi-threaded.
    let pid = unsafe { libc::fork() };
    if pid == 0 {
        idmap_child(path.as_ptr(), write_end.as_raw_fd());
    }
    drop(write_end);
    if pid < 0 {
        return None;
    }
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

/// The forked probe child: `open_tree(OPEN_TREE_CLONE)` of `path`, a user
/// namespace from a grandchild that shares this child's descriptor table
/// (`CLONE_FILES`: it opens `/proc/self/ns/user` into it and exits), then
/// `mount_setattr(MOUNT_ATTR_IDMAP)` of the detached copy with that namespace.
fn idmap_child(path: *const libc::c_char, report_fd: libc::c_int) -> ! {
    let report = |step: libc::c_int, errno: libc::c_int| -> ! {
        let [a, b] = [step.to_ne_bytes(), errno.to_ne_bytes()];
        let bytes = [a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3]];
        // SAFETY: a write of a local buffer to our pipe, then the child ends
        // without running the parent's atexit handlers or destructors.
        unsafe {
            libc::write(report_fd, bytes.as_ptr().cast(), bytes.len());
            libc::_exit(0)
        }
    };
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: a NUL-terminated path made before the fork; a detached copy of the
    // mount at `path` (no submounts), close-on-exec.
    let tree = unsafe {
        libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            path,
            libc::OPEN_TREE_CLONE
                | libc::O_CLOEXEC as libc::c_uint
                | libc::AT_SYMLINK_NOFOLLOW as libc::c_uint,
        )
    };
    if tree < 0 {
        report(1, errno());
    }
    let tree = tree as libc::c_int;
    // The slot the grandchild puts the namespace descriptor in: above both of ours.
    let userns = tree.max(report_fd) + 1;
    // SAFETY: a fork-style clone (NULL stack, no CLONE_VM) into a new user namespace,
    // sharing this child's descriptor table; the grandchild runs only raw system
    // calls on constants and exits with 0 or the errno that stopped it.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (libc::CLONE_NEWUSER | libc::CLONE_FILES | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
            0usize,
        )
    };
    if pid == 0 {
        // The namespace gets a map (kernels refuse an idmapping without one): its
        // root is host root, the only id this process may map itself.
        for (file, contents) in [
            (c"/proc/self/setgroups", &b"deny"[..]),
            (c"/proc/self/uid_map", &b"0 0 1\n"[..]),
            (c"/proc/self/gid_map", &b"0 0 1\n"[..]),
        ] {
            if let Err(e) = write_raw(file, contents) {
                // SAFETY: ends the grandchild at once.
                unsafe { libc::_exit(e.clamp(1, 255)) };
            }
        }
        // SAFETY: raw system calls on constants, in the grandchild alone.
        unsafe {
            let fd = libc::open(
                c"/proc/self/ns/user".as_ptr(),
                libc::O_RDONLY | libc::O_CLOEXEC,
            );
            if fd < 0 || (fd != userns && libc::dup3(fd, userns, libc::O_CLOEXEC) < 0) {
                libc::_exit(errno().clamp(1, 255));
            }
            libc::_exit(0);
        }
    }
    if pid < 0 {
        report(2, errno());
    }
    match wait_exit(pid as libc::pid_t) {
        Some(0) => {}
        Some(e) => report(2, e),
        None => report(2, libc::ECHILD),
    }
    let attr = libc::mount_attr {
        attr_set: libc::MOUNT_ATTR_IDMAP | libc::MOUNT_ATTR_RDONLY,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns as u64,
    };
    // SAFETY: `tree` is a detached mount named by an empty path with AT_EMPTY_PATH;
    // `attr` is a valid `struct mount_attr` of the size passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree,
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            std::ptr::from_ref(&attr),
            std::mem::size_of::<libc::mount_attr>(),
        )
    };
    if r < 0 {
        report(3, errno());
    }
    report(0, 0)
}

/// Writes `contents` to `path` with raw system calls only (safe after a fork);
/// `Err(errno)` on failure.
fn write_raw(path: &std::ffi::CStr, contents: &[u8]) -> Result<(), libc::c_int> {
    let errno = || {
        std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL)
    };
    // SAFETY: a NUL-terminated path; the descriptor is closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(errno());
    }
    // SAFETY: writes from a live slice of the length passed.
    let written = unsafe { libc::write(fd, contents.as_ptr().cast(), contents.len()) };
    let result = if written == contents.len() as isize {
        Ok(())
    } else {
        Err(errno())
    };
    // SAFETY: our own descriptor, closed once.
    unsafe { libc::close(fd) };
    result
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

/// Where [`run_all`] probes idmapped mounts: the root directory's file system.
pub(crate) const IDMAPPED_PROBE_DIR: &str = "/";

/// The idmapped-mounts finding for `dir`.
pub(crate) fn idmapped_mounts(dir: &Path, is_root: bool) -> Finding {
    parse::idmapped_mounts(
        &dir.to_string_lossy(),
        read("/proc/sys/kernel/osrelease").as_deref(),
        probe_idmapped_mount(dir),
        is_root,
    )
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
    findings.push(idmapped_mounts(Path::new(IDMAPPED_PROBE_DIR), is_root));
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
