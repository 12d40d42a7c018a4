//! Removing a checkout from the host, without following a link and without crossing
//! into another mount.
//!
//! A checkout may still have something mounted inside it when it is released (a
//! read-write host mount the process boundary failed to unmount, an overlay): a
//! recursive removal that descends into it would delete host files. So the removal
//! here walks with `openat`/`unlinkat` relative to directory handles, unlinks every
//! symlink as a link, and compares the file system of every directory with the one of
//! the removed root (device number, and the mount id where the kernel reports it, so
//! a bind mount of a directory of the same file system is caught too): a directory on
//! another file system or mount is refused with [`SourceError::RemoveRefused`]
//! before anything in it is touched.

use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, FileType, Statx, StatxFlags};

use super::SourceError;

/// Which file system and mount an inode is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Placement {
    dev: (u32, u32),
    /// The mount id, when the kernel reports it (Linux 5.8 and later).
    mount: Option<u64>,
}

impl Placement {
    fn of(stat: &Statx) -> Self {
        let mount = (stat.stx_mask & StatxFlags::MNT_ID.bits() != 0).then_some(stat.stx_mnt_id);
        Self {
            dev: (stat.stx_dev_major, stat.stx_dev_minor),
            mount,
        }
    }

    /// Whether both are on the same file system and, where both mount ids are known,
    /// the same mount.
    pub(crate) fn same_mount(&self, other: &Self) -> bool {
        self.dev == other.dev
            && match (self.mount, other.mount) {
                (Some(a), Some(b)) => a == b,
                _ => true,
            }
    }
}

/// `statx` of `name` in `dir` (the directory itself for an empty name), never
/// following a symlink.
fn stat_at(dir: impl AsFd, name: &OsStr, path: &Path) -> Result<Statx, SourceError> {
    let flags = if name.is_empty() {
        AtFlags::SYMLINK_NOFOLLOW | AtFlags::EMPTY_PATH
    } else {
        AtFlags::SYMLINK_NOFOLLOW
    };
    rustix::fs::statx(
        dir,
        name,
        flags,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID,
    )
    .map_err(|e| SourceError::io("inspect the checkout", path, e.into()))
}

fn is_dir(stat: &Statx) -> bool {
    FileType::from_raw_mode(u32::from(stat.stx_mode)) == FileType::Directory
}

/// The directory `name` below `dir`, opened without following a link. One
/// this process may not read (overlayfs makes its `work/work` with mode 0; a
/// run may `chmod 000` its own) is made its owner's first, through a handle on
/// that very directory ([`workspace_core::own_dirs`]): an ordinary user has no
/// `CAP_DAC_OVERRIDE` to read past it. Nothing of the run runs any more, and
/// the caller checks that what it opened is what it inspected.
fn open_dir_at(dir: impl AsFd, name: &OsStr, path: &Path) -> Result<OwnedFd, SourceError> {
    workspace_core::own_dirs::open_dir(dir, name)
        .and_then(|opened| opened.ok_or_else(|| std::io::ErrorKind::NotFound.into()))
        .map_err(|e| SourceError::io("open a directory of the checkout", path, e))
}

/// `path` split into an open handle on its parent directory and its last name.
fn parent_and_name(path: &Path) -> Result<(OwnedFd, OsString), SourceError> {
    let refused = || SourceError::RemoveRefused {
        path: path.to_owned(),
        reason: "the path does not end in a name",
    };
    let name = path.file_name().ok_or_else(refused)?;
    if name == OsStr::new(".") {
        return Err(refused());
    }
    let parent = match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    };
    let fd = open_dir_at(rustix::fs::CWD, parent.as_os_str(), parent)?;
    Ok((fd, name.to_owned()))
}

fn other_mount(path: &Path) -> SourceError {
    SourceError::RemoveRefused {
        path: path.to_owned(),
        reason: "it is on another file system or mount (a mount point); nothing in it was removed",
    }
}

/// Removes the directory tree at `path`; a missing path is not an error.
///
/// Symlinks are never followed: a link in the tree is unlinked as a link, and if
/// `path` itself is a symlink only the link is removed, so a link the agent planted
/// pointing at host files removes the link, never the files. A directory on another
/// file system or mount than `path`'s parent (a mount point still mounted in the
/// checkout, or `path` itself mounted over) is refused with
/// [`SourceError::RemoveRefused`] naming it: nothing under it is touched (what was
/// removed before it was found stays removed).
pub(crate) fn remove_tree(path: &Path) -> Result<(), SourceError> {
    let (parent, name) = parent_and_name(path)?;
    let stat = match rustix::fs::statx(
        &parent,
        &name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID,
    ) {
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(SourceError::io("inspect the checkout", path, e.into())),
        Ok(stat) => stat,
    };
    if !is_dir(&stat) {
        return rustix::fs::unlinkat(&parent, &name, AtFlags::empty())
            .map_err(|e| SourceError::io("remove the checkout", path, e.into()));
    }
    let root = Placement::of(&stat);
    let parent_placement = Placement::of(&stat_at(&parent, OsStr::new(""), path)?);
    if !root.same_mount(&parent_placement) {
        return Err(other_mount(path));
    }
    remove_contents(&parent, &name, &stat, root, path)?;
    rustix::fs::unlinkat(&parent, &name, AtFlags::REMOVEDIR)
        .map_err(|e| SourceError::io("remove the checkout", path, e.into()))
}

/// One directory being emptied.
struct Frame {
    entries: rustix::fs::Dir,
    /// Its name in its parent (the frame below it on the stack).
    name: OsString,
    /// Its host path, for errors.
    path: PathBuf,
}

/// Opens the directory `name` in `parent`, examined as `stat`, refusing it if it is
/// on another mount than `root` or was replaced by something else before the open.
fn enter(
    parent: impl AsFd,
    name: &OsStr,
    stat: &Statx,
    root: Placement,
    path: PathBuf,
) -> Result<Frame, SourceError> {
    if !Placement::of(stat).same_mount(&root) {
        return Err(other_mount(&path));
    }
    let fd = open_dir_at(parent, name, &path)?;
    let opened = stat_at(&fd, OsStr::new(""), &path)?;
    if !Placement::of(&opened).same_mount(&root) {
        return Err(other_mount(&path));
    }
    if opened.stx_ino != stat.stx_ino || !is_dir(&opened) {
        return Err(SourceError::RemoveRefused {
            path,
            reason: "it was replaced while being removed",
        });
    }
    let entries = rustix::fs::Dir::new(fd)
        .map_err(|e| SourceError::io("read a directory of the checkout", &path, e.into()))?;
    Ok(Frame {
        entries,
        name: name.to_owned(),
        path,
    })
}

/// Empties the directory `name` in `parent` (examined as `stat`), depth first, with
/// an explicit stack (an agent-made deep tree cannot exhaust the thread's stack).
fn remove_contents(
    parent: &OwnedFd,
    name: &OsStr,
    stat: &Statx,
    root: Placement,
    path: &Path,
) -> Result<(), SourceError> {
    let mut stack = vec![enter(parent, name, stat, root, path.to_owned())?];
    while let Some(top) = stack.last_mut() {
        let Some(entry) = top.entries.next() else {
            if let Some(done) = stack.pop()
                && let Some(up) = stack.last()
            {
                let fd = up
                    .entries
                    .fd()
                    .map_err(|e| SourceError::io("remove the checkout", &done.path, e.into()))?;
                rustix::fs::unlinkat(fd, &done.name, AtFlags::REMOVEDIR)
                    .map_err(|e| SourceError::io("remove the checkout", &done.path, e.into()))?;
            }
            continue;
        };
        let entry = entry.map_err(|e| {
            SourceError::io("read a directory of the checkout", &top.path, e.into())
        })?;
        let child = OsStr::from_bytes(entry.file_name().to_bytes()).to_owned();
        if child == OsStr::new(".") || child == OsStr::new("..") {
            continue;
        }
        let child_path = top.path.join(&child);
        let fd = top.entries.fd().map_err(|e| {
            SourceError::io("read a directory of the checkout", &top.path, e.into())
        })?;
        // The directory entry's type is a hint; `statx` decides (a mount point is
        // seen as the root of what is mounted on it).
        let child_stat = stat_at(fd, &child, &child_path)?;
        if is_dir(&child_stat) {
            let frame = enter(fd, &child, &child_stat, root, child_path)?;
            stack.push(frame);
        } else {
            rustix::fs::unlinkat(fd, &child, AtFlags::empty())
                .map_err(|e| SourceError::io("remove the checkout", &child_path, e.into()))?;
        }
    }
    Ok(())
}

/// Removes `path` if it is an empty directory on the same file system and mount as
/// its parent; a missing path is not an error. Anything else — not a directory, not
/// empty, or a mount point (an overlay still mounted on it) — is refused with
/// [`SourceError::RemoveRefused`] and nothing is removed.
pub(crate) fn remove_empty_dir(path: &Path) -> Result<(), SourceError> {
    let (parent, name) = parent_and_name(path)?;
    let stat = match rustix::fs::statx(
        &parent,
        &name,
        AtFlags::SYMLINK_NOFOLLOW,
        StatxFlags::TYPE | StatxFlags::INO | StatxFlags::MNT_ID,
    ) {
        Err(rustix::io::Errno::NOENT) => return Ok(()),
        Err(e) => return Err(SourceError::io("inspect the checkout", path, e.into())),
        Ok(stat) => stat,
    };
    if !is_dir(&stat) {
        return Err(SourceError::RemoveRefused {
            path: path.to_owned(),
            reason: "it is not a directory",
        });
    }
    let parent_placement = Placement::of(&stat_at(&parent, OsStr::new(""), path)?);
    if !Placement::of(&stat).same_mount(&parent_placement) {
        return Err(other_mount(path));
    }
    // `rmdir` itself refuses a non-empty directory and a mount point.
    match rustix::fs::unlinkat(&parent, &name, AtFlags::REMOVEDIR) {
        Ok(()) => Ok(()),
        Err(rustix::io::Errno::NOTEMPTY | rustix::io::Errno::EXIST) => {
            Err(SourceError::RemoveRefused {
                path: path.to_owned(),
                reason: "it is not empty",
            })
        }
        Err(rustix::io::Errno::BUSY) => Err(other_mount(path)),
        Err(e) => Err(SourceError::io("remove the directory", path, e.into())),
    }
}
