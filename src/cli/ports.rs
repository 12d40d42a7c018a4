//! `agent-workspace ports RUN`: where a live workspace's published ports are.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::boundary::PreviewEndpoint;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct PortsArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print `{"run_id", "ports": [{"port", "host"}]}` on stdout instead of
    /// lines.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `ports --json`.
#[derive(Debug, Serialize)]
struct PortsJson {
    /// The run.
    run_id: String,
    /// Each port of `process.ports` (`port`, inside the workspace) and the
    /// host address that forwards to it (`host`, on the host's loopback).
    ports: Vec<PreviewEndpoint>,
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
            super::json::print(&PortsJson {
                run_id: run_id.to_string(),
                ports: previews,
            });
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
