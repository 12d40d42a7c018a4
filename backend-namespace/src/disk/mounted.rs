//! What the host's mount table and loop devices say about a run's disk.

use std::path::Path;

use super::DiskError;
use crate::host_check::parse::mountinfo;

/// The mount at a run's disk mount point.
pub(super) struct MountedDisk {
    /// Its file system type.
    pub(super) fs_type: String,
    /// Its source (`/dev/loopN`, `tmpfs`).
    pub(super) source: String,
    /// The loop device's name (`loopN`), for an image.
    pub(super) loop_device: Option<String>,
}

/// The topmost mount at `mount_point`, if any (read from this process's
/// mount table: the host's).
pub(super) fn mounted_at(mount_point: &Path) -> Result<Option<MountedDisk>, DiskError> {
    const MOUNTINFO: &str = "/proc/self/mountinfo";
    let text =
        std::fs::read_to_string(MOUNTINFO).map_err(DiskError::io("read", Path::new(MOUNTINFO)))?;
    // Later lines are mounted later: the last one at a point is the one seen.
    let found = mountinfo(&text)
        .into_iter()
        .rev()
        .find(|mount| Path::new(&mount.mount_point) == mount_point);
    Ok(found.map(|mount| MountedDisk {
        loop_device: mount
            .source
            .strip_prefix("/dev/")
            .filter(|name| name.starts_with("loop"))
            .map(str::to_owned),
        fs_type: mount.fstype,
        source: mount.source,
    }))
}

/// The file a loop device is bound to, while it is bound.
pub(super) fn loop_device_backing(device: &str) -> Option<String> {
    let path = Path::new("/sys/block")
        .join(device)
        .join("loop/backing_file");
    let text = std::fs::read_to_string(path).ok()?;
    Some(text.trim_end_matches('\n').to_owned())
}
