//! Crash recovery: finish every run whose runner died.
//!
//! A runner holds its run's journal locked while it lives (see [`crate::journal`]).
//! [`recover`] walks the journal directory, skips journals a live process holds
//! and runs parked in `Suspended` (nothing of them runs; they wait for a resume),
//! and for every other unfinished run: marks it `Failed { cause: RunnerLost }`
//! (unless it had already failed), lets the backends reap what the run left
//! running ([`RecoveryHooks::reap`]: processes, mounts, cgroups, leases), exports
//! what evidence exists unless an export already completed, and cleans up. Each
//! step is journaled like any other transition, so recovery itself can crash and be
//! run again; hooks must therefore be idempotent.
//!
//! Two failures stop short of cleanup and leave the run for the next recovery:
//! a failed reap (deleting a run's files while its processes or mounts may still be
//! there could reach through a live mount into the host), and a failed export while
//! fewer than [`MAX_EXPORT_ATTEMPTS`] were made (evidence is worth a retry; after
//! that the run is cleaned up without it, and the report says so).

use std::path::{Path, PathBuf};

use async_trait::async_trait;
use serde::Serialize;

use crate::RunId;
use crate::boundary::BoundaryError;
use crate::error_chain;
use crate::journal::{self, TornTail};
use crate::lifecycle::{CleanupPermit, FailureCause, Lifecycle, LifecycleError, State, Timeouts};
use crate::step::{RunnerStep, StepErrors, StepFailure};

/// How many export attempts a run gets, over all recoveries, before it is cleaned
/// up without a complete export.
pub const MAX_EXPORT_ATTEMPTS: u32 = 3;

/// The directory under the runtime directory that holds one journal per run.
pub const JOURNAL_DIR: &str = "journals";

/// Where the journal of `run_id` lives under `runtime_dir`.
pub fn journal_path(runtime_dir: &Path, run_id: &RunId) -> PathBuf {
    runtime_dir
        .join(JOURNAL_DIR)
        .join(format!("{run_id}.jsonl"))
}

/// Why a step of recovering a run failed: a boundary's failure, or one of
/// recovery's own (named as such, not as a boundary's).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryStepError {
    /// A boundary failed.
    #[error(transparent)]
    Boundary(#[from] BoundaryError),
    /// Teardown reported processes, mounts or cgroups of the run still there.
    #[error("still present after teardown: {leaks}")]
    Leaked {
        /// What is left, in words.
        leaks: String,
    },
    /// A record of the run could not be read.
    #[error("reading the run's record {}", .path.display())]
    Record {
        /// The record.
        path: PathBuf,
        /// Why it could not be read.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// Exporting the evidence failed, at each of these steps.
    #[error("exporting the evidence")]
    Export(#[source] StepErrors),
    /// Removing the run's own state from its run directory failed.
    #[error("removing the run's state from {}", .run_dir.display())]
    State {
        /// The run directory.
        run_dir: PathBuf,
        /// Each removal that failed.
        #[source]
        problems: StepErrors,
    },
}

impl RecoveryStepError {
    /// The failure cause the run gets for it: the boundary's, or the steps
    /// of core's own that failed.
    pub fn failure_cause(&self) -> FailureCause {
        let failed = match self {
            Self::Boundary(e) => {
                return FailureCause::Boundary {
                    boundary: e.boundary,
                    message: error_chain(e),
                };
            }
            Self::Export(steps)
            | Self::State {
                problems: steps, ..
            } => steps.failures(),
            Self::Leaked { leaks } => vec![StepFailure {
                step: RunnerStep::Reap,
                cause: format!("still present: {leaks}"),
            }],
            Self::Record { path, source } => vec![StepFailure {
                step: RunnerStep::RunState { path: path.clone() },
                cause: error_chain(source.as_ref()),
            }],
        };
        FailureCause::Runner { failed }
    }
}

/// What the backends do for a run whose runner died. Every method must be
/// idempotent: recovery may itself be interrupted and run again.
#[async_trait]
pub trait RecoveryHooks: Send + Sync {
    /// Kills whatever the run left running (its whole process tree), removes its
    /// mounts and cgroups and releases its leases.
    async fn reap(&self, run: &LostRun) -> Result<(), RecoveryStepError>;
    /// Exports whatever evidence exists, with the run's failure cause.
    async fn export(&self, run: &LostRun) -> Result<(), RecoveryStepError>;
    /// Removes the run's checkout and private state (never its evidence). `permit`
    /// proves its export was attempted.
    async fn clean_up(
        &self,
        run: &LostRun,
        permit: &CleanupPermit,
    ) -> Result<(), RecoveryStepError>;
}

/// A run found without a live runner.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LostRun {
    /// The run.
    pub run_id: RunId,
    /// Its journal.
    pub journal_path: PathBuf,
    /// The state its journal had reached when recovery found it.
    pub found_in: State,
    /// A partial last journal line the dead runner left, now truncated.
    pub torn_tail: Option<TornTail>,
}

/// What recovery did, run by run.
#[derive(Debug, Default, Serialize)]
pub struct RecoveryReport {
    /// Runs taken over and finished (or attempted).
    pub recovered: Vec<RecoveredRun>,
    /// Runs a live runner still holds: left alone.
    pub live: Vec<RunId>,
    /// Runs already cleaned: nothing to do.
    pub finished: Vec<RunId>,
    /// Runs parked in `Suspended`: nothing of them runs, their checkout waits for
    /// a resume or a destroy. Left alone.
    pub suspended: Vec<RunId>,
    /// Runs left `Detached`: their sandbox is live (or, after a reboot, gone) and
    /// waits for a runner to attach or destroy it. Left alone.
    pub detached: Vec<RunId>,
    /// Journals that could not be used, with the reason.
    pub unreadable: Vec<(PathBuf, String)>,
    /// Runs the caller left out ([`recover_where`]): not looked at.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<RunId>,
}

/// The outcome for one recovered run.
#[derive(Debug, Serialize)]
pub struct RecoveredRun {
    /// Where the run was found.
    pub run: LostRun,
    /// Whether evidence was exported now (false when a complete export existed).
    pub exported_now: bool,
    /// Whether the run reached `Cleaned`.
    pub cleaned: bool,
    /// Every step that failed, and why cleanup was held back if it was, in order.
    /// A run that is not `cleaned` is left for the next recovery.
    pub errors: Vec<StepFailure>,
}

/// Why recovery could not even start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RecoveryError {
    /// The journal directory could not be listed.
    #[error("cannot list the journal directory {path}")]
    ListJournals {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Finds every unfinished run under `runtime_dir` whose runner is gone and finishes it.
///
/// Journal I/O here is blocking (it fsyncs); from a latency-sensitive runtime, call
/// this from a task that may block.
///
/// # Ambient authority
/// Reads and locks the journals under `runtime_dir/journals`.
pub async fn recover(
    runtime_dir: &Path,
    hooks: &dyn RecoveryHooks,
    timeouts: Timeouts,
) -> Result<RecoveryReport, RecoveryError> {
    recover_where(runtime_dir, hooks, timeouts, &|_| true).await
}

/// [`recover`], for the runs `wanted` says yes to (those of one backend, say);
/// the others are only listed ([`RecoveryReport::left_out`]), their journals
/// not even locked.
///
/// # Ambient authority
/// Reads and locks the journals under `runtime_dir/journals`.
pub async fn recover_where(
    runtime_dir: &Path,
    hooks: &dyn RecoveryHooks,
    timeouts: Timeouts,
    wanted: &(dyn Fn(&RunId) -> bool + Sync),
) -> Result<RecoveryReport, RecoveryError> {
    let dir = runtime_dir.join(JOURNAL_DIR);
    let mut report = RecoveryReport::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(report),
        Err(source) => return Err(RecoveryError::ListJournals { path: dir, source }),
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "jsonl"))
        .collect();
    paths.sort();
    for path in paths {
        let Some(run_id) = path
            .file_stem()
            .and_then(|stem| stem.to_str())
            .and_then(|stem| RunId::new(stem).ok())
        else {
            report
                .unreadable
                .push((path, "the file name is not a run id".into()));
            continue;
        };
        if !wanted(&run_id) {
            report.left_out.push(run_id);
            continue;
        }
        match journal::is_held(&path) {
            Ok(true) => {
                report.live.push(run_id);
                continue;
            }
            Ok(false) => {}
            Err(e) => {
                report.unreadable.push((path, error_chain(&e)));
                continue;
            }
        }
        let (life, torn_tail) = match Lifecycle::recover(&path, run_id.clone(), timeouts) {
            Ok(taken) => taken,
            // A runner that started between the check and the lock is alive after all.
            Err(LifecycleError::Open {
                source: journal::JournalError::Held { .. },
                ..
            }) => {
                report.live.push(run_id);
                continue;
            }
            Err(e) => {
                report.unreadable.push((path, error_chain(&e)));
                continue;
            }
        };
        if life.state() == &State::Cleaned {
            report.finished.push(run_id);
            continue;
        }
        if life.state() == &State::Suspended {
            report.suspended.push(run_id);
            continue;
        }
        if life.state() == &State::Detached {
            report.detached.push(run_id);
            continue;
        }
        let run = LostRun {
            run_id,
            journal_path: path,
            found_in: life.state().clone(),
            torn_tail,
        };
        report
            .recovered
            .push(finish_lost_run(life, run, hooks).await);
    }
    Ok(report)
}

/// Drives one lost run towards `Cleaned`: fail, reap, export (unless an export
/// completed), clean up. Stops early, recording why, when cleanup would be unsafe
/// or premature; the run is then left for the next recovery.
async fn finish_lost_run(
    mut life: Lifecycle,
    run: LostRun,
    hooks: &dyn RecoveryHooks,
) -> RecoveredRun {
    let mut exported_now = false;
    let mut cleaned = false;
    let mut errors = StepErrors::default();
    let result: Result<(), LifecycleError> = async {
        if !matches!(life.state(), State::Failed { .. }) {
            life.fail(FailureCause::RunnerLost)?;
        }
        let reaped = match hooks.reap(&run).await {
            Ok(()) => true,
            Err(e) => {
                errors.push(RunnerStep::Reap, e);
                false
            }
        };
        let mut export_failed = false;
        if !life.export_completed() && life.export_attempts() < MAX_EXPORT_ATTEMPTS {
            life.export()?;
            match hooks.export(&run).await {
                Ok(()) => {
                    life.finish_export()?;
                    exported_now = true;
                }
                Err(e) => {
                    export_failed = true;
                    life.fail(e.failure_cause())?;
                    errors.push(RunnerStep::Evidence, e);
                }
            }
        }
        if !reaped {
            errors.push(
                RunnerStep::CleanUp,
                "held back: the reap failed, the run is left for the next recovery",
            );
            return Ok(());
        }
        if export_failed && life.export_attempts() < MAX_EXPORT_ATTEMPTS {
            errors.push(
                RunnerStep::CleanUp,
                format!(
                    "held back: export attempt {} of {MAX_EXPORT_ATTEMPTS} failed, the run is left for the next recovery",
                    life.export_attempts()
                ),
            );
            return Ok(());
        }
        if !life.export_completed() {
            errors.push(
                RunnerStep::Evidence,
                format!(
                    "incomplete: cleaning up without a complete export after {} attempts",
                    life.export_attempts()
                ),
            );
        }
        let permit = life.clean_up()?;
        match hooks.clean_up(&run, &permit).await {
            Ok(()) => {
                life.finish_clean_up()?;
                cleaned = true;
            }
            Err(e) => {
                life.fail(e.failure_cause())?;
                errors.push(RunnerStep::CleanUp, e);
            }
        }
        Ok(())
    }
    .await;
    if let Err(e) = result {
        errors.push(RunnerStep::Journal, e);
    }
    tracing::info!(run_id = %run.run_id, found_in = %run.found_in.name(), cleaned, "recovered run");
    RecoveredRun {
        run,
        exported_now,
        cleaned,
        errors: errors.failures(),
    }
}

#[cfg(test)]
mod tests;
