//! Resume: re-verifying an existing checkout against its record.
//!
//! The workspace's `.git` is agent-writable, so its repository is never opened (no
//! config, no hooks, no filters): `HEAD` is read as a plain file without following
//! any link ([`super::head`]), and the base tree is read from the source repository
//! by the recorded commit id. The inherited files are the changes the diff reports
//! ([`crate::changes`]), so resume and export never disagree.

use std::fs;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use workspace_core::boundary::SourceRecord;
use workspace_core::contract::Materialization;

use super::SourceError;
use super::head::{linked_worktrees_dir, workspace_head};
use super::inherited::{Inherited, changes_error, inherited};
use super::resolve::open_source_repo;
use crate::changes::base_tree;

/// What a resumed workspace inherited from its earlier run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResumeReport {
    /// The workspace.
    pub workspace: PathBuf,
    /// The recorded commit.
    pub expected: ObjectId,
    /// What `HEAD` holds now: the commit id when detached, `None` when it names a ref.
    pub found: Option<ObjectId>,
    /// `HEAD` moved away from the recorded commit (only possible with `allow_rebase`).
    pub moved: bool,
    /// Differences of the files from the recorded base tree.
    pub inherited: Inherited,
}

/// Verifies that the checkout `record` describes is still there and still at its
/// commit, and reports what it inherited (changed, deleted and untracked files
/// relative to the recorded tree).
///
/// Fails with [`SourceError::RestoreIncomplete`] (naming the expected and the found
/// commit) when the workspace is missing, `HEAD` is unreadable, or `HEAD` moved and
/// `allow_rebase` is false. `HEAD` is unreadable when it, `.git` or a directory on
/// the way is a symlink, when it is not a regular file of at most 256 bytes holding
/// a commit id or a `ref: refs/...` line (its content is then not repeated), when a
/// standalone checkout has a `.git` file instead of a directory, and when a linked
/// worktree's `.git` file points anywhere but at a registration in the source's
/// `.git/worktrees`.
///
/// # Ambient authority
/// `record.repository` (the source, opened in isolation and only read) and
/// `record.workspace` are host paths, used as given.
pub fn verify_checkout(
    record: &SourceRecord,
    allow_rebase: bool,
) -> Result<ResumeReport, SourceError> {
    let workspace = &record.workspace;
    let incomplete = |reason: String| SourceError::RestoreIncomplete {
        workspace: workspace.clone(),
        reason,
    };
    let expected = ObjectId::from_hex(record.commit.as_bytes()).map_err(|_| {
        incomplete(format!(
            "the record's commit {:?} is not an object id",
            record.commit
        ))
    })?;
    let tree = ObjectId::from_hex(record.tree.as_bytes()).map_err(|_| {
        incomplete(format!(
            "the record's tree {:?} is not an object id",
            record.tree
        ))
    })?;
    match fs::symlink_metadata(workspace) {
        Ok(meta) if meta.is_dir() => {}
        Ok(_) => return Err(incomplete("the workspace is not a directory".into())),
        Err(e) => return Err(incomplete(format!("the workspace is missing ({e})"))),
    }

    let source = open_source_repo(Path::new(&record.repository))?;
    // Only a linked worktree has a `.git` file, and only one registered in the source.
    let linked_worktrees = match record.materialization {
        Materialization::Linked => Some(linked_worktrees_dir(&source).map_err(incomplete)?),
        _ => None,
    };
    let head = workspace_head(workspace, linked_worktrees.as_deref()).map_err(incomplete)?;
    let found = head.commit();
    let moved = found != Some(expected);
    if moved && !allow_rebase {
        return Err(incomplete(format!(
            "HEAD moved: expected detached at commit {expected}, found {head}"
        )));
    }

    let base =
        base_tree(&source, &expected.to_string()).map_err(|e| changes_error(workspace, e))?;
    if base.tree != tree {
        return Err(incomplete(format!(
            "commit {expected} has tree {} in the source, the record says {tree}",
            base.tree
        )));
    }
    let inherited = inherited(&base, workspace)?;
    Ok(ResumeReport {
        workspace: workspace.clone(),
        expected,
        found,
        moved,
        inherited,
    })
}
