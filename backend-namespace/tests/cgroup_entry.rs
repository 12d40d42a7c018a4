//! How a sandbox's first process enters the run's cgroups: born in the v2 one
//! by `clone3` (`CLONE_INTO_CGROUP`) and moved into each v1 one through
//! `tasks`, or, where `clone3` is hidden (`ENOSYS`, as container runtimes'
//! seccomp profiles do), cloned plainly and moved into every one by itself.
//! Either way it and the command it forks are in every hierarchy of the run.
//!
//! The second case runs in a re-executed copy of this binary that first hides
//! `clone3` from itself with a seccomp filter of its own. Every cgroup made here
//! lives under a parent `aw-entry-test-<pid>-<n>`, removed at the end; only
//! processes spawned here are signalled.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use backend_namespace::cgroup::{CgroupLayout, RunCgroup, remove_parent};
use backend_namespace::spawn::spawn;
use common::Fixture;
use nix::libc;
use workspace_core::RunId;
use workspace_core::boundary::ResolvedLimits;

/// The env var that makes the re-executed binary hide `clone3` first.
const HIDDEN_CLONE3_VAR: &str = "AW_CGROUP_ENTRY_HIDE_CLONE3";

/// The run's cgroups under a test parent, removed (processes killed) on drop.
struct TestGroup {
    layout: CgroupLayout,
    parent: String,
    run: Option<RunCgroup>,
}

impl TestGroup {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let layout = CgroupLayout::detect()
            .unwrap_or_else(|e| panic!("this test needs cgroups (run as root): {e}"));
        let parent = format!(
            "aw-entry-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        );
        let run_id = RunId::new(format!("entry-{}", std::process::id())).unwrap();
        let run = RunCgroup::create(&layout, &parent, &run_id, &ResolvedLimits::default())
            .unwrap_or_else(|e| panic!("creating the test's run cgroups: {e}"));
        Self {
            layout,
            parent,
            run: Some(run),
        }
    }

    fn run(&self) -> &RunCgroup {
        self.run.as_ref().unwrap()
    }

    fn dirs(&self) -> Vec<PathBuf> {
        self.run().paths().into_iter().map(PathBuf::from).collect()
    }
}

impl Drop for TestGroup {
    fn drop(&mut self) {
        if let Some(run) = self.run.take()
            && let Err(e) = run.remove()
        {
            eprintln!("removing the test's run cgroups failed: {e}");
        }
        if let Err(e) = remove_parent(&self.layout, &self.parent) {
            eprintln!("removing test parent cgroup {} failed: {e}", self.parent);
        }
    }
}

/// Spawns a sandbox whose command sleeps, joined to a fresh run group, and
/// checks from the host that its pid 1 and the command are listed in every
/// hierarchy of the run. Panics (naming the hierarchy) otherwise.
fn a_sandbox_is_in_every_hierarchy_of_its_run() {
    let group = TestGroup::new();
    let fixture = Fixture::new();
    // `exec`: the command stays one process (a shell would fork `sleep`).
    let mut request = fixture.request("exec sleep 30");
    request.cgroups = group.dirs();
    let mut child = spawn(&request).unwrap_or_else(|e| panic!("spawning the sandbox: {e}"));
    let pid1 = child.pid();
    // The command is forked right after pid 1's setup; wait (bounded) until
    // the host sees it beside pid 1.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let counts: Vec<(PathBuf, Vec<u32>)> = group
            .dirs()
            .into_iter()
            .map(|dir| {
                let procs = std::fs::read_to_string(dir.join("cgroup.procs"))
                    .unwrap_or_else(|e| panic!("reading {}/cgroup.procs: {e}", dir.display()));
                let pids = procs.lines().map(|l| l.parse().unwrap()).collect();
                (dir, pids)
            })
            .collect();
        let all_there = counts
            .iter()
            .all(|(_, pids)| pids.contains(&pid1) && pids.len() == 2);
        if all_there {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "pid 1 ({pid1}) and its command are not both in every hierarchy: {counts:?}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn born_in_the_v2_cgroup_and_moved_into_each_v1_one() {
    a_sandbox_is_in_every_hierarchy_of_its_run();
}

#[test]
fn without_clone3_the_child_moves_itself_into_every_hierarchy() {
    let output = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "with_clone3_hidden",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(HIDDEN_CLONE3_VAR, "1")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success() && stdout.contains("clone3 hidden: ENOSYS"),
        "the re-executed test failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
}

/// Not a test: the body of the re-executed binary.
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn with_clone3_hidden() {
    assert!(
        std::env::var_os(HIDDEN_CLONE3_VAR).is_some(),
        "runs only re-executed, with {HIDDEN_CLONE3_VAR} set"
    );
    hide_clone3();
    // Positive control: the filter is in place (a real clone3 with a NULL
    // argument would fail with EFAULT or EINVAL, not ENOSYS).
    // SAFETY: clone3 with a NULL pointer and size 0 creates nothing.
    let ret = unsafe { libc::syscall(libc::SYS_clone3, std::ptr::null::<u8>(), 0usize) };
    assert_eq!(ret, -1);
    assert_eq!(nix::errno::Errno::last(), nix::errno::Errno::ENOSYS);
    println!("clone3 hidden: ENOSYS");
    a_sandbox_is_in_every_hierarchy_of_its_run();
}

/// Installs a seccomp filter on this process (and all it starts) under which
/// `clone3` fails with `ENOSYS` and every other call is allowed.
fn hide_clone3() {
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    // struct seccomp_data: nr at offset 0.
    let filter = [
        libc::sock_filter {
            code: (libc::BPF_LD | libc::BPF_W | libc::BPF_ABS) as u16,
            jt: 0,
            jf: 0,
            k: 0,
        },
        libc::sock_filter {
            code: (libc::BPF_JMP | libc::BPF_JEQ | libc::BPF_K) as u16,
            jt: 0,
            jf: 1,
            k: libc::SYS_clone3 as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ERRNO | libc::ENOSYS as u32,
        },
        libc::sock_filter {
            code: (libc::BPF_RET | libc::BPF_K) as u16,
            jt: 0,
            jf: 0,
            k: SECCOMP_RET_ALLOW,
        },
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_ptr().cast_mut(),
    };
    // SAFETY: PR_SET_SECCOMP with a valid program that outlives the call; the
    // process is root (CAP_SYS_ADMIN), so no no_new_privs is needed.
    let ret = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            &raw const program,
        )
    };
    assert_eq!(
        ret,
        0,
        "installing the test's seccomp filter: {}",
        nix::errno::Errno::last()
    );
}
