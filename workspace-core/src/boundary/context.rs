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
