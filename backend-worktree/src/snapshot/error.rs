//! The one error type of [`crate::snapshot`].

use std::path::PathBuf;

use crate::changes::ChangesError;
use crate::layered::diff::LayeredDiffError;
use crate::source::SourceError;

/// Why a snapshot could not be captured or restored.
///
/// Every variant names the operation and the path or digest it was about, and keeps
/// its cause as the `source`. Refusals of an archive (digest, manifest, entries)
/// happen before anything is written at the destination.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SnapshotError {
    /// Computing or reading the workspace's changes failed.
    #[error("snapshot: cannot {operation}")]
    Changes {
        /// What was being done (`"walk the workspace"`, `"read a changed file"`).
        operation: &'static str,
        /// The cause.
        #[source]
        source: ChangesError,
    },
    /// Computing a layered run's changes from its upper directory failed.
    #[error("snapshot: cannot {operation}")]
    Layered {
        /// What was being done.
        operation: &'static str,
        /// The cause.
        #[source]
        source: LayeredDiffError,
    },
    /// Provisioning the base checkout to restore into failed.
    #[error("snapshot: cannot {operation} {path}")]
    Source {
        /// What was being done (`"check out the base commit into"`).
        operation: &'static str,
        /// The destination or repository.
        path: PathBuf,
        /// The cause.
        #[source]
        source: Box<SourceError>,
    },
    /// A file-system operation failed.
    #[error("snapshot: {operation} {path}")]
    Io {
        /// What was being done (`"write the archive"`, `"create a directory"`).
        operation: &'static str,
        /// The host path it was done on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The manifest (`snapshot.json`) could not be written or parsed.
    #[error("snapshot: {operation} snapshot.json of {path}")]
    Manifest {
        /// `"encode"` or `"parse"`.
        operation: &'static str,
        /// The archive.
        path: PathBuf,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
    /// A digest given to look a snapshot up is not a sha256 (64 hex digits).
    #[error("snapshot: {digest:?} is not a sha256 digest (64 hex digits)")]
    InvalidDigest {
        /// The digest as given.
        digest: String,
    },
    /// The archive's sha256 is not the digest it is stored under: it was altered
    /// (or truncated) after capture. Nothing was written.
    #[error("snapshot: {path} has sha256 {actual}, expected {expected}")]
    DigestMismatch {
        /// The archive.
        path: PathBuf,
        /// The digest asked for (its file name).
        expected: String,
        /// The sha256 of its bytes.
        actual: String,
    },
    /// The manifest has a version this code does not read.
    #[error("snapshot: {digest} has manifest version {version}, only 1 is read")]
    UnsupportedVersion {
        /// The snapshot.
        digest: String,
        /// The version found.
        version: u32,
    },
    /// A manifest path is unsafe to write: absolute, with `..`, `.` or empty
    /// components, a `.git` component, a NUL, or listed twice.
    #[error("snapshot: {digest} lists unsafe path {path:?}: {reason}")]
    UnsafeEntry {
        /// The snapshot.
        digest: String,
        /// The path as listed.
        path: String,
        /// Why it was refused.
        reason: &'static str,
    },
    /// The archive does not match its manifest: an entry has another path, type or
    /// content than the manifest says, an entry is missing or one is extra, or a
    /// manifest field is malformed.
    #[error("snapshot: {digest} entry {path:?} does not match the manifest: {reason}")]
    ArchiveMismatch {
        /// The snapshot.
        digest: String,
        /// The entry (its manifest path, or the tar path when it has none).
        path: String,
        /// What did not match.
        reason: &'static str,
    },
    /// Hashing an entry's content as a git blob failed.
    #[error("snapshot: {digest} entry {path:?}: cannot hash its content as a blob")]
    Hash {
        /// The snapshot.
        digest: String,
        /// The entry's path.
        path: String,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// The snapshot's base commit is not the one the caller expected.
    #[error("snapshot: {digest} is based on commit {actual}, expected {expected}")]
    BaseCommitMismatch {
        /// The snapshot.
        digest: String,
        /// The commit the caller expected.
        expected: String,
        /// The commit the manifest names.
        actual: String,
    },
    /// The base commit's tree in the source repository is not the manifest's.
    #[error(
        "snapshot: {digest}: commit {commit} has tree {actual} in the source, the manifest says {expected}"
    )]
    BaseTreeMismatch {
        /// The snapshot.
        digest: String,
        /// The base commit.
        commit: String,
        /// The manifest's tree id.
        expected: String,
        /// The tree id in the source repository.
        actual: String,
    },
    /// A path could not be written at the destination without following a symlink
    /// or replacing a non-empty directory.
    #[error("snapshot: refused to write {path}: {reason}")]
    Apply {
        /// The host path.
        path: PathBuf,
        /// Why.
        reason: &'static str,
    },
    /// After restoring, the destination's changes against the base commit are not
    /// the manifest's (path, mode or blob id differ).
    #[error("snapshot: restored tree differs from the manifest of {digest} at {path:?}")]
    RestoredTreeMismatch {
        /// The snapshot.
        digest: String,
        /// The first path that differs.
        path: String,
    },
}

impl SnapshotError {
    pub(crate) fn io(
        operation: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        Self::Io {
            operation,
            path: path.into(),
            source,
        }
    }

    pub(crate) fn changes(operation: &'static str) -> impl FnOnce(ChangesError) -> Self {
        move |source| Self::Changes { operation, source }
    }
}
