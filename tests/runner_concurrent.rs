//! Commands at once in one live workspace from one tokio runtime, through the
//! library: sixteen tasks share the workspace (`Workspace::exec` takes
//! `&self`), each command waits until all sixteen have started (so one held
//! back behind another never ends), and each is recorded under a number of
//! its own with its own output. A command spawned to be watched streams its
//! output as events, takes input while it runs, and is killed whole.
//!
//! Needs root, user namespaces and cgroups, as every namespace-backend test.
#![allow(clippy::expect_used, clippy::unwrap_used)] // panicking is how a test fails

mod support;

use std::collections::BTreeSet;
use std::sync::Arc;

use support::{Fixture, command, marker, processes_with, shell, wait_until_gone};
use tokio::io::AsyncWriteExt;
use workspace_core::boundary::KillCause;
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::runner::{
    CommandEvent, CommandIo, CommandOutcome, CreateOptions, SpawnedCommand,
};

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

/// Reads `command`'s events until its stdout holds `wanted` (or it ended);
/// returns both streams as read so far.
async fn read_until(command: &mut SpawnedCommand<'_>, wanted: &str) -> (String, String) {
    let (mut stdout, mut stderr) = (String::new(), String::new());
    while !stdout.contains(wanted) {
        match command.next().await {
            Some(Ok(CommandEvent::Stdout(bytes))) => {
                stdout.push_str(&String::from_utf8_lossy(&bytes))
            }
            Some(Ok(CommandEvent::Stderr(bytes))) => {
                stderr.push_str(&String::from_utf8_lossy(&bytes))
            }
            other => panic!("waiting for {wanted:?}, got {other:?} ({stdout:?})"),
        }
    }
    (stdout, stderr)
}

/// Reads `command`'s events to its end; its outcome and its stdout.
async fn read_to_end(command: &mut SpawnedCommand<'_>) -> (CommandOutcome, String) {
    let mut stdout = String::new();
    loop {
        match command.next().await.expect("events end with the exit") {
            Ok(CommandEvent::Stdout(bytes)) => stdout.push_str(&String::from_utf8_lossy(&bytes)),
            Ok(CommandEvent::Stderr(_)) => {}
            Ok(CommandEvent::Exit(outcome)) => {
                assert!(command.next().await.is_none(), "nothing after the exit");
                return (*outcome, stdout);
            }
            Err(error) => panic!("the run broke: {error}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spawned_command_streams_its_output_takes_input_as_it_runs_and_is_killed_whole() {
    let fx = Fixture::new("spawned-command");
    let workspace = fx
        .runner()
        .create(fx.contract(), CreateOptions::default())
        .await
        .expect("create");

    // A conversation: each line written is answered on both streams before
    // the next is written.
    let mut echo = workspace.spawn(&command(
        &[
            "/bin/sh",
            "-c",
            "while read line; do echo \"got $line\"; echo \"err $line\" >&2; done; echo bye",
        ],
        None,
    ));
    for line in ["one", "two"] {
        let stdin = echo.stdin().expect("stdin open while it runs");
        stdin
            .write_all(format!("{line}\n").as_bytes())
            .await
            .unwrap();
        stdin.flush().await.unwrap();
        let (stdout, _) = read_until(&mut echo, &format!("got {line}\n")).await;
        assert_eq!(stdout, format!("got {line}\n"));
    }
    echo.close_stdin();
    let (outcome, rest) = read_to_end(&mut echo).await;
    assert_eq!(
        outcome.exit.status,
        ExitStatusRecord::Code(0),
        "{outcome:?}"
    );
    assert!(rest.ends_with("bye\n"), "{rest:?}");
    let record = std::fs::read_to_string(
        workspace
            .evidence_dir()
            .join("commands")
            .join(format!("{:04}", outcome.seq))
            .join("stdout"),
    )
    .unwrap();
    assert_eq!(record, "got one\ngot two\nbye\n", "the evidence has it all");

    // A tree killed whole: a background child and its parent.
    let mark = marker("spawned-kill");
    let mut sleeper = workspace.spawn(&shell("sleep 1000 & echo started; sleep 1000", &mark));
    read_until(&mut sleeper, "started\n").await;
    assert!(
        !processes_with(&mark).is_empty(),
        "the test would prove nothing"
    );
    sleeper.kill();
    let (outcome, _) = read_to_end(&mut sleeper).await;
    assert_eq!(
        outcome.exit.killed,
        Some(KillCause::Cancelled),
        "{outcome:?}"
    );
    let left = wait_until_gone(&mark, std::time::Duration::from_secs(10));
    assert!(left.is_empty(), "left running: {left:?}");

    // One command killed, the workspace goes on.
    let after = workspace
        .exec(&command(&["true"], None), CommandIo::captured())
        .await
        .expect("exec");
    assert_eq!(after.exit.status, ExitStatusRecord::Code(0));
    drop(sleeper);
    drop(echo);
    let report = workspace.finish().await.expect("finish");
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    fx.assert_nothing_left(&report.run_id, &[&mark]);
}
