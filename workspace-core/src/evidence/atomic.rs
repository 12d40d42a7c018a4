//! How the bundle's files are written, and when they become durable.
//!
//! Every file is replaced all-or-nothing (a temp file renamed onto its name), so a
//! reader never sees a torn file. Durability is paid once, when the bundle is
//! sealed ([`seal_durably`]): every file and directory the manifest names is synced,
//! together with the manifest's own temp file, before the manifest is renamed into
//! place and its directory synced. Until then the
//! bundle lives in the page cache, which outlives the runner's process (the case
//! recovery handles); a host that loses power loses only unsealed bundles' latest
//! writes, never a sealed bundle, and never the journal, which syncs each record
//! before it takes effect.

use std::collections::BTreeSet;
use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use super::EvidenceError;
use super::manifest::Manifest;

/// Replaces `dir/name` with `bytes` so that a reader sees either the old content
/// or the new one, never a torn file: the bytes go to `dir/.name.tmp` (created
/// fresh) and the temp file is renamed onto `name`. Not synced: see
/// [`make_durable`].
pub(crate) fn write_atomic(dir: &Path, name: &str, bytes: &[u8]) -> Result<(), EvidenceError> {
    replace(dir, name, bytes, |_| Ok(()))
}

/// Seals the bundle at `dir`: writes `name` (its manifest, `bytes`, which
/// describes `manifest`) to a temp file, syncs it in one batch with every file
/// and directory the manifest names ([`make_durable`]), and only then renames
/// it onto `name` and syncs `dir`. So a manifest is never found before all it
/// names is on disk, and the bundle costs the file system two rounds of
/// syncs, not three (the manifest synced after the batch, then its entry).
pub(crate) fn seal_durably(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    manifest: &Manifest,
) -> Result<(), EvidenceError> {
    replace(dir, name, bytes, |temp| make_durable(dir, manifest, temp))?;
    sync_dir(dir)
}

/// Writes `bytes` to `dir/.name.tmp` (created fresh), runs `before_rename` on
/// that path, and renames it onto `name`; the temp file is removed when a step
/// fails.
fn replace(
    dir: &Path,
    name: &str,
    bytes: &[u8],
    before_rename: impl FnOnce(&Path) -> Result<(), EvidenceError>,
) -> Result<(), EvidenceError> {
    let target = dir.join(name);
    let temp = discard_stale_temp(dir, name)?;
    let result = write_new(&temp, bytes)
        .and_then(|()| before_rename(&temp))
        .and_then(|()| {
            fs::rename(&temp, &target).map_err(|source| EvidenceError::Rename {
                from: temp.clone(),
                to: target.clone(),
                source,
            })
        });
    if result.is_err() {
        // Best effort: do not leave a stray temp file in the bundle.
        let _ = fs::remove_file(&temp);
    }
    result
}

/// Removes the temp file of `dir/name` an earlier attempt left (a runner
/// killed while it wrote or synced it): it is ours to replace, and no part of
/// what a manifest describes. Returns its path.
fn discard_stale_temp(dir: &Path, name: &str) -> Result<PathBuf, EvidenceError> {
    let temp = dir.join(format!(".{name}.tmp"));
    match fs::remove_file(&temp) {
        Ok(()) => Ok(temp),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(temp),
        Err(source) => Err(EvidenceError::Write { path: temp, source }),
    }
}

/// Removes every temp file (`.NAME.tmp`, a regular file) that writes killed
/// midway left anywhere in the bundle at `dir`: no bundle file is named so,
/// and none of them is part of what a manifest describes.
pub(crate) fn discard_stale_temps(dir: &Path) -> Result<(), EvidenceError> {
    for entry in super::layout::walk(dir)? {
        let temp = entry
            .path
            .file_name()
            .and_then(|name| name.to_str()?.strip_prefix('.')?.strip_suffix(".tmp"))
            .is_some_and(|of| !of.is_empty());
        if temp && entry.kind == super::layout::EntryKind::Regular {
            fs::remove_file(&entry.path).map_err(|source| EvidenceError::Write {
                path: entry.path.clone(),
                source,
            })?;
        }
    }
    Ok(())
}

/// Creates `path` (which must not exist) and writes `bytes`.
fn write_new(path: &Path, bytes: &[u8]) -> Result<(), EvidenceError> {
    let wrap = |source| EvidenceError::Write {
        path: path.to_path_buf(),
        source,
    };
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(wrap)?;
    file.write_all(bytes).map_err(wrap)
}

/// How many threads sync a bundle's entries at once. A journaling file system
/// commits the syncs that wait together in one transaction, so a bundle of a
/// dozen files costs a few commits instead of one each (measured on ext4 with
/// 15 small files: one thread per file took a third to a half of the time of
/// one thread for all).
const SYNC_WORKERS: usize = 16;

/// One entry of a bundle to make durable: a file's data, or a directory's
/// entries.
enum Entry {
    File(PathBuf),
    Dir(PathBuf),
}

/// Syncs every file `manifest` lists under `dir`, every directory holding one,
/// `dir` itself and its parent (which holds the bundle's own entry), and the
/// manifest's own temp file `staged`, several at once (see [`SYNC_WORKERS`]):
/// after this returns, all the manifest describes survives a crash of the
/// host. On a memory file system (tmpfs) nothing does, whatever is synced:
/// nothing is.
///
/// Files and directories go in one batch, in no order: durability is only
/// claimed once every sync returned, when the manifest (renamed into place
/// after this) says so, and a batch that waits together shares the file
/// system's commits.
fn make_durable(dir: &Path, manifest: &Manifest, staged: &Path) -> Result<(), EvidenceError> {
    if in_memory(dir) {
        // Nothing of it survives the host anyway; a sync there returns at once,
        // and the threads would be all the cost.
        return Ok(());
    }
    let mut dirs = BTreeSet::new();
    for rel in manifest.files.keys() {
        let mut parent = Path::new(rel.as_str()).parent();
        while let Some(p) = parent.filter(|p| !p.as_os_str().is_empty()) {
            dirs.insert(dir.join(p));
            parent = p.parent();
        }
    }
    dirs.insert(dir.to_path_buf());
    dirs.extend(dir.parent().map(Path::to_path_buf));
    let entries: Vec<Entry> = manifest
        .files
        .keys()
        .map(|rel| Entry::File(dir.join(rel)))
        .chain(std::iter::once(Entry::File(staged.to_path_buf())))
        .chain(dirs.into_iter().map(Entry::Dir))
        .collect();
    let per_worker = entries.len().div_ceil(SYNC_WORKERS).max(1);
    std::thread::scope(|scope| {
        let workers: Vec<_> = entries
            .chunks(per_worker)
            .map(|chunk| {
                scope.spawn(|| {
                    chunk.iter().try_for_each(|entry| match entry {
                        Entry::File(path) => sync_file(path),
                        Entry::Dir(path) => sync_dir(path),
                    })
                })
            })
            .collect();
        // Every worker is joined before the first error is returned.
        let results: Vec<_> = workers.into_iter().map(|worker| worker.join()).collect();
        results.into_iter().try_for_each(|joined| match joined {
            Ok(result) => result,
            Err(panic) => std::panic::resume_unwind(panic),
        })
    })
}

/// Whether `dir` is on a file system held in memory (tmpfs), which no sync
/// makes outlive the host.
pub(crate) fn in_memory(dir: &Path) -> bool {
    #[cfg(target_os = "linux")]
    {
        nix::sys::statfs::statfs(dir)
            .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::TMPFS_MAGIC)
    }
    #[cfg(not(target_os = "linux"))]
    {
        let _ = dir;
        false
    }
}

/// Syncs the bundle file `path`. The manifest was computed from regular files
/// opened without following links, and the bundle is this process's own; a file
/// that changed since is reported by `verify`, not here.
fn sync_file(path: &Path) -> Result<(), EvidenceError> {
    // Unix syncs through a read-only descriptor; elsewhere flushing a file needs
    // write access.
    let file = fs::OpenOptions::new()
        .read(true)
        .write(cfg!(not(unix)))
        .open(path)
        .map_err(|source| EvidenceError::Read {
            path: path.to_path_buf(),
            source,
        })?;
    file.sync_all().map_err(|source| EvidenceError::Write {
        path: path.to_path_buf(),
        source,
    })
}

/// Makes the directory entries of `dir` durable (a no-op where directories cannot
/// be opened, i.e. outside Unix).
pub(crate) fn sync_dir(dir: &Path) -> Result<(), EvidenceError> {
    #[cfg(unix)]
    {
        let wrap = |source| EvidenceError::Write {
            path: dir.to_path_buf(),
            source,
        };
        fs::File::open(dir)
            .map_err(wrap)?
            .sync_all()
            .map_err(wrap)?;
    }
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

/// Serializes `value` as pretty JSON followed by a newline.
pub(crate) fn to_pretty_json(
    value: &impl serde::Serialize,
    path: &Path,
) -> Result<Vec<u8>, EvidenceError> {
    let mut bytes =
        serde_json::to_vec_pretty(value).map_err(|source| EvidenceError::Serialize {
            path: path.to_path_buf(),
            source,
        })?;
    bytes.push(b'\n');
    Ok(bytes)
}
