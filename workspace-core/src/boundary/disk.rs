//! A run's capped disk: the file system its writable layer lives on when the
//! contract caps it (`environment.limits.disk`).
//!
//! The writable layer is everything the run writes that the host keeps on disk:
//! its checkout (a layered checkout's upper, work and merged directories) and its
//! services' template layers, all under [`RunContext::layer_dir`](super::RunContext::layer_dir).
//! The process boundary makes the disk before the checkout is provisioned and
//! removes it once the checkout is released; what it records is read back from
//! the mounted file system, never what was asked for.

use std::path::PathBuf;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, RunContext};

/// What makes, mounts again, measures and removes a run's capped disk: the
/// work behind [`ProcessBoundary::make_disk`](super::ProcessBoundary::make_disk)
/// and its siblings, which a process boundary may take from elsewhere (the
/// namespace backend's loop-mounted images serve the container backend too:
/// the disk is the host's, under the run's directory, whatever then isolates
/// the run's processes).
#[async_trait]
pub trait RunDisks: Send + Sync + std::fmt::Debug {
    /// Makes the run's disk at [`RunContext::layer_dir`], holding at most
    /// `cap_bytes`; what is mounted, read back.
    async fn make(&self, run: &RunContext, cap_bytes: u64) -> Result<DiskRecord, BoundaryError>;

    /// Mounts the run's disk again where it is no longer mounted, or reads it
    /// back where it still is.
    async fn remount(&self, run: &RunContext, cap_bytes: u64) -> Result<DiskRecord, BoundaryError>;

    /// What the run's disk holds now and the most it ever held; `None` when
    /// none is mounted.
    async fn usage(&self, run: &RunContext) -> Result<Option<DiskUsage>, BoundaryError>;

    /// Unmounts and removes whatever of the run's disk exists; fails unless
    /// nothing of it is left.
    async fn remove(&self, run: &RunContext) -> Result<(), BoundaryError>;
}

/// How a run's disk is capped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum DiskKind {
    /// A file system image of the cap's size (sparse: the host pays only for
    /// what is written), loop-mounted.
    Image,
    /// A size-capped tmpfs: memory, not disk, charged to the run's memory
    /// cgroup as it is written; it does not outlive the host.
    Tmpfs,
}

/// The capped disk a run's writable layer lives on, as read back once mounted.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskRecord {
    /// How the cap is kept.
    pub kind: DiskKind,
    /// The cap the contract declared, in bytes.
    pub cap_bytes: u64,
    /// The mount point (the run's [`layer_dir`](super::RunContext::layer_dir)).
    pub mount_point: PathBuf,
    /// The file system type the mount table shows there (`ext4`, `tmpfs`).
    pub fs_type: String,
    /// The mount's source as the mount table shows it (the loop device of an
    /// image, `tmpfs`).
    pub device: String,
    /// The image file backing an [`DiskKind::Image`] disk.
    pub image: Option<PathBuf>,
    /// What the mounted file system can hold (its blocks, read with `statvfs`).
    pub size_bytes: u64,
    /// Why this kind was chosen over the others the host offers (or lacks).
    pub chosen_because: String,
}

/// What a run's disk held, read just before it is removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskUsage {
    /// Bytes in use at the end (`statvfs`: blocks less free blocks).
    pub used_bytes: u64,
    /// The most the disk's device ever held, where it shows it: for an image,
    /// the blocks the image file has on the host. A file system on a loop
    /// device without discard never gives a block back, so this is the
    /// high-water mark of what was written out to it, metadata included, and
    /// what the run cost the host's disk; data deleted before the kernel wrote
    /// it back never reached the device and is not in it. `None` for a tmpfs,
    /// which keeps no such mark.
    pub peak_bytes: Option<u64>,
}
