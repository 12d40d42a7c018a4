//! Crash recovery of runs whose runner was SIGKILLed in each lifecycle state.
//!
//! A test binary of its own (`harness = false`): [`main`] runs every case in
//! order, each in a runtime of its own, and reports them as libtest does. Each
//! case starts this binary again as the runner, with `AW_RECOVERY_*` variables
//! naming the state to stop in and the fixture's directories (child mode, see
//! [`support::crash_child`]). The child drives a real run over the default stack,
//! wrapped in [gates](support::gates) that hold it in the wanted state, writes a
//! ready file and waits. The parent SIGKILLs it, then calls `Runner::recover`
//! with the plain stack and checks that the run was exported, sealed and cleaned
//! up, leaving nothing behind, or, for a suspended run, left alone for a resume.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

// The custom test harness of workspace-core's process tests: the same libtest-like
// runner, one file.
#[path = "../workspace-core/tests/harness/mod.rs"]
mod harness;
mod support;

use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use backend_namespace::cgroup::{CgroupLayout, leaked_paths};
use support::crash::{Target, spawn_child, wait_ready};
use support::{
    Fixture, assert_has_files, assert_intact, git_stdout, journal_states, list_tree, marker,
    read_outcome, wait_until_gone,
};
use workspace_core::RunId;
use workspace_core::boundary::SourceRecord;
use workspace_core::lifecycle::{FailureCause, State, StateName};
use workspace_core::runner::CreateOptions;

/// The name of the case for `target`.
fn case_name(target: Target) -> String {
    match target {
        Target::Running => "recovers_a_run_lost_in_running_and_kills_its_command".into(),
        Target::ProvisionedNotRecorded => {
            "recovers_a_run_lost_in_provisioning_after_the_checkout_was_made".into()
        }
        Target::Suspended => "leaves_a_run_suspended_before_the_crash_for_resume".into(),
        other => format!("recovers_a_run_lost_in_{}", snake(&format!("{other:?}"))),
    }
}

fn snake(camel: &str) -> String {
    let mut out = String::new();
    for c in camel.chars() {
        if c.is_ascii_uppercase() && !out.is_empty() {
            out.push('_');
        }
        out.push(c.to_ascii_lowercase());
    }
    out
}

fn main() -> ExitCode {
    support::crash_child::run_if_child();
    let cases = Target::ALL
        .into_iter()
        .map(|target| {
            let case = move || {
                tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(2)
                    .enable_all()
                    .build()
                    .unwrap()
                    .block_on(run_case(target));
            };
            (case_name(target), Box::new(case) as Box<dyn Fn()>)
        })
        .collect();
    harness::run(cases)
}

async fn run_case(target: Target) {
    if target == Target::Suspended {
        crash_while_suspended().await;
    } else {
        crash_and_recover(target).await;
    }
}

/// Starts the child runner, waits until it holds the run in `target`, SIGKILLs
/// it, recovers, and checks everything recovery promises.
async fn crash_and_recover(target: Target) {
    let slug = target.slug();
    let fx = Fixture::new(&format!("rec-{slug}"));
    let run_id = RunId::new(format!("crash-{slug}")).unwrap();
    let mark = marker(&format!("rec-{slug}"));
    let paths = fx.paths(&run_id);

    let mut child = spawn_child(&fx, target, &run_id, &mark);
    wait_ready(child.child(), fx.base.path());
    // The child holds the journal: recovery must leave a live run alone.
    let live = fx.runner().recover().await.unwrap();
    assert_eq!(live.live, vec![run_id.clone()], "{live:?}");
    assert!(live.recovered.is_empty(), "{live:?}");
    if target == Target::Running {
        assert!(
            !support::processes_with(&mark).is_empty(),
            "the command is not running: the test would prove nothing"
        );
    }
    if target.holds_cgroups() {
        assert!(
            !run_cgroups(&fx, &run_id).is_empty(),
            "the sealed run has no cgroup: the test would prove nothing"
        );
    }
    if target == Target::ProvisionedNotRecorded {
        assert!(
            !list_tree(&paths.run_dir).is_empty(),
            "provisioning left nothing: the test would prove nothing"
        );
        assert!(!paths.evidence.join("source.json").exists());
    }
    child.kill_now();
    let states = journal_states(&paths.journal);
    // A journal without a record is a run in `requested`.
    assert_eq!(
        states.last().map_or(StateName::Requested, State::name),
        target.journal_state(),
        "the child stopped elsewhere: {states:?}"
    );

    let report = fx.runner().recover().await.unwrap();
    assert!(report.live.is_empty(), "{report:?}");
    assert!(report.unreadable.is_empty(), "{report:?}");
    assert!(report.suspended.is_empty(), "{report:?}");
    assert_eq!(report.recovered.len(), 1, "{report:?}");
    let recovered = &report.recovered[0];
    assert_eq!(recovered.run.run_id, run_id);
    assert_eq!(recovered.run.found_in.name(), target.journal_state());
    assert!(
        recovered.cleaned,
        "not cleaned: {:?}; left in the run directory: {:?}",
        recovered.errors,
        list_tree(&paths.run_dir)
    );
    assert!(recovered.errors.is_empty(), "{:?}", recovered.errors);
    assert_eq!(recovered.exported_now, !target.sealed_before_crash());

    // The evidence exists, is sealed and intact, and says how the run ended.
    assert_intact(&paths.evidence);
    assert_has_files(
        &paths.evidence,
        &[
            "contract.json",
            "journal.jsonl",
            "outcome.json",
            "checks.json",
        ],
    );
    let outcome = read_outcome(&paths.evidence);
    assert_eq!(outcome.run_id, run_id);
    if target.sealed_before_crash() {
        assert_eq!(outcome.failure, None, "{outcome:?}");
        assert_eq!(outcome.ended_in, StateName::Exported);
    } else {
        assert_eq!(
            outcome.failure,
            Some(FailureCause::RunnerLost),
            "{outcome:?}"
        );
        assert_eq!(outcome.ended_in, StateName::Failed);
        assert_eq!(
            outcome.recovered_from,
            Some(target.journal_state()),
            "{outcome:?}"
        );
    }
    let recorded_checkout = !matches!(
        target,
        Target::Requested | Target::Waiting | Target::Provisioning | Target::ProvisionedNotRecorded
    );
    if recorded_checkout {
        // What the checkout held was exported before it was removed.
        assert_has_files(&paths.evidence, &["source.json", "diff.patch"]);
    }
    if target == Target::Running {
        // Its runner died while it ran: all it wrote is kept beside what was
        // streamed before the runner died (which may have stopped short).
        let whole = std::fs::read_to_string(paths.evidence.join("commands/0001/whole.stdout"));
        assert_eq!(whole.unwrap(), "running\n");
        let streamed = std::fs::read_to_string(paths.evidence.join("commands/0001/stdout"));
        assert!("running\n".starts_with(&streamed.unwrap()));
        let late = &outcome.late_output;
        assert!(
            late.len() == 1 && late[0].whole && late[0].seq == 1,
            "{late:?}"
        );
    }
    if matches!(
        target,
        Target::Draining | Target::Failed | Target::Exporting | Target::CleaningUp
    ) {
        assert_change_exported(&paths.evidence);
    }

    // The journal ends in `cleaned`, after a failure with cause RunnerLost when
    // the run had not failed already.
    let states = states_ending_cleaned(&paths.journal);
    if target != Target::Failed {
        assert!(
            states.iter().any(|s| matches!(
                s,
                State::Failed {
                    cause: FailureCause::RunnerLost,
                    ..
                }
            )),
            "{states:?}"
        );
    }
    fx.assert_nothing_left(&run_id, &[&mark]);
    assert_no_mounts_or_worktrees(&fx);

    // A second recovery has nothing to do.
    let again = fx.runner().recover().await.unwrap();
    assert!(again.recovered.is_empty(), "{again:?}");
    assert!(again.live.is_empty(), "{again:?}");
    assert_eq!(again.finished, vec![run_id.clone()]);
    assert_intact(&paths.evidence);
}

/// The child suspends its run after one command and is then killed: recovery
/// leaves the parked run alone (nothing of it runs, its checkout stays), and a
/// resume in another runner brings it back and finishes it.
async fn crash_while_suspended() {
    let target = Target::Suspended;
    let fx = Fixture::new("rec-suspended");
    let run_id = RunId::new("crash-suspended").unwrap();
    let mark = marker("rec-suspended");
    let paths = fx.paths(&run_id);

    let mut child = spawn_child(&fx, target, &run_id, &mark);
    wait_ready(child.child(), fx.base.path());
    // The suspend released the journal: even with its runner alive, the run is
    // parked, not live.
    let parked = fx.runner().recover().await.unwrap();
    assert_eq!(parked.suspended, vec![run_id.clone()], "{parked:?}");
    assert!(parked.live.is_empty(), "{parked:?}");
    child.kill_now();
    let states = journal_states(&paths.journal);
    assert_eq!(states.last(), Some(&State::Suspended), "{states:?}");

    let report = fx.runner().recover().await.unwrap();
    assert_eq!(report.suspended, vec![run_id.clone()], "{report:?}");
    assert!(report.recovered.is_empty(), "{report:?}");
    assert!(report.live.is_empty(), "{report:?}");
    assert!(report.finished.is_empty(), "{report:?}");
    assert!(report.unreadable.is_empty(), "{report:?}");
    // Recovery changed nothing: the journal still ends in `suspended`.
    assert_eq!(journal_states(&paths.journal), states);

    // The command ended; the run's sandbox is frozen in place (its cgroups stay
    // for the resume), its checkout, with the command's change, stays.
    let alive = wait_until_gone(&mark, Duration::from_secs(5));
    assert!(alive.is_empty(), "the command still runs: {alive:?}");
    let cgroups = run_cgroups(&fx, &run_id);
    assert!(
        !cgroups.is_empty(),
        "the suspended run's frozen sandbox is gone"
    );
    let source: SourceRecord =
        serde_json::from_slice(&std::fs::read(paths.evidence.join("source.json")).unwrap())
            .unwrap();
    let change = source.workspace.join("change.txt");
    assert_eq!(
        std::fs::read_to_string(&change).unwrap_or_default(),
        "changed-by-the-run\n",
        "the suspended checkout lost its change: {:?}",
        list_tree(&paths.run_dir)
    );

    // Another runner resumes it (its sandbox thawed, as source.json says) and
    // finishes it.
    let runner = fx.runner();
    let ws = runner
        .resume(&run_id, CreateOptions::default())
        .await
        .unwrap();
    assert_eq!(ws.state(), &State::Sealed);
    let source: serde_json::Value =
        serde_json::from_slice(&std::fs::read(paths.evidence.join("source.json")).unwrap())
            .unwrap();
    let note = source["resumes"][0]["note"].as_str().unwrap_or_default();
    assert!(note.starts_with("resumed with "), "{source}");
    let done = ws.finish().await.unwrap();
    assert!(done.cleaned, "not cleaned: {:?}", done.cleanup_errors);
    assert!(done.cleanup_errors.is_empty(), "{:?}", done.cleanup_errors);
    assert!(done.evidence_sealed);
    assert_eq!(done.evidence, paths.evidence);
    assert_intact(&paths.evidence);
    let outcome = read_outcome(&paths.evidence);
    assert_eq!(outcome, done.outcome);
    assert_eq!(outcome.failure, None, "{outcome:?}");
    assert!(outcome.errors.is_empty(), "{:?}", outcome.errors);
    assert_eq!(outcome.commands.len(), 1, "{outcome:?}");
    assert_eq!(outcome.changed_paths, 1, "{outcome:?}");
    assert_change_exported(&paths.evidence);
    let states = states_ending_cleaned(&paths.journal);
    assert!(states.contains(&State::Suspended), "{states:?}");
    assert!(
        !states.iter().any(|s| matches!(s, State::Failed { .. })),
        "{states:?}"
    );
    fx.assert_nothing_left(&run_id, &[&mark]);
    assert_no_mounts_or_worktrees(&fx);

    let again = fx.runner().recover().await.unwrap();
    assert_eq!(again.finished, vec![run_id.clone()], "{again:?}");
    assert!(again.suspended.is_empty(), "{again:?}");
    assert!(again.recovered.is_empty(), "{again:?}");
}

/// Asserts that the first command of the bundle in `evidence` wrote `expected`
/// to its stdout.
fn assert_first_stdout(evidence: &Path, expected: &str) {
    let stdout = std::fs::read_to_string(evidence.join("commands/0001/stdout"));
    assert_eq!(stdout.unwrap(), expected);
}

/// Asserts that the child's change command ran first and that the bundle in
/// `evidence` exported its change.
fn assert_change_exported(evidence: &Path) {
    assert_first_stdout(evidence, "started\n");
    let patch = std::fs::read_to_string(evidence.join("diff.patch")).unwrap();
    assert!(patch.contains("+changed-by-the-run"), "{patch}");
}

/// Every state the journal at `path` went through, asserted to end in `cleaned`.
fn states_ending_cleaned(journal: &Path) -> Vec<State> {
    let states = journal_states(journal);
    assert_eq!(states.last(), Some(&State::Cleaned), "{states:?}");
    states
}

/// The cgroup directories of run `run_id` that exist.
fn run_cgroups(fx: &Fixture, run_id: &RunId) -> Vec<std::path::PathBuf> {
    let layout = CgroupLayout::detect().unwrap();
    leaked_paths(&layout, &fx.cgroup_parent, run_id).unwrap()
}

/// Nothing is mounted under the fixture and the source repository has no
/// worktree but its own.
fn assert_no_mounts_or_worktrees(fx: &Fixture) {
    let mounts = mounts_under(fx.base.path());
    assert!(mounts.is_empty(), "mounts remain: {mounts:?}");
    let worktrees = git_stdout(&fx.repo, &["worktree", "list", "--porcelain"]);
    let count = worktrees
        .lines()
        .filter(|l| l.starts_with("worktree "))
        .count();
    assert_eq!(count, 1, "worktrees remain: {worktrees}");
}

/// The mount points under `dir` in this process's mount namespace.
fn mounts_under(dir: &Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(&dir))
        .map(str::to_owned)
        .collect()
}
