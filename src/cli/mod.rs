//! Command-line interface: argument parsing and dispatch. Each subcommand lives in
//! its own file and returns the process exit code.

mod backend;
mod check_host;
mod check_report;
mod checks;
mod command_json;
mod command_words;
mod conformance;
mod contract;
mod contract_args;
mod create;
mod destroy;
mod exec;
mod export;
mod files;
mod host;
mod json;
mod line_start;
mod logs;
mod ls;
mod ports;
mod probe;
mod progress;
mod promote;
mod prune;
mod recover;
mod run;
mod session;
mod summary;
mod suspend;
mod text;
mod verify;
mod waiting;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit status for bad input: an invalid contract, a missing file, a bad flag.
pub(crate) const EXIT_BAD_INPUT: u8 = 2;

/// Exit status when the run itself failed (not the command in it), as `timeout`
/// and container runners use.
pub(crate) const EXIT_RUNNER_FAILED: u8 = 125;

/// Exit status when the run is in use by another `agent-workspace` (try again
/// when it is done): sysexits' `EX_TEMPFAIL`.
pub(crate) const EXIT_BUSY: u8 = 75;

/// Input refused before anything was created: the message names the flag, field
/// or path at fault, and under `--json` the answer names them apart
/// ([`json::Failure`], exit 2).
#[derive(Debug)]
pub(crate) struct BadInput(pub(crate) Box<json::Failure>);

impl BadInput {
    /// Bad input, said in `message`.
    pub(crate) fn new(message: impl Into<String>) -> Self {
        Self::of_kind(json::ErrorKind::BadInput, message)
    }

    /// Bad input of another kind (no such run, another user's).
    pub(crate) fn of_kind(kind: json::ErrorKind, message: impl Into<String>) -> Self {
        Self(Box::new(json::Failure::new(kind, EXIT_BAD_INPUT, message)))
    }

    /// Adds what is known of the fault (its flag, field, path, run).
    pub(crate) fn with(self, add: impl FnOnce(json::Failure) -> json::Failure) -> Self {
        Self(Box::new(add(*self.0)))
    }
}

/// Isolated, reviewable workspaces for coding-agent runs.
#[derive(Debug, Parser)]
#[command(
    name = "agent-workspace",
    version,
    about,
    after_help = "With --json every subcommand answers with one JSON document on one line: on \
stdout, or for `run` and `exec` (whose stdout is the command's) on the last line of \
stderr unless --capture carries the output inline on stdout. An error is one too, \
{\"error\": {\"kind\", \"message\", ...}}, with the same exit status. docs/cli-json.md \
lists every field."
)]
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
    /// Create a sealed, live workspace and keep it for `exec`; print its id.
    Create(create::CreateArgs),
    /// Run one more command in a created workspace (any number at once).
    Exec(exec::ExecArgs),
    /// Print the current patch of a created workspace (while commands run).
    Export(export::ExportArgs),
    /// Read and write a created workspace's files inside it, as its user
    /// (ls, cat, write from stdin, rm, stat, mkdir, mv; while commands run).
    Files(files::FilesArgs),
    /// End a created workspace: checks, evidence, cleanup.
    Destroy(destroy::DestroyArgs),
    /// End a created workspace and promote its patch to the contract's target.
    Promote(promote::PromoteArgs),
    /// Run a created workspace's required checks now, keeping it live.
    Checks(checks::ChecksArgs),
    /// Check workspace contracts or print their schema.
    #[command(subcommand)]
    Contract(contract::ContractCommand),
    /// Check an evidence bundle against its manifest.
    Verify(verify::VerifyArgs),
    /// List the runs under the runtime directory that are not cleaned up.
    Ls(ls::LsArgs),
    /// Freeze a live workspace's processes in place (the frozen workspace keeps its capacity).
    Suspend(suspend::SuspendArgs),
    /// Thaw a suspended workspace (its checkout re-verified) and keep it live.
    Resume(suspend::SuspendArgs),
    /// Print where a live workspace's ports are published on the host.
    Ports(ports::PortsArgs),
    /// Print what a live workspace's services wrote.
    Logs(logs::LogsArgs),
    /// Finish every run whose runner died: reap, export its evidence, clean up.
    Recover(recover::RecoverArgs),
    /// Forget cleaned runs beyond a count and an age (their journals, and with
    /// --evidence their bundles).
    Prune(prune::PruneArgs),
    /// Check whether this host can run the namespace backend.
    CheckHost(check_host::CheckHostArgs),
    /// Seal a workspace, print what the boundary probe saw, and finish it.
    Probe(probe::ProbeArgs),
    /// Run the conformance kit on a backend: one line per contract test.
    Conformance(conformance::ConformanceArgs),
    /// The egress proxy of one allowlisted workspace (started by the backend).
    #[command(hide = true)]
    EgressProxy {
        /// Its configuration (written by the backend in the run directory).
        config: std::path::PathBuf,
    },
    /// The preview forwarder of one container workspace (started by the backend).
    #[command(hide = true)]
    PreviewForward {
        /// Its configuration (written by the backend in the container's bundle).
        config: std::path::PathBuf,
    },
}

/// Parses the arguments and runs the subcommand.
pub(crate) fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) if !err.use_stderr() => {
            // Help and version: printed as clap renders them, exit 0.
            let _ = err.print();
            return ExitCode::SUCCESS;
        }
        Err(err) => {
            json::set_answer(json::answer_of_raw_args());
            let line = usage_error_line(&err.to_string());
            return json::Failure::new(json::ErrorKind::Usage, EXIT_BAD_INPUT, line).report();
        }
    };
    line_start::set_quiet(cli.host.quiet());
    json::set_answer(cli.command.answer());
    match cli.command {
        Command::Run(args) => run::run(args, &cli.host),
        Command::Create(args) => create::run(args, &cli.host),
        Command::Exec(args) => exec::run(args, &cli.host),
        Command::Export(args) => export::run(args, &cli.host),
        Command::Files(args) => files::run(args, &cli.host),
        Command::Destroy(args) => destroy::run(args, &cli.host),
        Command::Promote(args) => promote::run(args, &cli.host),
        Command::Checks(args) => checks::run(args, &cli.host),
        Command::Contract(command) => contract::run(command, &cli.host),
        Command::Verify(args) => verify::run(&args),
        Command::Ls(args) => ls::run(&args, &cli.host),
        Command::Suspend(args) => suspend::suspend(args, &cli.host),
        Command::Resume(args) => suspend::resume(args, &cli.host),
        Command::Ports(args) => ports::run(args, &cli.host),
        Command::Logs(args) => logs::run(args, &cli.host),
        Command::Recover(args) => recover::run(&args, &cli.host),
        Command::Prune(args) => prune::run(&args, &cli.host),
        Command::CheckHost(args) => check_host::run(&args, &cli.host),
        Command::Probe(args) => probe::run(args, &cli.host),
        Command::Conformance(args) => conformance::run(&args, &cli.host),
        Command::EgressProxy { config } => helper(agent_workspace::egress::serve(&config)),
        Command::PreviewForward { config } => helper(agent_workspace::preview::serve(&config)),
    }
}

impl Command {
    /// Where the subcommand's answer goes: `--json` on stdout, or for `run`
    /// and `exec` without `--capture` on stderr's last line.
    fn answer(&self) -> json::Answer {
        use json::Answer;
        let on_stdout = |json: bool| if json { Answer::Stdout } else { Answer::Human };
        match self {
            Self::Run(args) => args.answer(),
            Self::Exec(args) => args.answer(),
            Self::Create(args) => on_stdout(args.json),
            Self::Export(args) => on_stdout(args.json),
            Self::Files(args) => on_stdout(args.json),
            Self::Destroy(args) => on_stdout(args.json),
            Self::Promote(args) => on_stdout(args.json),
            Self::Checks(args) => on_stdout(args.json),
            Self::Contract(command) => on_stdout(command.json()),
            Self::Verify(args) => on_stdout(args.json),
            Self::Ls(args) => on_stdout(args.json),
            Self::Suspend(args) | Self::Resume(args) => on_stdout(args.json),
            Self::Ports(args) => on_stdout(args.json),
            Self::Logs(args) => on_stdout(args.json),
            Self::Recover(args) => on_stdout(args.json),
            Self::Prune(args) => on_stdout(args.json),
            Self::CheckHost(args) => on_stdout(args.json),
            Self::Probe(args) => on_stdout(args.json),
            Self::Conformance(args) => on_stdout(args.json),
            Self::EgressProxy { .. } | Self::PreviewForward { .. } => Answer::Human,
        }
    }
}

/// How a helper program the backends start ends: it serves until killed, so
/// returning at all is its failure.
fn helper<E: std::error::Error>(served: Result<std::convert::Infallible, E>) -> ExitCode {
    match served {
        Ok(never) => match never {},
        Err(e) => {
            eprintln!("{}", workspace_core::error_chain(&e));
            ExitCode::from(EXIT_RUNNER_FAILED)
        }
    }
}

/// A clap usage error on one line, like every other bad input: its message and
/// details, without the usage synopsis and the `--help` hint.
fn usage_error_line(rendered: &str) -> String {
    let mut line = String::new();
    for part in rendered
        .lines()
        .map(str::trim)
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .filter(|l| !l.is_empty())
    {
        let part = part.strip_prefix("error: ").unwrap_or(part);
        if !line.is_empty() {
            line.push_str(if line.ends_with(':') || part.starts_with('[') {
                " "
            } else {
                "; "
            });
        }
        line.push_str(part);
    }
    line
}
