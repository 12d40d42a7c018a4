//! Synthetic inputs: each gap gets the right status and a remediation.

use super::parse::{self, NS_KINDS, UserNsInputs};
use super::*;

fn userns(
    max: Option<&str>,
    clone: Option<&str>,
    aa: Option<&str>,
    created: Option<bool>,
    root: bool,
) -> Finding {
    parse::user_namespaces(&UserNsInputs {
        max_user_namespaces: max,
        unprivileged_userns_clone: clone,
        apparmor_restrict: aa,
        created,
        is_root: root,
    })
}

fn assert_gap(f: &Finding, status: Status, remediation_has: &str) {
    assert_eq!(f.status, status, "{f}");
    assert!(f.remediation.contains(remediation_has), "{f}");
}

#[test]
fn user_namespace_sysctls() {
    let ok = userns(Some("63413\n"), None, None, Some(true), false);
    assert_eq!(ok.status, Status::Ok, "{ok}");
    assert!(ok.remediation.is_empty());
    assert_gap(
        &userns(Some("0\n"), None, None, Some(false), true),
        Status::Missing,
        "user.max_user_namespaces=",
    );
    assert_gap(
        &userns(None, None, None, None, true),
        Status::Missing,
        "CONFIG_USER_NS",
    );
    assert_gap(
        &userns(Some("x"), None, None, None, true),
        Status::Missing,
        "max_user_namespaces",
    );
    assert_gap(
        &userns(Some("100"), Some("0\n"), None, Some(false), false),
        Status::Restricted,
        "kernel.unprivileged_userns_clone=1",
    );
    assert_gap(
        &userns(Some("100"), Some("1"), Some("1\n"), Some(false), false),
        Status::Restricted,
        "apparmor_restrict_unprivileged_userns=0",
    );
    // Root is exempt from both sysctls.
    let root = userns(Some("100"), Some("0"), Some("1"), Some(true), true);
    assert_eq!(root.status, Status::Ok, "{root}");
    assert!(root.detail.contains("does not apply to root"), "{root}");
    // Sysctls fine, but the probe failed: something else restricts.
    assert_gap(
        &userns(Some("100"), None, Some("0"), Some(false), true),
        Status::Restricted,
        "seccomp",
    );
}

#[test]
fn namespace_kinds() {
    let pid = NS_KINDS[1];
    assert_eq!(
        parse::namespace_kind(pid, true, Some(true), Some(true)).status,
        Status::Ok
    );
    assert_gap(
        &parse::namespace_kind(pid, false, None, None),
        Status::Missing,
        "CONFIG_PID_NS=y",
    );
    let f = parse::namespace_kind(NS_KINDS[2], true, Some(false), Some(false));
    assert_gap(&f, Status::Restricted, "root");
    assert!(f.detail.contains("/proc/self/ns/net"), "{f}");
}

const HYBRID: &str = "\
25 30 0:23 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
26 25 0:24 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:8 - tmpfs tmpfs ro,mode=755
27 26 0:25 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate
29 26 0:27 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,memory
30 26 0:28 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,cpu,cpuacct
31 26 0:29 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,pids
";

#[test]
fn cgroup_layouts() {
    // Hybrid: every controller on v1, v2 beside them with no controllers.
    let mounts = parse::mountinfo(HYBRID);
    assert_eq!(
        parse::cgroup2_mount_points(&mounts),
        ["/sys/fs/cgroup/unified"]
    );
    let v2 = [("/sys/fs/cgroup/unified".to_owned(), Some(String::new()))];
    for f in parse::cgroup_controllers(&mounts, &v2) {
        assert_eq!(f.status, Status::Ok, "{f}");
        assert!(f.detail.contains("v1"), "{f}");
    }
    // cpuacct alone must not count as cpu.
    let acct = HYBRID.replace("rw,cpu,cpuacct\n", "rw,cpuacct\n");
    let f = parse::cgroup_controllers(&parse::mountinfo(&acct), &v2);
    assert_gap(&f[2], Status::Missing, "mount -t cgroup -o cpu");

    // Pure v2.
    let v2_only = "27 26 0:25 / /sys/fs/cgroup rw,relatime - cgroup2 cgroup2 rw\n";
    let mounts = parse::mountinfo(v2_only);
    let ctl = [(
        "/sys/fs/cgroup".to_owned(),
        Some("cpuset cpu io memory pids\n".to_owned()),
    )];
    for f in parse::cgroup_controllers(&mounts, &ctl) {
        assert_eq!(f.status, Status::Ok, "{f}");
    }
    let ctl = [("/sys/fs/cgroup".to_owned(), Some("cpu io pids".to_owned()))];
    let f = parse::cgroup_controllers(&mounts, &ctl);
    assert_gap(&f[0], Status::Missing, "cgroup_enable=memory");
    assert!(f[0].detail.contains("cpu io pids"), "{}", f[0]);

    // No cgroup mounts at all.
    let none = "25 30 0:23 / /sys rw - sysfs sysfs rw\n";
    for f in parse::cgroup_controllers(&parse::mountinfo(none), &[]) {
        assert_gap(&f, Status::Missing, "mount -t cgroup2");
    }
}

#[test]
fn mountinfo_escapes_and_garbage() {
    let m = parse::mountinfo("1 2 0:1 / /a\\040b rw - cgroup2 none rw\nnot a line\n");
    assert_eq!(m.len(), 1);
    assert_eq!(m[0].mount_point, "/a b");
    assert_eq!(m[0].source, "none");
}

#[test]
fn disk_caps_need_root_mkfs_and_loop_devices() {
    let mkfs = std::path::Path::new("/usr/sbin/mkfs.ext4");
    assert_eq!(parse::disk_caps(true, Some(mkfs), true).status, Status::Ok);
    assert_gap(
        &parse::disk_caps(false, Some(mkfs), true),
        Status::Restricted,
        "run as root",
    );
    assert_gap(
        &parse::disk_caps(true, None, true),
        Status::Missing,
        "apt-get install e2fsprogs",
    );
    assert_gap(
        &parse::disk_caps(true, Some(mkfs), false),
        Status::Missing,
        "modprobe loop",
    );
}

#[test]
fn seccomp_overlay_landlock() {
    let status = "Name:\tx\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n";
    assert_eq!(parse::seccomp(Some(status), Ok(())).status, Status::Ok);
    assert_eq!(parse::seccomp(Some(status), Err(22)).status, Status::Ok);
    assert_gap(
        &parse::seccomp(Some("Name:\tx\n"), Ok(())),
        Status::Missing,
        "CONFIG_SECCOMP=y",
    );
    assert_gap(
        &parse::seccomp(Some("Seccomp:\t0\n"), Err(22)),
        Status::Missing,
        "CONFIG_SECCOMP_FILTER",
    );

    assert_eq!(
        parse::overlayfs(Some("nodev\tproc\nnodev\toverlay\n")).status,
        Status::Ok
    );
    assert_gap(
        &parse::overlayfs(Some("nodev\tproc\n\text4\n")),
        Status::Missing,
        "modprobe overlay",
    );
    assert_gap(&parse::overlayfs(None), Status::Missing, "modprobe overlay");

    assert_eq!(parse::landlock(Ok(6)).detail, "Landlock ABI 6");
    assert_gap(
        &parse::landlock(Err(nix::libc::ENOSYS)),
        Status::Missing,
        "CONFIG_SECURITY_LANDLOCK",
    );
    assert_gap(
        &parse::landlock(Err(nix::libc::EOPNOTSUPP)),
        Status::Missing,
        "lsm=",
    );
    assert_gap(
        &parse::landlock(Err(nix::libc::EPERM)),
        Status::Restricted,
        "sandbox",
    );
}

#[test]
fn cgroup_delegation() {
    let ok = parse::cgroup_delegation(false, "alice", 1000, "aw-user-1000", false, Ok(Vec::new()));
    assert_eq!(ok.status, Status::Ok, "{ok}");
    let absent = vec![std::path::PathBuf::from(
        "/sys/fs/cgroup/memory/aw-user-1000",
    )];
    let missing = parse::cgroup_delegation(
        false,
        "bob",
        1000,
        "aw-user-1000",
        false,
        Ok(absent.clone()),
    );
    assert_gap(
        &missing,
        Status::Missing,
        "sudo agent-workspace check-host --fix --user bob",
    );
    assert!(
        missing
            .detail
            .contains("/sys/fs/cgroup/memory/aw-user-1000"),
        "{missing}"
    );
    // On pure v2 root's delegation alone does not do: the runs must be made
    // inside the subtree the caller's own process runs in.
    let v2 = parse::cgroup_delegation(false, "bob", 1000, "aw-user-1000", true, Ok(absent));
    assert_gap(
        &v2,
        Status::Missing,
        "systemd-run --user --scope -p Delegate=yes agent-workspace",
    );
    let unread =
        parse::cgroup_delegation(false, "bob", 1000, "p", false, Err("no mount table".into()));
    assert_eq!(unread.detail, "no mount table");
    let root = parse::cgroup_delegation(true, "root", 0, "p", false, Err("unused".into()));
    assert_eq!(root.status, Status::Ok, "{root}");
}

#[test]
fn readiness_and_serde() {
    let report = HostReport {
        findings: vec![
            Finding::ok(Check::PidNamespace, "fine"),
            Finding::gap(
                Check::Overlayfs,
                Status::Missing,
                "no overlay",
                "modprobe overlay",
            ),
        ],
        elapsed_us: 1,
    };
    assert_eq!(report.is_ready_for(&[Check::PidNamespace]), Ok(()));
    let gaps = report
        .is_ready_for(&[
            Check::PidNamespace,
            Check::Overlayfs,
            Check::Landlock,
            Check::Overlayfs,
        ])
        .unwrap_err();
    assert_eq!(gaps.len(), 2);
    assert_eq!(gaps[0].check, Check::Overlayfs);
    assert_eq!(
        (gaps[1].check, gaps[1].status),
        (Check::Landlock, Status::Missing)
    );

    let json = serde_json::to_string(&report.findings[1]).unwrap();
    assert_eq!(
        json,
        r#"{"check":"overlayfs","status":"missing","detail":"no overlay","remediation":"modprobe overlay"}"#
    );
    let back: HostReport = serde_json::from_str(&serde_json::to_string(&report).unwrap()).unwrap();
    assert_eq!(back, report);
    for c in Check::ALL {
        assert_eq!(serde_json::to_value(c).unwrap(), c.name());
    }
}

#[test]
fn idmapped_mounts() {
    use super::parse::IdmapStep;
    use nix::libc::{EACCES, EINVAL, ENOSPC, ENOSYS, EPERM};
    assert_eq!(parse::kernel_version("6.18.44-fc-v669\n"), Some((6, 18)));
    assert_eq!(parse::kernel_version("5.19-rc1"), Some((5, 19)));
    assert_eq!(parse::kernel_version("garbage"), None);
    let f = |release: Option<&str>, probe, root| parse::idmapped_mounts("/", release, probe, root);

    let ok = f(Some("6.1.0-18-amd64"), Some(Ok(())), true);
    assert_eq!(ok.status, Status::Ok, "{ok}");
    assert!(ok.detail.contains("kernel 6.1"), "{ok}");
    assert!(ok.remediation.is_empty());
    // No probe (fork failed): the version alone decides.
    assert_eq!(f(Some("6.1.0"), None, true).status, Status::Ok);
    // Idmapped mounts exist since 5.12, but overlayfs takes an idmapped lower only
    // since 5.19: whatever the probe says.
    assert_gap(
        &f(Some("5.15.0-91-generic"), Some(Ok(())), true),
        Status::Missing,
        "kernel >= 5.19",
    );
    assert_gap(
        &f(None, Some(Err((IdmapStep::OpenTree, ENOSYS))), true),
        Status::Missing,
        "kernel >= 5.19",
    );
    assert_gap(
        &f(
            Some("6.8.0"),
            Some(Err((IdmapStep::OpenTree, EPERM))),
            false,
        ),
        Status::Restricted,
        "run the runner as root",
    );
    assert_gap(
        &f(Some("6.8.0"), Some(Err((IdmapStep::SetAttr, EINVAL))), true),
        Status::Missing,
        "ext4, xfs or btrfs",
    );
    assert_gap(
        &f(
            Some("6.8.0"),
            Some(Err((IdmapStep::UserNamespace, ENOSPC))),
            true,
        ),
        Status::Restricted,
        "user_namespaces",
    );
    let refused = f(Some("6.8.0"), Some(Err((IdmapStep::SetAttr, EACCES))), true);
    assert_gap(&refused, Status::Restricted, "seccomp");
    assert!(refused.detail.contains("mount_setattr"), "{refused}");
    // Every gap offers standalone checkouts instead.
    assert!(refused.remediation.contains("standalone"), "{refused}");
}

#[test]
fn required_sets_are_in_all_and_layered_adds_idmapped_mounts() {
    for c in Check::REQUIRED_STANDALONE {
        assert!(Check::ALL.contains(&c), "{c}");
        assert!(Check::REQUIRED_LAYERED.contains(&c), "{c}");
    }
    for c in Check::REQUIRED_LAYERED {
        assert!(Check::ALL.contains(&c), "{c}");
    }
    assert!(!Check::IdmappedMounts.is_required(false));
    assert!(Check::IdmappedMounts.is_required(true));
    assert!(Check::Overlayfs.is_required(true));
    assert!(!Check::Landlock.is_required(true));
    let mut names: Vec<&str> = Check::ALL.iter().map(|c| c.name()).collect();
    names.sort_unstable();
    names.dedup();
    assert_eq!(names.len(), Check::ALL.len(), "names are unique");
}
