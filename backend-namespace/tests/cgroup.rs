//! Real-cgroup tests of `backend_namespace::cgroup` (run as root on Linux).
//!
//! Every cgroup made here lives under a parent `agent-workspace-test-<pid>-<n>`,
//! removed at the end by a guard (run groups are removed by `RunCgroup`'s drop, even
//! on a panic). Only processes spawned here are signalled. Children that fork are
//! spawned here, in a binary of their own, so they never share one with lock tests.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::io::{BufRead, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use backend_namespace::cgroup::{
    CgroupError, CgroupLayout, Controller, Hierarchy, KillMethod, Placement, RunCgroup,
    leaked_paths, remove_parent,
};
use workspace_core::RunId;
use workspace_core::boundary::ResolvedLimits;

/// The env var telling a re-executed test binary which child role to play.
const ROLE_VAR: &str = "AW_CGROUP_TEST_ROLE";

/// Removes the test's parent cgroups when dropped.
struct ParentGuard {
    layout: CgroupLayout,
    name: String,
}

impl ParentGuard {
    fn new(layout: &CgroupLayout) -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        Self {
            layout: layout.clone(),
            name: format!("agent-workspace-test-{}-{n}", std::process::id()),
        }
    }
}

impl Drop for ParentGuard {
    fn drop(&mut self) {
        if let Err(e) = remove_parent(&self.layout, &self.name) {
            eprintln!("removing test parent cgroup {} failed: {e}", self.name);
        }
    }
}

/// Kills and reaps a spawned child on drop (a test that fails early leaves no stray).
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The detected layout; fails (never skips) when a controller is missing.
fn layout_with_all_controllers() -> CgroupLayout {
    let layout = CgroupLayout::detect()
        .unwrap_or_else(|e| panic!("cgroup detection failed; these tests need cgroups: {e}"));
    for controller in Controller::ALL {
        if let Placement::Missing { reason } = layout.placement(controller) {
            panic!(
                "these tests need the {controller} cgroup controller, which is missing: {reason}"
            );
        }
    }
    layout
}

fn run_id(tag: &str) -> RunId {
    RunId::new(format!("t-{tag}-{}", std::process::id())).unwrap()
}

fn wait_for_signal(child: &mut Child, what: &str) -> Option<i32> {
    let status = child
        .wait()
        .unwrap_or_else(|e| panic!("waiting for {what}: {e}"));
    status.signal()
}

fn assert_gone(run: RunCgroup, layout: &CgroupLayout, parent: &str) {
    let id = run.run_id().clone();
    let paths: Vec<_> = run.paths().into_iter().map(|p| p.to_path_buf()).collect();
    run.remove().unwrap();
    for path in &paths {
        assert!(
            !path.exists(),
            "{} still exists after remove()",
            path.display()
        );
    }
    assert_eq!(
        leaked_paths(layout, parent, &id).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
}

/// Not a test: the body of re-executed children.
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn cgroup_child_role() {
    let Ok(role) = std::env::var(ROLE_VAR) else {
        panic!("a child role runs only with {ROLE_VAR} set");
    };
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line).unwrap();
    match role.as_str() {
        "memory-bomb" => {
            let block = vec![1u8; 200 * 1024 * 1024];
            std::hint::black_box(&block);
            println!("allocated {} bytes", block.len());
        }
        other => panic!("unknown child role {other:?}"),
    }
}

fn spawn_role(role: &str) -> KillOnDrop {
    let exe = std::env::current_exe().unwrap();
    let child = Command::new(exe)
        .args([
            "--ignored",
            "--exact",
            "cgroup_child_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_VAR, role)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    KillOnDrop(child)
}

fn release(child: &mut KillOnDrop) {
    let stdin = child.0.stdin.as_mut().unwrap();
    stdin.write_all(b"go\n").unwrap();
    stdin.flush().unwrap();
}

fn sleep_in_group(layout: &CgroupLayout, tag: &str, expect: KillMethod) {
    let parent = ParentGuard::new(layout);
    let run = RunCgroup::create(
        layout,
        &parent.name,
        &run_id(tag),
        &ResolvedLimits::default(),
    )
    .unwrap();
    assert_eq!(run.kill_method(), expect);
    println!("paths: {:?}", run.paths());
    let mut child = KillOnDrop(Command::new("sleep").arg("30").spawn().unwrap());
    run.add_process(child.0.id()).unwrap();
    assert_eq!(run.pids().unwrap(), vec![child.0.id()]);
    run.kill_all().unwrap();
    assert_eq!(wait_for_signal(&mut child.0, "sleep 30"), Some(9));
    assert!(run.pids().unwrap().is_empty());
    assert_gone(run, layout, &parent.name);
}

#[test]
fn cgroup_sleep_child_is_listed_killed_and_removed() {
    let layout = layout_with_all_controllers();
    let expect = match layout.unified() {
        Some(_) => KillMethod::CgroupKill,
        None => KillMethod::V1Freezer,
    };
    sleep_in_group(&layout, "sleep", expect);
}

#[test]
fn cgroup_v1_freezer_kill_path() {
    let layout = layout_with_all_controllers().without_unified();
    if layout.freezer_v1().is_none() {
        panic!("this test needs the v1 freezer controller, which is not mounted");
    }
    for controller in Controller::ALL {
        assert!(
            !matches!(layout.placement(controller), Placement::Missing { .. }),
            "this test needs {controller} on v1 (it is on v2 only here)"
        );
    }
    sleep_in_group(&layout, "freezer", KillMethod::V1Freezer);
}

#[test]
fn cgroup_memory_bomb_is_oom_killed() {
    let layout = layout_with_all_controllers();
    let parent = ParentGuard::new(&layout);
    let limits = ResolvedLimits {
        memory_bytes: Some(64 * 1024 * 1024),
        ..ResolvedLimits::default()
    };
    let run = RunCgroup::create(&layout, &parent.name, &run_id("oom"), &limits).unwrap();
    let applied = run.applied().memory.clone().unwrap();
    println!("{}", serde_json::to_string(run.applied()).unwrap());
    assert_eq!(applied.limit_bytes, 64 * 1024 * 1024);
    assert!(!run.oom_killed().unwrap());

    let mut child = spawn_role("memory-bomb");
    run.add_process(child.0.id()).unwrap();
    release(&mut child);
    assert_eq!(
        wait_for_signal(&mut child.0, "the memory bomb"),
        Some(9),
        "the 200 MB child was not SIGKILLed under a 64 MB cap"
    );
    assert!(
        run.oom_killed().unwrap(),
        "oom_kill counter is 0 after the kill"
    );
    assert_gone(run, &layout, &parent.name);
}

#[test]
fn cgroup_pids_limit_caps_forks() {
    let layout = layout_with_all_controllers();
    let parent = ParentGuard::new(&layout);
    let limits = ResolvedLimits {
        pids: Some(8),
        ..ResolvedLimits::default()
    };
    let run = RunCgroup::create(&layout, &parent.name, &run_id("pids"), &limits).unwrap();
    assert_eq!(run.applied().pids.as_ref().map(|p| p.max), Some(8));
    let child = Command::new("sh")
        .args(["-c", "read x; for i in $(seq 50); do sleep 5 & done; wait"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    run.add_process(child.0.id()).unwrap();
    release(&mut child);
    std::thread::sleep(Duration::from_millis(500));
    let pids = run.pids().unwrap();
    println!("pids in the group after the fork loop: {}", pids.len());
    assert!(
        !pids.is_empty(),
        "no process of the fork loop is in the group"
    );
    assert!(pids.len() <= 8, "{} pids under pids.max = 8", pids.len());
    run.kill_all().unwrap();
    let _ = child.0.wait();
    assert!(run.pids().unwrap().is_empty());
    assert_gone(run, &layout, &parent.name);
}

#[test]
fn cgroup_cpu_limit_throttles_a_busy_loop() {
    let layout = layout_with_all_controllers();
    let parent = ParentGuard::new(&layout);
    let limits = ResolvedLimits {
        cpu_millis: Some(100),
        ..ResolvedLimits::default()
    };
    let run = RunCgroup::create(&layout, &parent.name, &run_id("cpu"), &limits).unwrap();
    // The cpu controller's counters: v1 `cpu.stat` in the cpu hierarchy, v2
    // `cpu.stat` of the unified group (both have `nr_throttled`).
    let stat = run
        .paths()
        .into_iter()
        .map(|p| p.join("cpu.stat"))
        .find(|f| std::fs::read_to_string(f).is_ok_and(|t| t.contains("nr_throttled")))
        .unwrap_or_else(|| panic!("no cpu.stat with nr_throttled in {:?}", run.paths()));
    let throttled = || -> u64 {
        std::fs::read_to_string(&stat)
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("nr_throttled "))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    assert_eq!(throttled(), 0, "{}", stat.display());
    let child = Command::new("sh")
        .args(["-c", "read x; while :; do :; done"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = KillOnDrop(child);
    run.add_process(child.0.id()).unwrap();
    release(&mut child);
    // A tenth of a cpu: the loop exhausts its quota in every period it runs.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while throttled() < 3 {
        assert!(
            std::time::Instant::now() < deadline,
            "a busy loop under cpu = 100 millis was throttled {} times ({})",
            throttled(),
            stat.display()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    run.kill_all().unwrap();
    let _ = child.0.wait();
    assert_gone(run, &layout, &parent.name);
}

#[test]
fn cgroup_limit_on_missing_controller_is_an_error() {
    let layout = layout_with_all_controllers().with_placement(
        Controller::Pids,
        Placement::Missing {
            reason: "removed by the test".to_owned(),
        },
    );
    let parent = ParentGuard::new(&layout);
    let id = run_id("missing");
    let limits = ResolvedLimits {
        pids: Some(8),
        ..ResolvedLimits::default()
    };
    let err = RunCgroup::create(&layout, &parent.name, &id, &limits).unwrap_err();
    assert!(
        matches!(
            err,
            CgroupError::ControllerMissing {
                controller: Controller::Pids,
                ..
            }
        ),
        "{err}"
    );
    assert!(leaked_paths(&layout, &parent.name, &id).unwrap().is_empty());
    // Without a pids limit the same layout works, and places nothing on pids.
    let run = RunCgroup::create(&layout, &parent.name, &id, &ResolvedLimits::default()).unwrap();
    assert!(run.applied().pids.is_none());
    assert_gone(run, &layout, &parent.name);
}

#[test]
fn cgroup_cpu_limit_and_existing_run_dir() {
    let layout = layout_with_all_controllers();
    let parent = ParentGuard::new(&layout);
    let id = run_id("cpu");
    let limits = ResolvedLimits {
        cpu_millis: Some(500),
        ..ResolvedLimits::default()
    };
    let run = RunCgroup::create(&layout, &parent.name, &id, &limits).unwrap();
    let cpu = run.applied().cpu.clone().unwrap();
    assert_eq!((cpu.quota_us, cpu.period_us), (50_000, 100_000));
    let quota = match cpu.hierarchy {
        Hierarchy::V1 => std::fs::read_to_string(cpu.path.join("cpu.cfs_quota_us")).unwrap(),
        Hierarchy::V2 => std::fs::read_to_string(cpu.path.join("cpu.max")).unwrap(),
    };
    assert!(quota.starts_with("50000"), "{quota:?}");
    let again = RunCgroup::create(&layout, &parent.name, &id, &limits).unwrap_err();
    assert!(
        matches!(again, CgroupError::AlreadyExists { .. }),
        "{again}"
    );
    assert!(run.exists());
    assert_gone(run, &layout, &parent.name);
}

/// An unused uid and gid the delegation test gives a parent to (no such user
/// exists: only ownership is looked at, and one `mkdir` runs as it).
const DELEGATE_ID: u32 = 64_999;

#[test]
fn a_delegated_parent_is_the_users_own_and_lets_it_make_groups_but_nothing_above() {
    use std::os::unix::fs::MetadataExt;
    use std::os::unix::process::CommandExt;
    let layout = CgroupLayout::detect().unwrap();
    let parent = ParentGuard::new(&layout);
    assert!(
        !backend_namespace::cgroup::delegation(&layout, &parent.name, DELEGATE_ID)
            .unwrap()
            .is_empty(),
        "an absent parent is reported"
    );
    let dirs = backend_namespace::cgroup::delegate(&layout, &parent.name, DELEGATE_ID, DELEGATE_ID)
        .unwrap();
    assert!(!dirs.is_empty());
    let again =
        backend_namespace::cgroup::delegate(&layout, &parent.name, DELEGATE_ID, DELEGATE_ID)
            .unwrap();
    assert_eq!(dirs, again, "idempotent");
    for dir in &dirs {
        assert_eq!(
            std::fs::metadata(dir).unwrap().uid(),
            DELEGATE_ID,
            "{}",
            dir.display()
        );
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let name = entry.file_name().into_string().unwrap();
            let owner = entry.metadata().unwrap().uid();
            let delegated = [
                "cgroup.procs",
                "tasks",
                "cgroup.threads",
                "cgroup.subtree_control",
            ];
            if delegated.contains(&name.as_str()) {
                assert_eq!(owner, DELEGATE_ID, "{name} in {}", dir.display());
            } else {
                // A limit file of the parent: the user cannot lift it.
                assert_eq!(owner, 0, "{name} in {} was given away", dir.display());
            }
        }
        // The user makes a group of its own there, and it is the user's.
        let status = Command::new("/bin/mkdir")
            .arg(dir.join("made-by-the-user"))
            .uid(DELEGATE_ID)
            .gid(DELEGATE_ID)
            .status()
            .unwrap();
        assert!(status.success(), "mkdir as the user in {}", dir.display());
        let made = dir.join("made-by-the-user");
        assert_eq!(std::fs::metadata(&made).unwrap().uid(), DELEGATE_ID);
        std::fs::remove_dir(&made).unwrap();
    }
    assert_eq!(
        backend_namespace::cgroup::delegation(&layout, &parent.name, DELEGATE_ID).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    assert_eq!(
        backend_namespace::cgroup::delegation(&layout, &parent.name, DELEGATE_ID + 1).unwrap(),
        dirs,
        "another user is told it cannot use them"
    );
}

/// Every cgroup hierarchy this host mounts (`cgroup` and `cgroup2` mount points).
fn every_cgroup_mount() -> Vec<std::path::PathBuf> {
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let fstype = right.split(' ').next()?;
            let mount_point = left.split(' ').nth(4)?;
            (fstype == "cgroup" || fstype == "cgroup2").then(|| mount_point.into())
        })
        .collect()
}

#[test]
fn remove_parent_removes_it_from_every_hierarchy_the_host_mounts() {
    // An OCI runtime given `parent/run` as a cgroup path makes `parent` in
    // every v1 hierarchy (`blkio`, `devices`, `name=systemd`...), also where
    // runs of this crate have none, and leaves it there, empty, when it
    // deletes the container.
    let layout = layout_with_all_controllers();
    let guard = ParentGuard::new(&layout);
    let mounts = every_cgroup_mount();
    assert!(!mounts.is_empty(), "no cgroup mount on this host");
    for mount in &mounts {
        std::fs::create_dir_all(mount.join(&guard.name)).unwrap();
    }
    remove_parent(&layout, &guard.name).unwrap();
    for mount in &mounts {
        assert!(
            !mount.join(&guard.name).exists(),
            "{} is left",
            mount.join(&guard.name).display()
        );
    }
}
