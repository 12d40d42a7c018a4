//! Command-line interface: argument parsing and dispatch. Each subcommand lives in
//! its own file and returns the process exit code.

mod contract;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for bad input: an invalid contract, a missing file, a bad flag.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;

/// Isolated, reviewable workspaces for coding-agent runs.
#[derive(Debug, Parser)]
#[command(name = "agent-workspace", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
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
        Command::Contract(command) => contract::run(command),
    }
}
