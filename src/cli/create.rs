//! `agent-workspace create`: a sealed workspace kept for later `exec`s.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::boundary::PreviewEndpoint;
use workspace_core::lifecycle::StateName;
use workspace_core::runner::CreateOptions;

use super::contract_args::ContractArgs;
use super::host::HostArgs;
use super::session::{bad_input, block_on, cancel_on_signals, runner_on};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct CreateArgs {
    #[command(flatten)]
    contract: ContractArgs,
    /// Where evidence goes (`DIR/<run-id>/`)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print `{"run_id", "evidence", "backend"}` on stdout instead of the id.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `create --json`: the new run.
#[derive(Debug, Serialize)]
struct Created {
    /// The run, for `exec`, `destroy` and the rest.
    run_id: String,
    /// Its evidence bundle (filled as it goes, sealed when it ends).
    evidence: PathBuf,
    /// The backend that sealed it (`namespace` or `container`).
    backend: &'static str,
    /// Its live state: `detached` (live, waiting for `exec`).
    state: StateName,
    /// Where its `process.ports` are published on the host.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    ports: Vec<PreviewEndpoint>,
}

/// Creates a run (provisioned, sealed, probed), then detaches from it: its
/// sandbox stays live (what `exec` leaves running goes on) and waits for `exec`,
/// `export`, `promote` or `destroy`. Prints the run id on stdout.
pub(crate) fn run(args: CreateArgs, host: &HostArgs) -> ExitCode {
    let contract = match args.contract.resolve("agent-workspace create") {
        Ok(contract) => contract,
        Err(bad) => return bad_input(bad),
    };
    let backend = args.contract.backend();
    block_on(async move {
        let runner = match runner_on(
            host,
            args.evidence,
            args.contract.backend(),
            args.contract.runtime(),
        ) {
            Ok(runner) => runner,
            Err(code) => return code,
        };
        if let Err(bad) = args.contract.check_on(&runner, &contract).await {
            return bad_input(bad);
        }
        let options = CreateOptions {
            run_id: None,
            cancel: Some(cancel_on_signals(
                "ending the run and exporting its evidence",
            )),
            cancel_grace: Some(host.stop_grace()),
            observer: Some(super::waiting::observer(
                host,
                super::progress::Progress::on_terminal()
                    .as_ref()
                    .map(super::progress::Progress::observer),
            )),
        };
        let workspace = match runner.create(contract, options).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        match workspace.detach().await {
            Ok(detached) if super::json::enabled() => {
                super::json::print(&Created {
                    run_id: detached.run_id.to_string(),
                    evidence: detached.evidence.clone(),
                    backend: backend.name(),
                    state: StateName::Detached,
                    ports: runner.previews(&detached.run_id).unwrap_or_default(),
                });
                ExitCode::SUCCESS
            }
            Ok(detached) => {
                println!("{}", detached.run_id);
                super::line_start::eprint_own_line(&format!(
                    "agent-workspace: run {} created; evidence {}",
                    detached.run_id,
                    detached.evidence.display()
                ));
                ExitCode::SUCCESS
            }
            Err(error) => report_run_error(&error),
        }
    })
}
