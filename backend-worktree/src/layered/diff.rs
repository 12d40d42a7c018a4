//! A layered run's changes and patch, from its upper directory: O(changes).
//!
//! Only the base entries a change touches are looked up: for each entry of the
//! upper directory, each of its parent directories is looked up by path (a blob
//! there is a file the run replaced by a directory; a gitlink there puts the entry
//! inside a submodule, which is left out as in the standalone comparison), and the
//! entry's own path. A base subtree is traversed only under a whiteout, an opaque
//! directory, or a file or symlink that replaced a directory, so the cost follows
//! the number of changes, not the size of the repository. The comparison, the patch
//! and `changes.json` are the very functions the standalone checkout uses, so both
//! materializations give the same diff and promotion.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use workspace_core::boundary::{NotInPatch, PatchExport};
use workspace_core::digest::sha256_hex;

use super::upper::{UpperEntry, UpperError, walk_upper};
use crate::changes::{
    Change, ChangeOptions, ChangesError, ContentBudget, ContentLimits, Entry, MODE_GITLINK,
    PathFilter, Uncarried, compare, current_entry, parse_commit_id, read_entry_within,
    split_refused,
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
    /// The base tree could not be looked up or traversed at a path.
    #[error("layered changes: cannot {operation} {path:?} in the tree of base commit {commit}")]
    ReadBasePath {
        /// What was being done (`"look up"`, `"traverse"`).
        operation: &'static str,
        /// The path in the base tree.
        path: String,
        /// The commit.
        commit: String,
        /// gix's error.
        #[source]
        source: gix::Error,
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

/// What the base tree holds at one path.
#[derive(Clone, Copy, Debug)]
enum BaseAt {
    /// Nothing.
    Absent,
    /// A blob or symlink.
    Entry(Entry),
    /// A tree (a directory).
    Tree(gix::ObjectId),
    /// A gitlink (a submodule): left out with everything below it.
    Gitlink,
}

/// The changes recorded in `upper` against `base_commit`, read from `repo` (the
/// source repository, opened isolated).
///
/// The same as [`crate::changes::changes_against`] gives for a checkout with the same
/// files: `.git` components, `options.skip` and the base tree's gitlinks (with
/// everything at and below them) are left out, and a non-UTF-8 base path that a
/// change reaches is [`ChangesError::NonUtf8Path`].
pub fn layered_changes(
    repo: &gix::Repository,
    base_commit: &str,
    upper: &Path,
    options: &ChangeOptions,
) -> Result<Vec<Change>, LayeredDiffError> {
    let (changes, uncarried) = layered_changes_recording(repo, base_commit, upper, options)?;
    match uncarried.iter().find(|u| u.reason == NotInPatch::NotUtf8) {
        Some(found) => Err(LayeredDiffError::Upper(UpperError::NonUtf8Path {
            path: upper.join(&found.path),
        })),
        None => Ok(changes),
    }
}

/// [`layered_changes`], with what a patch cannot name (a name that is not UTF-8,
/// a nested repository's `.git`) recorded as [`Uncarried`] changes instead of
/// refused or left out. Like the other entries, one inside a submodule or left
/// out by `options.skip` is not recorded.
pub fn layered_changes_recording(
    repo: &gix::Repository,
    base_commit: &str,
    upper: &Path,
    options: &ChangeOptions,
) -> Result<(Vec<Change>, Vec<Uncarried>), LayeredDiffError> {
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
    let base_at = |path: &str, cache: &mut HashMap<String, BaseAt>| {
        if let Some(found) = cache.get(path) {
            return Ok(*found);
        }
        let found = look_up(&tree, path).map_err(|source| LayeredDiffError::ReadBasePath {
            operation: "look up",
            path: path.to_owned(),
            commit: base_commit.into(),
            source,
        })?;
        cache.insert(path.to_owned(), found);
        Ok::<_, LayeredDiffError>(found)
    };

    let entries = walk_upper(upper)?;
    let mut cache = HashMap::new();
    let mut base = BTreeMap::new();
    let mut kept = Vec::with_capacity(entries.len());
    let mut uncarried = Vec::new();
    'entries: for entry in &entries {
        let path = super::upper::entry_path(entry);
        // Each parent directory: a base file there was replaced by a directory; a
        // gitlink there puts this entry inside a submodule, which is left out.
        let mut end = 0;
        while let Some(slash) = path[end..].find('/') {
            let parent = &path[..end + slash];
            end += slash + 1;
            match base_at(parent, &mut cache)? {
                BaseAt::Gitlink => continue 'entries,
                BaseAt::Entry(found) => {
                    base.insert(parent.to_owned(), found);
                }
                BaseAt::Absent | BaseAt::Tree(_) => {}
            }
        }
        if let UpperEntry::Uncarried(found) = entry {
            if filter.skips(super::upper::parent(path)) || filter.excludes(path) {
                continue;
            }
            // Kept: the directories above it still hide what the base had there.
            uncarried.push(found.clone());
            kept.push(entry);
            continue;
        }
        match base_at(path, &mut cache)? {
            BaseAt::Gitlink => continue,
            BaseAt::Entry(found) => {
                base.insert(path.to_owned(), found);
            }
            // A directory of the base that this entry deletes, hides or replaces.
            BaseAt::Tree(id) => subtree(repo, id, path, base_commit, &mut base)?,
            BaseAt::Absent => {}
        }
        kept.push(entry);
    }
    base.retain(|path, _| !filter.skips(path));

    let mut current = base.clone();
    for entry in kept {
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
            UpperEntry::Uncarried(_) => {}
            UpperEntry::File { .. } | UpperEntry::Symlink { .. } => {
                remove_below(&mut current, path);
                if filter.skips(path) {
                    continue;
                }
                let Some(found) =
                    current_entry(upper, path).map_err(changes_error("read a changed file"))?
                else {
                    continue;
                };
                current.insert(path.to_owned(), found);
            }
        }
    }
    Ok((compare(&base, &current), uncarried))
}

/// `diff.patch` and `changes.json` of a layered run: the same format, bytes and
/// scope as [`crate::promotion::export_patch`] gives for a standalone checkout with
/// the same changes.
///
/// As the standalone export does, a change the patch cannot carry is listed with
/// why and left out of the patch; refused when the changed content exceeds
/// [`ContentLimits::default`].
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
    export_layered_patch_within(
        source_repo,
        base_commit,
        upper,
        outputs,
        options,
        ContentLimits::default(),
    )
}

/// [`export_layered_patch`] with explicit content `limits`.
pub(crate) fn export_layered_patch_within(
    source_repo: &Path,
    base_commit: &str,
    upper: &Path,
    outputs: &[String],
    options: &ChangeOptions,
    limits: ContentLimits,
) -> Result<PatchExport, LayeredDiffError> {
    let repo =
        crate::repo::open_source(source_repo).map_err(|source| LayeredDiffError::Changes {
            operation: "open the source repository",
            source: ChangesError::OpenSource {
                path: source_repo.to_path_buf(),
                source,
            },
        })?;
    let (changes, mut uncarried) = layered_changes_recording(&repo, base_commit, upper, options)?;
    let (changes, ignored) = crate::promotion::ignored::split_ignored(&repo, base_commit, changes)?;
    let (changes, refused) = split_refused(changes);
    uncarried.extend(refused);
    let mut budget = ContentBudget::new(limits);
    let mut read_new = |path: &str, entry: &Entry| {
        read_entry_within(upper, path, entry, &mut budget)
            .map_err(PromotionError::changes("read changed file"))
    };
    let patch = crate::promotion::patch::render_patch(&repo, &changes, &mut read_new)?;
    Ok(PatchExport {
        patch_sha256: sha256_hex(&patch),
        changes: crate::promotion::patch::changed_paths(&changes, &ignored, &uncarried, outputs),
        patch,
    })
}

/// What the base tree holds at `path`.
fn look_up(tree: &gix::Tree<'_>, path: &str) -> Result<BaseAt, gix::Error> {
    let Some(entry) = tree.lookup_entry_by_path(path)? else {
        return Ok(BaseAt::Absent);
    };
    let mode = entry.mode();
    let value = u32::from(mode.value());
    Ok(if mode.is_tree() {
        BaseAt::Tree(entry.oid().to_owned())
    } else if value == MODE_GITLINK {
        BaseAt::Gitlink
    } else {
        BaseAt::Entry(Entry::new(
            crate::changes::base::normalize(value),
            entry.oid().to_owned(),
        ))
    })
}

/// Adds every blob and symlink of the base subtree `id` at `path` to `out`.
/// Gitlinks are left out, as in the standalone comparison; a path that is not UTF-8
/// is [`ChangesError::NonUtf8Path`], as [`crate::changes::base_tree`] reports it.
fn subtree(
    repo: &gix::Repository,
    id: gix::ObjectId,
    path: &str,
    commit: &str,
    out: &mut BTreeMap<String, Entry>,
) -> Result<(), LayeredDiffError> {
    let traverse = |source: gix::Error| LayeredDiffError::ReadBasePath {
        operation: "traverse",
        path: path.to_owned(),
        commit: commit.into(),
        source,
    };
    let mut recorder = gix::traverse::tree::Recorder::default();
    repo.find_tree(id)
        .map_err(traverse)?
        .traverse()
        .breadthfirst(&mut recorder)
        .map_err(traverse)?;
    for record in recorder.records {
        let value = u32::from(record.mode.value());
        if record.mode.is_tree() || value == MODE_GITLINK {
            continue;
        }
        let Ok(sub) = std::str::from_utf8(record.filepath.as_ref()) else {
            let mut bytes = format!("{path}/").into_bytes();
            bytes.extend_from_slice(record.filepath.as_ref());
            return Err(LayeredDiffError::Changes {
                operation: "read base tree",
                source: ChangesError::NonUtf8Path {
                    path: std::path::PathBuf::from(
                        <std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(bytes),
                    ),
                },
            });
        };
        out.insert(
            format!("{path}/{sub}"),
            Entry::new(crate::changes::base::normalize(value), record.oid),
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
