//! `NamespaceProcess` end to end, with real namespaces and cgroups (run as root).
//!
//! Every run's cgroups live under a parent `agent-workspace-test-<pid>-<test>`,
//! removed when the test ends. The workspace is a `TempDir` with one file, owned
//! by the host id the run's uid 1000 maps to; no git repository is needed.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod runs;

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
    let f = fixture("seal", |_| {}).await;
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
async fn a_bare_program_name_is_refused() {
    let f = fixture("relative", |_| {}).await;
    f.process.seal(&f.run, &f.plan).await.unwrap();
    let err = f
        .process
        .spawn(&f.run, &command(&["sh", "-c", "true"], None))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("spawn command"), "{err}");
    assert!(
        format!("{:?}", err.source).contains("RelativeProgram"),
        "{err:?}"
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
