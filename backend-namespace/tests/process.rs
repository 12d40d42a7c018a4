//! `NamespaceProcess` end to end, with real namespaces and cgroups (run as root).
//!
//! Every run's cgroups live under a parent `agent-workspace-test-<pid>-<test>`,
//! removed when the test ends. The workspace is a `TempDir` with one file, owned
//! by the host id the run's uid 1000 maps to; no git repository is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod runs;

use std::os::unix::fs::PermissionsExt;

use backend_namespace::cgroup::{CgroupLayout, leaked_paths};
use backend_namespace::process::{DEFAULT_HOST_ID_BASE, NamespaceProcess, ProcessOptions};
use runs::{ParentGuard, Run, command, standalone_run};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use workspace_core::boundary::{KillCause, ProcessBoundary, RunContext, SealPlan};
use workspace_core::contract::{ByteSize, Contract};
use workspace_core::evidence::ExitStatusRecord;

/// A workspace, a sealed-to-be run over it, and the boundary.
struct Fixture {
    run: RunContext,
    plan: SealPlan,
    process: NamespaceProcess,
    _parent: ParentGuard,
    _base: TempDir,
}

async fn fixture(test: &str, edit: impl FnOnce(&mut Contract)) -> Fixture {
    let Run { base, run, plan } = standalone_run(&format!("process-{test}"), edit).await;
    let parent = format!("agent-workspace-test-{}-{test}", std::process::id());
    let process = NamespaceProcess::new(ProcessOptions::probe(parent.clone()).unwrap());
    Fixture {
        run,
        plan,
        process,
        _parent: ParentGuard(parent),
        _base: base,
    }
}

async fn teardown_is_clean(f: &Fixture) {
    let report = f.process.teardown(&f.run).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn seal_observes_the_boundary_the_contract_asks_for() {
    let f = fixture("seal", |c| {
        // The shell as the toolchain, no version: its program must be found.
        c.environment.runtime.toolchain = Some("sh".into())
    })
    .await;
    let observed = f.process.seal(&f.run, &f.plan).await.unwrap();
    let facts = &observed.facts;
    assert_eq!(observed.mismatches, Vec::<String>::new(), "{facts:#?}");
    assert_eq!(facts["uid"], serde_json::json!([1000, 1000, 1000, 1000]));
    assert_eq!(facts["cap_eff"], "0000000000000000");
    assert_eq!(facts["no_new_privs"], 1);
    assert_eq!(facts["seccomp"], 2);
    assert_eq!(facts["interfaces"], serde_json::json!(["lo"]));
    assert_eq!(facts["hostname"], f.run.run_id.as_str());
    assert_eq!(
        facts["uid_map"],
        serde_json::json!([format!("1000 {} 1", DEFAULT_HOST_ID_BASE + 1000)])
    );
    assert_eq!(
        facts["gid_map"],
        serde_json::json!([format!("1000 {} 1", DEFAULT_HOST_ID_BASE + 1000)])
    );
    // The mount table as the run sees it: the workspace, a read-only root.
    let mounts = facts["mounts"].as_array().unwrap();
    let target = |t: &str| mounts.iter().find(|m| m["target"] == t).cloned();
    assert!(target("/workspace").is_some(), "{mounts:#?}");
    assert!(
        target("/").unwrap()["options"]
            .as_str()
            .unwrap()
            .starts_with("ro,")
    );
    assert_eq!(facts["mount_plan_sha256"].as_str().map(str::len), Some(64));
    // The declared toolchain's program was asked for its version inside the run.
    assert!(facts.contains_key("toolchain"), "{facts:#?}");
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn spawn_streams_stdout_and_stderr_and_reports_the_exit_code() {
    let f = fixture("spawn", |_| {}).await;
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &command(
                &[
                    "/bin/sh",
                    "-c",
                    "cat hello.txt; echo out; echo err >&2; exit 3",
                ],
                None,
            ),
        )
        .await
        .unwrap();
    let mut stdout = exec.take_stdout().unwrap();
    let mut stderr = exec.take_stderr().unwrap();
    drop(exec.take_stdin());
    let (mut out, mut err) = (String::new(), String::new());
    let (a, b) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    a.unwrap();
    b.unwrap();
    let exit = exec.wait().await.unwrap();
    assert_eq!(out, "hello from the workspace\nout\n");
    assert_eq!(err, "err\n");
    assert_eq!(exit.status, ExitStatusRecord::Code(3));
    assert_eq!(exit.killed, None);
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_bare_program_name_is_looked_up_in_the_run_path_and_a_missing_one_is_refused() {
    let f = fixture("relative", |_| {}).await;
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let mut exec = f
        .process
        .spawn(&f.run, &command(&["sh", "-c", "echo found via PATH"], None))
        .await
        .unwrap();
    let mut stdout = exec.take_stdout().unwrap();
    let mut out = String::new();
    stdout.read_to_string(&mut out).await.unwrap();
    let exit = exec.wait().await.unwrap();
    assert_eq!(out, "found via PATH\n");
    assert_eq!(exit.status, ExitStatusRecord::Code(0));

    let err = f
        .process
        .spawn(&f.run, &command(&["no-such-program-in-the-run", "x"], None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spawn command"), "{err}");
    // The one thing a user needs to read: which program is not there.
    let chain = workspace_core::error_chain(&err);
    assert!(
        chain.ends_with("not found: no-such-program-in-the-run"),
        "{chain}"
    );
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_timeout_kills_the_whole_run_and_leaves_nothing() {
    let f = fixture("timeout", |_| {}).await;
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let started = std::time::Instant::now();
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &command(&["/bin/sh", "-c", "sleep 30 & sleep 30"], Some(300)),
        )
        .await
        .unwrap();
    let exit = exec.wait().await.unwrap();
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert_eq!(exit.killed, Some(KillCause::Timeout));
    assert_eq!(exit.status, ExitStatusRecord::Signal(9));
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_memory_hog_is_killed_by_the_memory_limit() {
    let f = fixture("memory", |c| {
        c.environment.limits.memory = Some(ByteSize(64 << 20));
    })
    .await;
    assert_eq!(f.plan.environment.limits.memory_bytes, Some(64 << 20));
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &command(
                &[
                    "/bin/sh",
                    "-c",
                    "x=$(head -c 200000000 /dev/zero | tr '\\0' a); echo $x | wc -c",
                ],
                Some(60_000),
            ),
        )
        .await
        .unwrap();
    let exit = exec.wait().await.unwrap();
    assert_eq!(exit.killed, Some(KillCause::MemoryLimit), "{exit:?}");
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn teardown_of_an_unknown_run_reports_nothing() {
    let f = fixture("unknown", |_| {}).await;
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn dot_env_files_are_masked() {
    let f = fixture("masked", |_| {}).await;
    let env_file = f.plan.source.workspace.join(".env");
    std::fs::write(&env_file, "SECRET=do-not-read\n").unwrap();
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let mut exec = f
        .process
        .spawn(
            &f.run,
            &command(&["/bin/sh", "-c", "cat .env; echo rc=$?"], None),
        )
        .await
        .unwrap();
    let mut out = String::new();
    exec.take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let exit = exec.wait().await.unwrap();
    assert_eq!(exit.status, ExitStatusRecord::Code(0));
    assert!(!out.contains("do-not-read"), "{out}");
    teardown_is_clean(&f).await;
}

/// Runs `script` in the sealed run of `f`; (exit, stdout).
async fn run_sh(f: &Fixture, script: &str) -> (ExitStatusRecord, String) {
    let mut exec = f
        .process
        .spawn(&f.run, &command(&["/bin/sh", "-c", script], Some(30_000)))
        .await
        .unwrap();
    drop(exec.take_stdin());
    let mut out = String::new();
    exec.take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    (exec.wait().await.unwrap().status, out)
}

#[tokio::test(flavor = "multi_thread")]
async fn the_rlimit_baseline_comes_from_the_contract() {
    let f = fixture("rlimits", |c| {
        c.environment.limits.open_files = Some(321);
        c.environment.limits.disk = Some(ByteSize(1 << 20));
    })
    .await;
    assert_eq!(f.plan.environment.limits.open_files, Some(321));
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let (status, out) = run_sh(
        &f,
        "ulimit -n; ulimit -Hn; ulimit -c; ulimit -Hc; ulimit -f; ulimit -Hf",
    )
    .await;
    assert_eq!(status, ExitStatusRecord::Code(0));
    // `ulimit -f` counts 512-byte blocks: 1 MiB is 2048.
    assert_eq!(out, "321\n321\n0\n0\n2048\n2048\n");
    teardown_is_clean(&f).await;
}

/// Attack: a process inside raises its own limits above the contract's caps.
#[tokio::test(flavor = "multi_thread")]
async fn a_command_cannot_raise_its_limits_above_the_caps() {
    let f = fixture("rlimit-raise", |c| {
        c.environment.limits.open_files = Some(321);
        c.environment.limits.disk = Some(ByteSize(1 << 20));
    })
    .await;
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let (status, out) = run_sh(
        &f,
        "if ulimit -Hn 100000 2>/dev/null; then echo raised; else echo refused; fi; \
         if ulimit -Hc unlimited 2>/dev/null; then echo raised; else echo refused; fi; \
         if ulimit -Sn 322 2>/dev/null; then echo raised; else echo refused; fi; \
         ulimit -Hn; ulimit -Hc; \
         head -c 2000000 /dev/zero > big; echo rc=$?",
    )
    .await;
    assert_eq!(status, ExitStatusRecord::Code(0), "{out}");
    // 153 = 128 + SIGXFSZ: the write beyond the file-size cap killed `head`.
    assert_eq!(out, "refused\nrefused\nrefused\n321\n0\nrc=153\n");
    // Host unchanged beyond the cap: the file stopped at 1 MiB.
    let big = std::fs::metadata(f.plan.source.workspace.join("big")).unwrap();
    assert_eq!(big.len(), 1 << 20);
    // Positive control: lowering is allowed.
    let (_, out) = run_sh(&f, "ulimit -n 100 && ulimit -n").await;
    assert_eq!(out, "100\n");
    teardown_is_clean(&f).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_hung_probe_fails_the_seal_with_a_timeout_and_leaves_nothing() {
    // The declared toolchain's program is the workspace's own, and its
    // `--version` never ends (and leaves a process behind).
    let Run { base, run, plan } = standalone_run("process-probe-timeout", |contract| {
        contract.environment.runtime.toolchain = Some("hang 1.0".into());
        contract
            .environment
            .env
            .insert("PATH".into(), "/workspace/bin:/usr/bin:/bin".into());
    })
    .await;
    let bin = plan.source.workspace.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(bin.join("hang"), "#!/bin/sh\nsleep 300 &\nexec sleep 300\n").unwrap();
    std::fs::set_permissions(bin.join("hang"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let parent = format!("agent-workspace-test-{}-probe-timeout", std::process::id());
    let _guard = ParentGuard(parent.clone());
    let options = ProcessOptions {
        probe_timeout: std::time::Duration::from_millis(500),
        ..ProcessOptions::probe(parent.clone()).unwrap()
    };
    let process = NamespaceProcess::new(options);
    let started = std::time::Instant::now();
    let err = process.seal(&run, &plan).await.unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(
        format!("{:?}", err.source).contains("ProbeTimeout"),
        "{err} {:?}",
        err.source
    );
    let layout = CgroupLayout::detect().unwrap();
    assert_eq!(
        leaked_paths(&layout, &parent, &run.run_id).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    // Not sealed: spawning is refused.
    assert!(
        process
            .spawn(&run, &command(&["/bin/true"], None))
            .await
            .is_err()
    );
    drop(base);
}

#[tokio::test(flavor = "multi_thread")]
async fn what_the_probe_leaves_running_is_stopped_and_said() {
    // The declared toolchain's `--version` answers and leaves a `sleep`
    // behind, as a toolchain that starts a daemon would.
    let f = fixture("probe-leftover", |contract| {
        contract.environment.runtime.toolchain = Some("leave 1.0".into());
        contract
            .environment
            .env
            .insert("PATH".into(), "/workspace/bin:/usr/bin:/bin".into());
    })
    .await;
    let bin = f.plan.source.workspace.join("bin");
    std::fs::create_dir(&bin).unwrap();
    std::fs::write(
        bin.join("leave"),
        "#!/bin/sh\nsleep 300 </dev/null >/dev/null 2>&1 &\necho leave 1.0\n",
    )
    .unwrap();
    std::fs::set_permissions(bin.join("leave"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let observed = f.process.seal(&f.run, &f.plan).await.unwrap();
    assert_eq!(
        observed.facts["probe_status"],
        "ended (reaped by the sandbox's pid 1); 1 process(es) it left stopped",
        "{:?}",
        observed.facts
    );
    // Gone before any command runs: no `sleep` in the run's cgroups.
    let layout = CgroupLayout::detect().unwrap();
    let parent = format!("agent-workspace-test-{}-probe-leftover", std::process::id());
    let cgroups = leaked_paths(&layout, &parent, &f.run.run_id).unwrap();
    assert!(!cgroups.is_empty());
    assert_eq!(sleeps_in(&cgroups), Vec::<u32>::new());
    // The sandbox lives on: a command runs.
    let (status, out) = run_sh(&f, "echo still").await;
    assert_eq!(
        (status, out.as_str()),
        (ExitStatusRecord::Code(0), "still\n")
    );
    teardown_is_clean(&f).await;
}

/// The host pids in the run's cgroups whose `comm` is `sleep`.
/// `sleep` processes in the run's cgroups and their children (each command has
/// a child group of its own).
fn sleeps_in(cgroups: &[std::path::PathBuf]) -> Vec<u32> {
    let mut pids = Vec::new();
    let mut dirs: Vec<std::path::PathBuf> = cgroups.to_vec();
    while let Some(dir) = dirs.pop() {
        if let Ok(entries) = std::fs::read_dir(&dir) {
            dirs.extend(
                entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                    .map(|e| e.path()),
            );
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<u32>().ok()) {
            let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
            if comm.trim() == "sleep" && !pids.contains(&pid) {
                pids.push(pid);
            }
        }
    }
    pids.sort_unstable();
    pids
}

/// Whether host pid `pid` is still a live `sleep` (gone, or a zombie, is not).
fn live_sleep(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat.rsplit_once(") ").map(|(_, rest)| &rest[..1]);
    stat.contains("(sleep)") && state != Some("Z")
}

/// Crash recovery: the instance that sealed the run is gone without a teardown;
/// a NEW instance tears the run down by its cgroups.
#[tokio::test(flavor = "multi_thread")]
async fn a_new_instance_tears_down_a_run_it_did_not_seal() {
    let Run { base, run, plan } = standalone_run("process-recovery", |_| {}).await;
    let parent = format!("agent-workspace-test-{}-recovery", std::process::id());
    let _guard = ParentGuard(parent.clone());
    let first = NamespaceProcess::new(ProcessOptions::probe(parent.clone()).unwrap());
    first.seal(&run, &plan).await.unwrap();
    let exec = first
        .spawn(
            &run,
            &command(
                &["/bin/sh", "-c", "setsid sleep 1000 & exec sleep 1000"],
                None,
            ),
        )
        .await
        .unwrap();
    let layout = CgroupLayout::detect().unwrap();
    let cgroups = leaked_paths(&layout, &parent, &run.run_id).unwrap();
    assert!(!cgroups.is_empty());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let sleeps = loop {
        let sleeps = sleeps_in(&cgroups);
        if sleeps.len() == 2 || std::time::Instant::now() > deadline {
            break sleeps;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(sleeps.len(), 2, "both sleeps started: {sleeps:?}");
    // The runner "dies": neither the execution nor the instance is torn down or
    // dropped (dropping would kill the run).
    std::mem::forget(exec);
    std::mem::forget(first);

    let second = NamespaceProcess::new(ProcessOptions::probe(parent.clone()).unwrap());
    let report = second.teardown(&run).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
    for pid in &sleeps {
        assert!(!live_sleep(*pid), "sleep {pid} survived the teardown");
    }
    assert_eq!(
        leaked_paths(&layout, &parent, &run.run_id).unwrap(),
        Vec::<std::path::PathBuf>::new()
    );
    // Idempotent: nothing left is a clean report.
    assert!(second.teardown(&run).await.unwrap().is_clean());
    drop(base);
}
