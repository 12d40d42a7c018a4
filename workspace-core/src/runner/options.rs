//! What a runner and each of its runs are configured with.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

use crate::RunId;
use crate::lifecycle::{Timeouts, TransitionObserver};

/// Where a runner keeps runs, and how long their transient states may last.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunnerConfig {
    /// The host-wide runtime directory: journals, checkouts, leases, caches.
    pub runtime_dir: PathBuf,
    /// Where evidence bundles go (`<evidence_root>/<run-id>/`); never cleaned up.
    pub evidence_root: PathBuf,
    /// The limit of every transient lifecycle state.
    pub timeouts: Timeouts,
}

impl RunnerConfig {
    /// A configuration with default timeouts.
    pub fn new(runtime_dir: impl Into<PathBuf>, evidence_root: impl Into<PathBuf>) -> Self {
        Self {
            runtime_dir: runtime_dir.into(),
            evidence_root: evidence_root.into(),
            timeouts: Timeouts::default(),
        }
    }
}

/// Options of one run.
#[derive(Clone, Default)]
pub struct CreateOptions {
    /// The run's id; a new unique one when `None`.
    pub run_id: Option<RunId>,
    /// Cancels the run from outside (e.g. on Ctrl-C): a waiting, provisioning or
    /// running run fails with cause `cancelled`, and is still exported and cleaned.
    pub cancel: Option<CancellationToken>,
    /// How a command running when the run is cancelled ends: `Some(grace)` sends
    /// it `SIGTERM` (its own handler runs) and kills its whole tree after
    /// `grace`; `None` kills the tree at once.
    pub cancel_grace: Option<std::time::Duration>,
    /// Told about every lifecycle transition, after it is journaled (progress).
    pub observer: Option<TransitionObserver>,
}

/// How to end a run.
#[derive(Clone, Debug, Default)]
pub struct FinishOptions {
    /// Promote the patch to the contract's target with these approvals (possibly
    /// none: a draft review branch needs none unless changes are out of scope).
    /// `None`: export only.
    pub promote: Option<Vec<crate::boundary::ApprovalRecord>>,
}

impl std::fmt::Debug for CreateOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CreateOptions")
            .field("run_id", &self.run_id)
            .field("cancel", &self.cancel)
            .field("cancel_grace", &self.cancel_grace)
            .field("observer", &self.observer.is_some())
            .finish()
    }
}
