//! The runner's own files in a run directory (`filesystem.json`, `leases.json`)
//! and the records it reads back from the evidence.

use std::path::Path;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::error::RunErrorKind;
use super::leases::LEASES_STATE_FILE;
use super::paths::{
    CAPACITY_HELD_FILE, DISK_STATE_FILE, FILESYSTEM_STATE_FILE, IDENTITY_STATE_FILE,
};
use crate::step::{RunnerStep, StepErrors};

pub(super) fn create_dir(path: &Path) -> Result<(), RunErrorKind> {
    std::fs::create_dir_all(path).map_err(|source| RunErrorKind::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a run's private state file, `None` when it does not exist.
pub(super) fn read_state<T: DeserializeOwned>(path: &Path) -> Result<Option<T>, RunErrorKind> {
    let io = |source| RunErrorKind::Io {
        path: path.to_path_buf(),
        source,
    };
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| io(std::io::Error::other(e))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io(e)),
    }
}

/// Reads a JSON record that must exist.
pub(super) fn read_required<T: DeserializeOwned>(path: &Path) -> Result<T, RunErrorKind> {
    read_state(path)?.ok_or_else(|| RunErrorKind::Io {
        path: path.to_path_buf(),
        source: std::io::Error::from(std::io::ErrorKind::NotFound),
    })
}

/// Writes a run's private state file (JSON), replacing it.
pub(super) fn write_state(path: &Path, value: &impl Serialize) -> Result<(), RunErrorKind> {
    let bytes = serde_json::to_vec_pretty(value).map_err(|e| RunErrorKind::Io {
        path: path.to_path_buf(),
        source: std::io::Error::other(e),
    })?;
    std::fs::write(path, bytes).map_err(|source| RunErrorKind::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Removes `path` (a whole tree when it is a directory); one that is not
/// there is gone already; a failure is added to `errors`.
pub(super) fn remove_if_present(path: &Path, errors: &mut StepErrors) {
    let removed = match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.is_dir() => remove_tree(path),
        Ok(_) => std::fs::remove_file(path),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => errors.push(
            RunnerStep::RemoveFile {
                path: path.to_path_buf(),
            },
            e,
        ),
    }
}

/// Removes the directory tree `path`, links as links. A directory in it that
/// this process may not read (overlayfs makes a layer's `work/work` mode 0;
/// a command may `chmod 000` its own) is made its owner's first: an ordinary
/// user has no `CAP_DAC_OVERRIDE` to read past it.
fn remove_tree(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            make_readable_below(path)?;
            std::fs::remove_dir_all(path)
        }
        other => other,
    }
}

/// Gives every directory below `root` (itself included) that cannot be read
/// its owner's read, write and search permission, never through a link.
fn make_readable_below(root: &Path) -> std::io::Result<()> {
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries = match std::fs::read_dir(&dir) {
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
                owners_without_following(&dir)?;
                std::fs::read_dir(&dir)?
            }
            other => other?,
        };
        for entry in entries {
            let entry = entry?;
            // The entry's own type: a link to a directory is not one.
            if entry.file_type()?.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    Ok(())
}

/// `chmod u+rwx` on the directory `dir` itself: a link swapped in for it is
/// refused, not followed (the C library changes the inode it opened `O_PATH`).
#[cfg(target_os = "linux")]
fn owners_without_following(dir: &Path) -> std::io::Result<()> {
    use nix::sys::stat::{FchmodatFlags, Mode, fchmodat};
    fchmodat(
        nix::fcntl::AT_FDCWD,
        dir,
        Mode::S_IRWXU,
        FchmodatFlags::NoFollowSymlink,
    )
    .map_err(std::io::Error::from)
}

#[cfg(not(target_os = "linux"))]
fn owners_without_following(dir: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::PermissionDenied,
        format!("{} cannot be read", dir.display()),
    ))
}

/// Removes the runner's own files in the run directory.
pub(super) fn remove_private_state(run_dir: &Path, errors: &mut StepErrors) {
    for name in [
        FILESYSTEM_STATE_FILE,
        LEASES_STATE_FILE,
        IDENTITY_STATE_FILE,
        CAPACITY_HELD_FILE,
        DISK_STATE_FILE,
        crate::egress::ATTEMPT_LOG_FILE,
    ] {
        remove_if_present(&run_dir.join(name), errors);
    }
}

/// Removes the run directory if it is empty. Anything a boundary left there is
/// reported, never removed blindly.
pub(super) fn remove_run_dir(run_dir: &Path, errors: &mut StepErrors) {
    match std::fs::remove_dir(run_dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => errors.push(
            RunnerStep::RemoveFile {
                path: run_dir.to_path_buf(),
            },
            e,
        ),
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Set only in the child that runs [`ordinary_user_child`] as `nobody`.
    const CHILD_ENV: &str = "AGENT_WORKSPACE_TEST_STATE_FILES_CHILD";

    /// A run's template layer as an ordinary user's runner leaves it: the
    /// overlay's work directory of mode 0, and a link to a directory of mode
    /// 0 that is not the run's.
    #[test]
    fn an_ordinary_user_removes_a_layer_with_directories_of_mode_0() {
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "runner::state_files::tests::ordinary_user_child",
                "--ignored",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("re-executing the test binary as nobody (the test runs as root)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The body of [`an_ordinary_user_removes_a_layer_with_directories_of_mode_0`].
    #[test]
    #[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
    fn ordinary_user_child() {
        let mode = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        assert!(
            std::env::var_os(CHILD_ENV).is_some(),
            "runs only re-executed"
        );
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        assert_ne!(uid.unwrap(), 0, "not root");
        let tmp = tempfile::tempdir().unwrap();
        let kept = tmp.path().join("kept");
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join("file"), "kept\n").unwrap();
        mode(&kept, 0o000);
        let layer = tmp.path().join("templates");
        std::fs::create_dir_all(layer.join("db/work/work/inner")).unwrap();
        std::fs::write(layer.join("db/work/work/inner/file"), "x").unwrap();
        std::os::unix::fs::symlink(&kept, layer.join("db/link")).unwrap();
        for dir in ["db/work/work/inner", "db/work/work"] {
            mode(&layer.join(dir), 0o000);
        }
        assert_eq!(
            std::fs::remove_dir_all(&layer).unwrap_err().kind(),
            std::io::ErrorKind::PermissionDenied,
            "mode 0 keeps this user out of a plain removal"
        );

        let mut errors = StepErrors::default();
        remove_if_present(&layer, &mut errors);

        assert!(errors.is_empty(), "{errors:?}");
        assert!(!layer.exists());
        let kept_mode = std::fs::symlink_metadata(&kept)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(kept_mode & 0o777, 0, "the linked directory keeps its mode");
        mode(&kept, 0o700);
        assert_eq!(
            std::fs::read_to_string(kept.join("file")).unwrap(),
            "kept\n"
        );
    }
}
