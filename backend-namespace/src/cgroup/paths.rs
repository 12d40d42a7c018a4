//! Names and leak checks of run cgroup directories.

use std::io;
use std::path::{Component, Path, PathBuf};

use workspace_core::RunId;

use super::{CgroupError, CgroupLayout, Controller, Placement};

/// Checks that `name` is a relative path of plain components.
pub(crate) fn check_parent_name(name: &str) -> Result<PathBuf, CgroupError> {
    let invalid = |reason| CgroupError::InvalidParentName {
        name: name.to_owned(),
        reason,
    };
    if name.is_empty() {
        return Err(invalid("it is empty"));
    }
    if name.contains('\0') {
        return Err(invalid("it contains a NUL byte"));
    }
    let path = PathBuf::from(name);
    for part in name.split('/') {
        if part.is_empty() {
            return Err(invalid("it is absolute or has an empty component"));
        }
    }
    if !path.components().all(|c| matches!(c, Component::Normal(_))) {
        return Err(invalid(
            "only plain components are allowed (no `.` or `..`)",
        ));
    }
    Ok(path)
}

/// The cgroup directories of run `run_id` under `parent_name` that still exist in any
/// hierarchy of `layout` (empty when nothing leaked).
///
/// # Ambient authority
/// Looks at the host's cgroup hierarchies.
pub fn leaked_paths(
    layout: &CgroupLayout,
    parent_name: &str,
    run_id: &RunId,
) -> Result<Vec<PathBuf>, CgroupError> {
    let parent = check_parent_name(parent_name)?;
    Ok(hierarchy_mounts(layout)
        .into_iter()
        .map(|mount| mount.join(&parent).join(run_id.as_str()))
        .filter(|path| path.exists())
        .collect())
}

/// The pids in run `run_id`'s groups and their children (every hierarchy),
/// sorted, read only: nothing is killed or removed. Empty when the run has no
/// group.
///
/// # Ambient authority
/// Reads the host's cgroup hierarchies.
pub fn run_processes(
    layout: &CgroupLayout,
    parent_name: &str,
    run_id: &RunId,
) -> Result<Vec<u32>, CgroupError> {
    let Some(run) = super::RunCgroup::adopt(layout, parent_name, run_id)? else {
        return Ok(Vec::new());
    };
    // Adopted to be read, not owned: dropping it must not end the run.
    run.release();
    run.pids()
}

/// Removes the parent directory `parent_name` (made by [`RunCgroup::create`](super::RunCgroup::create)) from
/// every hierarchy of `layout`, once no run is left in it.
///
/// Only empty directories are removed: a parent still holding a run's group is an
/// error ([`CgroupError::RemoveDir`]), and nothing is killed. An OCI runtime given
/// the parent in a container's cgroup path makes it in every v1 hierarchy the
/// host mounts (`blkio`, `devices`, `name=systemd`...), not only in those of
/// `layout`: there it is removed too where it is empty, at best effort (no run
/// of this crate lives there).
///
/// # Ambient authority
/// Removes directories of the host's cgroup hierarchies.
pub fn remove_parent(layout: &CgroupLayout, parent_name: &str) -> Result<(), CgroupError> {
    let parent = check_parent_name(parent_name)?;
    let ours = hierarchy_mounts(layout);
    let mut first = None;
    for mount in &ours {
        if let Err(e) = remove_chain(mount, &parent) {
            first.get_or_insert(e);
        }
    }
    let others = std::fs::read_to_string("/proc/self/mountinfo")
        .map(|text| super::layout::parse_mountinfo(&text))
        .unwrap_or_default();
    for mount in others.iter().map(|m| &m.mount_point) {
        if !ours.contains(mount) {
            let _ = remove_chain(mount, &parent);
        }
    }
    first.map_or(Ok(()), Err)
}

/// Removes `parent` (relative) below `mount`, deepest component first (`a/b`
/// removes `a/b`, then `a`); a missing one is gone already.
fn remove_chain(mount: &Path, parent: &Path) -> Result<(), CgroupError> {
    let mut path = parent.to_path_buf();
    loop {
        let full = mount.join(&path);
        if let Err(source) = std::fs::remove_dir(&full)
            && source.kind() != io::ErrorKind::NotFound
        {
            return Err(CgroupError::RemoveDir {
                path: full,
                attempts: 1,
                source,
            });
        }
        if !path.pop() || path.as_os_str().is_empty() {
            return Ok(());
        }
    }
}

/// Every hierarchy mount of the layout a run may have a directory in.
pub(crate) fn hierarchy_mounts(layout: &CgroupLayout) -> Vec<PathBuf> {
    let mut mounts: Vec<PathBuf> = Vec::new();
    let v1 = Controller::ALL
        .into_iter()
        .filter_map(|c| match layout.placement(c) {
            Placement::V1 { mount } => Some(mount.clone()),
            _ => None,
        });
    for mount in layout
        .unified()
        .map(Path::to_path_buf)
        .into_iter()
        .chain(v1)
        .chain(layout.freezer_v1().map(Path::to_path_buf))
        .chain(layout.cpuacct_v1().map(Path::to_path_buf))
    {
        if !mounts.contains(&mount) {
            mounts.push(mount);
        }
    }
    mounts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cgroup_parent_name_rules() {
        assert!(check_parent_name("agent-workspace").is_ok());
        assert!(check_parent_name("agent-workspace/pool-1").is_ok());
        for bad in ["", "/abs", "a//b", "a/../b", "..", "./a", "a/", "a\0b"] {
            assert!(
                matches!(
                    check_parent_name(bad),
                    Err(CgroupError::InvalidParentName { .. })
                ),
                "{bad:?} was accepted"
            );
        }
    }
}
