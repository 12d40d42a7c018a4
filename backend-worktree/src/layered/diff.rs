//! A layered run's changes and patch, from its upper directory: O(changes).
//!
//! Only the base entries a change touches are looked up (the path itself, its
//! parent directories, and the subtree under a deleted or opaque directory), so
//! the cost follows the number of changes, not the size of the repository. The
//! comparison, the patch and `changes.json` are the very functions the standalone
//! checkout uses, so both materializations give the same diff and promotion.

use std::collections::BTreeMap;
use std::path::Path;

use workspace_core::boundary::PatchExport;
use workspace_core::digest::sha256_hex;

use super::upper::{UpperEntry, UpperError, walk_upper};
use crate::changes::{
    Change, ChangeOptions, ChangesError, Entry, MODE_GITLINK, PathFilter, compare, parse_commit_id,
    read_current, read_entry,
};
use crate::promotion::PromotionError;

/// Why a layered run's changes could not be computed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayeredDiffError {
    /// The upper directory could not be read.
    #[error("layered changes: cannot read the upper directory")]
    Upper(#[from] UpperError),
    /// A changed file or the skip patterns could not be read.
    #[error("layered changes: cannot {operation}")]
    Changes {
        /// What was being done.
        operation: &'static str,
        /// The cause.
        #[source]
        source: ChangesError,
    },
    /// The base commit's objects could not be read from the source repository.
    #[error("layered changes: cannot {operation} of base commit {commit}")]
    ReadBase {
        /// What was being read.
        operation: &'static str,
        /// The commit.
        commit: String,
        /// gix's error.
        #[source]
        source: gix::Error,
    },
    /// Rendering the patch failed.
    #[error("layered changes: cannot render the patch")]
    Patch(#[from] PromotionError),
}

/// The changes recorded in `upper` against `base_commit`, read from `repo` (the
/// source repository, opened isolated).
pub fn layered_changes(
    repo: &gix::Repository,
    base_commit: &str,
    upper: &Path,
    options: &ChangeOptions,
) -> Result<Vec<Change>, LayeredDiffError> {
    let changes_error = |operation| move |source| LayeredDiffError::Changes { operation, source };
    let filter = PathFilter::new(&options.skip).map_err(changes_error("compile skip patterns"))?;
    let commit = parse_commit_id(base_commit).map_err(changes_error("parse the base commit"))?;
    let read_base = |operation: &'static str| {
        move |source: gix::Error| LayeredDiffError::ReadBase {
            operation,
            commit: base_commit.into(),
            source,
        }
    };
    let tree = repo
        .find_commit(commit)
        .map_err(read_base("find commit"))?
        .tree()
        .map_err(read_base("read tree"))?;

    let entries = walk_upper(upper)?;
    let mut base = BTreeMap::new();
    let mut looked_up = std::collections::BTreeSet::new();
    for entry in &entries {
        let path = super::upper::entry_path(entry);
        // The path, and every parent that a file of the base tree could occupy.
        let mut prefix = String::new();
        for component in path.split('/') {
            if !prefix.is_empty() {
                prefix.push('/');
            }
            prefix.push_str(component);
            if looked_up.insert(prefix.clone()) {
                base_entries_at(repo, &tree, &prefix, &mut base)
                    .map_err(read_base("look up a path"))?;
            }
        }
    }
    base.retain(|path, _| !filter.skips(path));

    let mut current = base.clone();
    for entry in &entries {
        let path = super::upper::entry_path(entry);
        // Whatever the lower layer had at a parent of this path is hidden by the
        // upper directory's directories.
        let mut parent = path;
        while let Some((up, _)) = parent.rsplit_once('/') {
            current.remove(up);
            parent = up;
        }
        match entry {
            UpperEntry::Whiteout { .. } => remove_tree(&mut current, path),
            UpperEntry::OpaqueDir { .. } => {
                current.remove(path);
                remove_below(&mut current, path);
            }
            UpperEntry::File { .. } | UpperEntry::Symlink { .. } => {
                remove_below(&mut current, path);
                if filter.skips(path) {
                    continue;
                }
                let Some((found, _)) =
                    read_current(upper, path).map_err(changes_error("read a changed file"))?
                else {
                    continue;
                };
                current.insert(path.to_owned(), found);
            }
        }
    }
    Ok(compare(&base, &current))
}

/// `diff.patch` and `changes.json` of a layered run: the same format, bytes and
/// scope as [`crate::promotion::export_patch`] gives for a standalone checkout with
/// the same changes.
///
/// # Ambient authority
/// `source_repo` and `upper` are host paths, used as given; nothing in `upper` is
/// followed.
pub fn export_layered_patch(
    source_repo: &Path,
    base_commit: &str,
    upper: &Path,
    outputs: &[String],
    options: &ChangeOptions,
) -> Result<PatchExport, LayeredDiffError> {
    let repo =
        crate::repo::open_source(source_repo).map_err(|source| LayeredDiffError::Changes {
            operation: "open the source repository",
            source: ChangesError::OpenSource {
                path: source_repo.to_path_buf(),
                source,
            },
        })?;
    let changes = layered_changes(&repo, base_commit, upper, options)?;
    let mut read_new = |path: &str, entry: &Entry| {
        read_entry(upper, path, entry).map_err(PromotionError::changes("read changed file"))
    };
    let patch = crate::promotion::patch::render_patch(&repo, &changes, &mut read_new)?;
    Ok(PatchExport {
        patch_sha256: sha256_hex(&patch),
        changes: crate::promotion::patch::changed_paths(&changes, outputs),
        patch,
    })
}

/// Adds the base tree's blobs and symlinks at `path` (one entry, or a whole subtree)
/// to `out`. Gitlinks are left out, as in the standalone comparison.
fn base_entries_at(
    repo: &gix::Repository,
    tree: &gix::Tree<'_>,
    path: &str,
    out: &mut BTreeMap<String, Entry>,
) -> Result<(), gix::Error> {
    let Some(entry) = tree.lookup_entry_by_path(path)? else {
        return Ok(());
    };
    let mode = entry.mode();
    if mode.is_tree() {
        let mut recorder = gix::traverse::tree::Recorder::default();
        repo.find_tree(entry.oid().to_owned())?
            .traverse()
            .breadthfirst(&mut recorder)?;
        for record in recorder.records {
            let value = u32::from(record.mode.value());
            if record.mode.is_tree() || value == MODE_GITLINK {
                continue;
            }
            let Ok(sub) = std::str::from_utf8(record.filepath.as_ref()) else {
                continue;
            };
            out.insert(
                format!("{path}/{sub}"),
                Entry::new(crate::changes::base::normalize(value), record.oid),
            );
        }
    } else if u32::from(mode.value()) != MODE_GITLINK {
        out.insert(
            path.to_owned(),
            Entry::new(
                crate::changes::base::normalize(u32::from(mode.value())),
                entry.oid().to_owned(),
            ),
        );
    }
    Ok(())
}

/// Removes `path` and everything below it.
fn remove_tree(entries: &mut BTreeMap<String, Entry>, path: &str) {
    entries.remove(path);
    remove_below(entries, path);
}

/// Removes everything below the directory `path`.
fn remove_below(entries: &mut BTreeMap<String, Entry>, path: &str) {
    let prefix = format!("{path}/");
    let below: Vec<String> = entries
        .range(prefix.clone()..)
        .take_while(|(key, _)| key.starts_with(&prefix))
        .map(|(key, _)| key.clone())
        .collect();
    for key in below {
        entries.remove(&key);
    }
}
