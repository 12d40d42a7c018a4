//! `agent-workspace run`: one command in a fresh, isolated workspace.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Args;
use workspace_core::boundary::CommandSpec;
use workspace_core::runner::CreateOptions;

use super::command_json::command_io;
use super::contract_args::ContractArgs;
use super::host::HostArgs;
use super::progress::{Progress, while_ticking};
use super::session::{bad_input, block_on, cancel_on_signals, runner_on};
use super::summary::{report_run_error, report_summary};

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    contract: ContractArgs,
    /// Where evidence goes (`DIR/<run-id>/`)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print the run's JSON summary instead of the summary line, as the last
    /// line of stderr (the command's stdout and stderr pass through as
    /// without it); with `--capture` on stdout.
    #[arg(long)]
    json: bool,
    /// With `--json`: do not pass the command's output through; stdout is
    /// one JSON document that carries it (`command.stdout`/`stderr` as text,
    /// or `stdout_base64`/`stderr_base64` when not UTF-8).
    #[arg(long, requires = "json")]
    capture: bool,
    /// Run the command on a terminal of its own (a pseudo-terminal in the run):
    /// for programs that need one; stdout and stderr then arrive together. Its
    /// input is empty unless `-i` passes yours.
    #[arg(long)]
    tty: bool,
    /// Pass this process's standard input to the command (without it the
    /// command reads nothing); with `--tty` through its terminal, whose input
    /// ends (`^D`) where yours does.
    #[arg(short = 'i', long)]
    interactive: bool,
    /// The command and its arguments, after `--`. A program name without `/` is
    /// looked up in the run's `PATH`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

impl RunArgs {
    /// Where the answer goes (`--json`, `--capture`).
    pub(crate) fn answer(&self) -> super::json::Answer {
        super::json::answer_of(self.json, self.capture)
    }
}

pub(crate) fn run(args: RunArgs, host: &HostArgs) -> ExitCode {
    let contract = match args.contract.resolve("agent-workspace run") {
        Ok(contract) => contract,
        Err(bad) => return bad_input(bad),
    };
    // No time limit of its own: the contract's wall time applies.
    let command = CommandSpec {
        tty: args.tty,
        ..CommandSpec::new(args.command)
    };
    let (capture, interactive) = (args.capture, args.interactive);
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
        // With --capture its output is the answer's, not passed through.
        let progress = Progress::on_terminal();
        let mut io = command_io(progress.as_ref(), capture);
        if interactive {
            io.stdin = Some(Box::pin(tokio::io::stdin()));
        }
        let options = CreateOptions {
            run_id: None,
            cancel: Some(cancel_on_signals(
                "stopping the command and exporting the evidence",
            )),
            cancel_grace: Some(host.stop_grace()),
            observer: Some(super::waiting::observer(
                host,
                progress.as_ref().map(Progress::observer),
            )),
        };
        let ran = while_ticking(progress, runner.run(contract, &command, io, options)).await;
        match ran {
            Ok(report) => report_summary(&report, capture),
            Err(error) => report_run_error(&error),
        }
    })
}
