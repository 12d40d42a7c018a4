//! The one error type of [`crate::promotion`].

use std::path::PathBuf;

use crate::changes::ChangesError;

/// Why a patch could not be exported or a result not promoted.
///
/// Refusals name the check, approval, ref or digest at fault; failures name the
/// operation and keep their cause as the `source`.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PromotionError {
    /// Computing or reading the workspace's changes failed.
    #[error("promotion: {operation}")]
    Changes {
        /// What was being done (`"compute changes"`, `"read changed file"`).
        operation: &'static str,
        /// The cause.
        #[source]
        source: ChangesError,
    },
    /// The source repository could not be opened.
    #[error("promotion: open source repository {path}")]
    OpenSource {
        /// The repository path.
        path: PathBuf,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// Reading from or writing to the source repository's object database failed.
    #[error("promotion: {operation} {object} in the source repository")]
    Objects {
        /// What was being done (`"read blob"`, `"write tree"`, ...).
        operation: &'static str,
        /// The path, object id or ref involved.
        object: String,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// Encoding a section of the patch failed.
    #[error("promotion: {operation} of {path}")]
    Encode {
        /// What was being done (`"compress binary content"`, `"render hunks"`).
        operation: &'static str,
        /// The path whose content was being encoded.
        path: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Not every required check has passed on this exact patch.
    #[error("required checks missing {missing:?}, failed {failed:?} for this patch")]
    ChecksNotPassed {
        /// Required checks with no result for the current patch digest.
        missing: Vec<String>,
        /// Required checks that failed on the current patch digest.
        failed: Vec<String>,
    },
    /// A required check ran on an earlier patch, not on the one being promoted.
    #[error("check {name:?} ran on patch {ran_on}, the patch is now {current}")]
    StaleCheck {
        /// The check's name.
        name: String,
        /// The digest it ran on.
        ran_on: String,
        /// The digest of the patch being promoted.
        current: String,
    },
    /// The request names a different patch than the workspace exports now.
    #[error("request is for patch {requested}, the workspace exports {current}")]
    DigestMismatch {
        /// The digest in the request.
        requested: String,
        /// The digest of the current export.
        current: String,
    },
    /// A merge candidate needs a recorded human approval and there is none.
    #[error("no approval recorded for patch {digest}")]
    ApprovalMissing {
        /// The digest needing approval.
        digest: String,
    },
    /// The only approvals recorded are for other patches.
    #[error("{approver:?} approved patch {approved}, the patch is now {current}")]
    StaleApproval {
        /// Who approved.
        approver: String,
        /// The digest they approved.
        approved: String,
        /// The digest of the patch being promoted.
        current: String,
    },
    /// Changes outside the declared outputs (`filesystem.outputs`) would reach a
    /// review branch without an approval bound to this patch.
    #[error("{paths:?} lie outside the declared outputs and patch {digest} is not approved")]
    OutOfScope {
        /// Every path outside the outputs (both sides of a rename are checked).
        paths: Vec<String>,
        /// The digest of the patch.
        digest: String,
        /// Why no approval counts ([`PromotionError::ApprovalMissing`] or
        /// [`PromotionError::StaleApproval`]).
        #[source]
        approval: Box<PromotionError>,
    },
    /// Changes the patch does not carry (a path git refuses, a name that is not
    /// UTF-8, a nested repository, ...): promoting the patch would present part
    /// of the run's changes as all of them.
    #[error(
        "{paths:?} changed but are not in the patch (changes.json says why); it is not promoted"
    )]
    NotInPatch {
        /// Each such path, as `changes.json` lists it.
        paths: Vec<String>,
    },
    /// The workspace no longer holds what the export recorded at `path`.
    #[error("the workspace changed at {path} since the patch was exported")]
    ExportOutdated {
        /// The path relative to the workspace root.
        path: String,
    },
    /// A ref name built from the run id is not a valid git ref name.
    #[error("promotion: {reference} is not a valid ref name")]
    InvalidRefName {
        /// The ref name.
        reference: String,
        /// gix's validation error.
        #[source]
        source: gix::validate::reference::name::Error,
    },
    /// The review ref exists and points at a different commit: never overwritten.
    #[error("{reference} already points at {existing}")]
    RefExists {
        /// The full ref name.
        reference: String,
        /// Where it points.
        existing: String,
    },
    /// The review ref is the source repository's current (unborn) branch: writing
    /// it would move the source's HEAD.
    #[error("{reference} is the source repository's current branch")]
    RefIsCurrentBranch {
        /// The full ref name.
        reference: String,
    },
    /// The record to mark has no review commit (the target was `patch`).
    #[error("patch {digest} has no review commit to mark")]
    NoReviewCommit {
        /// The digest of the record.
        digest: String,
    },
    /// A blocking task was cancelled or panicked.
    #[error("promotion: {operation} task did not finish")]
    Task {
        /// What the task was doing.
        operation: &'static str,
        /// tokio's error.
        #[source]
        source: tokio::task::JoinError,
    },
}

impl PromotionError {
    pub(crate) fn changes(operation: &'static str) -> impl FnOnce(ChangesError) -> Self {
        move |source| Self::Changes { operation, source }
    }

    pub(crate) fn objects(
        operation: &'static str,
        object: impl std::fmt::Display,
    ) -> impl FnOnce(gix::Error) -> Self {
        let object = object.to_string();
        move |source| Self::Objects {
            operation,
            object,
            source,
        }
    }
}
