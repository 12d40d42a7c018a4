//! Writing a verified snapshot's changes into a fresh checkout, never through a
//! symlink.
//!
//! Every path is reached from a [`Dir`] on the destination root one component at a
//! time: a component is examined with `symlink_metadata` and then opened with
//! `O_NOFOLLOW | O_DIRECTORY`, so a parent that is a symlink is refused rather than
//! followed, and the final name is created exclusively (`O_EXCL`) or as a link.

use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, OpenOptions, OpenOptionsExt, Permissions, PermissionsExt};
use rustix::fs::{Mode, OFlags};

use super::SnapshotError;
use super::manifest::{EntryKind, Manifest};
use crate::changes::MODE_EXECUTABLE;

/// Removes the manifest's deleted paths and rename sources from `dest`, prunes the
/// directories that became empty, then writes every entry (files with their
/// executable bit, symlinks as links) from `contents`.
pub(crate) fn apply(
    dest: &Path,
    manifest: &Manifest,
    contents: &[Vec<u8>],
) -> Result<(), SnapshotError> {
    let root = Dir::open_ambient_dir(dest, ambient_authority())
        .map_err(|e| SnapshotError::io("open the destination", dest, e))?;
    let removed: Vec<&str> = manifest
        .deleted
        .iter()
        .map(String::as_str)
        .chain(
            manifest
                .entries
                .iter()
                .filter(|e| e.kind == EntryKind::Renamed)
                .filter_map(|e| e.from.as_deref()),
        )
        .collect();
    for path in &removed {
        remove(&root, dest, path)?;
    }
    for path in &removed {
        prune_empty_parents(&root, path);
    }
    for (entry, data) in manifest.entries.iter().zip(contents) {
        let git = entry.entry().ok_or(SnapshotError::Apply {
            path: dest.join(&entry.path),
            reason: "mode or blob id is malformed",
        })?;
        let (dir, name) = parent(&root, dest, &entry.path, true)?.ok_or(SnapshotError::Apply {
            path: dest.join(&entry.path),
            reason: "a parent directory is missing",
        })?;
        clear(&dir, dest, &entry.path, name)?;
        let host = dest.join(&entry.path);
        if git.is_symlink() {
            dir.symlink_contents(OsStr::from_bytes(data), name)
                .map_err(|e| SnapshotError::io("create a symlink", &host, e))?;
        } else {
            let mode = if git.mode == MODE_EXECUTABLE {
                0o755
            } else {
                0o644
            };
            let mut options = OpenOptions::new();
            options.write(true).create_new(true).mode(mode);
            let mut file = dir
                .open_with(name, &options)
                .map_err(|e| SnapshotError::io("create a file", &host, e))?;
            file.write_all(data)
                .map_err(|e| SnapshotError::io("write a file", &host, e))?;
            // The umask may have cleared bits at creation: set them exactly.
            file.set_permissions(Permissions::from_mode(mode))
                .map_err(|e| SnapshotError::io("set the mode of", &host, e))?;
        }
    }
    Ok(())
}

/// Removes the file or symlink at `path` (nothing there is fine; a directory is
/// refused: the base tree had a file there).
fn remove(root: &Dir, dest: &Path, path: &str) -> Result<(), SnapshotError> {
    let Some((dir, name)) = parent(root, dest, path, false)? else {
        return Ok(());
    };
    let host = dest.join(path);
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.is_dir() => Err(SnapshotError::Apply {
            path: host,
            reason: "a path to delete is a directory",
        }),
        Ok(_) => dir
            .remove_file(name)
            .map_err(|e| SnapshotError::io("remove a deleted file", &host, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SnapshotError::io("inspect", &host, e)),
    }
}

/// Removes `path`'s parent directories that are empty now, deepest first (as git
/// does after deleting a file). Failures leave the directory in place: the
/// verification that follows decides whether the result is right.
fn prune_empty_parents(root: &Dir, path: &str) {
    let mut current = path;
    while let Some((up, _)) = current.rsplit_once('/') {
        if root.remove_dir(up).is_err() {
            break;
        }
        current = up;
    }
}

/// Makes room for a new entry `name` in `dir`: removes a file or symlink there, or
/// an empty directory; refuses a non-empty directory.
fn clear(dir: &Dir, dest: &Path, path: &str, name: &str) -> Result<(), SnapshotError> {
    let host = dest.join(path);
    match dir.symlink_metadata(name) {
        Ok(meta) if meta.is_dir() => dir.remove_dir(name).map_err(|_| SnapshotError::Apply {
            path: host,
            reason: "a non-empty directory is in the way",
        }),
        Ok(_) => dir
            .remove_file(name)
            .map_err(|e| SnapshotError::io("replace a file", &host, e)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SnapshotError::io("inspect", &host, e)),
    }
}

/// The directory holding `path` and its last component, reached from `root` one
/// component at a time without following a symlink. Missing directories are
/// created when `create` is set, else `None` is returned.
fn parent<'p>(
    root: &Dir,
    dest: &Path,
    path: &'p str,
    create: bool,
) -> Result<Option<(Dir, &'p str)>, SnapshotError> {
    let (dirs, name) = match path.rsplit_once('/') {
        Some((dirs, name)) => (Some(dirs), name),
        None => (None, path),
    };
    let mut dir = root
        .try_clone()
        .map_err(|e| SnapshotError::io("open the destination", dest, e))?;
    let mut walked = String::new();
    for component in dirs.into_iter().flat_map(|d| d.split('/')) {
        if !walked.is_empty() {
            walked.push('/');
        }
        walked.push_str(component);
        let host = dest.join(&walked);
        match dir.symlink_metadata(component) {
            Ok(meta) if meta.file_type().is_symlink() => {
                return Err(SnapshotError::Apply {
                    path: host,
                    reason: "a parent component is a symlink",
                });
            }
            Ok(meta) if !meta.is_dir() => {
                return Err(SnapshotError::Apply {
                    path: host,
                    reason: "a parent component is not a directory",
                });
            }
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && create => {
                dir.create_dir(component)
                    .map_err(|e| SnapshotError::io("create a directory", &host, e))?;
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(SnapshotError::io("inspect", &host, e)),
        }
        dir = open_dir_nofollow(&dir, component)
            .map_err(|e| SnapshotError::io("open a directory", &host, e))?;
    }
    Ok(Some((dir, name)))
}

/// Opens the directory `name` in `dir`, refusing a symlink (`O_NOFOLLOW`).
fn open_dir_nofollow(dir: &Dir, name: &str) -> std::io::Result<Dir> {
    let fd = rustix::fs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(Dir::from_std_file(std::fs::File::from(fd)))
}
