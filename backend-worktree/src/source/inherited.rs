//! What a resumed workspace inherited: its changes against the base tree, computed
//! by [`crate::changes`] (the walk and comparison the diff uses), so a resume report
//! and an exported diff always agree on which paths changed.

use std::path::Path;

use workspace_core::boundary::ChangeKind;

use super::SourceError;
use crate::changes::{BaseTree, Change, ChangeOptions, ChangesError, changes_against};

/// How the workspace differs from its base tree.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inherited {
    /// Tracked paths whose content, type or executable bit differ, and the new
    /// paths of renamed files.
    pub changed: Vec<String>,
    /// Tracked paths missing from the workspace, including the old paths of renamed
    /// files.
    pub deleted: Vec<String>,
    /// Paths in the workspace that the base tree does not have.
    pub untracked: Vec<String>,
}

impl Inherited {
    /// Sorts the changes of [`crate::changes::compare`] into the three lists, each
    /// sorted by path.
    pub(crate) fn from_changes(changes: &[Change]) -> Self {
        let mut report = Self::default();
        for change in changes {
            match &change.kind {
                ChangeKind::Added => report.untracked.push(change.path.clone()),
                ChangeKind::Modified | ChangeKind::ModeChanged => {
                    report.changed.push(change.path.clone());
                }
                ChangeKind::Deleted => report.deleted.push(change.path.clone()),
                ChangeKind::Renamed { from } => {
                    report.changed.push(change.path.clone());
                    report.deleted.push(from.clone());
                }
            }
        }
        report.changed.sort();
        report.deleted.sort();
        report.untracked.sort();
        report
    }
}

/// Compares the files under `workspace` with `base` (read from the source), as the
/// diff does: links are recorded as links, `.git` directories at any depth and the
/// base tree's gitlinks are left out, executable means the owner's execute bit.
pub(crate) fn inherited(base: &BaseTree, workspace: &Path) -> Result<Inherited, SourceError> {
    let (changes, _) = changes_against(base, workspace, &ChangeOptions::default())
        .map_err(|e| changes_error(workspace, e))?;
    Ok(Inherited::from_changes(&changes))
}

/// Wraps an error of the changes module about `workspace`.
pub(crate) fn changes_error(workspace: &Path, source: ChangesError) -> SourceError {
    SourceError::Changes {
        workspace: workspace.to_owned(),
        source: Box::new(source),
    }
}
