//! Command-line interface: argument parsing and dispatch. Each subcommand lives in
//! its own file and returns the process exit code.

mod contract;
mod host;
mod run;
mod summary;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for bad input: an invalid contract, a missing file, a bad flag.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;

/// Exit status when the run itself failed (not the command in it), as `timeout`
/// and container runners use.
pub(crate) const EXIT_RUNNER_FAILED: u8 = 125;

/// Input refused before anything was created: the message names the flag, field
/// or path at fault.
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) String);

/// Isolated, reviewable workspaces for coding-agent runs.
#[derive(Debug, Parser)]
#[command(name = "agent-workspace", version, about)]
struct Cli {
    #[command(flatten)]
    host: host::HostArgs,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run one command in a fresh, isolated workspace; export its evidence.
    Run(run::RunArgs),
    /// Check workspace contracts or print their schema.
    #[command(subcommand)]
    Contract(contract::ContractCommand),
}

/// Parses the arguments and runs the subcommand.
pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => {
            // clap prints usage errors itself; help and version exit 0.
            let code = if err.use_stderr() { EXIT_BAD_INPUT } else { 0 };
            let _ = err.print();
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Run(args) => run::run(args, &cli.host),
        Command::Contract(command) => contract::run(command),
    }
}
