//! Core's own steps of a run (not a boundary's), and how one failed.
//!
//! Concluding or recovering a run goes through every step it can even when one
//! fails (a failed export must not keep the run from being cleaned up), so the
//! failures are collected: each a [`StepError`] that keeps its cause, together
//! a [`StepErrors`]. What a record keeps of them (the journal's failure cause,
//! `outcome.json`, a run's report) is a [`StepFailure`] per step: the step,
//! typed, and its cause as text.

use std::fmt;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::boundary::BoundaryKind;

/// A step of core's own work on a run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "step", rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RunnerStep {
    /// Checking the contract against the stack.
    CheckContract,
    /// Reserving the run's capacity.
    Admit,
    /// Leasing the run's names and ports (`process.leases`).
    Lease,
    /// Journaling a lifecycle transition.
    Journal,
    /// Writing or reading a file of the run's private state.
    RunState {
        /// The file or directory.
        path: PathBuf,
    },
    /// A step asked of the run in a state that does not allow it.
    Order,
    /// Writing the evidence bundle.
    Evidence,
    /// Writing a file of the evidence bundle.
    WriteEvidence {
        /// The file, as named in the bundle.
        file: String,
    },
    /// Taking the run's patch from the promotion boundary.
    ExportPatch,
    /// Promoting the run's patch.
    Promote,
    /// Copying the journal into the evidence.
    CopyJournal,
    /// Sealing the evidence bundle.
    SealEvidence,
    /// Asking the run's preview endpoints (`preview.json`).
    Preview,
    /// Counting the run's network attempts.
    Network,
    /// Stopping one of the run's services.
    StopService {
        /// The service.
        name: String,
    },
    /// Exporting the services' records and logs.
    ExportServices,
    /// Publishing a service template into the host's store.
    PublishTemplate,
    /// Exporting what background processes wrote after their command ended.
    ExportLateOutput,
    /// Stopping every process of the run and proving them gone.
    Teardown,
    /// Reading what the run's capped disk holds.
    DiskUsage,
    /// Finding and stopping the processes of a run whose runner died.
    Reap,
    /// Releasing what a boundary made for the run.
    Release {
        /// The boundary.
        boundary: BoundaryKind,
    },
    /// Removing the runner's own files of the run.
    RemoveFile {
        /// The file or directory.
        path: PathBuf,
    },
    /// Cleaning up the run (after its processes are proven gone).
    CleanUp,
}

impl fmt::Display for RunnerStep {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::CheckContract => f.write_str("checking the contract"),
            Self::Admit => f.write_str("reserving capacity"),
            Self::Lease => f.write_str("leasing process.leases"),
            Self::Journal => f.write_str("journaling a transition"),
            Self::RunState { path } => write!(f, "using {}", path.display()),
            Self::Order => f.write_str("taking a step the run's state does not allow"),
            Self::Evidence => f.write_str("writing the evidence"),
            Self::WriteEvidence { file } => write!(f, "writing {file}"),
            Self::ExportPatch => f.write_str("exporting the patch"),
            Self::Promote => f.write_str("promoting"),
            Self::CopyJournal => f.write_str("copying the journal"),
            Self::SealEvidence => f.write_str("sealing the bundle"),
            Self::Preview => f.write_str("asking the preview endpoints"),
            Self::Network => f.write_str("counting network attempts"),
            Self::StopService { name } => write!(f, "stopping service {name:?}"),
            Self::ExportServices => f.write_str("exporting the services"),
            Self::PublishTemplate => f.write_str("publishing a service template"),
            Self::ExportLateOutput => f.write_str("exporting late output"),
            Self::Teardown => f.write_str("teardown"),
            Self::DiskUsage => f.write_str("reading the run's disk usage"),
            Self::Reap => f.write_str("reaping"),
            Self::Release { boundary } => {
                write!(f, "releasing the {boundary} boundary's resources")
            }
            Self::RemoveFile { path } => write!(f, "removing {}", path.display()),
            Self::CleanUp => f.write_str("cleaning up"),
        }
    }
}

/// A step of core's that failed, with its cause.
#[derive(Debug, thiserror::Error)]
#[error("{step}")]
pub struct StepError {
    /// The step.
    pub step: RunnerStep,
    /// Why it failed.
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

impl StepError {
    /// `step` failed because of `source` (an error, or a reason in words).
    pub fn new(
        step: RunnerStep,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) -> Self {
        Self {
            step,
            source: source.into(),
        }
    }

    /// What a record keeps of it.
    pub fn failure(&self) -> StepFailure {
        StepFailure {
            step: self.step.clone(),
            cause: crate::error_chain(self.source.as_ref()),
        }
    }
}

/// The steps that failed while a run was concluded or recovered, in order.
#[derive(Debug, Default)]
pub struct StepErrors(pub Vec<StepError>);

impl fmt::Display for StepErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&describe(&self.failures()))
    }
}

impl std::error::Error for StepErrors {}

impl StepErrors {
    /// Adds that `step` failed because of `source`.
    pub fn push(
        &mut self,
        step: RunnerStep,
        source: impl Into<Box<dyn std::error::Error + Send + Sync>>,
    ) {
        self.0.push(StepError::new(step, source));
    }

    /// Whether no step failed.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Moves `other`'s failures after these.
    pub fn append(&mut self, other: &mut StepErrors) {
        self.0.append(&mut other.0);
    }

    /// What a record keeps of them.
    pub fn failures(&self) -> Vec<StepFailure> {
        self.0.iter().map(StepError::failure).collect()
    }
}

/// What a record keeps of a failed step: the step and its cause in words.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StepFailure {
    /// The step.
    #[serde(flatten)]
    pub step: RunnerStep,
    /// Its cause and the causes of that, joined by `": "`.
    pub cause: String,
}

impl fmt::Display for StepFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.step, self.cause)
    }
}

/// `failures` in one line: each as `step: cause`, joined by `"; "`.
pub fn describe(failures: &[StepFailure]) -> String {
    let lines: Vec<String> = failures.iter().map(StepFailure::to_string).collect();
    lines.join("; ")
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;
    use crate::lifecycle::FailureCause;

    #[test]
    fn each_failed_step_keeps_its_cause_and_is_named_in_the_journal_as_core_s() {
        let mut errors = StepErrors::default();
        let denied = std::io::Error::new(std::io::ErrorKind::PermissionDenied, "denied");
        errors.push(
            RunnerStep::WriteEvidence {
                file: "diff.patch".into(),
            },
            denied,
        );
        errors.push(
            RunnerStep::Release {
                boundary: BoundaryKind::Source,
            },
            "busy",
        );
        // The typed cause is still there for a caller to inspect.
        let first = &errors.0[0];
        let io = first.source.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::PermissionDenied);
        assert_eq!(
            errors.to_string(),
            "writing diff.patch: denied; releasing the source boundary's resources: busy"
        );

        let cause = FailureCause::Runner {
            failed: errors.failures(),
        };
        let json = serde_json::to_value(&cause).unwrap();
        assert_eq!(json["kind"], "runner");
        assert_eq!(json["failed"][0]["step"], "write-evidence");
        assert_eq!(json["failed"][0]["file"], "diff.patch");
        assert_eq!(json["failed"][1]["boundary"], "source");
        let read: FailureCause = serde_json::from_value(json).unwrap();
        assert_eq!(read, cause);
        assert_eq!(read.to_string(), errors.to_string());
    }
}
