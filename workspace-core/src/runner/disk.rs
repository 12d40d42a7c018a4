//! The run's capped disk, when its contract caps one (`environment.limits.disk`):
//! made before the checkout is provisioned on it, read back into
//! `observed.json`, measured into `outcome.json` once every process of the run
//! ended, removed once the checkout is released.
//!
//! Its record is kept in the run directory (`disk.json`) for the runners that
//! take the run over later; removing it needs no record, since where the disk
//! lives follows from the contract ([`RunContext::layer_dir`]).

use std::path::Path;

use super::error::RunErrorKind;
use super::paths::DISK_STATE_FILE;
use super::state_files::{read_state, write_state};
use crate::boundary::{BoundaryError, DiskRecord, DiskUsage, ProcessBoundary, RunContext};
use crate::step::{RunnerStep, StepErrors};

/// The cap the contract declares, in bytes.
fn cap(run: &RunContext) -> Option<u64> {
    run.contract
        .environment
        .limits
        .disk
        .map(|disk| disk.bytes())
}

/// Makes the run's disk, when its contract caps one, and keeps its record.
pub(super) async fn make(
    process: &dyn ProcessBoundary,
    run: &RunContext,
) -> Result<(), RunErrorKind> {
    let Some(cap) = cap(run) else {
        return Ok(());
    };
    let record = process.make_disk(run, cap).await?;
    write_state(&run.run_dir.join(DISK_STATE_FILE), &record)
}

/// Mounts the run's disk again for a run taken back (or reads it back where
/// it is still mounted), and keeps its record.
pub(super) async fn remount(
    process: &dyn ProcessBoundary,
    run: &RunContext,
) -> Result<(), RunErrorKind> {
    let Some(cap) = cap(run) else {
        return Ok(());
    };
    let record = process.remount_disk(run, cap).await?;
    write_state(&run.run_dir.join(DISK_STATE_FILE), &record)
}

/// The run's disk as recorded when it was made.
pub(super) fn record(run_dir: &Path) -> Result<Option<DiskRecord>, RunErrorKind> {
    read_state(&run_dir.join(DISK_STATE_FILE))
}

/// What the run's disk holds, when it has one mounted; a failure to read it
/// is added to `errors`.
pub(super) async fn usage(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    errors: &mut StepErrors,
) -> Option<DiskUsage> {
    cap(run)?;
    match process.disk_usage(run).await {
        Ok(usage) => usage,
        Err(e) => {
            errors.push(RunnerStep::DiskUsage, e);
            None
        }
    }
}

/// Removes the run's disk, when its contract caps one (whatever of it exists).
pub(super) async fn remove(
    process: &dyn ProcessBoundary,
    run: &RunContext,
) -> Result<(), BoundaryError> {
    if cap(run).is_none() {
        return Ok(());
    }
    process.remove_disk(run).await
}

impl super::RunPaths {
    /// The run's capped disk as it was made (its record in the run
    /// directory); `None` for a run without a cap, or once it was cleaned.
    pub fn disk(&self) -> Result<Option<DiskRecord>, RunErrorKind> {
        record(&self.run_dir)
    }
}
