//! Rebuilding an export's changes from the workspace as it is now, and writing them
//! as blobs and trees into the source repository.

use std::collections::HashMap;
use std::path::Path;

use gix::objs::tree::EntryKind;
use workspace_core::boundary::{ChangeKind, PatchExport};

use super::PromotionError;
use crate::changes::{BaseTree, Change, Entry, MODE_EXECUTABLE, MODE_SYMLINK, read_current};

/// The new content of each added or modified path, keyed by path.
pub(crate) type Contents = HashMap<String, Vec<u8>>;

/// Rebuilds the changes `export` lists from `base` and the workspace as it is now,
/// reading every new side once (without following symlinks). A path whose state no
/// longer fits the export is [`PromotionError::ExportOutdated`]; finer differences
/// (content, mode) show up as a different patch digest when the caller renders the
/// result again.
pub(crate) fn rebuild_changes(
    base: &BaseTree,
    workspace: &Path,
    export: &PatchExport,
) -> Result<(Vec<Change>, Contents), PromotionError> {
    let mut changes = Vec::with_capacity(export.changes.len());
    let mut contents = Contents::new();
    for changed in &export.changes {
        let outdated = || PromotionError::ExportOutdated {
            path: changed.path.clone(),
        };
        let old_path = match &changed.change {
            ChangeKind::Renamed { from } => from.as_str(),
            _ => changed.path.as_str(),
        };
        let old = match changed.change {
            ChangeKind::Added => None,
            _ => Some(*base.entries.get(old_path).ok_or_else(outdated)?),
        };
        let new = match changed.change {
            ChangeKind::Deleted => {
                if read_current(workspace, &changed.path)
                    .map_err(PromotionError::changes("read changed file"))?
                    .is_some()
                {
                    return Err(outdated());
                }
                None
            }
            _ => {
                let (entry, content) = read_current(workspace, &changed.path)
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
        let content = contents
            .get(&change.path)
            .ok_or_else(|| PromotionError::ExportOutdated {
                path: change.path.clone(),
            })?;
        let id = repo
            .write_blob(content)
            .map_err(PromotionError::objects("write blob", &change.path))?
            .detach();
        if id != new.id {
            return Err(PromotionError::ExportOutdated {
                path: change.path.clone(),
            });
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

fn entry_kind(entry: &Entry) -> EntryKind {
    match entry.mode {
        MODE_SYMLINK => EntryKind::Link,
        MODE_EXECUTABLE => EntryKind::BlobExecutable,
        _ => EntryKind::Blob,
    }
}
