//! What every boundary call receives about the run.

use std::path::PathBuf;
use std::sync::Arc;

use crate::RunId;
use crate::contract::Contract;

/// The run a boundary call is for: its id, its validated contract and the host
/// directories the runner assigned to it.
///
/// Boundaries write only under the directories named here; that is what lets
/// cleanup and crash recovery find everything a run created.
#[derive(Clone, Debug)]
pub struct RunContext {
    /// The run's id.
    pub run_id: RunId,
    /// The validated contract (shared, never mutated during the run).
    pub contract: Arc<Contract>,
    /// A directory owned by this run for its checkout and its private state
    /// (`<runtime>/runs/<run-id>`); removed by cleanup.
    pub run_dir: PathBuf,
    /// The host-wide runtime directory shared by all runs (leases, caches, journals).
    pub runtime_dir: PathBuf,
}

/// The directory [`RunContext::layer_dir`] names when the run has a capped disk.
pub const DISK_DIR: &str = "disk";

impl RunContext {
    /// Where the run's writable layer lives: its checkout (a layered
    /// checkout's upper, work and merged directories) and its services'
    /// template layers. With `environment.limits.disk` it is the mount point
    /// of the run's capped disk, `<run_dir>/disk`, which the process boundary
    /// makes before the checkout is provisioned
    /// ([`ProcessBoundary::make_disk`](super::ProcessBoundary::make_disk));
    /// without one, the run directory itself.
    ///
    /// It follows from the contract alone, so every runner of the run
    /// (recovery too) finds the same place.
    pub fn layer_dir(&self) -> PathBuf {
        if self.contract.environment.limits.disk.is_some() {
            self.run_dir.join(DISK_DIR)
        } else {
            self.run_dir.clone()
        }
    }
}
