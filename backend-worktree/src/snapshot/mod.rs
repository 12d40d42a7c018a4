//! Content-addressed snapshots of a workspace: its base commit plus every change,
//! in one deterministic archive named by its sha256.
//!
//! ```no_run
//! # fn main() -> Result<(), backend_worktree::snapshot::SnapshotError> {
//! use std::path::Path;
//! use backend_worktree::changes::ChangeOptions;
//! use backend_worktree::snapshot::{capture, restore};
//!
//! let (repo, store) = (Path::new("/srv/repo"), Path::new("/srv/snapshots"));
//! let commit = "0123456789abcdef0123456789abcdef01234567";
//! let snapshot = capture(repo, commit, Path::new("/runs/r1/checkout"), store, &ChangeOptions::default())?;
//! let report = restore(repo, store, &snapshot.digest, Path::new("/runs/r2/checkout"))?;
//! assert_eq!(report.entries, snapshot.entries);
//! # Ok(()) }
//! ```
//!
//! # Capture
//! [`capture`] computes the workspace's changes against the base commit with
//! [`crate::changes::workspace_changes`]'s walker, which never follows a symlink: a
//! link is recorded as a link (its target text), so a planted link to a host secret
//! never brings the secret into the archive. [`capture_layered`] does the same
//! from an overlay upper directory. The archive (see [`Manifest`] for
//! `snapshot.json`) is written to `store/tmp-<random>` and renamed to
//! `store/<sha256>.tar`; headers carry no time, owner or host mode bits, entries
//! are sorted, so the same state always gives the same digest.
//!
//! # Restore
//! [`restore`] refuses an archive whose bytes do not hash to its digest, an unsafe
//! or inconsistent manifest, or entries that differ from it, all before writing
//! anything; then it checks out the base commit, applies the changes without
//! following a symlink, and verifies the result against the manifest.
//!
//! # Limitations
//! * The archive is read into memory whole on restore (so the bytes that were
//!   hashed are the bytes that are applied).
//! * What [`crate::changes`] cannot record is not captured: empty directories,
//!   gitlinks' contents, non-UTF-8 names, paths matching `skip`; the workspace's
//!   own `.git` (its local commits, branches, stash) is not captured either.
//! * A snapshot needs its base commit in the source repository to be restored.

mod apply;
mod archive;
mod capture;
mod error;
mod manifest;
mod restore;

#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use capture::{capture, capture_layered};
pub use error::SnapshotError;
pub use manifest::{EntryKind, MANIFEST_VERSION, Manifest, ManifestEntry};
pub use restore::{inspect, restore, restore_opts};

/// A captured snapshot.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct Snapshot {
    /// The sha256 of the archive (lower-case hex): its name in the store.
    pub digest: String,
    /// The archive: `<store>/<digest>.tar`.
    pub path: PathBuf,
    /// The full id of the base commit.
    pub base_commit: String,
    /// How many files and symlinks it holds (deletions not counted).
    pub entries: usize,
}

/// What [`restore`] made.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestoreReport {
    /// The restored workspace (the destination).
    pub workspace: PathBuf,
    /// The base commit it is a checkout of.
    pub base_commit: String,
    /// The snapshot's digest (lower-case).
    pub digest: String,
    /// How many files and symlinks were written.
    pub entries: usize,
    /// How many base paths were deleted (rename sources not counted).
    pub deleted: usize,
    /// The restored changes in `git diff --name-status` form.
    pub name_status: String,
}

/// Options of [`restore_opts`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RestoreOptions {
    /// Refuse the snapshot unless its base commit is this full commit id (checked
    /// before anything is written).
    pub expected_base_commit: Option<String>,
}

impl RestoreOptions {
    /// Requires the snapshot's base commit to be `commit`.
    pub fn expecting_base(commit: impl Into<String>) -> Self {
        Self {
            expected_base_commit: Some(commit.into()),
        }
    }
}
