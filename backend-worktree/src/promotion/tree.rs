//! Rebuilding an export's changes from the workspace as it is now, and writing them
//! as blobs and trees into the source repository.

use std::collections::HashMap;
use std::path::Path;

use gix::objs::tree::EntryKind;
use workspace_core::boundary::{ChangeKind, PatchExport};

use super::PromotionError;
use crate::changes::{
    BaseTree, Change, ContentBudget, ContentLimits, Entry, MODE_EXECUTABLE, MODE_SYMLINK,
    check_path, current_entry, read_current_within,
};

/// The new content of each path whose new blob is not already in the base tree,
/// keyed by path.
pub(crate) type Contents = HashMap<String, Vec<u8>>;

/// Rebuilds the changes `export` lists from `base` and the workspace as it is now
/// (without following symlinks). A path whose state no longer fits the export is
/// [`PromotionError::ExportOutdated`]; finer differences (content, mode) show up as
/// a different patch digest when the caller renders the result again.
///
/// Every listed path (both sides of a rename) is checked with git's path rules
/// before anything is read there. Only new content that is not already a blob of
/// the base (an addition, a modification, a type change) is read and kept, within
/// `limits` ([`ChangesError::TooLarge`](crate::changes::ChangesError::TooLarge),
/// [`ChangesError::TotalTooLarge`](crate::changes::ChangesError::TotalTooLarge));
/// a rename or mode change keeps the base blob.
pub(crate) fn rebuild_changes(
    base: &BaseTree,
    workspace: &Path,
    export: &PatchExport,
    limits: ContentLimits,
) -> Result<(Vec<Change>, Contents), PromotionError> {
    let mut changes = Vec::with_capacity(export.changes.len());
    let mut contents = Contents::new();
    let mut budget = ContentBudget::new(limits);
    // What the ignore rules left out of the patch is not part of the review either.
    for changed in export.changes.iter().filter(|c| !c.ignored) {
        let outdated = || PromotionError::ExportOutdated {
            path: changed.path.clone(),
        };
        let old_path = match &changed.change {
            ChangeKind::Renamed { from } => from.as_str(),
            _ => changed.path.as_str(),
        };
        for path in [changed.path.as_str(), old_path] {
            check_path(path, None).map_err(PromotionError::changes("check changed paths"))?;
        }
        let old = match changed.change {
            ChangeKind::Added => None,
            _ => Some(*base.entries.get(old_path).ok_or_else(outdated)?),
        };
        // Hashed first (as a stream, nothing kept) only when the base may already
        // hold the new blob; an addition is read (within the budget) directly.
        let found = match old {
            Some(_) => current_entry(workspace, &changed.path)
                .map_err(PromotionError::changes("read changed file"))?,
            None => None,
        };
        let new = match (&changed.change, found) {
            (ChangeKind::Deleted, None) => None,
            (ChangeKind::Deleted, Some(_)) => return Err(outdated()),
            (_, Some(entry)) if old.is_some_and(|o| same_blob(&o, &entry)) => Some(entry),
            (_, _) => {
                let (entry, content) = read_current_within(workspace, &changed.path, &mut budget)
                    .map_err(PromotionError::changes("read changed file"))?
                    .ok_or_else(outdated)?;
                contents.insert(changed.path.clone(), content);
                Some(entry)
            }
        };
        let is_rename = matches!(changed.change, ChangeKind::Renamed { .. });
        if is_rename && old.map(|o| o.id) != new.map(|n| n.id) {
            return Err(outdated());
        }
        changes.push(Change {
            path: changed.path.clone(),
            kind: changed.change.clone(),
            old,
            new,
        });
    }
    changes.sort_by(|a, b| a.path.cmp(&b.path));
    Ok((changes, contents))
}

/// Writes `base_tree` with `changes` applied (new blobs from `contents`) into
/// `repo`'s object database and returns the new root tree id. Gitlinks and every
/// unchanged entry stay as they are in the base tree.
pub(crate) fn write_tree(
    repo: &gix::Repository,
    base_tree: gix::ObjectId,
    changes: &[Change],
    contents: &Contents,
) -> Result<gix::ObjectId, PromotionError> {
    let mut editor = repo
        .edit_tree(base_tree)
        .map_err(PromotionError::objects("edit tree", base_tree))?;
    // Removals first, so a path freed by a deletion (a directory replaced by a file
    // or the reverse) is empty when the addition arrives.
    for change in changes {
        if change.new.is_none() || change.old_path() != change.path {
            editor
                .remove(change.old_path())
                .map_err(PromotionError::objects(
                    "remove tree entry",
                    change.old_path(),
                ))?;
        }
    }
    for change in changes {
        let Some(new) = change.new else { continue };
        let outdated = || PromotionError::ExportOutdated {
            path: change.path.clone(),
        };
        let id = match (contents.get(&change.path), change.old) {
            (Some(content), _) => repo
                .write_blob(content)
                .map_err(PromotionError::objects("write blob", &change.path))?
                .detach(),
            // A rename or mode change: the blob is the base's, already stored.
            (None, Some(old)) if same_blob(&old, &new) => old.id,
            (None, _) => return Err(outdated()),
        };
        if id != new.id {
            return Err(outdated());
        }
        editor
            .upsert(change.path.as_str(), entry_kind(&new), id)
            .map_err(PromotionError::objects("add tree entry", &change.path))?;
    }
    Ok(editor
        .write()
        .map_err(PromotionError::objects(
            "write tree",
            "of the review commit",
        ))?
        .detach())
}

/// Whether `a` and `b` are the same blob of the same type (file or symlink), so the
/// base's blob serves the new side as it is.
fn same_blob(a: &Entry, b: &Entry) -> bool {
    a.id == b.id && a.is_symlink() == b.is_symlink()
}

fn entry_kind(entry: &Entry) -> EntryKind {
    match entry.mode {
        MODE_SYMLINK => EntryKind::Link,
        MODE_EXECUTABLE => EntryKind::BlobExecutable,
        _ => EntryKind::Blob,
    }
}
