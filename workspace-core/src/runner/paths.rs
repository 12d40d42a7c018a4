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
/// Present while the run's sandbox holds its capacity ticket (a runner that
/// attaches to it again does not admit it again).
pub(super) const CAPACITY_HELD_FILE: &str = "capacity-held-by-sandbox";
/// The run's identity plan with its credential values (mode 0600), in its run
/// directory (see `identity_store`).
pub(super) const IDENTITY_STATE_FILE: &str = "identity.json";
/// The run's capped disk as it was made (see `disk`), in its run directory.
pub(super) const DISK_STATE_FILE: &str = "disk.json";

/// The extension of the file beside a run's journal that names its evidence
/// directory (`<runtime>/journals/<run-id>.evidence`), so that recovery and resume
/// find a bundle written under a non-default evidence root.
pub const EVIDENCE_POINTER_EXTENSION: &str = "evidence";

/// The host paths of one run, derived from the run id (and, for the evidence,
/// from the pointer beside the journal): recovery finds everything a run made.
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

    /// The paths of an existing run: like [`new`](Self::new), but the evidence
    /// directory is the one its pointer names, if it has one.
    pub fn locate(runtime_dir: &Path, default_evidence_root: &Path, run_id: &RunId) -> Self {
        let mut paths = Self::new(runtime_dir, default_evidence_root, run_id);
        if let Ok(text) = std::fs::read_to_string(paths.evidence_pointer()) {
            let dir = PathBuf::from(text.trim_end_matches('\n'));
            if dir.is_absolute() {
                paths.evidence = dir;
            }
        }
        paths
    }

    /// The file beside the journal that names the evidence directory.
    pub fn evidence_pointer(&self) -> PathBuf {
        self.journal.with_extension(EVIDENCE_POINTER_EXTENSION)
    }

    /// Records where the evidence is (an absolute path), before the journal exists.
    pub(super) fn write_evidence_pointer(&self) -> std::io::Result<()> {
        let evidence = std::path::absolute(&self.evidence)?;
        let mut text = evidence.into_os_string().into_encoded_bytes();
        text.push(b'\n');
        std::fs::write(self.evidence_pointer(), text)
    }
}
