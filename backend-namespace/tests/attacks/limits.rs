//! Resource attacks under the run's cgroups (the `cgroups` hook), and the
//! layered (overlay) workspace.

use std::os::unix::fs::PermissionsExt;
use std::os::unix::fs::chown;
use std::process::Command;
use std::time::{Duration, Instant};

use backend_namespace::spawn::spawn;
use workspace_core::boundary::{LayersRecord, ResolvedLimits};
use workspace_core::evidence::ExitStatusRecord;

use crate::common::{Fixture, HOST_ID, plan_for, run};
use crate::support::{
    Canary, CgroupParent, HostSnapshot, LiveRun, PWNED, attack_fixture, cgroup_dirs, probe_request,
    with_probe,
};

/// A fork bomb under `pids.max = 16`: at most 16 processes at any time, the host
/// can still fork, and killing the run ends all of it.
#[test]
fn fork_bomb_under_a_pids_limit() {
    let fixture = attack_fixture();
    let parent = CgroupParent::new();
    let limits = ResolvedLimits {
        pids: Some(16),
        ..ResolvedLimits::default()
    };
    let group = parent.run("forkbomb", &limits);
    let mut canary = Canary::start();

    // Positive control: a few processes are fine under the same limit.
    let mut request = fixture.request("sleep 0.1 & sleep 0.1 & wait; echo CONTROL-OK");
    request.cgroups = cgroup_dirs(&group);
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");

    let mut request = fixture.request("for i in $(seq 200); do sleep 5 & done; wait");
    request.cgroups = cgroup_dirs(&group);
    let mut child = spawn(&request).unwrap();
    drop(request);
    let mut most = 0;
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) && child.try_wait().unwrap().is_none() {
        most = most.max(group.pids().unwrap().len());
        std::thread::sleep(Duration::from_millis(5));
    }
    // dash gives up at the first failed fork, so the bomb may be over between two
    // samples: the controller's own count of refused forks is the evidence that it
    // reached the cap.
    let pids = group.applied().pids.clone().unwrap();
    let events = std::fs::read_to_string(pids.path.join("pids.events")).unwrap();
    let refused: u64 = events
        .lines()
        .find_map(|l| l.strip_prefix("max "))
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(refused > 0, "the bomb never hit pids.max: {events}");
    assert!(most <= 16, "{most} processes under pids.max = 16");
    // The host is fine: it can still fork, and its own process is untouched.
    assert!(Command::new("true").status().unwrap().success());
    assert!(canary.alive());
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(group.pids().unwrap().is_empty(), "{:?}", group.pids());
    group.remove().unwrap();
}

/// 300 MiB under a 64 MiB memory cap: the kernel kills the allocator, the run's
/// status is `SIGKILL`, and the group records an OOM kill.
#[test]
fn memory_bomb_under_a_memory_limit() {
    let mut fixture = attack_fixture();
    with_probe(&mut fixture);
    let parent = CgroupParent::new();
    let limits = ResolvedLimits {
        memory_bytes: Some(64 << 20),
        ..ResolvedLimits::default()
    };

    // Positive control: 8 MiB fits.
    let group = parent.run("mem-ok", &limits);
    let mut request = probe_request(&fixture, "memory", "8");
    request.cgroups = cgroup_dirs(&group);
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("probe: allocated=8MiB"), "{out}");
    assert!(!group.oom_killed().unwrap());
    group.remove().unwrap();

    let group = parent.run("mem-bomb", &limits);
    let mut canary = Canary::start();
    let mut request = probe_request(&fixture, "memory", "300");
    request.cgroups = cgroup_dirs(&group);
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Signal(9), "{out}");
    assert!(!out.contains("probe: allocated"), "{out}");
    assert!(group.oom_killed().unwrap(), "no OOM kill recorded");
    assert!(canary.alive());
    group.remove().unwrap();
}

/// Writing its own pid into a host cgroup (the root of each hierarchy, reached
/// through the bound `/sys`) would leave the run's limits: `/sys` is read-only and
/// the run stays in its group.
#[test]
fn leave_the_run_cgroup_through_sys() {
    let fixture = attack_fixture();
    let parent = CgroupParent::new();
    let limits = ResolvedLimits {
        pids: Some(32),
        ..ResolvedLimits::default()
    };
    let group = parent.run("escape", &limits);
    let (stdin_read, stdin_write) = nix::unistd::pipe().unwrap();
    let mut request = fixture.request(
        "cat /proc/self/cgroup >/dev/null && echo CONTROL-OK; \
         for f in /sys/fs/cgroup/*/cgroup.procs /sys/fs/cgroup/cgroup.procs; do \
         [ -e $f ] && echo $$ > $f && echo ATTACK-WORKED:$f; done; \
         echo tried; read line; exit 0",
    );
    request.stdin = Some(stdin_read);
    request.cgroups = cgroup_dirs(&group);
    let mut live = LiveRun::start(request);
    live.wait_for("tried");
    // init and the shell are both still in the run's group.
    let pids = group.pids().unwrap();
    drop(stdin_write);
    assert_eq!(live.child.wait().unwrap(), ExitStatusRecord::Code(0));
    assert!(live.output.contains("CONTROL-OK"), "{}", live.output);
    assert!(!live.output.contains("ATTACK-WORKED"), "{}", live.output);
    // The run's /sys is a fresh sysfs: no host cgroup hierarchy is even mounted
    // there, and were one reachable, /sys is read-only.
    assert!(
        live.output.contains("Read-only file system") || !live.output.contains("cgroup.procs"),
        "{}",
        live.output
    );
    assert_eq!(
        pids.len(),
        2,
        "the run's processes left its group: {pids:?}"
    );
    group.remove().unwrap();
}

/// Another run's cgroups (its run id, its processes, its memory use) seen through
/// the bound host `/sys/fs/cgroup`: the run's cgroup namespace only changes what
/// `/proc/self/cgroup` shows, not what the host's cgroup mounts list.
#[test]
fn observe_another_run_through_sys_fs_cgroup() {
    let fixture = attack_fixture();
    let parent = CgroupParent::new();
    let other = parent.run("other-run", &ResolvedLimits::default());
    let mut canary = Canary::start();
    other.add_process(canary.pid()).unwrap();
    let other_id = other.run_id().to_string();
    let (status, out) = run(fixture.request(&format!(
        "cat /proc/self/cgroup >/dev/null && echo CONTROL-OK; \
         ls /sys/fs/cgroup/*/{parent}/ 2>/dev/null; \
         cat /sys/fs/cgroup/*/{parent}/{other_id}/cgroup.procs 2>/dev/null; exit 0",
        parent = parent.name
    )));
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(out.contains("CONTROL-OK"), "{out}");
    assert!(canary.alive());
    // Host pids are not: a pid outside the run's pid namespace reads as 0.
    assert!(
        !out.contains(&canary.pid().to_string()),
        "another run's host pids are visible inside: {out}"
    );
    assert!(
        !out.contains(&other_id),
        "another run's cgroup (its run id, process count, memory use) is visible inside: {out}"
    );
    drop(canary);
    other.remove().unwrap();
}

/// A layered workspace: the run's writes land in the upper layer; the shared lower
/// layer (every run of the commit reads it) is unchanged, even for files the run
/// modifies or deletes.
#[test]
fn write_into_the_shared_lower_layer_of_an_overlay_workspace() {
    let fixture: Fixture = attack_fixture();
    let base = fixture.base.path();
    let (lower, upper, work, merged) = (
        base.join("lower"),
        base.join("upper"),
        base.join("work"),
        base.join("merged"),
    );
    for dir in [&lower, &upper, &work, &merged] {
        std::fs::create_dir(dir).unwrap();
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    std::fs::write(lower.join("hello.txt"), "hello from the lower layer\n").unwrap();
    std::fs::write(lower.join("gone.txt"), "delete me\n").unwrap();
    for path in [
        &lower,
        &lower.join("hello.txt"),
        &lower.join("gone.txt"),
        &upper,
        &work,
    ] {
        chown(path, Some(HOST_ID), Some(HOST_ID)).unwrap();
    }
    let plan = plan_for(
        &merged,
        Some(LayersRecord {
            lower: lower.clone(),
            upper: upper.clone(),
            work: work.clone(),
        }),
    );
    let before = HostSnapshot::of(&lower);
    let mut request = fixture.request(&format!(
        "cat /workspace/hello.txt && echo CONTROL-OK; \
         echo {PWNED} > /workspace/hello.txt && echo new > /workspace/new.txt && \
         rm /workspace/gone.txt && echo WROTE; ls -A /workspace | tr '\\n' ,"
    ));
    request.plan = plan;
    let (status, out) = run(request);
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    assert!(
        out.contains("hello from the lower layer\nCONTROL-OK\nWROTE\n"),
        "{out}"
    );
    assert!(out.contains("hello.txt,new.txt,"), "{out}");
    before.assert_unchanged(&lower, "write into the lower layer");
    assert_eq!(
        std::fs::read_to_string(upper.join("hello.txt")).unwrap(),
        format!("{PWNED}\n")
    );
    assert_eq!(
        std::fs::read_to_string(upper.join("new.txt")).unwrap(),
        "new\n"
    );
    // The deletion is a whiteout in the upper layer.
    use std::os::unix::fs::FileTypeExt;
    let whiteout = std::fs::symlink_metadata(upper.join("gone.txt")).unwrap();
    assert!(whiteout.file_type().is_char_device(), "{whiteout:?}");
    assert!(std::fs::read_dir(&merged).unwrap().next().is_none());
}
