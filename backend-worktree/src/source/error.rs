//! The one error type of the source module.

use std::path::PathBuf;

/// What went wrong while provisioning, verifying or releasing a checkout.
///
/// Every variant names the path or revision involved and the operation; causes are
/// kept as `#[source]` (gix errors boxed) so nothing is lost on the way up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SourceError {
    /// `filesystem.excluded` could not be read as patterns.
    #[error("source: withholding excluded paths from the checkout's index")]
    Excluded {
        /// Why.
        #[source]
        source: workspace_core::mount_plan::CheckoutError,
    },
    /// The source repository could not be opened.
    #[error("source: cannot open the source repository {path}")]
    OpenSource {
        /// The repository path as given.
        path: PathBuf,
        /// gix's error.
        #[source]
        source: Box<gix::Error>,
    },

    /// No object or reference of that name exists in the source repository.
    #[error("source: revision {revision:?} was not found in the source repository")]
    RevisionNotFound {
        /// The revision as declared.
        revision: String,
    },

    /// A short object id matches more than one object (or a reference and an object).
    #[error(
        "source: revision {revision:?} is ambiguous in the source repository; use a longer commit id"
    )]
    AmbiguousRevision {
        /// The revision as declared.
        revision: String,
        /// gix's error, which lists the candidates.
        #[source]
        source: Box<gix::Error>,
    },

    /// The revision could not be parsed or resolved for another reason.
    #[error("source: cannot resolve revision {revision:?}")]
    ResolveRevision {
        /// The revision as declared.
        revision: String,
        /// gix's error.
        #[source]
        source: Box<gix::Error>,
    },

    /// The revision names an object that does not peel to a commit (a tree, a blob).
    #[error("source: revision {revision:?} does not name a commit")]
    NotACommit {
        /// The revision as declared.
        revision: String,
        /// gix's error.
        #[source]
        source: Box<gix::Error>,
    },

    /// The checkout destination exists and is not an empty directory.
    #[error("source: checkout destination {path} exists and is not an empty directory")]
    DestinationNotEmpty {
        /// The destination.
        path: PathBuf,
    },

    /// A gix operation failed.
    #[error("source: {operation} failed ({path})")]
    Git {
        /// What was being done, e.g. `"build the index from the tree"`.
        operation: &'static str,
        /// The repository or workspace path involved.
        path: PathBuf,
        /// gix's error.
        #[source]
        source: Box<gix::Error>,
    },

    /// A file-system operation failed.
    #[error("source: {operation} failed ({path})")]
    Io {
        /// What was being done, e.g. `"write .git/HEAD"`.
        operation: &'static str,
        /// The path involved.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },

    /// gix checked out only part of the tree.
    #[error("source: checkout into {workspace} is incomplete; failed paths: {paths:?}")]
    CheckoutIncomplete {
        /// The workspace.
        workspace: PathBuf,
        /// Paths that collided or failed.
        paths: Vec<String>,
    },

    /// A path from the tree, the contract or the workspace leads through a symlink or
    /// outside the workspace.
    #[error("source: path {path} escapes the workspace: {reason}")]
    PathEscape {
        /// The offending path.
        path: PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },

    /// `.gitmodules` of the commit could not be read.
    #[error("source: cannot read .gitmodules of commit {commit}")]
    Gitmodules {
        /// The commit.
        commit: String,
        /// gix's error.
        #[source]
        source: Box<gix::Error>,
    },

    /// A submodule the contract declares cannot be initialised.
    #[error("source: declared submodule {path:?} cannot be initialised: {reason}")]
    SubmoduleUnavailable {
        /// The submodule's path in the repository.
        path: String,
        /// Why.
        reason: String,
    },

    /// A declared untracked input was refused.
    #[error("source: untracked input {from} refused: {reason}")]
    InputRefused {
        /// Where it was to be copied from.
        from: PathBuf,
        /// Why it was refused.
        reason: &'static str,
    },

    /// A resumed workspace is not what its record claims.
    #[error("source: workspace {workspace} cannot be resumed: {reason}")]
    RestoreIncomplete {
        /// The workspace.
        workspace: PathBuf,
        /// What did not match (names the expected and the found commit).
        reason: String,
    },

    /// A layered checkout could not be provisioned.
    #[error("source: the layered checkout failed")]
    Layered(#[source] Box<crate::layered::provision::LayeredError>),

    /// A snapshot could not be restored into the checkout.
    #[error("source: restoring the snapshot failed")]
    Snapshot(#[source] Box<crate::snapshot::SnapshotError>),

    /// The changes of a checkout against its base tree could not be computed.
    #[error("source: comparing {workspace} with its base tree failed")]
    Changes {
        /// The workspace.
        workspace: PathBuf,
        /// The changes module's error.
        #[source]
        source: Box<crate::changes::ChangesError>,
    },

    /// A removal was refused: removing would reach beyond the checkout's own files.
    #[error("source: refusing to remove {path}: {reason}")]
    RemoveRefused {
        /// The path that was not removed.
        path: PathBuf,
        /// Why, e.g. "it is on another file system (a mount point)".
        reason: &'static str,
    },

    /// The contract asks for something this module does not provide.
    #[error("source: {setting} is not supported by the worktree source")]
    Unsupported {
        /// The setting, e.g. `"origin snapshot"`.
        setting: String,
    },

    /// A blocking task was cancelled or panicked.
    #[error("source: the blocking task for {operation} did not finish")]
    Join {
        /// The operation.
        operation: &'static str,
        /// tokio's error.
        #[source]
        source: tokio::task::JoinError,
    },
}

impl SourceError {
    /// Wraps a gix error of `operation` on `path`.
    pub(crate) fn git(
        operation: &'static str,
        path: impl Into<PathBuf>,
        source: gix::Error,
    ) -> Self {
        Self::Git {
            operation,
            path: path.into(),
            source: Box::new(source),
        }
    }

    /// Wraps an I/O error of `operation` on `path`.
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
}
