//! `agent-workspace suspend RUN` and `resume RUN`: freeze a live workspace in
//! place and thaw it again, from any process.

use std::process::ExitCode;

use clap::Args;
use workspace_core::boundary::Suspension;
use workspace_core::runner::CreateOptions;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct SuspendArgs {
    #[command(flatten)]
    run: TheRun,
}

/// Freezes every process of the workspace where it is and gives its capacity
/// back; `resume` thaws it.
pub(crate) fn suspend(args: SuspendArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        match workspace.suspend().await {
            Ok(suspended) => {
                match suspended.suspension {
                    Suspension::Frozen { processes } => eprintln!(
                        "agent-workspace: run {run_id} suspended: {} processes frozen",
                        processes.len()
                    ),
                    Suspension::Stopped => eprintln!(
                        "agent-workspace: run {run_id} suspended: its processes were stopped"
                    ),
                }
                ExitCode::SUCCESS
            }
            Err(error) => report_run_error(&error),
        }
    })
}

/// Re-verifies the workspace's checkout and thaws its processes (or seals it
/// again when they are gone, which it says), and leaves it live for `exec`.
pub(crate) fn resume(args: SuspendArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        match workspace.detach().await {
            Ok(_) => {
                eprintln!("agent-workspace: run {run_id} resumed");
                ExitCode::SUCCESS
            }
            Err(error) => report_run_error(&error),
        }
    })
}
