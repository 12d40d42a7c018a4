//! The Promotion boundary: how a run's result becomes visible.
//!
//! * [`export_patch`] turns a workspace's changes into `diff.patch` (a patch in
//!   git's format that `git apply` accepts on a clean checkout of the base commit)
//!   and `changes.json` (every changed path, in or out of the declared outputs),
//!   bound together by the patch's sha256.
//! * [`create_review_branch`] writes the same changes as a commit on
//!   `refs/heads/review/<run-id>` in the source repository, once every required
//!   check has passed on that exact digest and, when a change lies outside the
//!   declared outputs, an approval is bound to it; [`mark_merge_candidate`] adds
//!   `refs/review-merge-candidates/<run-id>` once the approval rule is met for it.
//! * [`WorktreePromotion`] implements
//!   [`PromotionBoundary`](workspace_core::boundary::PromotionBoundary) with them.
//!
//! Like [`crate::changes`], nothing here opens the workspace's repository or runs
//! anything a repository configures (filters, hooks, fsmonitor, external diff or
//! textconv drivers): the base is read from the source repository opened isolated,
//! the workspace is read as plain files, and no symlink in it is ever followed.
//! Every path is checked with git's path rules before it enters a patch or a review
//! tree, and the changed content read is capped ([`crate::changes::ContentLimits`]).

mod binary;
mod boundary;
mod error;
mod gate;
mod hunks;
pub(crate) mod ignored;
pub(crate) mod patch;
mod quote;
pub mod review;
mod scope;
mod tree;

#[cfg(test)]
mod tests;

use std::path::Path;

pub use boundary::WorktreePromotion;
pub use error::PromotionError;
pub use gate::{require_approval, require_checks, require_complete, require_scope_approval};
pub use patch::export_patch;
pub use quote::quote_path;
pub use review::{create_review_branch, mark_merge_candidate};
pub use scope::in_scope;

fn open_source(path: &Path) -> Result<gix::Repository, PromotionError> {
    crate::repo::open_source(path).map_err(|source| PromotionError::OpenSource {
        path: path.to_path_buf(),
        source,
    })
}
