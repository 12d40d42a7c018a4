//! The parent writes the child's uid and gid maps (allocation is fine here).
//!
//! One id maps to one host id: `"<uid> <host_uid> 1"`. When the parent may write a
//! gid map without denying `setgroups` (it holds `CAP_SETGID`, e.g. it runs as host
//! root), it leaves `setgroups` allowed so the child can *clear* the supplementary
//! groups it inherited (host root's group 0 would otherwise still grant group
//! access to host files); the child drops every capability right after, so it can
//! never call `setgroups` again. Otherwise `setgroups` is denied first, as the kernel
//! requires, and the inherited groups stay (shown as the overflow gid).

use std::io::Write;
use std::path::PathBuf;

use super::error::SpawnError;
use super::protocol::{GO_CLEAR_GROUPS, GO_GROUPS_DENIED};

/// Writes the maps of `pid`; returns the go byte telling the child what it may do
/// about supplementary groups.
pub(crate) fn write_maps(
    pid: i32,
    (uid, gid): (u32, u32),
    (host_uid, host_gid): (u32, u32),
) -> Result<u8, SpawnError> {
    let dir = PathBuf::from(format!("/proc/{pid}"));
    write(&dir.join("uid_map"), &format!("{uid} {host_uid} 1\n"))?;
    let gid_map = dir.join("gid_map");
    let line = format!("{gid} {host_gid} 1\n");
    match write(&gid_map, &line) {
        Ok(()) => Ok(GO_CLEAR_GROUPS),
        Err(SpawnError::IdMap { source, .. })
            if source.kind() == std::io::ErrorKind::PermissionDenied =>
        {
            write(&dir.join("setgroups"), "deny\n")?;
            write(&gid_map, &line)?;
            Ok(GO_GROUPS_DENIED)
        }
        Err(other) => Err(other),
    }
}

/// One `write(2)` of the whole line, as the kernel requires for these files.
pub(crate) fn write(path: &PathBuf, contents: &str) -> Result<(), SpawnError> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(path)
        .and_then(|mut file| {
            let n = file.write(contents.as_bytes())?;
            if n == contents.len() {
                Ok(())
            } else {
                Err(std::io::Error::from(std::io::ErrorKind::WriteZero))
            }
        })
        .map_err(|source| SpawnError::IdMap {
            path: path.clone(),
            source,
        })
}
