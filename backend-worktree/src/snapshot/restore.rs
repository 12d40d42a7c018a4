//! Restoring a snapshot: verify the archive, check out its base commit, apply its
//! changes, and verify the result against the manifest.

use std::path::Path;

use super::apply::apply;
use super::archive::{Opened, open_archive};
use super::manifest::{Manifest, ManifestEntry};
use super::{RestoreOptions, RestoreReport, SnapshotError};
use crate::changes::{ChangeOptions, workspace_changes};
use crate::source::provision_standalone;

/// Restores snapshot `digest` from `store` into `dest` (which must not exist or be
/// an empty directory): [`restore_opts`] with default options.
///
/// # Ambient authority
/// `source_repo` (opened isolated, only read), `store` (only read) and `dest`
/// (written) are host paths, used as given.
pub fn restore(
    source_repo: &Path,
    store: &Path,
    digest: &str,
    dest: &Path,
) -> Result<RestoreReport, SnapshotError> {
    restore_opts(source_repo, store, digest, dest, &RestoreOptions::default())
}

/// Restores snapshot `digest` from `store` into `dest`.
///
/// 1. The archive is read once into memory; unless its sha256 is `digest`, it is
///    refused ([`SnapshotError::DigestMismatch`]) before anything is written.
/// 2. `snapshot.json` and every entry are checked: unsafe paths
///    ([`SnapshotError::UnsafeEntry`]), entries that differ from the manifest
///    ([`SnapshotError::ArchiveMismatch`]), another base commit than
///    `options.expected_base_commit` ([`SnapshotError::BaseCommitMismatch`]).
/// 3. The base commit is checked out standalone into `dest`
///    ([`provision_standalone`]).
/// 4. Deleted paths are removed, files and symlinks written, never through a
///    symlink.
/// 5. The changes of `dest` against the base commit are recomputed and must equal
///    the manifest's (paths, kinds, modes, blob ids), else
///    [`SnapshotError::RestoredTreeMismatch`].
///
/// When a step after 3 fails, `dest` is removed again (symlinks in it are removed,
/// never followed).
///
/// # Ambient authority
/// `source_repo` (opened isolated, only read), `store` (only read) and `dest`
/// (written) are host paths, used as given.
pub fn restore_opts(
    source_repo: &Path,
    store: &Path,
    digest: &str,
    dest: &Path,
    options: &RestoreOptions,
) -> Result<RestoreReport, SnapshotError> {
    let _span = tracing::info_span!("snapshot.restore", digest, dest = %dest.display()).entered();
    let opened = open_archive(store, digest)?;
    if let Some(expected) = &options.expected_base_commit
        && !expected.eq_ignore_ascii_case(&opened.manifest.base_commit)
    {
        return Err(SnapshotError::BaseCommitMismatch {
            digest: opened.digest,
            expected: expected.clone(),
            actual: opened.manifest.base_commit,
        });
    }
    let checkout = provision_standalone(source_repo, &opened.manifest.base_commit, dest).map_err(
        |source| SnapshotError::Source {
            operation: "check out the base commit into",
            path: dest.to_path_buf(),
            source: Box::new(source),
        },
    )?;
    let finish = || -> Result<RestoreReport, SnapshotError> {
        let tree = checkout.tree.to_string();
        if opened.manifest.base_tree != tree {
            return Err(SnapshotError::BaseTreeMismatch {
                digest: opened.digest.clone(),
                commit: opened.manifest.base_commit.clone(),
                expected: opened.manifest.base_tree.clone(),
                actual: tree,
            });
        }
        apply(dest, &opened.manifest, &opened.contents)?;
        verify(source_repo, dest, &opened)?;
        Ok(RestoreReport {
            workspace: dest.to_path_buf(),
            base_commit: opened.manifest.base_commit.clone(),
            digest: opened.digest.clone(),
            entries: opened.manifest.entries.len(),
            deleted: opened.manifest.deleted.len(),
            name_status: opened.manifest.name_status(),
        })
    };
    finish().inspect_err(|_| {
        // `remove_dir_all` removes symlinks, never what they point to.
        if let Err(cleanup) = std::fs::remove_dir_all(dest) {
            tracing::warn!(error = %cleanup, workspace = %dest.display(), "removing the failed restore failed");
        }
    })
}

/// Reads and checks snapshot `digest` from `store` (digest, manifest and every
/// entry, as [`restore`] does before writing) and returns its manifest. Nothing is
/// written.
///
/// # Ambient authority
/// `store` is a host path, only read.
pub fn inspect(store: &Path, digest: &str) -> Result<Manifest, SnapshotError> {
    Ok(open_archive(store, digest)?.manifest)
}

/// Recomputes the changes of `dest` and compares them with the manifest.
fn verify(source_repo: &Path, dest: &Path, opened: &Opened) -> Result<(), SnapshotError> {
    let manifest = &opened.manifest;
    let options = ChangeOptions::skipping(manifest.skip.iter().cloned());
    let changes = workspace_changes(source_repo, &manifest.base_commit, dest, &options).map_err(
        SnapshotError::changes("recompute the restored tree's changes"),
    )?;
    let (entries, deleted) = Manifest::shape(&changes);
    let strip = |e: &ManifestEntry| {
        (
            e.path.clone(),
            e.kind,
            e.from.clone(),
            e.mode.clone(),
            e.blob.clone(),
        )
    };
    let expected: Vec<_> = manifest.entries.iter().map(strip).collect();
    let actual: Vec<_> = entries.iter().map(strip).collect();
    let differs = |a: Option<&String>, b: Option<&String>| SnapshotError::RestoredTreeMismatch {
        digest: opened.digest.clone(),
        path: a.or(b).cloned().unwrap_or_default(),
    };
    if expected != actual {
        let at = expected.iter().zip(&actual).position(|(a, b)| a != b);
        return Err(match at {
            Some(i) => differs(expected.get(i).map(|e| &e.0), None),
            None => differs(
                expected.get(actual.len()).map(|e| &e.0),
                actual.get(expected.len()).map(|e| &e.0),
            ),
        });
    }
    if deleted != manifest.deleted {
        let at = manifest
            .deleted
            .iter()
            .zip(&deleted)
            .position(|(a, b)| a != b);
        return Err(match at {
            Some(i) => differs(manifest.deleted.get(i), None),
            None => differs(
                manifest.deleted.get(deleted.len()),
                deleted.get(manifest.deleted.len()),
            ),
        });
    }
    tracing::info!(digest = %opened.digest, entries = expected.len(), deleted = deleted.len(), "snapshot restored and verified");
    Ok(())
}
