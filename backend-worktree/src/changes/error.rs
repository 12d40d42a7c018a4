//! The one error type of [`crate::changes`].

use std::path::PathBuf;

/// Why the changes of a workspace could not be computed.
///
/// Every variant names the operation and the path or id it was about, and keeps its
/// cause as the `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChangesError {
    /// The source repository could not be opened.
    #[error("changes: open source repository {path}")]
    OpenSource {
        /// The repository path as given.
        path: PathBuf,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// The base commit id is not a full hexadecimal object id.
    #[error("changes: base commit {commit:?} is not a full object id")]
    InvalidCommitId {
        /// The id as given.
        commit: String,
        /// Why it does not parse.
        #[source]
        source: gix::Error,
    },
    /// The base commit or one of its trees could not be read from the source repository.
    #[error("changes: {operation} of base commit {commit}")]
    ReadBase {
        /// What was being read (`"find commit"`, `"traverse tree"`).
        operation: &'static str,
        /// The commit id.
        commit: String,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// A `skip` pattern is not a valid glob.
    #[error("changes: skip pattern {pattern:?} is not a valid glob")]
    InvalidSkipPattern {
        /// The pattern.
        pattern: String,
        /// globset's error.
        #[source]
        source: globset::Error,
    },
    /// A file system operation on the workspace failed.
    #[error("changes: {operation} {path}")]
    Io {
        /// What was being done (`"read directory"`, `"read link"`, ...).
        operation: &'static str,
        /// The host path it was done on.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Hashing a workspace file as a git blob failed.
    #[error("changes: hash {path} as a blob")]
    Hash {
        /// The path relative to the workspace root.
        path: String,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// A file name is not UTF-8 (a documented limitation: paths are reported and
    /// quoted as UTF-8 strings).
    #[error("changes: file name {} is not UTF-8", path.display())]
    NonUtf8Path {
        /// The host path of the entry.
        path: PathBuf,
    },
    /// An entry changed between being listed and being opened (it was replaced, e.g.
    /// by a symlink): the walk refuses to read through it.
    #[error("changes: {path} was replaced while it was being read")]
    Replaced {
        /// The path relative to the workspace root.
        path: String,
    },
    /// A file's content no longer matches the blob id recorded when the workspace
    /// was walked: it changed while the export was running.
    #[error("changes: {path} changed during export (walked as {expected}, read as {actual})")]
    ChangedDuringRead {
        /// The path relative to the workspace root.
        path: String,
        /// The blob id recorded by the walk.
        expected: gix::ObjectId,
        /// The blob id of what was read now.
        actual: gix::ObjectId,
    },
    /// A path that must be read from the workspace is not a file or symlink there.
    #[error("changes: {path} is not a file or symlink in the workspace")]
    NotAFile {
        /// The path relative to the workspace root.
        path: String,
    },
    /// A changed path breaks git's path rules (a `.git` in any spelling, a
    /// symlinked `.gitmodules`, ...): it may enter neither a patch nor a review tree.
    #[error("changes: {path:?} cannot be exported")]
    RefusedPath {
        /// The path relative to the workspace root.
        path: String,
        /// The rule it breaks.
        #[source]
        reason: super::validate::PathRefusal,
    },
    /// A changed file is larger than one export or promotion reads.
    #[error(
        "changes: {path} is {size} bytes, more than the {limit} bytes an export reads per file"
    )]
    TooLarge {
        /// The path relative to the workspace root.
        path: String,
        /// Its size in bytes (at least, when it grew while being read).
        size: u64,
        /// The per-file limit in bytes.
        limit: u64,
    },
    /// The changed files together are larger than one export or promotion reads.
    #[error(
        "changes: reading {path} brings the changed content to {total} bytes, more than the {limit} bytes one export reads"
    )]
    TotalTooLarge {
        /// The path relative to the workspace root whose content crossed the limit.
        path: String,
        /// The total in bytes with that file.
        total: u64,
        /// The limit for one export or promotion, in bytes.
        limit: u64,
    },
}
