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
pub(super) use super::tree_removal::remove_tree;
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

/// Removes the runner's own files in the run directory.
pub(super) fn remove_private_state(run_dir: &Path, errors: &mut StepErrors) {
    for name in [
        FILESYSTEM_STATE_FILE,
        LEASES_STATE_FILE,
        IDENTITY_STATE_FILE,
        CAPACITY_HELD_FILE,
        DISK_STATE_FILE,
        crate::egress::ATTEMPT_LOG_FILE,
        crate::mount_plan::EXCLUDED_RECORD_FILE,
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
