//! `agent-workspace export RUN`: the current patch of a created workspace.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;

use super::EXIT_RUNNER_FAILED;
use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct ExportArgs {
    #[command(flatten)]
    run: TheRun,
    /// Write the patch to FILE instead of stdout.
    #[arg(long, value_name = "FILE")]
    out: Option<PathBuf>,
}

/// Prints the run's changes against its base commit as a patch `git apply`
/// accepts, and their sha256 (the digest checks and approvals are bound to) on
/// stderr. The run stays as it was (detached and live, or suspended).
pub(crate) fn run(args: ExportArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let patch = match runner.export_patch(&run_id).await {
            Ok(patch) => patch,
            Err(error) => return report_run_error(&error),
        };
        let written = match &args.out {
            Some(file) => std::fs::write(file, &patch.patch),
            None => std::io::stdout().write_all(&patch.patch),
        };
        if let Err(e) = written {
            eprintln!("agent-workspace: cannot write the patch: {e}");
            return ExitCode::from(EXIT_RUNNER_FAILED);
        }
        let not_in_patch: Vec<String> = patch
            .changes
            .iter()
            .filter_map(|c| {
                let why = c.not_in_patch.as_ref()?;
                Some(format!("{} ({why})", super::text::escaped(&c.path)))
            })
            .collect();
        let left_out = match not_in_patch.as_slice() {
            [] => String::new(),
            paths => format!("; not in the patch: {}", paths.join(", ")),
        };
        eprintln!(
            "agent-workspace: run {run_id}: {} changed path(s), sha256 {}{left_out}",
            patch.changes.iter().filter(|c| !c.ignored).count(),
            patch.patch_sha256
        );
        ExitCode::SUCCESS
    })
}
