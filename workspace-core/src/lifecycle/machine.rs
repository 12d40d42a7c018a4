//! [`Lifecycle`]: the state machine of one run, journaled before every transition.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use super::{
    FailureCause, Operation, OperationName, Origin, Refusal, State, StateName, Timeouts, next_state,
};
use crate::RunId;
use crate::journal::{Journal, JournalError, TornTail};

/// One journal record of the lifecycle: the operation and the states around it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transition {
    /// What was asked.
    pub operation: Operation,
    /// The state before.
    pub from: State,
    /// The state after.
    pub to: State,
}

/// Proof that a run may be cleaned up: its evidence export has been attempted.
///
/// Only [`Lifecycle::clean_up`] makes one (the field is private), and only after
/// the transition table allowed `CleanUp`. Boundary calls that delete a run's data
/// (`SourceBoundary::release`, `FilesystemBoundary::release`,
/// `RecoveryHooks::clean_up`) take it as a parameter, so "cleanup before export"
/// does not compile rather than being a convention.
#[derive(Debug)]
pub struct CleanupPermit {
    run_id: RunId,
}

impl CleanupPermit {
    /// The run the permit is for; an implementation refuses a permit of another run.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// `Ok` when the permit is for `run`: the one check every boundary that
    /// removes something makes before it does.
    pub fn check(&self, run: &RunId) -> Result<(), WrongPermit> {
        if &self.run_id == run {
            Ok(())
        } else {
            Err(WrongPermit {
                permit_for: self.run_id.clone(),
                run: run.clone(),
            })
        }
    }
}

/// A cleanup permit shown for another run than the one it was issued for.
#[derive(Debug, thiserror::Error)]
#[error("the cleanup permit is for run {permit_for}, not {run}")]
pub struct WrongPermit {
    /// The run the permit is for.
    pub permit_for: RunId,
    /// The run it was shown for.
    pub run: RunId,
}

/// Why a lifecycle operation did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LifecycleError {
    /// The operation is not legal in the current state; nothing changed.
    #[error("run {run_id}: cannot {operation} while {state}: {refusal}")]
    Illegal {
        /// The run.
        run_id: RunId,
        /// The state it is in.
        state: StateName,
        /// The operation attempted.
        operation: OperationName,
        /// Why not.
        refusal: Refusal,
    },
    /// The transition could not be made durable, so it did not take effect.
    #[error("run {run_id}: the journal refused the transition to {to}")]
    Journal {
        /// The run.
        run_id: RunId,
        /// The state that was not entered.
        to: StateName,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
    /// Opening or replaying a journal failed.
    #[error("run {run_id}: cannot open its journal")]
    Open {
        /// The run.
        run_id: RunId,
        /// The journal's error.
        #[source]
        source: JournalError,
    },
    /// A journal record does not follow from the one before: the journal cannot be
    /// trusted to say what the run did.
    #[error("run {run_id}: journal record {seq} is not a legal transition from {from}")]
    Replay {
        /// The run.
        run_id: RunId,
        /// The offending record.
        seq: u64,
        /// The state replay had reached.
        from: StateName,
    },
}

/// The lifecycle of one run.
///
/// Every verb checks its transition against the table ([`next_state`]) first, then
/// appends the transition to the run's journal and syncs it, and only then changes
/// the state. A refused or unjournaled transition leaves the state unchanged.
///
/// ```
/// use workspace_core::RunId;
/// use workspace_core::lifecycle::{Lifecycle, Origin, StateName, Timeouts};
///
/// let dir = tempfile::tempdir().unwrap();
/// let run = RunId::new("run-1").unwrap();
/// let mut life = Lifecycle::create(dir.path().join("run-1.jsonl"), run, Timeouts::default()).unwrap();
/// life.admit().unwrap();
/// // Cleanup before export is refused by the type's rules, not by convention.
/// assert!(life.clean_up().is_err());
/// life.provision(Origin::Fresh).unwrap();
/// assert_eq!(life.state().name(), StateName::Provisioning);
/// ```
pub struct Lifecycle {
    run_id: RunId,
    state: State,
    /// How many times the run has entered `Exporting`.
    export_attempts: u32,
    /// Whether an export ever finished (`Exported` was entered).
    export_completed: bool,
    entered: Instant,
    timeouts: Timeouts,
    journal: Journal<Transition>,
    observer: Option<TransitionObserver>,
}

/// Called after each transition is journaled, with the run and its new state
/// (e.g. to show progress). It runs on the caller's task: keep it short.
pub type TransitionObserver = std::sync::Arc<dyn Fn(&RunId, &State) + Send + Sync>;

impl std::fmt::Debug for Lifecycle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Lifecycle")
            .field("run_id", &self.run_id)
            .field("state", &self.state)
            .field("export_attempts", &self.export_attempts)
            .field("export_completed", &self.export_completed)
            .field("timeouts", &self.timeouts)
            .field("journal", &self.journal)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}

impl Lifecycle {
    /// Calls `observer` after every later transition.
    pub fn observe(&mut self, observer: TransitionObserver) {
        self.observer = Some(observer);
    }

    /// Starts the lifecycle of a new run in `Requested`, with a new journal at
    /// `journal_path` that this process holds locked while the value lives.
    ///
    /// # Ambient authority
    /// `journal_path` is a host path, used as given.
    pub fn create(
        journal_path: impl AsRef<Path>,
        run_id: RunId,
        timeouts: Timeouts,
    ) -> Result<Self, LifecycleError> {
        let journal = Journal::create(journal_path, run_id.clone()).map_err(|source| {
            LifecycleError::Open {
                run_id: run_id.clone(),
                source,
            }
        })?;
        tracing::info!(run_id = %run_id, state = %StateName::Requested, "run requested");
        Ok(Self {
            run_id,
            state: State::Requested,
            export_attempts: 0,
            export_completed: false,
            entered: Instant::now(),
            timeouts,
            journal,
            observer: None,
        })
    }

    /// Takes over the run of a dead runner: locks its journal, replays every record
    /// (each must be a legal transition from the one before) and continues from the
    /// state reached. A torn last line is truncated and returned.
    ///
    /// # Ambient authority
    /// `journal_path` is a host path, used as given.
    pub fn recover(
        journal_path: impl AsRef<Path>,
        run_id: RunId,
        timeouts: Timeouts,
    ) -> Result<(Self, Option<TornTail>), LifecycleError> {
        let (journal, read) =
            Journal::<Transition>::open_for_recovery(journal_path, run_id.clone()).map_err(
                |source| LifecycleError::Open {
                    run_id: run_id.clone(),
                    source,
                },
            )?;
        let mut state = State::Requested;
        let mut export_attempts = 0u32;
        let mut export_completed = false;
        for record in &read.records {
            let transition = &record.event;
            let legal = transition.from == state
                && next_state(&state, export_attempts > 0, &transition.operation).as_ref()
                    == Ok(&transition.to);
            if !legal {
                return Err(LifecycleError::Replay {
                    run_id,
                    seq: record.seq,
                    from: state.name(),
                });
            }
            export_attempts += u32::from(transition.to == State::Exporting);
            export_completed |= transition.to == State::Exported;
            state = transition.to.clone();
        }
        tracing::info!(run_id = %run_id, state = %state.name(), "run taken over for recovery");
        let life = Self {
            run_id,
            state,
            export_attempts,
            export_completed,
            entered: Instant::now(),
            timeouts,
            journal,
            observer: None,
        };
        Ok((life, read.torn_tail))
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The current state.
    pub fn state(&self) -> &State {
        &self.state
    }

    /// Whether evidence export has been attempted (the run has entered `Exporting`).
    pub fn export_attempted(&self) -> bool {
        self.export_attempts > 0
    }

    /// How many times the run has entered `Exporting` (a failed export may be
    /// retried, by the runner or by recovery).
    pub fn export_attempts(&self) -> u32 {
        self.export_attempts
    }

    /// Whether an export has ever finished (the run has entered `Exported`).
    pub fn export_completed(&self) -> bool {
        self.export_completed
    }

    /// The timeouts in force.
    pub fn timeouts(&self) -> &Timeouts {
        &self.timeouts
    }

    /// Changes the timeouts (e.g. a command's wall time from the contract); the
    /// current state's deadline moves with it.
    pub fn set_timeouts(&mut self, timeouts: Timeouts) {
        self.timeouts = timeouts;
    }

    /// When the current state times out, if it is transient.
    pub fn deadline(&self) -> Option<Instant> {
        self.timeouts
            .limit(self.state.name())
            .map(|limit| self.entered + limit)
    }

    /// Applies `op`: checks it, journals it (synced where it must survive a
    /// power cut), then takes it into effect.
    pub fn apply(&mut self, op: Operation) -> Result<&State, LifecycleError> {
        let next = next_state(&self.state, self.export_attempted(), &op).map_err(|refusal| {
            tracing::warn!(run_id = %self.run_id, state = %self.state.name(), operation = %op.name(), %refusal, "transition refused");
            LifecycleError::Illegal {
                run_id: self.run_id.clone(),
                state: self.state.name(),
                operation: op.name(),
                refusal,
            }
        })?;
        let to = next.name();
        let transition = Transition {
            operation: op,
            from: self.state.clone(),
            to: next,
        };
        let appended = if transition.operation.must_survive_power_loss() {
            self.journal.append(&transition)
        } else {
            self.journal.append_unsynced(&transition)
        };
        appended.map_err(|source| LifecycleError::Journal {
            run_id: self.run_id.clone(),
            to,
            source,
        })?;
        tracing::info!(run_id = %self.run_id, from = %transition.from.name(), to = %to, operation = %transition.operation.name(), "transition");
        self.export_attempts += u32::from(to == StateName::Exporting);
        self.export_completed |= to == StateName::Exported;
        self.state = transition.to;
        self.entered = Instant::now();
        if let Some(observer) = &self.observer {
            observer(&self.run_id, &self.state);
        }
        Ok(&self.state)
    }

    /// Fails the run if its transient state has outlived its limit at `now`.
    /// Returns whether it did.
    pub fn check_timeout_at(&mut self, now: Instant) -> Result<bool, LifecycleError> {
        let state = self.state.name();
        match self.timeouts.limit(state) {
            Some(limit) if now.saturating_duration_since(self.entered) >= limit => {
                self.fail(FailureCause::Timeout {
                    state,
                    limit_ms: duration_ms(limit),
                })?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// [`check_timeout_at`](Self::check_timeout_at) now.
    pub fn check_timeout(&mut self) -> Result<bool, LifecycleError> {
        self.check_timeout_at(Instant::now())
    }

    /// Requested -> Waiting.
    pub fn admit(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Admit)
    }
    /// Waiting -> Provisioning: capacity was granted.
    pub fn provision(&mut self, origin: Origin) -> Result<&State, LifecycleError> {
        self.apply(Operation::Provision { origin })
    }
    /// Provisioning -> StartingServices.
    pub fn start_services(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::StartServices)
    }
    /// StartingServices -> Sealed.
    pub fn seal(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Seal)
    }
    /// Sealed -> Suspended.
    pub fn suspend(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Suspend)
    }
    /// Suspended or Detached -> Provisioning(Resumed).
    pub fn resume(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Resume)
    }
    /// Sealed -> Detached.
    pub fn detach(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Detach)
    }
    /// Detached -> Sealed.
    pub fn attach(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Attach)
    }
    /// Sealed -> Draining.
    pub fn drain(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Drain)
    }
    /// Draining or Failed -> Exporting.
    pub fn export(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::Export)
    }
    /// Exporting -> Exported.
    pub fn finish_export(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::FinishExport)
    }
    /// Exported (or Failed after an export attempt) -> CleaningUp. Returns the
    /// [`CleanupPermit`] that the boundaries' destructive calls require: holding one
    /// proves the transition table allowed cleanup, so export was attempted.
    pub fn clean_up(&mut self) -> Result<CleanupPermit, LifecycleError> {
        self.apply(Operation::CleanUp)?;
        Ok(CleanupPermit {
            run_id: self.run_id.clone(),
        })
    }
    /// CleaningUp -> Cleaned.
    pub fn finish_clean_up(&mut self) -> Result<&State, LifecycleError> {
        self.apply(Operation::FinishCleanUp)
    }
    /// Any live state -> Failed.
    pub fn fail(&mut self, cause: FailureCause) -> Result<&State, LifecycleError> {
        self.apply(Operation::Fail { cause })
    }
}

fn duration_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
