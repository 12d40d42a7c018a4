//! [`WorktreeFilesystem`]: the Filesystem boundary over a provisioned checkout.
//!
//! It checks the contract's filesystem section against the checkout (the globs
//! compile, the workspace root opens as a capability) and records the grants a
//! sandbox applies: the workspace read-write where the contract says so,
//! read-only paths, excluded paths masked, host mounts. The sandbox itself (the
//! process boundary's mount plan) is what enforces them for the agent's
//! processes; [`PathGrants`](super::PathGrants) enforces the same section for a
//! host application's own file tools. Nothing is mounted on the host, so release
//! has nothing to undo.

use async_trait::async_trait;
use workspace_core::boundary::{
    Access, BoundaryError, BoundaryKind, FilesystemBoundary, FilesystemCapabilities,
    FilesystemRecord, GrantRecord, RunContext, SourceRecord,
};
use workspace_core::contract::MountMode;
use workspace_core::lifecycle::CleanupPermit;

use super::PathGrants;

/// The Filesystem boundary of a checkout (see its module docs).
#[derive(Clone, Copy, Debug, Default)]
pub struct WorktreeFilesystem;

impl WorktreeFilesystem {
    /// The boundary.
    pub fn new() -> Self {
        Self
    }
}

#[async_trait]
impl FilesystemBoundary for WorktreeFilesystem {
    fn capabilities(&self) -> FilesystemCapabilities {
        FilesystemCapabilities {
            read_only_paths: true,
            excluded_paths: true,
            host_mounts: true,
            writable_host_mounts: true,
        }
    }

    fn name(&self) -> &'static str {
        "backend-worktree filesystem"
    }

    async fn prepare(
        &self,
        run: &RunContext,
        source: &SourceRecord,
    ) -> Result<FilesystemRecord, BoundaryError> {
        let section = &run.contract.filesystem;
        // Building the grants compiles every glob and opens the root as a capability:
        // a section the checkout cannot honour fails here, before the sandbox exists.
        PathGrants::new(&source.workspace, section).map_err(|e| {
            BoundaryError::new(BoundaryKind::Filesystem, "prepare grants", e)
                .with_path(&source.workspace)
        })?;
        let workspace = |path: &String| format!("{}/{}", section.root.trim_end_matches('/'), path);
        let mut grants = Vec::new();
        grants.extend(section.writable.iter().map(|path| GrantRecord {
            target: workspace(path),
            source: None,
            access: Access::ReadWrite,
        }));
        grants.extend(section.read_only.iter().map(|path| GrantRecord {
            target: workspace(path),
            source: None,
            access: Access::ReadOnly,
        }));
        grants.extend(section.excluded.iter().map(|path| GrantRecord {
            target: workspace(path),
            source: None,
            access: Access::Masked,
        }));
        grants.extend(section.host_mounts.iter().map(|mount| GrantRecord {
            target: mount.target.clone(),
            source: Some(mount.host.clone()),
            access: match mount.mode {
                MountMode::ReadOnly => Access::ReadOnly,
                MountMode::DangerReadWrite => Access::ReadWrite,
            },
        }));
        Ok(FilesystemRecord { grants })
    }

    async fn release(
        &self,
        run: &RunContext,
        _record: &FilesystemRecord,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError> {
        permit
            .check(&run.run_id)
            .map_err(|e| BoundaryError::new(BoundaryKind::Filesystem, "release", e))
    }
}
