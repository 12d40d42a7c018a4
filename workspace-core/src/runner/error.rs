//! Why a run could not be created, or ended without reaching its command.

use std::path::PathBuf;

use crate::RunId;
use crate::boundary::BoundaryError;
use crate::capacity::CapacityError;
use crate::contract::Problems;
use crate::evidence::EvidenceError;
use crate::lifecycle::{FailureCause, LifecycleError};
use crate::step::{RunnerStep, StepFailure};

/// A run that failed, with where its evidence went.
///
/// `evidence` is `None` only when the run was refused before anything was created
/// (an invalid or unsupported contract): such a run leaves nothing behind.
#[derive(Debug, thiserror::Error)]
#[error("run {run_id} failed")]
pub struct RunError {
    /// The run.
    pub run_id: RunId,
    /// Its evidence bundle, exported before cleanup, if one was created.
    pub evidence: Option<PathBuf>,
    /// What went wrong.
    #[source]
    pub kind: Box<RunErrorKind>,
}

impl RunError {
    /// A run refused before anything of it was created or changed.
    pub fn refused(run_id: &RunId, kind: RunErrorKind) -> Self {
        Self {
            run_id: run_id.clone(),
            evidence: None,
            kind: Box::new(kind),
        }
    }
}

/// What went wrong with a run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RunErrorKind {
    /// The contract is invalid; each problem names its field.
    #[error("the contract is invalid: {0}")]
    InvalidContract(Problems),
    /// The stack cannot enforce the contract; each problem names its field.
    #[error("the backends cannot keep the contract: {0}")]
    Unsupported(Problems),
    /// No capacity was granted.
    #[error(transparent)]
    Capacity(#[from] CapacityError),
    /// The run's journal refused or failed a transition.
    #[error(transparent)]
    Lifecycle(#[from] LifecycleError),
    /// The evidence bundle could not be written.
    #[error(transparent)]
    Evidence(#[from] EvidenceError),
    /// A boundary failed.
    #[error(transparent)]
    Boundary(#[from] BoundaryError),
    /// The run failed (timeout, cancel, probe mismatch); evidence was exported.
    #[error("the run failed: {0}")]
    Failed(FailureCause),
    /// A cache prefix, schema name or port could not be leased.
    #[error("process.leases: {0}")]
    Lease(crate::lease::LeaseError),
    /// A file of the run's private state could not be written or read.
    #[error("cannot use {path}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The runtime directory or the evidence root is not, and could not be
    /// made, the runner's alone ([`crate::private_dirs`]); nothing of the run
    /// was made.
    #[error(transparent)]
    PrivateDir(#[from] crate::private_dirs::PrivateDirError),
    /// A service template could not be published into the host's store.
    #[error(transparent)]
    Template(#[from] super::template_store::TemplateError),
    /// The run has ended: nothing of it is live any more.
    #[error("the run has ended ({state})")]
    Ended {
        /// Its state.
        state: crate::lifecycle::StateName,
    },
    /// The run is neither suspended nor detached, so it cannot be resumed.
    #[error("the run is {state}, not suspended or detached")]
    NotSuspended {
        /// Its state.
        state: crate::lifecycle::StateName,
    },
    /// The run cannot be joined as it is (see
    /// [`Runner::join`](super::Runner::join)): it must be taken back first
    /// ([`Runner::resume`](super::Runner::resume)), by one process.
    #[error("the run cannot be joined: {why}")]
    NotJoinable {
        /// Why: suspended, its sandbox gone, or its leases not kept by it.
        why: String,
    },
    /// A step needs the run's provisioned checkout and the run has none (its
    /// records were lost, or a step was taken out of order).
    #[error("the run has no provisioned checkout to {step}")]
    NotProvisioned {
        /// What needed it.
        step: &'static str,
    },
    /// A step needs a sealed run (no command running) and the run is not one.
    #[error("{step} needs a sealed run, not one {state}")]
    NotSealed {
        /// What needed it.
        step: &'static str,
        /// The run's state.
        state: crate::lifecycle::StateName,
    },
    /// A sandbox found gone left something its teardown could not remove, so
    /// the run cannot be sealed again.
    #[error("the lost sandbox left {0:?}; it cannot be sealed again")]
    LostSandboxLeft(crate::boundary::LeakReport),
    /// The run was to be ended and its sandbox was gone: it was not sealed
    /// again only to be ended.
    #[error("its sandbox was gone when the run was ended ({reason}); it was not sealed again")]
    SandboxGone {
        /// Why the process boundary found it gone.
        reason: String,
    },
}

impl RunErrorKind {
    /// The failure cause a run gets for this error: the boundary's, the
    /// run's own (a timeout, a cancel), or the step of core's that failed.
    pub fn failure_cause(&self) -> FailureCause {
        let step = match self {
            Self::Failed(cause) => return cause.clone(),
            Self::Boundary(error) => {
                return FailureCause::Boundary {
                    boundary: error.boundary,
                    message: crate::error_chain(error),
                };
            }
            Self::SandboxGone { .. } => {
                return FailureCause::Boundary {
                    boundary: crate::boundary::BoundaryKind::Process,
                    message: self.to_string(),
                };
            }
            Self::InvalidContract(_) | Self::Unsupported(_) => RunnerStep::CheckContract,
            Self::Capacity(_) => RunnerStep::Admit,
            Self::Lifecycle(_) => RunnerStep::Journal,
            Self::Evidence(_) => RunnerStep::Evidence,
            Self::Lease(_) => RunnerStep::Lease,
            Self::Io { path, .. } => RunnerStep::RunState { path: path.clone() },
            Self::PrivateDir(
                crate::private_dirs::PrivateDirError::Io { path, .. }
                | crate::private_dirs::PrivateDirError::OpenToOthers { path, .. }
                | crate::private_dirs::PrivateDirError::NotTheRunners { path, .. },
            ) => RunnerStep::RunState { path: path.clone() },
            Self::Template(_) => RunnerStep::PublishTemplate,
            Self::LostSandboxLeft(_) => RunnerStep::Teardown,
            Self::Ended { .. }
            | Self::NotSuspended { .. }
            | Self::NotJoinable { .. }
            | Self::NotProvisioned { .. }
            | Self::NotSealed { .. } => RunnerStep::Order,
        };
        FailureCause::Runner {
            failed: vec![StepFailure {
                step,
                cause: crate::error_chain(self),
            }],
        }
    }
}
