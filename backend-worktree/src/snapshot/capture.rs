//! Capturing a workspace (or a layered run's upper directory) into an archive.

use std::path::Path;

use workspace_core::digest::sha256_hex;

use super::archive::write_archive;
use super::manifest::{MANIFEST_VERSION, Manifest};
use super::{Snapshot, SnapshotError};
use crate::changes::{
    Change, ChangeOptions, Entry, base_tree, changes_against, parse_commit_id, read_entry,
};

/// Captures `workspace`'s changes against `base_commit` (a full commit id whose
/// tree is read from `source_repo`) into a content-addressed archive in `store`.
///
/// Every change is recorded: modified, added (untracked files too), deleted,
/// renamed and mode-changed files, and symlinks as links (their target text, never
/// what they point to). Paths matching `options.skip` and `.git` directories are
/// left out. Capturing the same state twice gives the same digest.
///
/// # Ambient authority
/// `source_repo` (opened isolated, only read), `workspace` (only walked, no
/// symlink followed) and `store` (written) are host paths, used as given.
pub fn capture(
    source_repo: &Path,
    base_commit: &str,
    workspace: &Path,
    store: &Path,
    options: &ChangeOptions,
) -> Result<Snapshot, SnapshotError> {
    let _span = tracing::info_span!("snapshot.capture", workspace = %workspace.display()).entered();
    let repo = crate::repo::open_source(source_repo).map_err(|source| SnapshotError::Changes {
        operation: "open the source repository",
        source: crate::changes::ChangesError::OpenSource {
            path: source_repo.to_path_buf(),
            source,
        },
    })?;
    let base =
        base_tree(&repo, base_commit).map_err(SnapshotError::changes("read the base tree"))?;
    let (changes, _) = changes_against(&base, workspace, options)
        .map_err(SnapshotError::changes("compute the workspace's changes"))?;
    let mut read = |path: &str, entry: &Entry| {
        read_entry(workspace, path, entry).map_err(SnapshotError::changes("read a changed file"))
    };
    store_changes(store, base_commit, &base.tree, &changes, options, &mut read)
}

/// [`capture`] for a layered run: the changes recorded in its overlay `upper`
/// directory against `base_commit`, contents read from `upper` (whiteouts are
/// deletions). The archive is the same as [`capture`] gives for a standalone
/// checkout in the same state.
///
/// # Ambient authority
/// `source_repo`, `upper` and `store` are host paths, used as given; nothing in
/// `upper` is followed.
pub fn capture_layered(
    source_repo: &Path,
    base_commit: &str,
    upper: &Path,
    store: &Path,
    options: &ChangeOptions,
) -> Result<Snapshot, SnapshotError> {
    let _span = tracing::info_span!("snapshot.capture_layered", upper = %upper.display()).entered();
    let repo = crate::repo::open_source(source_repo).map_err(|source| SnapshotError::Changes {
        operation: "open the source repository",
        source: crate::changes::ChangesError::OpenSource {
            path: source_repo.to_path_buf(),
            source,
        },
    })?;
    let commit =
        parse_commit_id(base_commit).map_err(SnapshotError::changes("parse the base commit"))?;
    let tree = repo
        .find_commit(commit)
        .and_then(|c| c.tree_id())
        .map_err(|source| SnapshotError::Changes {
            operation: "read the base tree",
            source: crate::changes::ChangesError::ReadBase {
                operation: "read tree id",
                commit: base_commit.into(),
                source,
            },
        })?
        .detach();
    let changes = crate::layered::diff::layered_changes(&repo, base_commit, upper, options)
        .map_err(|source| SnapshotError::Layered {
            operation: "compute the upper directory's changes",
            source,
        })?;
    let mut read = |path: &str, entry: &Entry| {
        read_entry(upper, path, entry).map_err(SnapshotError::changes("read a changed file"))
    };
    store_changes(store, base_commit, &tree, &changes, options, &mut read)
}

/// Reads the content of a changed path, checked against its walked entry.
type ReadContent<'r> = dyn FnMut(&str, &Entry) -> Result<Vec<u8>, SnapshotError> + 'r;

/// Builds the manifest of `changes` (reading each content once for its sha256),
/// then writes the archive (reading each content again, checked against the blob
/// id the walk recorded).
fn store_changes(
    store: &Path,
    base_commit: &str,
    base_tree: &gix::ObjectId,
    changes: &[Change],
    options: &ChangeOptions,
    read: &mut ReadContent<'_>,
) -> Result<Snapshot, SnapshotError> {
    let (mut entries, deleted) = Manifest::shape(changes);
    let news: Vec<Entry> = changes.iter().filter_map(|c| c.new).collect();
    for (entry, new) in entries.iter_mut().zip(&news) {
        let content = read(&entry.path, new)?;
        entry.sha256 = sha256_hex(&content);
        entry.size = content.len() as u64;
    }
    let manifest = Manifest {
        version: MANIFEST_VERSION,
        base_commit: base_commit.to_ascii_lowercase(),
        base_tree: base_tree.to_string(),
        skip: options.skip.clone(),
        entries,
        deleted,
    };
    // One content per manifest entry, in order: `shape` makes an entry for every
    // change with a new side, and `news` is those sides in the same order.
    let mut contents = entries_content(&manifest, &news, read);
    let (digest, path) = write_archive(store, &manifest, &mut contents)?;
    drop(contents);
    tracing::info!(%digest, entries = manifest.entries.len(), deleted = manifest.deleted.len(), "snapshot captured");
    Ok(Snapshot {
        digest,
        path,
        base_commit: manifest.base_commit.clone(),
        entries: manifest.entries.len(),
    })
}

fn entries_content<'a>(
    manifest: &'a Manifest,
    news: &'a [Entry],
    read: &'a mut ReadContent<'_>,
) -> impl Iterator<Item = Result<Vec<u8>, SnapshotError>> + 'a {
    manifest
        .entries
        .iter()
        .zip(news)
        .map(move |(entry, new)| read(&entry.path, new))
}
