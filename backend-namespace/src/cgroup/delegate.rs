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
//!
//! On a pure v2 host a process can only be moved between groups whose closest
//! common ancestor's `cgroup.procs` its user may write, so an ordinary user's
//! runs must be made inside the subtree its own process runs in, delegated to
//! it: what systemd's user manager gives (`user@UID.service`, and a scope
//! started with `systemd-run --user --scope -p Delegate=yes`).
//! [`delegated_subtree`] finds it.

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
/// `uid`:`gid` (the directory and its `cgroup.procs`, `tasks`,
/// `cgroup.threads` and `cgroup.subtree_control`, where they exist); on v2 the
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
    // A parent not made yet is the user's to make where the closest directory
    // that exists is its own (inside a subtree delegated to it).
    let owned = |dir: &Path| {
        dir.ancestors()
            .find_map(|d| std::fs::metadata(d).ok())
            .is_some_and(|meta| meta.uid() == uid)
    };
    Ok(hierarchy_mounts(&layout.clone().for_an_ordinary_user())
        .into_iter()
        .map(|mount| mount.join(&parent))
        .filter(|dir| !owned(dir))
        .collect())
}

/// The cgroup subtree delegated to this process's user that this process runs
/// in, on a layout whose runs use the v2 hierarchy alone: the highest ancestor
/// of its own v2 group (`/proc/self/cgroup`) the user owns, as a path under the
/// hierarchy's root (`user.slice/user-1000.slice/user@1000.service`). `None`
/// for root, on a layout with v1 hierarchies, and when no ancestor is the
/// user's own.
///
/// # Ambient authority
/// Reads `/proc/self/cgroup` and the owners of the host's cgroup directories.
pub fn delegated_subtree(layout: &CgroupLayout) -> Option<PathBuf> {
    let uid = nix::unistd::geteuid();
    if uid.is_root() {
        return None;
    }
    let unified = v2_alone(layout)?;
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let own = own.lines().find_map(|line| line.strip_prefix("0::/"))?;
    highest_owned(&unified, Path::new(own.trim()), uid.as_raw())
}

/// The v2 hierarchy's mount when an ordinary user's runs use it alone (a pure
/// v2 host).
pub(crate) fn v2_alone(layout: &CgroupLayout) -> Option<PathBuf> {
    let layout = layout.clone().for_an_ordinary_user();
    let unified = layout.unified()?.to_path_buf();
    (hierarchy_mounts(&layout) == [unified.clone()]).then_some(unified)
}

/// The shortest prefix of `group` (a path under the hierarchy `mount`) whose
/// directory `uid` owns, when every longer prefix is `uid`'s too.
fn highest_owned(mount: &Path, group: &Path, uid: u32) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let owned =
        |prefix: &Path| std::fs::metadata(mount.join(prefix)).is_ok_and(|meta| meta.uid() == uid);
    let mut highest = None;
    let mut prefix = group.to_path_buf();
    while !prefix.as_os_str().is_empty() && owned(&prefix) {
        highest = Some(prefix.clone());
        if !prefix.pop() {
            break;
        }
    }
    highest
}

fn give(path: &Path, uid: u32, gid: u32) -> Result<(), CgroupError> {
    chown(path, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid))).map_err(|errno| {
        CgroupError::Delegate {
            path: path.to_path_buf(),
            source: errno.into(),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_delegated_subtree_is_the_highest_ancestor_the_user_owns() {
        let mount = tempfile::tempdir().unwrap();
        let group = Path::new("system/user@4242/app/scope");
        std::fs::create_dir_all(mount.path().join(group)).unwrap();
        for owned in [
            "system/user@4242",
            "system/user@4242/app",
            "system/user@4242/app/scope",
        ] {
            chown(&mount.path().join(owned), Some(Uid::from_raw(4242)), None).unwrap();
        }
        assert_eq!(
            highest_owned(mount.path(), group, 4242),
            Some(PathBuf::from("system/user@4242"))
        );
        // A group another user owns, or one not its own below an owned one.
        assert_eq!(highest_owned(mount.path(), group, 4343), None);
        chown(
            &mount.path().join("system/user@4242/app/scope"),
            Some(Uid::from_raw(0)),
            None,
        )
        .unwrap();
        assert_eq!(highest_owned(mount.path(), group, 4242), None);
    }
}
