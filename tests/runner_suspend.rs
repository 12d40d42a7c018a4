//! Suspend and resume: a sealed run parks with its checkout and evidence, crash
//! recovery leaves it alone, another runner (as another process would) resumes it
//! after re-verifying the checkout, and a checkout changed behind its back is not
//! resumed silently.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

mod support;

use std::time::{Duration, Instant};

use support::{Fixture, assert_intact, command, command_lines_with, marker, read_outcome, shell};
use workspace_core::boundary::Suspension;
use workspace_core::evidence::ExitStatusRecord;
use workspace_core::lifecycle::State;
use workspace_core::runner::{CommandIo, CreateOptions, RunErrorKind};

#[tokio::test(flavor = "multi_thread")]
async fn a_suspended_run_keeps_its_checkout_and_resumes_in_another_runner() {
    let f = Fixture::new("suspend-resume");
    let runner = f.runner();
    let ws = runner
        .create(f.contract(), CreateOptions::default())
        .await
        .unwrap();
    let run_id = ws.run_id().clone();
    // The sleeper carries its marker in its own argv and never forks, so once the
    // shell that started it is gone, exactly one process carries the marker.
    let sleeper = marker("suspend-sleeper");
    let first = ws
        .exec(
            &command(
                &[
                    "/bin/sh",
                    "-c",
                    "echo first > note.txt; \
                     setsid python3 -c 'import time; time.sleep(1000)' \"$0\" </dev/null >/dev/null 2>&1 &",
                    &sleeper,
                ],
                None,
            ),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    assert_eq!(first.exit.status, ExitStatusRecord::Code(0));
    let python_sleepers = || {
        command_lines_with(&sleeper)
            .into_iter()
            .filter(|(_, line)| line.starts_with("python3"))
            .count()
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while command_lines_with(&sleeper).len() != 1 || python_sleepers() != 1 {
        assert!(Instant::now() < deadline, "the sleeper never started alone");
        std::thread::sleep(Duration::from_millis(20));
    }
    let suspended = ws.suspend().await.unwrap();
    assert_eq!(suspended.run_id, run_id);

    // Parked: the sleeper frozen in place (not killed), the checkout kept,
    // recovery leaves it alone.
    assert!(
        matches!(&suspended.suspension, Suspension::Frozen { processes } if !processes.is_empty()),
        "{:?}",
        suspended.suspension
    );
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(python_sleepers(), 1, "frozen, not killed");
    let paths = f.paths(&run_id);
    assert!(
        paths.run_dir.exists(),
        "the checkout must survive a suspend"
    );
    let report = runner.recover().await.unwrap();
    assert_eq!(report.suspended, vec![run_id.clone()]);
    assert!(report.recovered.is_empty());

    // A new runner, as another process: the run comes back sealed.
    let other = f.runner();
    let ws = other
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(ws.state(), &State::Sealed);
    let second = ws
        .exec(
            &shell("cat note.txt > copy.txt; echo second >> note.txt", "second"),
            CommandIo::captured(),
        )
        .await
        .unwrap();
    assert_eq!(second.seq, 2, "numbering continues after the resume");
    assert_eq!(second.exit.status, ExitStatusRecord::Code(0));
    let report = ws.finish().await.unwrap();
    assert!(report.cleaned, "{:?}", report.cleanup_errors);
    assert_intact(&report.evidence);
    let outcome = read_outcome(&report.evidence);
    assert_eq!(outcome.commands.len(), 2);
    assert_eq!(outcome.changed_paths, 2);
    let patch = std::fs::read_to_string(report.evidence.join("diff.patch")).unwrap();
    assert!(
        patch.contains("+first") && patch.contains("+second"),
        "{patch}"
    );
    f.assert_nothing_left(&run_id, &[&sleeper]);

    // Once finished it cannot be resumed again.
    let again = other
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap_err();
    assert!(
        matches!(*again.kind, RunErrorKind::NotSuspended { .. }),
        "{again:?}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_checkout_moved_to_another_commit_while_suspended_is_not_resumed() {
    let f = Fixture::new("suspend-tampered");
    let runner = f.runner();
    let ws = runner
        .create(f.contract(), CreateOptions::default())
        .await
        .unwrap();
    let run_id = ws.run_id().clone();
    let workspace = ws.source().unwrap().workspace.clone();
    ws.suspend().await.unwrap();

    // Someone commits in the parked checkout: it no longer is what the record says.
    // (The checkout belongs to the run's mapped id now, hence `safe.directory`.)
    let out = std::process::Command::new("git")
        .args([
            "-c",
            "safe.directory=*",
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.com",
        ])
        .args([
            "commit",
            "--allow-empty",
            "-q",
            "-m",
            "moved while suspended",
        ])
        .current_dir(&workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");

    let error = runner
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap_err();
    let evidence = error
        .evidence
        .clone()
        .expect("the failed resume names its evidence");
    assert!(
        matches!(*error.kind, RunErrorKind::Boundary(_)),
        "the source boundary refuses: {error:?}"
    );
    assert_intact(&evidence);
    let outcome = read_outcome(&evidence);
    assert!(outcome.failure.is_some(), "{outcome:?}");
    f.assert_nothing_left(&run_id, &[]);
}
