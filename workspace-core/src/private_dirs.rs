//! The runner's directories are its own: no other local user may reach a run's
//! checkout, its writable layer, a cached tree, a service template, a lease or
//! a command's output.
//!
//! Everything a run has on the host lives under the runtime directory, so that
//! one directory's mode closes all of it: `0700`, or, for root, `0710` with
//! the group of the host id a container's root maps to
//! ([`host_id_base`](crate::subordinate::host_id_base): an OCI runtime sets a
//! container up as that id and must pass through to the container's bundle;
//! the namespace backend opens what it mounts while it still has the runner's
//! ids and walks no host path as the run's). Modes below it do not matter to
//! other users then, whatever a run or an older version made them. Evidence
//! bundles hold every command's output: the evidence root is `0700`.
//!
//! [`make_private`] is the rule, in one place: the [`Runner`](crate::runner::Runner)
//! keeps it before it makes anything of a run (so an embedder need not
//! remember it), and the facade's `HostDirs::make_private` is it too. A
//! missing directory is made with that mode; one of the runner's own is
//! given it; one it cannot make so (another user's, or one it cannot tell
//! is its own) is refused, naming it, when other users could read or write
//! it or when its owner is another user.

use std::fmt;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Which of the runner's directories.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PrivateDir {
    /// The runtime directory ([`RunnerConfig::runtime_dir`](crate::runner::RunnerConfig::runtime_dir)).
    Runtime,
    /// The evidence root ([`RunnerConfig::evidence_root`](crate::runner::RunnerConfig::evidence_root)).
    Evidence,
}

impl fmt::Display for PrivateDir {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Runtime => "the runtime directory",
            Self::Evidence => "the evidence root",
        })
    }
}

impl PrivateDir {
    /// What another user could do with it open.
    fn exposes(self) -> &'static str {
        match self {
            Self::Runtime => {
                "read every run's checkout and writable layer, or change what the runner keeps there"
            }
            Self::Evidence => "read every command's output",
        }
    }
}

/// Why a runner's directory is not, and could not be made, its own.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PrivateDirError {
    /// Making it, inspecting it or changing its mode or group failed.
    #[error("making {which} {} private to the runner: {action}", path.display())]
    Io {
        /// Which directory.
        which: PrivateDir,
        /// Its path.
        path: PathBuf,
        /// What failed.
        action: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// Other users may read, list or write it, and it is not the runner's to
    /// close.
    #[error(
        "{which} {} is open to other users (mode {mode:04o}, owner uid {owner}, group {group}): they could {}; close it (chmod go-rwx) or give the runner another",
        path.display(),
        which.exposes()
    )]
    OpenToOthers {
        /// Which directory.
        which: PrivateDir,
        /// Its path.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
        /// Its owner.
        owner: u32,
        /// Its group.
        group: u32,
    },
    /// It belongs to another user, who could read it and replace what is in it.
    #[error(
        "{which} {} belongs to uid {owner}, not to the runner (uid {runner}): its owner could {} and replace what is in it; give the runner a directory of its own",
        path.display(),
        which.exposes()
    )]
    NotTheRunners {
        /// Which directory.
        which: PrivateDir,
        /// Its path.
        path: PathBuf,
        /// Its owner.
        owner: u32,
        /// The runner's effective uid.
        runner: u32,
    },
}

/// Makes `runtime_dir` and `evidence_root` the runner's alone (the module
/// docs): each created when missing (its missing parents as `mkdir -p` makes
/// them), given its mode (and, as root, the runtime directory its group)
/// when it is the runner's, and refused, naming it, when it is another
/// user's or stays open to other users. Idempotent; nothing below them is
/// touched.
///
/// # Ambient authority
/// Creates and changes host directories; reads the effective uid, this
/// process's environment and the host's subordinate id files (for root).
pub fn make_private(runtime_dir: &Path, evidence_root: &Path) -> Result<(), PrivateDirError> {
    make_runtime_private(runtime_dir)?;
    keep(PrivateDir::Evidence, evidence_root, effective_uid(), None)
}

/// [`make_private`] for the runtime directory alone: what a caller does
/// before building a stack whose caches live under it (the layered tree
/// cache, the container state), before it knows whether a run will be made
/// (the evidence root is then made by the run's
/// [`Runner::create`](crate::runner::Runner::create)).
///
/// # Ambient authority
/// As [`make_private`].
pub fn make_runtime_private(runtime_dir: &Path) -> Result<(), PrivateDirError> {
    let runner = effective_uid();
    let group = (runner == Some(0)).then(crate::subordinate::host_id_base);
    keep(PrivateDir::Runtime, runtime_dir, runner, group)
}

/// One directory made private (see [`make_private`]): `group` may search it.
fn keep(
    which: PrivateDir,
    dir: &Path,
    runner: Option<u32>,
    group: Option<u32>,
) -> Result<(), PrivateDirError> {
    let fail = |action| {
        move |source| PrivateDirError::Io {
            which,
            path: dir.to_path_buf(),
            action,
            source,
        }
    };
    let mode = if group.is_some() { 0o710 } else { 0o700 };
    if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent).map_err(fail("creating its parent"))?;
    }
    // Closed from the start; the group is added below.
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        made => made.map_err(fail("creating it"))?,
    }
    let mut meta = std::fs::metadata(dir).map_err(fail("inspecting it"))?;
    if !meta.is_dir() {
        return Err(fail("inspecting it")(std::io::Error::new(
            std::io::ErrorKind::NotADirectory,
            "not a directory",
        )));
    }
    if runner == Some(meta.uid()) {
        if let Some(gid) = group.filter(|gid| *gid != meta.gid()) {
            std::os::unix::fs::chown(dir, None, Some(gid)).map_err(fail("changing its group"))?;
        }
        if meta.mode() & 0o7777 != mode {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(mode))
                .map_err(fail("changing its mode"))?;
        }
        meta = std::fs::metadata(dir).map_err(fail("inspecting it"))?;
    }
    if let Some(runner) = runner
        && meta.uid() != runner
        && meta.uid() != 0
    {
        return Err(PrivateDirError::NotTheRunners {
            which,
            path: dir.to_path_buf(),
            owner: meta.uid(),
            runner,
        });
    }
    // Only the container root's group may search it, and only it.
    let searchable_by_group = match group {
        Some(gid) if meta.gid() == gid => 0o010,
        _ => 0,
    };
    if meta.mode() & 0o077 & !searchable_by_group != 0 {
        return Err(PrivateDirError::OpenToOthers {
            which,
            path: dir.to_path_buf(),
            mode: meta.mode() & 0o7777,
            owner: meta.uid(),
            group: meta.gid(),
        });
    }
    Ok(())
}

/// This process's effective uid, where it can be read without `unsafe`.
fn effective_uid() -> Option<u32> {
    #[cfg(target_os = "linux")]
    {
        Some(nix::unistd::geteuid().as_raw())
    }
    #[cfg(not(target_os = "linux"))]
    {
        // Elsewhere no directory is taken for the runner's: a new one is made
        // `0700`, an existing one must be closed already.
        None
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;

    fn mode(path: &Path) -> u32 {
        std::fs::metadata(path).unwrap().mode() & 0o7777
    }

    fn root() -> bool {
        effective_uid() == Some(0)
    }

    #[test]
    fn missing_directories_are_made_private_and_open_ones_of_the_runners_closed() {
        let base = tempfile::tempdir().unwrap();
        let (runtime, evidence) = (
            base.path().join("a/runtime"),
            base.path().join("b/evidence"),
        );
        make_private(&runtime, &evidence).unwrap();
        let runtime_mode = if root() { 0o710 } else { 0o700 };
        assert_eq!((mode(&runtime), mode(&evidence)), (runtime_mode, 0o700));
        // Its parents as `mkdir -p` makes them: the container's root must pass.
        assert_eq!(mode(&base.path().join("a")) & 0o005, 0o005);
        if root() {
            let gid = std::fs::metadata(&runtime).unwrap().gid();
            assert_eq!(gid, crate::subordinate::host_id_base());
        }
        // An older version's directories, open to everyone: closed.
        for dir in [&runtime, &evidence] {
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        }
        make_private(&runtime, &evidence).unwrap();
        assert_eq!((mode(&runtime), mode(&evidence)), (runtime_mode, 0o700));
        // Again: nothing to change, nothing fails.
        make_private(&runtime, &evidence).unwrap();
    }

    #[test]
    fn another_users_directory_is_refused_naming_it() {
        if !root() {
            // Only root can give a directory away; the rule is the same.
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let (runtime, evidence) = (base.path().join("runtime"), base.path().join("evidence"));
        std::fs::create_dir(&runtime).unwrap();
        std::os::unix::fs::chown(&runtime, Some(65_534), Some(65_534)).unwrap();
        std::fs::set_permissions(&runtime, std::fs::Permissions::from_mode(0o700)).unwrap();
        let refused = make_private(&runtime, &evidence).unwrap_err();
        assert!(
            matches!(&refused, PrivateDirError::NotTheRunners { which: PrivateDir::Runtime, owner: 65_534, path, .. } if *path == runtime),
            "{refused}"
        );
        assert!(
            refused.to_string().contains("belongs to uid 65534"),
            "{refused}"
        );
        // Left as it was.
        assert_eq!(mode(&runtime), 0o700);
        assert!(!evidence.exists());
        // Root's own, open to others, is closed; the evidence root another
        // user owns is refused too.
        std::os::unix::fs::chown(&runtime, Some(0), Some(0)).unwrap();
        std::fs::create_dir(&evidence).unwrap();
        std::os::unix::fs::chown(&evidence, Some(65_534), Some(65_534)).unwrap();
        let refused = make_private(&runtime, &evidence).unwrap_err();
        assert!(
            matches!(
                &refused,
                PrivateDirError::NotTheRunners {
                    which: PrivateDir::Evidence,
                    ..
                }
            ),
            "{refused}"
        );
    }

    #[test]
    fn a_file_where_a_directory_goes_is_refused() {
        let base = tempfile::tempdir().unwrap();
        let runtime = base.path().join("runtime");
        std::fs::write(&runtime, "").unwrap();
        let refused = make_private(&runtime, &base.path().join("evidence")).unwrap_err();
        assert!(
            matches!(
                &refused,
                PrivateDirError::Io {
                    which: PrivateDir::Runtime,
                    ..
                }
            ),
            "{refused}"
        );
    }

    #[test]
    fn the_refusal_of_an_open_directory_says_what_others_could_do() {
        let refused = PrivateDirError::OpenToOthers {
            which: PrivateDir::Runtime,
            path: "/srv/aw".into(),
            mode: 0o755,
            owner: 1000,
            group: 1000,
        };
        assert_eq!(
            refused.to_string(),
            "the runtime directory /srv/aw is open to other users (mode 0755, owner uid 1000, group 1000): they could read every run's checkout and writable layer, or change what the runner keeps there; close it (chmod go-rwx) or give the runner another"
        );
    }
}
