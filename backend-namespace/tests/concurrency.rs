//! Many `NamespaceProcess` runs at once, with real namespaces and cgroups (run as root).
//!
//! Every run's cgroups live under a parent `agent-workspace-test-<pid>-<test>`,
//! removed when the test ends. Each run gets its own standalone workspace (a
//! `TempDir` with one file, owned by the host id the run's uid 1000 maps to).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

use std::os::unix::fs::{PermissionsExt, chown};
use std::sync::Arc;
use std::time::{Duration, Instant};

use backend_namespace::cgroup::{CgroupLayout, remove_parent};
use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_namespace::process::{DEFAULT_HOST_ID_BASE, NamespaceProcess, ProcessOptions};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use workspace_core::RunId;
use workspace_core::boundary::{
    CommandSpec, EnvironmentBoundary, FilesystemRecord, IdentityBoundary, OriginRecord,
    ProcessBoundary, RunContext, SealPlan, SourceRecord,
};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape};
use workspace_core::evidence::ExitStatusRecord;

const ROUNDS: usize = 10;
const RUNS_PER_ROUND: usize = 32;
/// Generous: a deadlock fails the test instead of hanging it.
const OUTER_TIMEOUT: Duration = Duration::from_secs(240);

/// Removes the test's parent cgroups when dropped (best effort, for failures).
struct ParentGuard(String);

impl Drop for ParentGuard {
    fn drop(&mut self) {
        if let Ok(layout) = CgroupLayout::detect()
            && let Err(e) = remove_parent(&layout, &self.0)
        {
            eprintln!("removing the test parent cgroup {} failed: {e}", self.0);
        }
    }
}

/// One run's workspace, context and seal plan.
struct Run {
    _base: TempDir,
    run: RunContext,
    plan: SealPlan,
}

async fn prepare_run(name: &str) -> Run {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace = base.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("hello.txt"), "hello from the workspace\n").unwrap();
    let host_id = DEFAULT_HOST_ID_BASE + 1000;
    for path in [workspace.clone(), workspace.join("hello.txt")] {
        chown(&path, Some(host_id), Some(host_id)).unwrap();
    }
    let contract = Contract::preset(
        TaskShape::NarrowFix,
        "concurrency tests",
        SourceSection::new(workspace.to_string_lossy(), "HEAD"),
    );
    let run = RunContext {
        run_id: RunId::new(name).unwrap(),
        contract: Arc::new(contract),
        run_dir: base.path().join("run"),
        runtime_dir: base.path().join("runtime"),
    };
    let source = SourceRecord {
        repository: workspace.to_string_lossy().into_owned(),
        remote_urls: Vec::new(),
        commit: "a".repeat(40),
        tree: "b".repeat(40),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Standalone,
        workspace,
        layers: None,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
    };
    let environment = NamespaceEnvironment::with_host_vars(Default::default())
        .prepare(&run)
        .await
        .unwrap();
    let identity = NamespaceIdentity::new().prepare(&run).await.unwrap();
    let plan = SealPlan {
        source,
        filesystem: FilesystemRecord::default(),
        environment,
        identity,
    };
    Run {
        _base: base,
        run,
        plan,
    }
}

fn command(argv: &[&str]) -> CommandSpec {
    CommandSpec {
        argv: argv.iter().map(|s| s.to_string()).collect(),
        cwd: ".".into(),
        timeout_ms: None,
        tty: false,
    }
}

/// Host pids of every process whose cgroup path (in any hierarchy) lies under `parent`.
fn processes_under(parent: &str) -> Vec<(u32, String)> {
    let needle = format!("/{parent}/");
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap() {
        let entry = entry.unwrap();
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|s| s.parse::<u32>().ok())
        else {
            continue;
        };
        // A process may end between read_dir and the read: that is not a survivor.
        let Ok(cgroups) = std::fs::read_to_string(entry.path().join("cgroup")) else {
            continue;
        };
        if cgroups.lines().any(|line| line.contains(&needle)) {
            found.push((pid, cgroups));
        }
    }
    found
}

/// One run: seal, `echo $$; sleep 0.05`, wait, teardown; the teardown must be clean.
async fn one_run(process: Arc<NamespaceProcess>, name: String) {
    let r = prepare_run(&name).await;
    let observed = process.seal(&r.run, &r.plan).await.unwrap();
    assert_eq!(observed.mismatches, Vec::<String>::new(), "{name}");
    let mut exec = process
        .spawn(&r.run, &command(&["/bin/sh", "-c", "echo $$; sleep 0.05"]))
        .await
        .unwrap();
    drop(exec.take_stdin());
    let mut out = String::new();
    exec.take_stdout()
        .unwrap()
        .read_to_string(&mut out)
        .await
        .unwrap();
    let exit = exec.wait().await.unwrap();
    assert_eq!(exit.status, ExitStatusRecord::Code(0), "{name}: {exit:?}");
    assert_eq!(exit.killed, None, "{name}");
    let pid = out.trim();
    assert!(
        !pid.is_empty() && pid.parse::<u32>().is_ok(),
        "{name}: stdout {out:?}"
    );
    drop(exec);
    let report = process.teardown(&r.run).await.unwrap();
    assert!(report.is_clean(), "{name}: {report:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn thirty_two_runs_at_once_ten_times_leave_nothing_behind() {
    let test = "concurrency";
    let parent = format!("agent-workspace-test-{}-{test}", std::process::id());
    let guard = ParentGuard(parent.clone());
    let process = Arc::new(NamespaceProcess::new(
        ProcessOptions::probe(parent.clone()).unwrap(),
    ));
    let started = Instant::now();

    let body = {
        let (process, parent) = (Arc::clone(&process), parent.clone());
        async move {
            // The survivor scan below must be able to see a run's processes: check it
            // on a command that blocks until its stdin is closed.
            let r = prepare_run(&format!("{test}-scan-check")).await;
            process.seal(&r.run, &r.plan).await.unwrap();
            let mut exec = process
                .spawn(&r.run, &command(&["/bin/sh", "-c", "read line; echo done"]))
                .await
                .unwrap();
            let seen = processes_under(&parent);
            assert!(!seen.is_empty(), "the scan did not see a blocked run");
            drop(exec.take_stdin());
            let mut out = String::new();
            exec.take_stdout()
                .unwrap()
                .read_to_string(&mut out)
                .await
                .unwrap();
            assert_eq!(out, "done\n");
            assert_eq!(exec.wait().await.unwrap().status, ExitStatusRecord::Code(0));
            drop(exec);
            let report = process.teardown(&r.run).await.unwrap();
            assert!(report.is_clean(), "{report:?}");

            for round in 0..ROUNDS {
                let tasks: Vec<_> = (0..RUNS_PER_ROUND)
                    .map(|i| {
                        tokio::spawn(one_run(Arc::clone(&process), format!("{test}-{round}-{i}")))
                    })
                    .collect();
                let mut failures = Vec::new();
                for (i, result) in futures_join_all(tasks).await.into_iter().enumerate() {
                    if let Err(e) = result {
                        failures.push(format!("run {round}-{i}: {e}"));
                    }
                }
                assert!(failures.is_empty(), "round {round}: {failures:#?}");
            }
        }
    };
    tokio::time::timeout(OUTER_TIMEOUT, body)
        .await
        .unwrap_or_else(|_| panic!("the rounds did not finish within {OUTER_TIMEOUT:?}"));

    // No process of any run survives.
    let survivors = processes_under(&parent);
    assert!(survivors.is_empty(), "processes survived: {survivors:#?}");

    // No run's cgroup directory is left: removing the parent fails on a non-empty one.
    let layout = CgroupLayout::detect().unwrap();
    remove_parent(&layout, &parent).unwrap();
    drop(guard);
    eprintln!(
        "{ROUNDS} rounds of {RUNS_PER_ROUND} runs took {:?}",
        started.elapsed()
    );
}

/// Awaits every handle in order (all run concurrently once spawned): a `join_all`.
async fn futures_join_all<T>(
    handles: Vec<tokio::task::JoinHandle<T>>,
) -> Vec<Result<T, tokio::task::JoinError>> {
    let mut results = Vec::with_capacity(handles.len());
    for handle in handles {
        results.push(handle.await);
    }
    results
}
