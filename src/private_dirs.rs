//! The runner's directories are its own: no other local user may reach a run's
//! checkout, its writable layer, a cached tree, a service template or a lease.
//!
//! Everything a run has on the host lives under the runtime directory, so that
//! one directory's mode closes all of it: `0700`, or, for root, `0710` with the
//! group of the host id a container's root maps to (the OCI runtime sets a
//! container up as that id and must pass through to the container's bundle; the
//! namespace backend opens what it mounts while it still has the runner's ids
//! and walks no host path as the run's). Modes below it do not matter to other
//! users then, whatever a run or an older version made them.
//!
//! An existing evidence root is closed too (`0700`): bundles hold every
//! command's output (a new one is made so by the evidence writer).

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use crate::HostDirs;

/// Closing a directory failed.
#[derive(Debug, thiserror::Error)]
#[error("making {path} private to the runner: {action}")]
pub struct PrivateDirError {
    /// The directory.
    pub path: PathBuf,
    /// What failed.
    pub action: &'static str,
    /// The cause.
    #[source]
    pub source: std::io::Error,
}

impl HostDirs {
    /// Creates the runtime directory when missing and closes it and an
    /// existing evidence root to other users (the module docs): the runtime
    /// directory `0700` (root: `0710`, group `container_root_gid`), the
    /// evidence root `0700`. A directory another user owns is left as it is
    /// (it is theirs to close).
    ///
    /// # Ambient authority
    /// Creates and changes host directories; reads the effective uid.
    pub fn make_private(&self, container_root_gid: u32) -> Result<(), PrivateDirError> {
        let root = nix::unistd::geteuid().is_root();
        let group = root.then_some(container_root_gid);
        std::fs::create_dir_all(&self.runtime).map_err(|source| PrivateDirError {
            path: self.runtime.clone(),
            action: "creating it",
            source,
        })?;
        close(&self.runtime, if root { 0o710 } else { 0o700 }, group)?;
        if self.evidence.exists() {
            close(&self.evidence, 0o700, None)?;
        }
        Ok(())
    }
}

/// Gives `dir` `mode` (and `group`) when it is this process's own.
fn close(dir: &Path, mode: u32, group: Option<u32>) -> Result<(), PrivateDirError> {
    let fail = |action| {
        move |source| PrivateDirError {
            path: dir.to_path_buf(),
            action,
            source,
        }
    };
    let meta = std::fs::symlink_metadata(dir).map_err(fail("inspecting it"))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() || !meta.is_dir() {
        return Ok(());
    }
    if let Some(gid) = group.filter(|gid| *gid != meta.gid()) {
        std::os::unix::fs::lchown(dir, None, Some(gid)).map_err(fail("changing its group"))?;
    }
    if meta.mode() & 0o7777 != mode {
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
            .map_err(fail("changing its mode"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    #[test]
    fn the_runtime_and_evidence_roots_are_closed_to_other_users() {
        let base = tempfile::tempdir().unwrap();
        let dirs = HostDirs {
            runtime: base.path().join("state/runtime"),
            evidence: base.path().join("state/evidence"),
        };
        // An older version's directories, open to everyone.
        for dir in [&dirs.runtime, &dirs.evidence] {
            std::fs::create_dir_all(dir).unwrap();
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        dirs.make_private(100_000).unwrap();
        let runtime = std::fs::metadata(&dirs.runtime).unwrap();
        let evidence = std::fs::metadata(&dirs.evidence).unwrap();
        if nix::unistd::geteuid().is_root() {
            assert_eq!((runtime.mode() & 0o7777, runtime.gid()), (0o710, 100_000));
        } else {
            assert_eq!(runtime.mode() & 0o7777, 0o700);
        }
        assert_eq!(evidence.mode() & 0o7777, 0o700);
        // Again: nothing to change, nothing fails.
        dirs.make_private(100_000).unwrap();
    }
}
