//! Resume: re-verifying an existing checkout against its record.
//!
//! The workspace's `.git` is agent-writable, so its repository is never opened (no
//! config, no hooks, no filters): `HEAD` is read as a plain file, and the base tree is
//! read from the source repository by the recorded commit id.

use std::fs;
use std::path::{Path, PathBuf};

use gix::ObjectId;
use workspace_core::boundary::SourceRecord;

use super::SourceError;
use super::resolve::open_source_repo;
use super::walk::{Inherited, inherited};

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
/// `allow_rebase` is false.
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

    let head = read_head(workspace).map_err(incomplete)?;
    let found = ObjectId::from_hex(head.as_bytes()).ok();
    let moved = found != Some(expected);
    if moved && !allow_rebase {
        return Err(incomplete(format!(
            "HEAD moved: expected detached at commit {expected}, found {}",
            found.map_or_else(|| head.clone(), |id| format!("commit {id}"))
        )));
    }

    let source = open_source_repo(Path::new(&record.repository))?;
    let actual_tree = super::checkout::tree_of(&source, expected)?;
    if actual_tree != tree {
        return Err(incomplete(format!(
            "commit {expected} has tree {actual_tree} in the source, the record says {tree}"
        )));
    }
    let inherited = inherited(&source, tree, workspace)?;
    Ok(ResumeReport {
        workspace: workspace.clone(),
        expected,
        found,
        moved,
        inherited,
    })
}

/// The trimmed content of the workspace's `HEAD`, read as plain data. A `.git` file
/// (linked worktree) is followed to its `gitdir` once.
fn read_head(workspace: &Path) -> Result<String, String> {
    let dot_git = workspace.join(".git");
    let meta = fs::symlink_metadata(&dot_git)
        .map_err(|e| format!("{} is missing ({e})", dot_git.display()))?;
    let git_dir = if meta.is_dir() {
        dot_git
    } else if meta.is_file() {
        let text = fs::read_to_string(&dot_git)
            .map_err(|e| format!("cannot read {} ({e})", dot_git.display()))?;
        let target = text
            .trim_end()
            .strip_prefix("gitdir: ")
            .ok_or_else(|| format!("{} is not a gitdir file", dot_git.display()))?;
        workspace.join(target)
    } else {
        return Err(format!("{} is a symlink", dot_git.display()));
    };
    let head = git_dir.join("HEAD");
    let meta =
        fs::symlink_metadata(&head).map_err(|e| format!("cannot read {} ({e})", head.display()))?;
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", head.display()));
    }
    let text =
        fs::read_to_string(&head).map_err(|e| format!("cannot read {} ({e})", head.display()))?;
    Ok(text.trim().to_owned())
}
