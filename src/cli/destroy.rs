//! `agent-workspace destroy RUN`: end a created workspace.

use std::process::ExitCode;

use clap::Args;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::{print_summary, report_run_error};

#[derive(Debug, Args)]
pub(crate) struct DestroyArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print the run's JSON summary on stdout instead of the summary line
    /// (`command` is its last command's end, `checks` its required checks).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Ends the run (`Runner::end`: it never waits for capacity, and a run whose
/// sandbox is gone is not sealed again): its required checks run, its evidence
/// is exported and sealed, then its checkout is removed. Exit 0 when the
/// evidence was sealed and the run cleaned up, 1 otherwise.
pub(crate) fn run(args: DestroyArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        match runner.end(&run_id).await {
            Ok(report) => {
                print_summary(&report, false);
                if report.cleaned && report.evidence_sealed {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(error) => report_run_error(&error),
        }
    })
}
