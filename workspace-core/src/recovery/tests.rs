//! Recovery of runs left by dead runners, in every lifecycle state.

use std::sync::Mutex;

use tempfile::TempDir;

use super::*;
use crate::boundary::BoundaryKind;
use crate::lifecycle::{CleanupPermit, Origin, StateName};

/// Hooks that record what recovery asked of them, and can be told to fail export.
#[derive(Default)]
struct RecordingHooks {
    calls: Mutex<Vec<(String, RunId)>>,
    fail_export: bool,
    fail_reap: bool,
}

impl RecordingHooks {
    fn calls_for(&self, run_id: &RunId) -> Vec<String> {
        let calls = self.calls.lock().expect("lock");
        calls
            .iter()
            .filter(|(_, id)| id == run_id)
            .map(|(step, _)| step.clone())
            .collect()
    }
    fn record(&self, step: &str, run: &LostRun) {
        self.calls
            .lock()
            .expect("lock")
            .push((step.into(), run.run_id.clone()));
    }
}

#[async_trait]
impl RecoveryHooks for RecordingHooks {
    async fn reap(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        self.record("reap", run);
        if self.fail_reap {
            return Err(BoundaryError::new(BoundaryKind::Process, "reap", "mount busy").into());
        }
        Ok(())
    }
    async fn export(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        self.record("export", run);
        if self.fail_export {
            let file = "outcome.json".to_owned();
            let step = RunnerStep::WriteEvidence { file };
            return Err(RecoveryStepError::Export(StepErrors(vec![
                crate::step::StepError::new(step, "disk full"),
            ])));
        }
        Ok(())
    }
    async fn clean_up(
        &self,
        run: &LostRun,
        permit: &CleanupPermit,
    ) -> Result<(), RecoveryStepError> {
        assert_eq!(permit.run_id(), &run.run_id, "a permit of another run");
        self.record("clean-up", run);
        Ok(())
    }
}

/// A lifecycle driven to `state` and then abandoned (its lock released, as when the
/// runner process dies).
fn abandoned_run(runtime: &Path, state: StateName) -> RunId {
    let run_id = RunId::generate();
    let path = journal_path(runtime, &run_id);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("journal dir");
    let mut life = Lifecycle::create(&path, run_id.clone(), Timeouts::default()).expect("create");
    let to_sealed = |life: &mut Lifecycle| {
        life.admit().expect("admit");
        life.provision(Origin::Fresh).expect("provision");
        life.start_services().expect("services");
        life.seal().expect("seal");
    };
    match state {
        StateName::Requested => {}
        StateName::Waiting => {
            life.admit().expect("admit");
        }
        StateName::Provisioning => {
            life.admit().expect("admit");
            life.provision(Origin::Fresh).expect("provision");
        }
        StateName::StartingServices => {
            life.admit().expect("admit");
            life.provision(Origin::Fresh).expect("provision");
            life.start_services().expect("services");
        }
        StateName::Sealed => to_sealed(&mut life),
        StateName::Suspended => {
            to_sealed(&mut life);
            life.suspend().expect("suspend");
        }
        StateName::Detached => {
            to_sealed(&mut life);
            life.detach().expect("detach");
        }
        StateName::Draining
        | StateName::Exporting
        | StateName::Exported
        | StateName::CleaningUp
        | StateName::Cleaned => {
            to_sealed(&mut life);
            life.drain().expect("drain");
            if state >= StateName::Exporting {
                life.export().expect("export");
            }
            if state >= StateName::Exported {
                life.finish_export().expect("exported");
            }
            if state >= StateName::CleaningUp {
                life.clean_up().expect("clean up");
            }
            if state == StateName::Cleaned {
                life.finish_clean_up().expect("cleaned");
            }
        }
        StateName::Failed => {
            to_sealed(&mut life);
            life.fail(FailureCause::Cancelled).expect("fail");
        }
    }
    assert_eq!(life.state().name(), state);
    drop(life);
    run_id
}

fn final_state(runtime: &Path, run_id: &RunId) -> State {
    let read =
        journal::read::<crate::lifecycle::Transition>(journal_path(runtime, run_id)).expect("read");
    read.records
        .last()
        .map(|r| r.event.to.clone())
        .unwrap_or(State::Requested)
}

fn failure_cause(runtime: &Path, run_id: &RunId) -> Option<FailureCause> {
    let read =
        journal::read::<crate::lifecycle::Transition>(journal_path(runtime, run_id)).expect("read");
    read.records.iter().find_map(|r| match &r.event.to {
        State::Failed { cause, .. } => Some(cause.clone()),
        _ => None,
    })
}

#[tokio::test]
async fn a_lost_run_in_every_state_is_reaped_exported_and_cleaned_and_parked_ones_are_left() {
    let runtime = TempDir::new().expect("tempdir");
    let hooks = RecordingHooks::default();
    let runs: Vec<(StateName, RunId)> = StateName::ALL
        .iter()
        .map(|&state| (state, abandoned_run(runtime.path(), state)))
        .collect();
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");

    for (state, run_id) in &runs {
        if *state == StateName::Cleaned {
            assert!(report.finished.contains(run_id));
            assert!(
                hooks.calls_for(run_id).is_empty(),
                "a cleaned run was touched"
            );
            continue;
        }
        if *state == StateName::Suspended {
            // Parked, not lost: nothing of it runs, it waits for a resume.
            assert!(report.suspended.contains(run_id));
            assert!(
                hooks.calls_for(run_id).is_empty(),
                "a suspended run was touched"
            );
            assert_eq!(final_state(runtime.path(), run_id), State::Suspended);
            continue;
        }
        if *state == StateName::Detached {
            // Live without a runner, not lost: it waits for an attach or a destroy.
            assert!(report.detached.contains(run_id));
            assert!(
                hooks.calls_for(run_id).is_empty(),
                "a detached run was touched"
            );
            assert_eq!(final_state(runtime.path(), run_id), State::Detached);
            continue;
        }
        let outcome = report
            .recovered
            .iter()
            .find(|r| &r.run.run_id == run_id)
            .unwrap_or_else(|| panic!("{state:?} run not recovered"));
        assert!(outcome.errors.is_empty(), "{state:?}: {:?}", outcome.errors);
        assert!(outcome.cleaned, "{state:?}");
        assert_eq!(
            final_state(runtime.path(), run_id),
            State::Cleaned,
            "{state:?}"
        );
        let export_was_complete = matches!(state, StateName::Exported | StateName::CleaningUp);
        let want: &[&str] = if export_was_complete {
            &["reap", "clean-up"]
        } else {
            &["reap", "export", "clean-up"]
        };
        assert_eq!(hooks.calls_for(run_id), want, "{state:?}");
        let cause = failure_cause(runtime.path(), run_id);
        let want_cause = if *state == StateName::Failed {
            FailureCause::Cancelled
        } else {
            FailureCause::RunnerLost
        };
        assert_eq!(cause, Some(want_cause), "{state:?}");
    }
    // All but the cleaned, suspended and detached ones.
    assert_eq!(report.recovered.len(), StateName::ALL.len() - 3);

    // Running recovery again finds nothing left to do.
    let again = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    assert!(again.recovered.is_empty());
    assert_eq!(again.finished.len(), StateName::ALL.len() - 2);
    assert_eq!(again.suspended.len(), 1);
    assert_eq!(again.detached.len(), 1);
}

#[tokio::test]
async fn a_live_run_is_left_alone() {
    let runtime = TempDir::new().expect("tempdir");
    let run_id = RunId::generate();
    let path = journal_path(runtime.path(), &run_id);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    let mut life = Lifecycle::create(&path, run_id.clone(), Timeouts::default()).expect("create");
    life.admit().expect("admit");
    let hooks = RecordingHooks::default();
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    assert_eq!(report.live, vec![run_id.clone()]);
    assert!(hooks.calls_for(&run_id).is_empty());
    // The live runner goes on as if nothing happened.
    life.provision(Origin::Fresh)
        .expect("still owned by its runner");
}

#[tokio::test]
async fn a_failed_export_is_retried_and_cleanup_waits_for_the_last_attempt() {
    let runtime = TempDir::new().expect("tempdir");
    let run_id = abandoned_run(runtime.path(), StateName::Sealed);
    let hooks = RecordingHooks {
        fail_export: true,
        ..RecordingHooks::default()
    };
    for attempt in 1..=MAX_EXPORT_ATTEMPTS {
        let report = recover(runtime.path(), &hooks, Timeouts::default())
            .await
            .expect("recover");
        let outcome = &report.recovered[0];
        assert!(!outcome.exported_now);
        // The export's own step and cause, under the recovery step that ran it.
        assert_eq!(
            outcome.errors[0].step,
            RunnerStep::Evidence,
            "{:?}",
            outcome.errors
        );
        assert_eq!(
            outcome.errors[0].cause, "exporting the evidence: writing outcome.json: disk full",
            "{:?}",
            outcome.errors
        );
        let last = attempt == MAX_EXPORT_ATTEMPTS;
        assert_eq!(
            outcome.cleaned, last,
            "attempt {attempt}: {:?}",
            outcome.errors
        );
        if !last {
            assert_eq!(
                outcome.errors[1].step,
                RunnerStep::CleanUp,
                "{:?}",
                outcome.errors
            );
            assert!(
                outcome.errors[1]
                    .cause
                    .contains("left for the next recovery"),
                "{:?}",
                outcome.errors
            );
        } else {
            assert_eq!(
                outcome.errors[1].step,
                RunnerStep::Evidence,
                "{:?}",
                outcome.errors
            );
            assert!(
                outcome.errors[1]
                    .cause
                    .contains("without a complete export"),
                "{:?}",
                outcome.errors
            );
        }
    }
    let calls = hooks.calls_for(&run_id);
    assert_eq!(
        calls,
        [
            "reap", "export", "reap", "export", "reap", "export", "clean-up"
        ]
    );
    assert_eq!(final_state(runtime.path(), &run_id), State::Cleaned);
}

#[tokio::test]
async fn a_failed_export_followed_by_a_crash_in_cleanup_is_exported_again() {
    let runtime = TempDir::new().expect("tempdir");
    let run_id = RunId::generate();
    let path = journal_path(runtime.path(), &run_id);
    std::fs::create_dir_all(path.parent().expect("parent")).expect("dir");
    {
        let mut life =
            Lifecycle::create(&path, run_id.clone(), Timeouts::default()).expect("create");
        life.admit().expect("admit");
        life.fail(FailureCause::Cancelled).expect("fail");
        life.export().expect("export");
        life.fail(FailureCause::RunnerLost).expect("export failed");
        let _permit = life.clean_up().expect("cleanup after an attempted export");
        // The runner dies here, in CleaningUp, with no complete export.
    }
    let hooks = RecordingHooks::default();
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    let outcome = &report.recovered[0];
    assert!(
        outcome.exported_now,
        "the evidence is exported before cleanup"
    );
    assert!(outcome.cleaned);
    assert_eq!(hooks.calls_for(&run_id), ["reap", "export", "clean-up"]);
}

#[tokio::test]
async fn a_failed_reap_exports_but_never_cleans_up() {
    let runtime = TempDir::new().expect("tempdir");
    let run_id = abandoned_run(runtime.path(), StateName::Sealed);
    let hooks = RecordingHooks {
        fail_reap: true,
        ..RecordingHooks::default()
    };
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    let outcome = &report.recovered[0];
    assert!(outcome.exported_now);
    assert!(!outcome.cleaned);
    assert!(
        outcome
            .errors
            .iter()
            .any(|e| e.step == RunnerStep::Reap && e.cause.contains("mount busy")),
        "{:?}",
        outcome.errors
    );
    assert_eq!(hooks.calls_for(&run_id), ["reap", "export"]);
    // The next recovery, with the reap working again, cleans up without exporting twice.
    let hooks = RecordingHooks::default();
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    assert!(report.recovered[0].cleaned);
    assert_eq!(hooks.calls_for(&run_id), ["reap", "clean-up"]);
}

#[tokio::test]
async fn a_torn_journal_is_recovered_and_a_stray_file_is_reported() {
    let runtime = TempDir::new().expect("tempdir");
    let run_id = abandoned_run(runtime.path(), StateName::Sealed);
    let path = journal_path(runtime.path(), &run_id);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes.extend_from_slice(br#"{"seq":4,"run_id":"#);
    std::fs::write(&path, bytes).expect("tear");
    std::fs::write(
        runtime.path().join(JOURNAL_DIR).join("Not A Run.jsonl"),
        b"",
    )
    .expect("stray");

    let hooks = RecordingHooks::default();
    let report = recover(runtime.path(), &hooks, Timeouts::default())
        .await
        .expect("recover");
    let outcome = &report.recovered[0];
    assert!(outcome.run.torn_tail.is_some());
    assert_eq!(outcome.run.found_in, State::Sealed);
    assert!(outcome.cleaned);
    assert_eq!(report.unreadable.len(), 1);
}
