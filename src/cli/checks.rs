//! `agent-workspace checks RUN`: the required checks of a live workspace, run
//! now without promoting or ending it.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::runner::CreateOptions;

use super::check_report::{CheckJson, failed_check_lines};
use super::command_json::evidence_of;
use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;
use super::text::escaped;

/// The answer of `checks --json`.
#[derive(Debug, Serialize)]
struct ChecksJson {
    /// The run checked.
    run_id: String,
    /// Whether every required check passed (also when there is none).
    passed: bool,
    /// Each required check, in the contract's order.
    checks: Vec<CheckJson>,
}

#[derive(Debug, Args)]
pub(crate) struct ChecksArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print `{"run_id", "passed", "checks"}` on stdout instead of lines
    /// (each check with the paths of its command's record and output).
    #[arg(long)]
    pub(crate) json: bool,
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
        let evidence = evidence_of(&runner, &run_id);
        if args.json {
            super::json::print(&ChecksJson {
                run_id: run_id.to_string(),
                passed: checks.iter().all(|c| c.passed),
                checks: checks.iter().map(|c| CheckJson::of(c, &evidence)).collect(),
            });
        } else if checks.is_empty() {
            println!("the contract declares no required checks");
        } else {
            for check in &checks {
                if check.passed {
                    println!("{}: passed", escaped(&check.name));
                } else {
                    // The end of what it printed, escaped, and its record.
                    for line in failed_check_lines(check, &evidence) {
                        println!("{line}");
                    }
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
