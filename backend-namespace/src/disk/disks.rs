//! [`LoopDisks`]: this module's disks behind core's [`RunDisks`], for the
//! namespace backend's process boundary and any other that runs a run's
//! processes on this host (the facade gives it to the container backend).

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, BoundaryKind, DiskRecord, DiskUsage, RunContext, RunDisks,
};

use super::DiskError;

/// A run's capped disk as this module makes it: a size-capped tmpfs for a
/// small cap, else a loop-mounted ext4 image under the run's directory (see
/// the [module docs](super)). Needs root ([`super::available`]).
#[derive(Clone, Copy, Debug, Default)]
pub struct LoopDisks;

#[async_trait]
impl RunDisks for LoopDisks {
    async fn make(&self, run: &RunContext, cap_bytes: u64) -> Result<DiskRecord, BoundaryError> {
        let (run_dir, mount_point) = (run.run_dir.clone(), run.layer_dir());
        let memory = run.contract.environment.limits.memory.map(|m| m.bytes());
        call("make the run's disk", move || {
            super::make(&run_dir, &mount_point, cap_bytes, memory)
        })
        .await
    }

    async fn remount(&self, run: &RunContext, cap_bytes: u64) -> Result<DiskRecord, BoundaryError> {
        let (run_dir, mount_point) = (run.run_dir.clone(), run.layer_dir());
        call("mount the run's disk again", move || {
            super::remount(&run_dir, &mount_point, cap_bytes)
        })
        .await
    }

    async fn usage(&self, run: &RunContext) -> Result<Option<DiskUsage>, BoundaryError> {
        let (run_dir, mount_point) = (run.run_dir.clone(), run.layer_dir());
        call("read the run's disk usage", move || {
            super::usage(&run_dir, &mount_point)
        })
        .await
    }

    async fn remove(&self, run: &RunContext) -> Result<(), BoundaryError> {
        let (run_dir, mount_point) = (run.run_dir.clone(), run.layer_dir());
        call("remove the run's disk", move || {
            super::remove(&run_dir, &mount_point)
        })
        .await
    }
}

/// Runs a disk step on the blocking pool, its error named by `operation` and path.
async fn call<T: Send + 'static>(
    operation: &'static str,
    f: impl FnOnce() -> Result<T, DiskError> + Send + 'static,
) -> Result<T, BoundaryError> {
    let done = tokio::task::spawn_blocking(f)
        .await
        .map_err(|join| BoundaryError::new(BoundaryKind::Process, operation, join))?;
    done.map_err(|e| {
        let path = e.path().map(std::path::Path::to_path_buf);
        let error = BoundaryError::new(BoundaryKind::Process, operation, e);
        match path {
            Some(path) => error.with_path(path),
            None => error,
        }
    })
}
