//! The Filesystem boundary trait and what it records.

use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, FilesystemCapabilities, RunContext, SourceRecord};
use crate::lifecycle::CleanupPermit;

/// Turns the contract's path grants into what the run can actually reach.
#[async_trait]
pub trait FilesystemBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports.
    fn capabilities(&self) -> FilesystemCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Prepares the grants for the provisioned checkout and records the plan it will
    /// apply (mounts, masks, read-only paths).
    async fn prepare(
        &self,
        run: &RunContext,
        source: &SourceRecord,
    ) -> Result<FilesystemRecord, BoundaryError>;

    /// Undoes what `prepare` set up on the host (mounts, scratch directories).
    /// `permit` proves the run's evidence export was attempted.
    async fn release(
        &self,
        run: &RunContext,
        record: &FilesystemRecord,
        permit: &CleanupPermit,
    ) -> Result<(), BoundaryError>;
}

/// The grants a run received: part of `observed.json`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemRecord {
    /// Each planned mount or grant, in the order applied.
    pub grants: Vec<GrantRecord>,
}

/// One grant of the filesystem plan.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRecord {
    /// The path as the agent sees it.
    pub target: String,
    /// Where it comes from on the host, if it is a mount.
    pub source: Option<String>,
    /// Read-only, read-write or masked.
    pub access: Access,
}

/// How a granted path may be used.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Access {
    /// Reads only.
    ReadOnly,
    /// Reads and writes.
    ReadWrite,
    /// Hidden: neither readable nor writable.
    Masked,
}
