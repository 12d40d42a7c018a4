//! Commands at once in one live workspace from one tokio runtime, through the
//! library: sixteen tasks share the workspace (`Workspace::exec` takes
//! `&self`), each command waits until all sixteen have started (so one held
//! back behind another never ends), and each is recorded under a number of
//! its own with its own output.
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use support::{Fixture, command};
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::runner::{CommandIo, CreateOptions};

/// How many commands run at once.
const AT_ONCE: usize = 16;

/// Command `i`: marks itself started in `.barrier/`, then waits (up to a
/// minute, then exit 3) until all [`AT_ONCE`] have, and says who it is on
/// both streams. A command that had to wait for another to end before it
/// started would make that one time out.
fn barrier_command(i: usize) -> workspace_core::boundary::CommandSpec {
    let script = format!(
        "mkdir -p .barrier && : > .barrier/{i} && n=0; \
         while [ $(ls .barrier | wc -l) -lt {AT_ONCE} ]; do \
           n=$((n+1)); [ $n -gt 600 ] && exit 3; sleep 0.1; \
         done; echo out-{i}; echo err-{i} >&2"
    );
    command(&["/bin/sh", "-c", &script], None)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixteen_tasks_run_commands_in_one_workspace_at_once_each_recorded() {
    let fx = Fixture::new("concurrent-tasks");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");
    let workspace = Arc::new(workspace);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 1..=AT_ONCE {
        let workspace = Arc::clone(&workspace);
        tasks.spawn(async move {
            let outcome = workspace
                .exec(&barrier_command(i), CommandIo::captured())
                .await;
            (i, outcome.expect("the command was run"))
        });
    }
    let mut numbers = BTreeSet::new();
    let mut by_number = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        let (i, outcome) = joined.expect("the task ended");
        assert_eq!(
            outcome.exit.status,
            ExitStatusRecord::Code(0),
            "command {i} did not meet the others: {outcome:?}"
        );
        assert!(numbers.insert(outcome.seq), "number {} twice", outcome.seq);
        by_number.push((outcome.seq, i));
    }
    let expected: BTreeSet<u32> = (1..=AT_ONCE as u32).collect();
    assert_eq!(numbers, expected, "each command has a number of its own");

    let workspace = Arc::try_unwrap(workspace).expect("every task let go of it");
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    let recorded: Vec<u32> = report.outcome.commands.iter().map(|c| c.seq).collect();
    assert_eq!(recorded, expected.iter().copied().collect::<Vec<_>>());
    // Each record holds its own command's output, and nothing of another's.
    for (seq, i) in by_number {
        let dir = report.evidence.join("commands").join(format!("{seq:04}"));
        let stdout = std::fs::read_to_string(dir.join("stdout")).unwrap();
        let stderr = std::fs::read_to_string(dir.join("stderr")).unwrap();
        assert_eq!(stdout, format!("out-{i}\n"), "command {seq}");
        assert_eq!(stderr, format!("err-{i}\n"), "command {seq}");
        let record: serde_json::Value =
            serde_json::from_slice(&std::fs::read(dir.join("command.json")).unwrap()).unwrap();
        let script = record["argv"][2].as_str().unwrap();
        assert!(script.contains(&format!("echo out-{i};")), "{script}");
    }
    fx.assert_nothing_left(&report.run_id, &[]);
}
