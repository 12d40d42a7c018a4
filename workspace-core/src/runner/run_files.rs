//! The runner's own files of a run, removed once its processes have ended.

use std::future::Future;
use std::path::Path;

use super::late_output;
use super::services::Services;
use super::state_files::remove_private_state;
pub(super) use super::state_files::remove_run_dir;
use super::templates;
use crate::step::{RunnerStep, StepErrors};

/// Removes the runner's files of a run whose processes have all ended (its
/// services' logs, its commands' output, its templates' layers, its private
/// state), then the run directory; what fails is added to `errors`.
pub(super) fn remove_run_files(run_dir: &Path, errors: &mut StepErrors) {
    remove_files(run_dir, errors);
    remove_run_dir(run_dir, errors);
}

/// The runner's files of [`remove_run_files`] but the run directory, on a
/// blocking thread while `release` (the boundaries' removal of what they made
/// in the run directory) runs; returns what `release` returned. For a run that
/// ends whether or not `release` succeeds: its files go either way. The run
/// directory is the caller's to remove, last ([`remove_run_dir`]).
///
/// The two touch different entries of the run directory, and removing a
/// directory costs a journal update each on most file systems: side by side they
/// take the time of the longer one.
pub(super) async fn remove_run_files_alongside<T>(
    run_dir: &Path,
    release: impl Future<Output = T>,
    errors: &mut StepErrors,
) -> T {
    let dir = run_dir.to_path_buf();
    let files = tokio::task::spawn_blocking(move || {
        let mut errors = StepErrors::default();
        remove_files(&dir, &mut errors);
        errors
    });
    let (released, removed) = tokio::join!(release, files);
    match removed {
        Ok(mut removed) => errors.append(&mut removed),
        Err(e) => errors.push(
            RunnerStep::RemoveFile {
                path: run_dir.to_path_buf(),
            },
            e,
        ),
    }
    released
}

/// The runner's files of a run, all but the run directory.
fn remove_files(run_dir: &Path, errors: &mut StepErrors) {
    Services::remove_files(run_dir, errors);
    late_output::remove_files(run_dir, errors);
    templates::remove_files(run_dir, errors);
    remove_private_state(run_dir, errors);
}
