//! `agent-workspace checks RUN`: the required checks of a live workspace, run
//! now without promoting or ending it.

use std::process::ExitCode;

use clap::Args;
use workspace_core::runner::CreateOptions;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;
use super::text::{escaped, one_line};

#[derive(Debug, Args)]
pub(crate) struct ChecksArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    json: bool,
}

/// Runs the contract's required checks in the workspace, each against the patch
/// taken before it, prints one line per check (`NAME: passed`, `NAME: failed:
/// why`) and keeps the workspace live. Exit 0 when every check passed, 1 when
/// one failed.
pub(crate) fn run(args: ChecksArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let mut workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        let checked = workspace.check().await;
        let detached = workspace.detach().await;
        let checks = match (checked, detached) {
            (Ok(checks), Ok(_)) => checks,
            (Err(error), _) | (_, Err(error)) => return report_run_error(&error),
        };
        if args.json {
            match serde_json::to_string(&checks) {
                Ok(text) => println!("{text}"),
                Err(e) => eprintln!("agent-workspace: cannot print the checks: {e}"),
            }
        } else if checks.is_empty() {
            println!("the contract declares no required checks");
        } else {
            for check in &checks {
                match &check.failure {
                    None if check.passed => println!("{}: passed", escaped(&check.name)),
                    // A check's failure may quote what it printed.
                    failure => println!(
                        "{}: failed: {}",
                        escaped(&check.name),
                        one_line(failure.as_deref().unwrap_or("it did not pass"))
                    ),
                }
            }
        }
        if checks.iter().all(|c| c.passed) {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    })
}
