//! The runner's own files of a run, removed once its processes have ended.

use super::late_output;
use super::services::Services;
use super::state_files::remove_private_state;
use super::templates;
use crate::step::StepErrors;

/// Removes the runner's files of a run whose processes have all ended (its
/// services' logs, its commands' output, its templates' layers, its private
/// state), then the run directory; what fails is added to `errors`.
pub(super) fn remove_run_files(run_dir: &std::path::Path, errors: &mut StepErrors) {
    Services::remove_files(run_dir, errors);
    late_output::remove_files(run_dir, errors);
    templates::remove_files(run_dir, errors);
    remove_private_state(run_dir, errors);
}
