//! `agent-workspace ports RUN`: where a live workspace's published ports are.

use std::process::ExitCode;

use clap::Args;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct PortsArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print a JSON array of `{"port", "host"}` instead of lines.
    #[arg(long)]
    json: bool,
}

/// Prints `127.0.0.1:HOSTPORT -> PORT` for each port of `process.ports`: a
/// connection to the host address reaches the port inside the workspace, for as
/// long as the workspace lives.
pub(crate) fn run(args: PortsArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let previews = match runner.previews(&run_id) {
            Ok(previews) => previews,
            Err(error) => return report_run_error(&error),
        };
        if args.json {
            match serde_json::to_string_pretty(&previews) {
                Ok(text) => println!("{text}"),
                Err(e) => {
                    eprintln!("agent-workspace: {e}");
                    return ExitCode::from(super::EXIT_RUNNER_FAILED);
                }
            }
        } else {
            if previews.is_empty() {
                eprintln!(
                    "agent-workspace: run {run_id} publishes no ports (its process.ports is empty)"
                );
            }
            for preview in &previews {
                println!("{} -> {}", preview.host, preview.port);
            }
        }
        ExitCode::SUCCESS
    })
}
