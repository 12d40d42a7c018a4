//! Reading an overlayfs upper directory as what a run changed.
//!
//! With the base tree as the overlay's lower layer, the upper directory holds exactly
//! what the run wrote: created and modified files (copied up whole), whiteouts (a
//! character device 0:0) for deleted paths, and opaque directories (marked with the
//! `trusted.overlay.opaque` or, for overlays mounted in a user namespace with
//! `userxattr`, `user.overlay.opaque` extended attribute) for directories that were
//! removed and made again. Walking it is O(changes), not O(repository).
//!
//! The mount must create no redirects and no metadata-only copy-ups
//! (`redirect_dir=nofollow,metacopy=off`, as the namespace backend mounts it): with redirects or metadata-only copy-ups the upper directory no
//! longer holds every changed file's content, and this reading would be incomplete.
//!
//! Nothing here follows a symlink: links are recorded as links. The walk goes
//! through [`cap_std::fs::Dir`] handles one component at a time, never by host
//! path: a tree deeper than `PATH_MAX` is read like any other, a directory is opened
//! relative to its parent's handle and must be the inode that was listed (so one
//! swapped for a symlink while the walk runs is refused), and the opaque mark is
//! read from the opened directory's descriptor.

use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use cap_std::ambient_authority;
use cap_std::fs::{Dir, FileTypeExt, Metadata, MetadataExt};
use workspace_core::boundary::{ChangeKind, NotInPatch};

use crate::changes::Uncarried;
use crate::changes::uncarried::shown_path;

/// One entry of an upper directory, by path relative to the upper directory.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UpperEntry {
    /// A regular file created or modified by the run.
    File {
        /// Relative path, `/`-separated.
        path: String,
        /// Whether any execute bit is set.
        executable: bool,
    },
    /// A symbolic link created or retargeted by the run.
    Symlink {
        /// Relative path.
        path: String,
    },
    /// A path deleted by the run (whatever the lower layer had there).
    Whiteout {
        /// Relative path.
        path: String,
    },
    /// A directory that hides everything the lower layer had below it.
    OpaqueDir {
        /// Relative path.
        path: String,
    },
    /// What a patch cannot name: an entry whose name is not UTF-8 (a directory
    /// is one entry, not walked into), or a `.git` below the root (a nested
    /// repository).
    Uncarried(Uncarried),
}

/// Why an upper directory could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UpperError {
    /// Listing or inspecting a path failed.
    #[error("overlay upper directory: cannot read {path}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A file name is not UTF-8 (git paths here are UTF-8 only).
    #[error("overlay upper directory: {path} is not a UTF-8 path")]
    NonUtf8Path {
        /// The path.
        path: PathBuf,
    },
    /// A directory changed between being listed and being opened (it was replaced,
    /// e.g. by a symlink): the walk refuses to read through it.
    #[error("overlay upper directory: {path} was replaced while it was being read")]
    Replaced {
        /// The path.
        path: PathBuf,
    },
}

/// Every changed entry under `upper`, sorted by path, skipping the top-level `.git`.
/// Directories appear only when opaque; their contents are listed as entries. A
/// name that is not UTF-8 and a nested `.git` are [`UpperEntry::Uncarried`].
///
/// # Ambient authority
/// `upper` is a host path, opened as given; nothing below it is followed.
pub fn walk_upper(upper: &Path) -> Result<Vec<UpperEntry>, UpperError> {
    let root =
        Dir::open_ambient_dir(upper, ambient_authority()).map_err(|source| UpperError::Io {
            path: upper.to_path_buf(),
            source,
        })?;
    let mut entries = Vec::new();
    let mut pending = Vec::new();
    list(&Rc::new(root), "", upper, &mut entries, &mut pending)?;
    while let Some(next) = pending.pop() {
        let host = upper.join(&next.path);
        let io_error = |source| UpperError::Io {
            path: host.clone(),
            source,
        };
        let dir = next.parent.open_dir(&next.name).map_err(io_error)?;
        let opened = dir.dir_metadata().map_err(io_error)?;
        if opened.dev() != next.examined.dev() || opened.ino() != next.examined.ino() {
            return Err(UpperError::Replaced { path: host });
        }
        // The parent's handle is closed once its last pending child is opened.
        drop(next.parent);
        if is_opaque(&dir, &host)? {
            entries.push(UpperEntry::OpaqueDir {
                path: next.path.clone(),
            });
        }
        list(&Rc::new(dir), &next.path, upper, &mut entries, &mut pending)?;
    }
    entries.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
    Ok(entries)
}

/// A directory found by [`list`], opened when the walk reaches it.
struct Pending {
    /// The handle of the directory it was listed in.
    parent: Rc<Dir>,
    /// Its name there.
    name: OsString,
    /// What it was when listed (not followed).
    examined: Metadata,
    /// Its path relative to the upper directory.
    path: String,
}

/// Records the entries of `dir` (at `prefix`) in `entries`, and its directories in
/// `pending`.
fn list(
    dir: &Rc<Dir>,
    prefix: &str,
    upper: &Path,
    entries: &mut Vec<UpperEntry>,
    pending: &mut Vec<Pending>,
) -> Result<(), UpperError> {
    let io_error = |source| UpperError::Io {
        path: upper.join(prefix),
        source,
    };
    for entry in dir.entries().map_err(io_error)? {
        let name = entry.map_err(io_error)?.file_name();
        let shown = shown_path(prefix, &name);
        let meta = dir
            .symlink_metadata(&name)
            .map_err(|source| UpperError::Io {
                path: upper.join(prefix).join(&name),
                source,
            })?;
        let file_type = meta.file_type();
        let named = file_type.is_dir() || file_type.is_file() || file_type.is_symlink();
        let Some(text) = name.to_str() else {
            // The patch names paths as UTF-8 text: record it, read nothing. A
            // whiteout deletes such a name of the base; a fifo, socket or device
            // is left out, as git leaves it out.
            let whiteout = file_type.is_char_device() && meta.rdev() == 0;
            if named || whiteout {
                entries.push(UpperEntry::Uncarried(Uncarried {
                    path: shown,
                    kind: if named {
                        ChangeKind::Added
                    } else {
                        ChangeKind::Deleted
                    },
                    reason: NotInPatch::NotUtf8,
                }));
            }
            continue;
        };
        if text == ".git" {
            // The top one is the checkout's own repository; one below it is a
            // nested repository, whose files git leaves out: recorded.
            if !prefix.is_empty() && named {
                entries.push(UpperEntry::Uncarried(Uncarried {
                    path: shown,
                    kind: ChangeKind::Added,
                    reason: NotInPatch::NestedRepository,
                }));
            }
            continue;
        }
        let path = shown;
        if file_type.is_dir() {
            pending.push(Pending {
                parent: Rc::clone(dir),
                name,
                examined: meta,
                path,
            });
        } else if file_type.is_symlink() {
            entries.push(UpperEntry::Symlink { path });
        } else if file_type.is_file() {
            entries.push(UpperEntry::File {
                path,
                executable: meta.mode() & 0o111 != 0,
            });
        } else {
            // A whiteout (a 0:0 character device) deletes the path. Any other
            // special file (fifo, socket, device) hides the lower entry just the
            // same and cannot be recorded by git: the standalone walk leaves it
            // out, so here it reads as a deletion too.
            entries.push(UpperEntry::Whiteout { path });
        }
    }
    Ok(())
}

/// The directory `path` lies in (`""` at the root).
pub(crate) fn parent(path: &str) -> &str {
    path.rsplit_once('/').map_or("", |(parent, _)| parent)
}

/// The relative path of an entry.
pub fn entry_path(entry: &UpperEntry) -> &str {
    match entry {
        UpperEntry::File { path, .. }
        | UpperEntry::Symlink { path }
        | UpperEntry::Whiteout { path }
        | UpperEntry::OpaqueDir { path }
        | UpperEntry::Uncarried(Uncarried { path, .. }) => path,
    }
}

/// Whether overlayfs marked the opened directory `dir` (at `host`, for errors)
/// opaque.
fn is_opaque(dir: &Dir, host: &Path) -> Result<bool, UpperError> {
    use rustix::fs::{Mode, OFlags};
    // cap-std holds directories as `O_PATH` descriptors, which have no xattrs: open
    // the very directory (`.`) for reading to ask.
    let readable = rustix::fs::openat(
        dir,
        ".",
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
    .map_err(|errno| UpperError::Io {
        path: host.to_path_buf(),
        source: errno.into(),
    })?;
    for attribute in ["trusted.overlay.opaque", "user.overlay.opaque"] {
        let mut value = [0u8; 4];
        match rustix::fs::fgetxattr(&readable, attribute, &mut value) {
            Ok(len) => return Ok(value.get(..len) == Some(b"y".as_slice())),
            // Absent attribute, or a file system without xattrs: not opaque.
            Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => {}
            Err(errno) => {
                return Err(UpperError::Io {
                    path: host.to_path_buf(),
                    source: errno.into(),
                });
            }
        }
    }
    Ok(false)
}
