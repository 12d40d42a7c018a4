//! The container backend end to end through the runner, with runc: one live
//! container per workspace, sealed and probed like a namespace run, commands
//! `exec`'d into it, what a command leaves in the background still running for
//! the next one, and nothing left after the workspace ends (no runtime state,
//! cgroup, run directory or process).
//!
//! Needs root, user namespaces, cgroups and runc (Debian package runc).
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::path::Path;

use agent_workspace::container_stack;
use support::{Fixture, command, marker, wait_until_gone};
use workspace_core::runner::{CommandIo, CreateOptions};

fn runner(fixture: &Fixture) -> workspace_core::runner::Runner {
    let state = fixture.base.path().join("runc-state");
    let stack = container_stack(&fixture.cgroup_parent, Some("runc"), &state)
        .unwrap_or_else(|e| panic!("{e} (these tests need runc: apt-get install runc)"));
    fixture.runner_with(stack)
}

fn runc_knows(state: &Path) -> Vec<String> {
    let out = std::process::Command::new("runc")
        .arg("--root")
        .arg(state)
        .args(["list", "-q"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_started_by_one_command_answers_the_next_and_nothing_is_left() {
    let fixture = Fixture::new("container-live");
    let runner = runner(&fixture);
    let server = marker("container-server");
    let mut workspace = runner
        .create(fixture.contract(), CreateOptions::default())
        .await
        .unwrap_or_else(|e| panic!("{}", workspace_core::error_chain(&e)));
    let run_id = workspace.run_id().clone();
    let observed: serde_json::Value = serde_json::from_slice(
        &std::fs::read(fixture.paths(&run_id).evidence.join("observed.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(
        observed["probe"]["mismatches"],
        serde_json::json!([]),
        "{observed:#}"
    );
    assert_eq!(
        observed["probe"]["facts"]["runtime"]["name"], "runc",
        "{observed:#}"
    );

    let start = command(
        &[
            "sh",
            "-c",
            &format!(
                "python3 -c 'import http.server,sys; sys.argv=[\"{server}\"]; http.server.test(HandlerClass=http.server.SimpleHTTPRequestHandler, port=8000, bind=\"127.0.0.1\")' >/dev/null 2>&1 & sleep 1; echo started"
            ),
        ],
        Some(20_000),
    );
    let started = workspace.exec(&start, CommandIo::captured()).await.unwrap();
    assert_eq!(started.shell_status(), 0, "{started:?}");
    let fetch = command(
        &[
            "python3",
            "-c",
            "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8000/hello.txt').read().decode(), end='')",
        ],
        Some(20_000),
    );
    let fetched = workspace.exec(&fetch, CommandIo::captured()).await.unwrap();
    assert_eq!(fetched.shell_status(), 0, "{fetched:?}");
    let evidence = fixture.paths(&run_id).evidence;
    let answer = std::fs::read_to_string(evidence.join("commands/0002/stdout")).unwrap();
    assert_eq!(answer, support::HELLO, "{fetched:?}");

    let write = command(&["sh", "-c", "echo changed > made.txt"], Some(20_000));
    let wrote = workspace.exec(&write, CommandIo::captured()).await.unwrap();
    assert_eq!(wrote.shell_status(), 0, "{wrote:?}");

    let report = workspace.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let patch =
        std::fs::read_to_string(fixture.paths(&run_id).evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("made.txt"), "{patch}");
    fixture.assert_nothing_left(&run_id, &[&server]);
    assert!(
        runc_knows(&fixture.base.path().join("runc-state")).is_empty(),
        "runc still knows containers"
    );
    assert!(wait_until_gone(&server, std::time::Duration::from_secs(5)).is_empty());
}
