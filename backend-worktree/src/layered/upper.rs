//! Reading an overlayfs upper directory as what a run changed.
//!
//! With the base tree as the overlay's lower layer, the upper directory holds exactly
//! what the run wrote: created and modified files (copied up whole), whiteouts (a
//! character device 0:0) for deleted paths, and opaque directories (marked with the
//! `trusted.overlay.opaque` or, for overlays mounted in a user namespace with
//! `userxattr`, `user.overlay.opaque` extended attribute) for directories that were
//! removed and made again. Walking it is O(changes), not O(repository).
//!
//! The mount must use `redirect_dir=off` and `metacopy=off` (the namespace backend's
//! mount plan does): with redirects or metadata-only copy-ups the upper directory no
//! longer holds every changed file's content, and this reading would be incomplete.
//!
//! Nothing here follows a symlink: links are recorded as links.

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

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
    /// A fifo, socket or device other than a whiteout.
    #[error("overlay upper directory: {path} is a special file that cannot be part of a change")]
    SpecialFile {
        /// The path.
        path: PathBuf,
    },
}

/// Every changed entry under `upper`, sorted by path, skipping the top-level `.git`.
/// Directories appear only when opaque; their contents are listed as entries.
///
/// # Ambient authority
/// `upper` is a host path, used as given; nothing below it is followed.
pub fn walk_upper(upper: &Path) -> Result<Vec<UpperEntry>, UpperError> {
    let mut entries = Vec::new();
    let mut stack = vec![(upper.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = stack.pop() {
        let listing = fs::read_dir(&dir).map_err(|source| UpperError::Io {
            path: dir.clone(),
            source,
        })?;
        for entry in listing {
            let entry = entry.map_err(|source| UpperError::Io {
                path: dir.clone(),
                source,
            })?;
            let host_path = entry.path();
            let name = entry
                .file_name()
                .into_string()
                .map_err(|_| UpperError::NonUtf8Path {
                    path: host_path.clone(),
                })?;
            if prefix.is_empty() && name == ".git" {
                continue;
            }
            let path = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let meta = fs::symlink_metadata(&host_path).map_err(|source| UpperError::Io {
                path: host_path.clone(),
                source,
            })?;
            let file_type = meta.file_type();
            if file_type.is_dir() {
                if is_opaque(&host_path)? {
                    entries.push(UpperEntry::OpaqueDir { path: path.clone() });
                }
                stack.push((host_path, path));
            } else if file_type.is_symlink() {
                entries.push(UpperEntry::Symlink { path });
            } else if file_type.is_file() {
                entries.push(UpperEntry::File {
                    path,
                    executable: meta.mode() & 0o111 != 0,
                });
            } else if file_type.is_char_device() && meta.rdev() == 0 {
                entries.push(UpperEntry::Whiteout { path });
            } else {
                return Err(UpperError::SpecialFile { path: host_path });
            }
        }
    }
    entries.sort_by(|a, b| entry_path(a).cmp(entry_path(b)));
    Ok(entries)
}

/// The relative path of an entry.
pub fn entry_path(entry: &UpperEntry) -> &str {
    match entry {
        UpperEntry::File { path, .. }
        | UpperEntry::Symlink { path }
        | UpperEntry::Whiteout { path }
        | UpperEntry::OpaqueDir { path } => path,
    }
}

/// Whether overlayfs marked `dir` opaque.
fn is_opaque(dir: &Path) -> Result<bool, UpperError> {
    for attribute in ["trusted.overlay.opaque", "user.overlay.opaque"] {
        let mut value = [0u8; 4];
        match rustix::fs::lgetxattr(dir, attribute, &mut value) {
            Ok(len) => return Ok(value.get(..len) == Some(b"y".as_slice())),
            // Absent attribute, or a file system without xattrs: not opaque.
            Err(rustix::io::Errno::NODATA | rustix::io::Errno::NOTSUP) => {}
            Err(errno) => {
                return Err(UpperError::Io {
                    path: dir.to_path_buf(),
                    source: errno.into(),
                });
            }
        }
    }
    Ok(false)
}
