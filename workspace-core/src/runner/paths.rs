//! Where a run's files live on the host.

use std::path::{Path, PathBuf};

use crate::RunId;
use crate::recovery::journal_path;

/// The directory under the runtime directory that holds one private directory per
/// run (its checkout and its private state).
pub const RUNS_DIR: &str = "runs";

/// The file in a run's private directory that records its filesystem grants, so a
/// later process (resume, recovery) can release them.
pub const FILESYSTEM_STATE_FILE: &str = "filesystem.json";

/// The host paths of one run, all derived from the run id: nothing about where a
/// run lives is stored anywhere but in these rules, so recovery finds everything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunPaths {
    /// `<runtime>/runs/<run-id>`: the checkout and private state; removed by cleanup.
    pub run_dir: PathBuf,
    /// `<runtime>/journals/<run-id>.jsonl`: the durable lifecycle record.
    pub journal: PathBuf,
    /// `<evidence>/<run-id>`: the evidence bundle; never removed.
    pub evidence: PathBuf,
}

impl RunPaths {
    /// The paths of `run_id` under `runtime_dir` and `evidence_root`.
    pub fn new(runtime_dir: &Path, evidence_root: &Path, run_id: &RunId) -> Self {
        Self {
            run_dir: runtime_dir.join(RUNS_DIR).join(run_id.as_str()),
            journal: journal_path(runtime_dir, run_id),
            evidence: evidence_root.join(run_id.as_str()),
        }
    }
}
