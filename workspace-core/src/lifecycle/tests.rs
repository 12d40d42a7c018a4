//! Table-driven tests of every (state, operation) pair, on the real journaled machine.

use std::time::{Duration, Instant};

use tempfile::TempDir;

use super::*;
use crate::RunId;
use crate::boundary::BoundaryKind;

fn sample_cause() -> FailureCause {
    FailureCause::Boundary {
        boundary: BoundaryKind::Source,
        message: "revision not found".into(),
    }
}

fn sample_op(name: OperationName) -> Operation {
    match name {
        OperationName::Admit => Operation::Admit,
        OperationName::Provision => Operation::Provision {
            origin: Origin::Fresh,
        },
        OperationName::StartServices => Operation::StartServices,
        OperationName::Seal => Operation::Seal,
        OperationName::Suspend => Operation::Suspend,
        OperationName::Resume => Operation::Resume,
        OperationName::Detach => Operation::Detach,
        OperationName::Attach => Operation::Attach,
        OperationName::Drain => Operation::Drain,
        OperationName::Export => Operation::Export,
        OperationName::FinishExport => Operation::FinishExport,
        OperationName::CleanUp => Operation::CleanUp,
        OperationName::FinishCleanUp => Operation::FinishCleanUp,
        OperationName::Fail => Operation::Fail {
            cause: sample_cause(),
        },
    }
}

const ALL_OPS: [OperationName; 14] = [
    OperationName::Admit,
    OperationName::Provision,
    OperationName::StartServices,
    OperationName::Seal,
    OperationName::Suspend,
    OperationName::Resume,
    OperationName::Detach,
    OperationName::Attach,
    OperationName::Drain,
    OperationName::Export,
    OperationName::FinishExport,
    OperationName::CleanUp,
    OperationName::FinishCleanUp,
    OperationName::Fail,
];

/// The operations that lead to each state from `Requested`; `Failed` is reached
/// from `Sealed`, once before and once after an export attempt.
fn path_to(state: StateName, failed_after_export: bool) -> Vec<Operation> {
    use Operation as O;
    let to_sealed = vec![
        O::Admit,
        O::Provision {
            origin: Origin::Fresh,
        },
        O::StartServices,
        O::Seal,
    ];
    let mut ops = match state {
        StateName::Requested => vec![],
        StateName::Waiting => vec![O::Admit],
        StateName::Provisioning => vec![
            O::Admit,
            O::Provision {
                origin: Origin::Fresh,
            },
        ],
        StateName::StartingServices => to_sealed[..3].to_vec(),
        _ => to_sealed,
    };
    let tail: Vec<Operation> = match state {
        StateName::Suspended => vec![O::Suspend],
        StateName::Detached => vec![O::Detach],
        StateName::Draining => vec![O::Drain],
        StateName::Exporting => vec![O::Drain, O::Export],
        StateName::Exported => vec![O::Drain, O::Export, O::FinishExport],
        StateName::CleaningUp => vec![O::Drain, O::Export, O::FinishExport, O::CleanUp],
        StateName::Cleaned => vec![
            O::Drain,
            O::Export,
            O::FinishExport,
            O::CleanUp,
            O::FinishCleanUp,
        ],
        StateName::Failed if failed_after_export => {
            vec![
                O::Drain,
                O::Export,
                O::Fail {
                    cause: sample_cause(),
                },
            ]
        }
        StateName::Failed => vec![O::Fail {
            cause: sample_cause(),
        }],
        _ => vec![],
    };
    ops.extend(tail);
    ops
}

fn lifecycle_at(dir: &TempDir, state: StateName, failed_after_export: bool) -> Lifecycle {
    let run_id = RunId::generate();
    let path = dir.path().join(format!("{run_id}.jsonl"));
    let mut life = Lifecycle::create(path, run_id, Timeouts::default()).expect("create");
    for op in path_to(state, failed_after_export) {
        life.apply(op).expect("path to state");
    }
    assert_eq!(life.state().name(), state);
    life
}

/// The expected outcome of `op` in `state`: the next state, or the refusal.
fn expected(
    state: StateName,
    export_attempted: bool,
    op: OperationName,
) -> Result<StateName, Refusal> {
    use OperationName as O;
    use StateName as S;
    match (state, op) {
        (S::Cleaned, _) => Err(Refusal::Finished),
        (S::Failed, O::Fail) => Err(Refusal::AlreadyFailed),
        (_, O::Fail) => Ok(S::Failed),
        (S::Requested, O::Admit) => Ok(S::Waiting),
        (S::Waiting, O::Provision) => Ok(S::Provisioning),
        (S::Provisioning, O::StartServices) => Ok(S::StartingServices),
        (S::StartingServices, O::Seal) => Ok(S::Sealed),
        (S::Sealed, O::Suspend) => Ok(S::Suspended),
        (S::Suspended | S::Detached, O::Resume) => Ok(S::Provisioning),
        (S::Sealed, O::Detach) => Ok(S::Detached),
        (S::Detached, O::Attach) => Ok(S::Sealed),
        (S::Sealed, O::Drain) => Ok(S::Draining),
        (S::Draining | S::Failed, O::Export) => Ok(S::Exporting),
        (S::Exporting, O::FinishExport) => Ok(S::Exported),
        (S::Exported, O::CleanUp) => Ok(S::CleaningUp),
        (S::Failed, O::CleanUp) if export_attempted => Ok(S::CleaningUp),
        (_, O::CleanUp) if !export_attempted => Err(Refusal::EvidenceNotExported),
        (S::CleaningUp, O::FinishCleanUp) => Ok(S::Cleaned),
        _ => Err(Refusal::NotFromHere),
    }
}

#[test]
fn every_state_operation_pair_follows_the_table() {
    let dir = TempDir::new().expect("tempdir");
    let mut legal = 0;
    let mut refused = 0;
    for state in StateName::ALL {
        let failed_variants: &[bool] = if state == StateName::Failed {
            &[false, true]
        } else {
            &[false]
        };
        for &after_export in failed_variants {
            for op in ALL_OPS {
                let mut life = lifecycle_at(&dir, state, after_export);
                let before = life.state().clone();
                let export_attempted = life.export_attempted();
                let want = expected(state, export_attempted, op);
                match (life.apply(sample_op(op)), want) {
                    (Ok(next), Ok(want)) => {
                        assert_eq!(next.name(), want, "{state:?} --{op:?}-->");
                        legal += 1;
                    }
                    (
                        Err(LifecycleError::Illegal {
                            state: s,
                            operation,
                            refusal,
                            ..
                        }),
                        Err(want),
                    ) => {
                        assert_eq!((s, operation, refusal), (state, op, want));
                        assert_eq!(
                            life.state(),
                            &before,
                            "a refused operation changed the state"
                        );
                        refused += 1;
                    }
                    (got, want) => panic!("{state:?} --{op:?}--> got {got:?}, want {want:?}"),
                }
            }
        }
    }
    // 13 states + 1 extra Failed variant, 14 operations each.
    assert_eq!(legal + refused, 14 * 14);
    assert!(
        legal >= 23 && refused >= 150,
        "legal {legal}, refused {refused}"
    );
}

#[test]
fn cleanup_before_export_is_refused_in_every_state_before_export() {
    let dir = TempDir::new().expect("tempdir");
    for state in [
        StateName::Requested,
        StateName::Waiting,
        StateName::Provisioning,
        StateName::StartingServices,
        StateName::Sealed,
        StateName::Suspended,
        StateName::Detached,
        StateName::Draining,
        StateName::Failed,
    ] {
        let mut life = lifecycle_at(&dir, state, false);
        let err = life.clean_up().expect_err("cleanup before export");
        assert!(
            matches!(
                err,
                LifecycleError::Illegal {
                    refusal: Refusal::EvidenceNotExported,
                    ..
                }
            ),
            "{state:?}: {err}"
        );
        assert!(
            err.to_string().contains("evidence has not been exported"),
            "{err}"
        );
    }
}

#[test]
fn every_failure_still_exports_then_cleans_up() {
    let dir = TempDir::new().expect("tempdir");
    for state in StateName::ALL {
        if matches!(state, StateName::Cleaned | StateName::Failed) {
            continue;
        }
        let mut life = lifecycle_at(&dir, state, false);
        life.fail(sample_cause()).expect("fail");
        assert_eq!(
            life.state(),
            &State::Failed {
                at: state,
                cause: sample_cause()
            }
        );
        life.export().expect("export after failure");
        life.finish_export().expect("finish export");
        life.clean_up().expect("clean up");
        life.finish_clean_up().expect("cleaned");
        assert_eq!(life.state(), &State::Cleaned);
    }
}

#[test]
fn a_failed_export_may_still_be_cleaned_up() {
    let dir = TempDir::new().expect("tempdir");
    let mut life = lifecycle_at(&dir, StateName::Exporting, false);
    life.fail(sample_cause()).expect("export failed");
    life.clean_up()
        .expect("export was attempted, cleanup is allowed");
    life.finish_clean_up().expect("cleaned");
}

#[test]
fn transient_states_time_out_into_failed() {
    let dir = TempDir::new().expect("tempdir");
    let timeouts = Timeouts::default();
    for state in StateName::ALL {
        let mut life = lifecycle_at(&dir, state, false);
        match timeouts.limit(state) {
            Some(limit) => {
                assert!(state.is_transient());
                let deadline = life.deadline().expect("transient state has a deadline");
                // Not yet: a moment before the deadline does not fail the run.
                assert!(
                    !life
                        .check_timeout_at(deadline - Duration::from_millis(1))
                        .expect("check")
                );
                assert!(life.check_timeout_at(deadline).expect("check"));
                assert_eq!(
                    life.state(),
                    &State::Failed {
                        at: state,
                        cause: FailureCause::Timeout {
                            state,
                            limit_ms: u64::try_from(limit.as_millis()).expect("fits"),
                        }
                    }
                );
                // And the failure path is open.
                life.export().expect("export after timeout");
            }
            None => {
                assert!(!state.is_transient());
                assert!(life.deadline().is_none());
                let far = Instant::now() + Duration::from_secs(365 * 24 * 3600);
                assert!(!life.check_timeout_at(far).expect("check"));
            }
        }
    }
}

#[test]
fn the_journal_replays_to_the_same_state_and_export_flag() {
    let dir = TempDir::new().expect("tempdir");
    for state in StateName::ALL {
        for after_export in [false, true] {
            if after_export && state != StateName::Failed {
                continue;
            }
            let life = lifecycle_at(&dir, state, after_export);
            let run_id = life.run_id().clone();
            let want = (life.state().clone(), life.export_attempted());
            let path = dir.path().join(format!("{run_id}.jsonl"));
            // A live lifecycle holds the journal: recovery must not take it.
            assert!(Lifecycle::recover(&path, run_id.clone(), Timeouts::default()).is_err());
            drop(life);
            let (recovered, torn) =
                Lifecycle::recover(&path, run_id, Timeouts::default()).expect("recover");
            assert!(torn.is_none());
            assert_eq!(
                (recovered.state().clone(), recovered.export_attempted()),
                want
            );
        }
    }
}

#[test]
fn a_journal_with_an_illegal_transition_is_refused() {
    let dir = TempDir::new().expect("tempdir");
    let run_id = RunId::new("run-tampered").expect("id");
    let path = dir.path().join("run-tampered.jsonl");
    {
        let mut journal =
            crate::journal::Journal::<Transition>::create(&path, run_id.clone()).expect("journal");
        journal
            .append(&Transition {
                operation: Operation::CleanUp,
                from: State::Requested,
                to: State::CleaningUp,
            })
            .expect("append");
    }
    let err = Lifecycle::recover(&path, run_id, Timeouts::default()).expect_err("illegal record");
    assert!(
        matches!(
            err,
            LifecycleError::Replay {
                seq: 0,
                from: StateName::Requested,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn refused_operations_name_state_and_operation() {
    let dir = TempDir::new().expect("tempdir");
    let mut life = lifecycle_at(&dir, StateName::Requested, false);
    let err = life.detach().expect_err("detach before seal");
    let text = err.to_string();
    assert!(
        text.contains("requested") && text.contains("detach"),
        "{text}"
    );
}
