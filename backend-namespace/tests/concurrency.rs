//! Many `NamespaceProcess` runs at once, with real namespaces and cgroups (run as root).
//!
//! Every run's cgroups live under a parent `agent-workspace-test-<pid>-<test>`,
//! removed when the test ends. Each run gets its own standalone workspace (a
//! `TempDir` with one file, owned by the host id the run's uid 1000 maps to).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod runs;

use std::sync::Arc;
use std::time::{Duration, Instant};

use backend_namespace::cgroup::{CgroupLayout, remove_parent};
use backend_namespace::process::{NamespaceProcess, ProcessOptions};
use runs::{ParentGuard, Run, command, standalone_run};
use tokio::io::AsyncReadExt;
use workspace_core::boundary::ProcessBoundary;
use workspace_core::evidence::ExitStatusRecord;

const ROUNDS: usize = 10;
const RUNS_PER_ROUND: usize = 32;
/// Generous: a deadlock fails the test instead of hanging it.
const OUTER_TIMEOUT: Duration = Duration::from_secs(240);

async fn prepare_run(name: &str) -> Run {
    standalone_run(name, |_| {}).await
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
        .spawn(
            &r.run,
            &command(&["/bin/sh", "-c", "echo $$; sleep 0.05"], None),
        )
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
                .spawn(
                    &r.run,
                    &command(&["/bin/sh", "-c", "read line; echo done"], None),
                )
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
