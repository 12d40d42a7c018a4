//! Pure functions from file contents (and probe outcomes) to findings, so every
//! branch is testable with synthetic input.

use super::{Check, Finding, Status};

/// The namespace kinds below the user namespace: check, `/proc/self/ns` name, kernel
/// option, in the order the creation probe tries them.
pub(crate) const NS_KINDS: [(Check, &str, &str); 6] = [
    (Check::MountNamespace, "mnt", "CONFIG_NAMESPACES"),
    (Check::PidNamespace, "pid", "CONFIG_PID_NS"),
    (Check::NetNamespace, "net", "CONFIG_NET_NS"),
    (Check::UtsNamespace, "uts", "CONFIG_UTS_NS"),
    (Check::IpcNamespace, "ipc", "CONFIG_IPC_NS"),
    (Check::CgroupNamespace, "cgroup", "CONFIG_CGROUPS"),
];

/// Inputs of the user-namespace check.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UserNsInputs<'a> {
    /// `/proc/sys/user/max_user_namespaces`, if it exists.
    pub(crate) max_user_namespaces: Option<&'a str>,
    /// Debian's `/proc/sys/kernel/unprivileged_userns_clone`, if it exists.
    pub(crate) unprivileged_userns_clone: Option<&'a str>,
    /// Ubuntu's `/proc/sys/kernel/apparmor_restrict_unprivileged_userns`, if it exists.
    pub(crate) apparmor_restrict: Option<&'a str>,
    /// Whether `unshare(CLONE_NEWUSER)` worked in the probe child (`None`: not run).
    pub(crate) created: Option<bool>,
    /// Whether the caller is root.
    pub(crate) is_root: bool,
}

pub(crate) fn user_namespaces(i: &UserNsInputs<'_>) -> Finding {
    let check = Check::UserNamespaces;
    let Some(max) = i.max_user_namespaces else {
        return Finding::gap(
            check,
            Status::Missing,
            "/proc/sys/user/max_user_namespaces does not exist: kernel without user namespaces",
            "use a kernel built with CONFIG_USER_NS=y",
        );
    };
    let max = max.trim();
    match max.parse::<u64>() {
        Ok(0) => {
            return Finding::gap(
                check,
                Status::Missing,
                "user.max_user_namespaces is 0: user namespaces are disabled",
                "sysctl -w user.max_user_namespaces=15000 (persist it in /etc/sysctl.d/)",
            );
        }
        Ok(_) => {}
        Err(_) => {
            return Finding::gap(
                check,
                Status::Missing,
                format!("user.max_user_namespaces is unreadable: {max:?}"),
                "check /proc/sys/user/max_user_namespaces",
            );
        }
    }
    let mut notes = vec![format!("user.max_user_namespaces={max}")];
    if i.unprivileged_userns_clone.map(str::trim) == Some("0") {
        if !i.is_root {
            return Finding::gap(
                check,
                Status::Restricted,
                "kernel.unprivileged_userns_clone=0 (Debian): unprivileged users may not create user namespaces",
                "sysctl -w kernel.unprivileged_userns_clone=1 (persist it in /etc/sysctl.d/), or run the runner as root",
            );
        }
        notes.push("kernel.unprivileged_userns_clone=0 does not apply to root".into());
    }
    if i.apparmor_restrict.map(str::trim) == Some("1") {
        if !i.is_root {
            return Finding::gap(
                check,
                Status::Restricted,
                "kernel.apparmor_restrict_unprivileged_userns=1 (Ubuntu): AppArmor denies user namespaces to unconfined unprivileged programs",
                "give the runner binary an AppArmor profile with `userns,` \
                 (/etc/apparmor.d/agent-workspace: `abi <abi/4.0>, profile agent-workspace /path/to/runner flags=(unconfined) { userns, }`, \
                 then apparmor_parser -r), or sysctl -w kernel.apparmor_restrict_unprivileged_userns=0",
            );
        }
        notes.push("kernel.apparmor_restrict_unprivileged_userns=1 does not apply to root".into());
    }
    match i.created {
        Some(true) => notes.push("created one in a probe".into()),
        Some(false) => {
            return Finding::gap(
                check,
                Status::Restricted,
                format!(
                    "{}; but unshare(CLONE_NEWUSER) failed in a probe child",
                    notes.join("; ")
                ),
                "something outside the sysctls refuses user namespaces: an enclosing container's \
                 seccomp filter or LSM, or a chroot; run the runner on the host or in a container \
                 that allows nested user namespaces",
            );
        }
        None => notes.push("creation not probed (fork failed)".into()),
    }
    Finding::ok(check, notes.join("; "))
}

/// One namespace kind: `present` is `/proc/self/ns/<name>` existing, `created` the
/// probe's outcome (`None`: not run), `user_created` the user namespace's.
pub(crate) fn namespace_kind(
    (check, name, option): (Check, &str, &str),
    present: bool,
    created: Option<bool>,
    user_created: Option<bool>,
) -> Finding {
    if !present {
        return Finding::gap(
            check,
            Status::Missing,
            format!("/proc/self/ns/{name} does not exist: the kernel lacks this namespace"),
            format!("use a kernel built with {option}=y"),
        );
    }
    let inside = if user_created == Some(true) {
        " inside a new user namespace"
    } else {
        ""
    };
    match created {
        Some(true) => Finding::ok(
            check,
            format!("/proc/self/ns/{name} present; created one{inside} in a probe"),
        ),
        Some(false) => Finding::gap(
            check,
            Status::Restricted,
            format!("/proc/self/ns/{name} present, but unshare failed{inside} in a probe child"),
            "creating namespaces needs root or a working user namespace (see user_namespaces); \
             an enclosing container may also forbid it with seccomp or an LSM",
        ),
        None => Finding::ok(
            check,
            format!("/proc/self/ns/{name} present; creation not probed (fork failed)"),
        ),
    }
}

/// One line of `/proc/self/mountinfo`, the fields this module needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Mount {
    pub(crate) mount_point: String,
    pub(crate) fstype: String,
    pub(crate) source: String,
    pub(crate) super_options: String,
}

/// Undo mountinfo's octal escapes (`\040` for a space, ...).
fn unescape(field: &str) -> String {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if let [b'\\', a @ b'0'..=b'3', b @ b'0'..=b'7', c @ b'0'..=b'7', ..] = bytes[i..] {
            out.push((a - b'0') * 64 + (b - b'0') * 8 + (c - b'0'));
            i += 4;
            continue;
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Parse `/proc/self/mountinfo`; malformed lines are skipped.
pub(crate) fn mountinfo(content: &str) -> Vec<Mount> {
    content
        .lines()
        .filter_map(|line| {
            let (before, after) = line.split_once(" - ")?;
            let mount_point = before.split(' ').nth(4)?;
            let mut after = after.split(' ');
            let fstype = after.next()?;
            let source = after.next()?;
            let super_options = after.next().unwrap_or("");
            Some(Mount {
                mount_point: unescape(mount_point),
                fstype: fstype.to_owned(),
                source: unescape(source),
                super_options: super_options.to_owned(),
            })
        })
        .collect()
}

/// The cgroup2 mount points in a mountinfo.
pub(crate) fn cgroup2_mount_points(mounts: &[Mount]) -> Vec<String> {
    mounts
        .iter()
        .filter(|m| m.fstype == "cgroup2")
        .map(|m| m.mount_point.clone())
        .collect()
}

/// The memory, pids and cpu findings. `v2_controllers` holds, for each cgroup2 mount
/// point, the contents of its `cgroup.controllers` (`None`: unreadable).
pub(crate) fn cgroup_controllers(
    mounts: &[Mount],
    v2_controllers: &[(String, Option<String>)],
) -> Vec<Finding> {
    [
        (Check::CgroupMemory, "memory"),
        (Check::CgroupPids, "pids"),
        (Check::CgroupCpu, "cpu"),
    ]
    .into_iter()
    .map(|(check, controller)| {
        let v1 = mounts.iter().find(|m| {
            m.fstype == "cgroup" && m.super_options.split(',').any(|o| o == controller)
        });
        if let Some(m) = v1 {
            return Finding::ok(check, format!("cgroup v1 `{controller}` hierarchy at {}", m.mount_point));
        }
        let v2 = v2_controllers.iter().find(|(_, c)| {
            c.as_deref()
                .is_some_and(|c| c.split_whitespace().any(|c| c == controller))
        });
        if let Some((mp, _)) = v2 {
            return Finding::ok(check, format!("cgroup v2 at {mp} lists `{controller}` in cgroup.controllers"));
        }
        let (detail, remediation) = if v2_controllers.is_empty()
            && !mounts.iter().any(|m| m.fstype == "cgroup")
        {
            (
                "no cgroup filesystem is mounted".to_owned(),
                "mount cgroup v2: mount -t cgroup2 cgroup2 /sys/fs/cgroup".to_owned(),
            )
        } else {
            let seen: Vec<String> = v2_controllers
                .iter()
                .map(|(mp, c)| format!("{mp}/cgroup.controllers = {:?}", c.as_deref().unwrap_or("(unreadable)").trim()))
                .collect();
            (
                format!(
                    "no cgroup v1 hierarchy has `{controller}` and no cgroup v2 root lists it ({})",
                    if seen.is_empty() { "no cgroup2 mount".to_owned() } else { seen.join(", ") }
                ),
                format!(
                    "enable the `{controller}` controller: remove cgroup_disable={controller} from the \
                     kernel command line (some kernels need cgroup_enable={controller}), and either mount \
                     it on v1 (mount -t cgroup -o {controller} cgroup /sys/fs/cgroup/{controller}) or \
                     unbind it from v1 so that cgroup v2 lists it"
                ),
            )
        };
        Finding::gap(check, Status::Missing, detail, remediation)
    })
    .collect()
}

/// The value of a `Key:` line of `/proc/self/status`.
fn status_field<'a>(status: &'a str, key: &str) -> Option<&'a str> {
    status.lines().find_map(|l| {
        let (k, v) = l.split_once(':')?;
        (k == key).then_some(v.trim())
    })
}

/// Seccomp: `status` is `/proc/self/status`; `action_avail` the outcome of
/// `seccomp(SECCOMP_GET_ACTION_AVAIL, 0, &SECCOMP_RET_ERRNO)` (`Err(errno)`).
pub(crate) fn seccomp(status: Option<&str>, action_avail: Result<(), i32>) -> Finding {
    let check = Check::Seccomp;
    let mode = status.and_then(|s| status_field(s, "Seccomp"));
    let filters = status.and_then(|s| status_field(s, "Seccomp_filters"));
    let Some(mode) = mode else {
        return Finding::gap(
            check,
            Status::Missing,
            "/proc/self/status has no Seccomp: line: kernel without seccomp",
            "use a kernel built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y",
        );
    };
    match (filters, action_avail) {
        (_, Ok(())) | (Some(_), Err(_)) => Finding::ok(
            check,
            format!(
                "Seccomp: {mode}, Seccomp_filters: {} (filters stack; mode 2 means this process is already filtered)",
                filters.unwrap_or("(no line)")
            ),
        ),
        (None, Err(errno)) => Finding::gap(
            check,
            Status::Missing,
            format!(
                "Seccomp: {mode}, but filter mode is unavailable (SECCOMP_GET_ACTION_AVAIL failed with errno {errno})"
            ),
            "use a kernel built with CONFIG_SECCOMP_FILTER=y",
        ),
    }
}

/// Overlayfs, from `/proc/filesystems`.
pub(crate) fn overlayfs(filesystems: Option<&str>) -> Finding {
    let listed = filesystems.is_some_and(|f| {
        f.lines()
            .any(|l| l.split_whitespace().last() == Some("overlay"))
    });
    if listed {
        Finding::ok(Check::Overlayfs, "/proc/filesystems lists overlay")
    } else {
        Finding::gap(
            Check::Overlayfs,
            Status::Missing,
            "/proc/filesystems does not list overlay",
            "modprobe overlay (persist it: echo overlay > /etc/modules-load.d/overlay.conf), \
             or use a kernel built with CONFIG_OVERLAY_FS",
        )
    }
}

/// Landlock, from the raw `landlock_create_ruleset(NULL, 0, VERSION)` outcome.
pub(crate) fn landlock(abi: Result<i64, i32>) -> Finding {
    let check = Check::Landlock;
    match abi {
        Ok(v) => Finding::ok(check, format!("Landlock ABI {v}")),
        Err(e) if e == nix::libc::ENOSYS => Finding::gap(
            check,
            Status::Missing,
            "landlock_create_ruleset: ENOSYS (kernel without Landlock)",
            "use a kernel >= 5.13 built with CONFIG_SECURITY_LANDLOCK=y",
        ),
        Err(e) if e == nix::libc::EOPNOTSUPP => Finding::gap(
            check,
            Status::Missing,
            "landlock_create_ruleset: EOPNOTSUPP (Landlock built in but not enabled)",
            "add landlock to the lsm= kernel command line (e.g. lsm=landlock,lockdown,yama,apparmor,bpf)",
        ),
        Err(e) => Finding::gap(
            check,
            Status::Restricted,
            format!("landlock_create_ruleset failed with errno {e}"),
            "an enclosing sandbox refuses the Landlock syscalls; run on the host or allow them",
        ),
    }
}

/// Whether this caller can make runs' capped disks: as root, with `mkfs.ext4`
/// (`None`: not found) and loop devices.
pub(crate) fn disk_caps(
    is_root: bool,
    mkfs: Option<&std::path::Path>,
    loop_control: bool,
) -> Finding {
    let check = Check::DiskCaps;
    match (is_root, mkfs, loop_control) {
        (false, _, _) => Finding::gap(
            check,
            Status::Restricted,
            "not root: a run's disk is mounted on the host",
            "run as root for contracts with environment.limits.disk (or leave the cap out)",
        ),
        (true, None, _) => Finding::gap(
            check,
            Status::Missing,
            "mkfs.ext4 not found in /usr/sbin, /sbin, /usr/bin or /bin",
            "apt-get install e2fsprogs",
        ),
        (true, Some(_), false) => Finding::gap(
            check,
            Status::Missing,
            "/dev/loop-control is missing (no loop devices)",
            "modprobe loop (a kernel with CONFIG_BLK_DEV_LOOP)",
        ),
        (true, Some(mkfs), true) => Finding::ok(
            check,
            format!("root, {} and /dev/loop-control", mkfs.display()),
        ),
    }
}

/// Whether `user` may make run groups under `parent`: `missing` lists the
/// hierarchies' directories it cannot make groups in (absent or not its own),
/// or why they could not be looked at.
pub(crate) fn cgroup_delegation(
    is_root: bool,
    user: &str,
    uid: u32,
    parent: &str,
    pure_v2: bool,
    missing: Result<Vec<std::path::PathBuf>, String>,
) -> Finding {
    let check = Check::CgroupDelegation;
    if is_root {
        return Finding::ok(
            check,
            format!("running as root: runs make their groups under {parent}"),
        );
    }
    // On pure v2 a run's groups must be inside the subtree this process runs
    // in: systemd's user manager delegates one to a scope it starts.
    let fix = if pure_v2 {
        "start agent-workspace in a cgroup delegated to you: systemd-run --user --scope -p Delegate=yes agent-workspace ...".to_owned()
    } else {
        format!("sudo agent-workspace check-host --fix --user {user}")
    };
    match missing {
        Ok(dirs) if dirs.is_empty() => Finding::ok(
            check,
            format!("{parent} is delegated to {user} ({uid}) in every hierarchy"),
        ),
        Ok(dirs) => Finding::gap(
            check,
            Status::Missing,
            format!(
                "{user} ({uid}) cannot make groups in {} (absent, or not its own)",
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            fix,
        ),
        Err(why) => Finding::gap(check, Status::Missing, why, fix),
    }
}

/// The step of the idmapped-mount probe that failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum IdmapStep {
    /// `open_tree(OPEN_TREE_CLONE)` of the probed directory.
    OpenTree,
    /// Creating the mapping user namespace (`clone(CLONE_NEWUSER)`).
    UserNamespace,
    /// `mount_setattr(MOUNT_ATTR_IDMAP)` on the detached copy.
    SetAttr,
}

/// `(major, minor)` of a kernel release such as `6.18.44-fc-v669`.
pub(crate) fn kernel_version(osrelease: &str) -> Option<(u32, u32)> {
    let mut parts = osrelease.trim().split(['.', '-', '+']);
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Overlayfs accepts idmapped layers since this kernel.
pub(crate) const OVERLAY_IDMAPPED_LOWER: (u32, u32) = (5, 19);

/// What a layered checkout can do instead of fixing the host.
const OR_STANDALONE: &str = "or use standalone checkouts (source.materialization = \"standalone\"), \
     which need no idmapped mount";

/// Idmapped mounts, as a layered checkout's overlay lower needs them: `osrelease`
/// is `/proc/sys/kernel/osrelease`; `probe` the outcome of `open_tree` +
/// `mount_setattr(MOUNT_ATTR_IDMAP)` on `dir` in a probe child (`None`: not run).
pub(crate) fn idmapped_mounts(
    dir: &str,
    osrelease: Option<&str>,
    probe: Option<Result<(), (IdmapStep, i32)>>,
    is_root: bool,
) -> Finding {
    use nix::libc::{EACCES, EINVAL, ENOENT, ENOSYS, ENOTDIR, EPERM};
    let check = Check::IdmappedMounts;
    let version = osrelease.and_then(kernel_version);
    let kernel = match (osrelease, version) {
        (_, Some((major, minor))) => format!("kernel {major}.{minor}"),
        (Some(raw), None) => format!("kernel release {:?} (unparsed)", raw.trim()),
        (None, None) => "kernel release unreadable".to_owned(),
    };
    let new_kernel = format!(
        "use a kernel >= {}.{} (idmapped mounts since 5.12, overlayfs over an idmapped lower since 5.19), {OR_STANDALONE}",
        OVERLAY_IDMAPPED_LOWER.0, OVERLAY_IDMAPPED_LOWER.1
    );
    if let Some(v) = version
        && v < OVERLAY_IDMAPPED_LOWER
    {
        return Finding::gap(
            check,
            Status::Missing,
            format!("{kernel}: overlayfs accepts an idmapped lower layer only since 5.19"),
            new_kernel,
        );
    }
    let Some(probe) = probe else {
        return Finding::ok(
            check,
            format!("{kernel}; idmapped mount not probed (fork failed)"),
        );
    };
    let (step, errno) = match probe {
        Ok(()) => {
            return Finding::ok(
                check,
                format!("{kernel}; made a detached idmapped mount of {dir} in a probe"),
            );
        }
        Err(e) => e,
    };
    let what = match step {
        IdmapStep::OpenTree => "open_tree(OPEN_TREE_CLONE)",
        IdmapStep::UserNamespace => "creating the mapping user namespace",
        IdmapStep::SetAttr => "mount_setattr(MOUNT_ATTR_IDMAP)",
    };
    let detail = format!(
        "{kernel}; {what} of {dir} failed with {} in a probe child",
        nix::errno::Errno::from_raw(errno)
    );
    match (step, errno) {
        (IdmapStep::OpenTree | IdmapStep::SetAttr, ENOSYS) => {
            Finding::gap(check, Status::Missing, detail, new_kernel)
        }
        (IdmapStep::OpenTree | IdmapStep::SetAttr, EPERM) if !is_root => Finding::gap(
            check,
            Status::Restricted,
            detail,
            format!(
                "idmapped mounts of a host file system need CAP_SYS_ADMIN on the host: run the runner as root, {OR_STANDALONE}"
            ),
        ),
        (IdmapStep::OpenTree, ENOENT | ENOTDIR | EACCES) => Finding::gap(
            check,
            Status::Missing,
            detail,
            format!(
                "{dir} cannot be opened: probe an existing directory (the base-tree cache's root)"
            ),
        ),
        (IdmapStep::SetAttr, EINVAL) => Finding::gap(
            check,
            Status::Missing,
            detail,
            format!(
                "the file system at {dir} does not support idmapped mounts: keep the base-tree cache on ext4, xfs \
                 or btrfs (tmpfs since 6.3), {OR_STANDALONE}"
            ),
        ),
        (IdmapStep::UserNamespace, _) => Finding::gap(
            check,
            Status::Restricted,
            detail,
            "the idmapping is a user namespace: make user namespaces available (see user_namespaces)",
        ),
        _ => Finding::gap(
            check,
            Status::Restricted,
            detail,
            format!(
                "something outside the kernel version refuses the mount API (an enclosing container's seccomp \
                 filter or LSM, or a missing CAP_SYS_ADMIN): run the runner as root on the host, {OR_STANDALONE}"
            ),
        ),
    }
}
