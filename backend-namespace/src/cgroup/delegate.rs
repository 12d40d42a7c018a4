//! Delegating a cgroup subtree to an ordinary user.
//!
//! An ordinary user's runs make their groups under a parent directory it owns
//! in every hierarchy its layout uses (`CgroupLayout::detect` as that user).
//! Root makes that parent once ([`delegate`], what `check-host --fix --user`
//! runs) and gives the user the directory and the files that move processes
//! and hand controllers down (`cgroup.procs`, `tasks`, `cgroup.threads`,
//! `cgroup.subtree_control`), as systemd's `Delegate=yes` does on v2. The
//! groups the user then makes below are its own: the kernel gives a new group
//! to its creator. Nothing above the parent is given away, so the user cannot
//! lift the limits root set there.
//!
//! [`delegation`] reads the same back for a user: which hierarchies lack the
//! parent, or have one the user does not own.

use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, chown};

use super::paths::{check_parent_name, hierarchy_mounts};
use super::run::enable_v2_controllers;
use super::{CgroupError, CgroupLayout, Controller, Placement};

/// The files of a delegated group the user gets, where they exist.
const DELEGATED_FILES: [&str; 4] = [
    "cgroup.procs",
    "tasks",
    "cgroup.threads",
    "cgroup.subtree_control",
];

/// Makes `parent_name` in every hierarchy of `layout` and gives it to
/// `uid`:`gid` (the directory and its [`DELEGATED_FILES`]); on v2 the
/// controllers a run needs are enabled down to it first. Returns the
/// directories. Idempotent.
///
/// `layout` may be root's (`CgroupLayout::detect` as root): the hierarchies
/// delegated are those an ordinary user's runs use of it.
///
/// # Ambient authority
/// Creates directories in the host's cgroup hierarchies and changes their
/// owner: needs root.
pub fn delegate(
    layout: &CgroupLayout,
    parent_name: &str,
    uid: u32,
    gid: u32,
) -> Result<Vec<PathBuf>, CgroupError> {
    let parent = check_parent_name(parent_name)?;
    let layout = &layout.clone().for_an_ordinary_user();
    let v2: Vec<Controller> = Controller::ALL
        .into_iter()
        .filter(|c| *layout.placement(*c) == Placement::V2)
        .collect();
    let mut made = Vec::new();
    for mount in hierarchy_mounts(layout) {
        let dir = mount.join(&parent);
        std::fs::create_dir_all(&dir).map_err(|source| CgroupError::CreateDir {
            path: dir.clone(),
            source,
        })?;
        if Some(mount.as_path()) == layout.unified() {
            enable_v2_controllers(&mount, &parent, &v2)?;
        }
        give(&dir, uid, gid)?;
        for file in DELEGATED_FILES {
            let path = dir.join(file);
            if path.exists() {
                give(&path, uid, gid)?;
            }
        }
        made.push(dir);
    }
    Ok(made)
}

/// The directories of `parent_name` in the hierarchies an ordinary user's runs
/// use of `layout` (which may be root's) that `uid` cannot make groups in:
/// missing, or not its own. Empty when the subtree is delegated (or `uid` is
/// root, who needs no delegation).
///
/// # Ambient authority
/// Looks at the host's cgroup hierarchies.
pub fn delegation(
    layout: &CgroupLayout,
    parent_name: &str,
    uid: u32,
) -> Result<Vec<PathBuf>, CgroupError> {
    use std::os::unix::fs::MetadataExt;
    let parent = check_parent_name(parent_name)?;
    if uid == 0 {
        return Ok(Vec::new());
    }
    Ok(hierarchy_mounts(&layout.clone().for_an_ordinary_user())
        .into_iter()
        .map(|mount| mount.join(&parent))
        .filter(|dir| std::fs::metadata(dir).map_or(true, |meta| meta.uid() != uid))
        .collect())
}

fn give(path: &Path, uid: u32, gid: u32) -> Result<(), CgroupError> {
    chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(|errno| {
        CgroupError::Delegate {
            path: path.to_path_buf(),
            source: errno.into(),
        }
    })
}
