//! `agent-workspace exec RUN -- CMD`: one more command in a created workspace.

use std::process::ExitCode;

use clap::Args;
use workspace_core::RunId;
use workspace_core::boundary::{CommandSpec, KillCause};
use workspace_core::contract::ByteSize;
use workspace_core::runner::{
    CommandIo, CommandOutcome, CreateOptions, JoinedRun, RunError, RunErrorKind, Runner, Workspace,
};

use super::EXIT_RUNNER_FAILED;
use super::host::HostArgs;
use super::progress::{Progress, while_ticking};
use super::session::{TheRun, cancel_on_signals, interrupted_status, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct ExecArgs {
    #[command(flatten)]
    run: TheRun,
    /// Wall-clock limit of this command in seconds (the contract's wall time
    /// applies too; the smaller wins). Exit status 124 after it.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Start the command and return at once: it runs on in the workspace until
    /// `destroy`, its output goes to `logs RUN exec-N` and into the evidence.
    /// Prints its name, `exec-N`.
    #[arg(long, conflicts_with = "timeout")]
    detach: bool,
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
    /// Set a variable for this command alone, over the workspace's
    /// (repeatable). Its name is kept in the evidence, its value is not.
    #[arg(long = "env", short = 'e', value_name = "NAME=VALUE", value_parser = name_value)]
    env: Vec<(String, String)>,
    /// Run the command in this directory, relative to the workspace root
    /// (`..` is refused).
    #[arg(long, short = 'w', value_name = "DIR", default_value = ".")]
    workdir: String,
    /// Print the command's end as JSON instead of the summary line, as the
    /// last line of stderr (its stdout and stderr pass through as without
    /// it); with `--capture` on stdout; with `--detach` `{"run_id", "name"}`
    /// on stdout.
    #[arg(long)]
    json: bool,
    /// With `--json`: do not pass the command's output through; stdout is
    /// one JSON document that carries it (`stdout`/`stderr` as text, or
    /// `stdout_base64`/`stderr_base64` when not UTF-8).
    #[arg(long, requires = "json", conflicts_with = "detach")]
    capture: bool,
    /// The most of this command's stdout and of its stderr kept in the
    /// evidence [default: the contract's, `16MiB` unless it says]: past it the
    /// first and last half are kept, and the command runs on; what it writes
    /// is still passed through whole.
    #[arg(long, value_name = "SIZE", conflicts_with = "detach")]
    output_limit: Option<ByteSize>,
    /// The command and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

impl ExecArgs {
    /// Where the answer goes (`--json`, `--capture`; a detached command's
    /// name on stdout).
    pub(crate) fn answer(&self) -> super::json::Answer {
        super::json::answer_of(self.json, self.capture || self.detach)
    }
}

/// `NAME=VALUE`, split at the first `=`.
fn name_value(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((name, value)) if !name.is_empty() => Ok((name.to_owned(), value.to_owned())),
        _ => Err(format!("{text:?}: write it as NAME=VALUE")),
    }
}

/// Joins the run's live sandbox, runs the command in it with its output
/// passed through and recorded, and lets go again: what the command left
/// running in the background goes on until `destroy`. Any number of `exec`s
/// run at once. Exits with the command's status.
pub(crate) fn run(args: ExecArgs, host: &HostArgs) -> ExitCode {
    if args.timeout == Some(0) {
        return super::session::bad_input(
            super::BadInput::new("--timeout 0: the timeout must be at least 1 second")
                .with(|f| f.flag("--timeout")),
        );
    }
    if args.output_limit.is_some_and(|limit| limit.bytes() == 0) {
        return super::session::bad_input(
            super::BadInput::new("--output-limit 0: no output would be kept")
                .with(|f| f.flag("--output-limit")),
        );
    }
    let output_limit = args.output_limit.map(ByteSize::bytes);
    let interactive = args.interactive;
    let command = CommandSpec {
        argv: args.command,
        cwd: args.workdir,
        timeout_ms: args.timeout.map(|secs| secs.saturating_mul(1000)),
        tty: args.tty,
        env: args.env.into_iter().collect(),
        ..CommandSpec::default()
    };
    on_run(host, &args.run, |runner, run_id| async move {
        let progress = Progress::on_terminal();
        let options = || CreateOptions {
            run_id: None,
            cancel: Some(cancel_on_signals(
                "stopping the command (the workspace is kept)",
            )),
            cancel_grace: Some(host.stop_grace()),
            observer: Some(super::waiting::observer(
                host,
                progress.as_ref().map(Progress::observer),
            )),
        };
        if args.detach {
            // A background command is one of the run's services: the run is
            // taken back to record it.
            let mut workspace = match runner.resume(&run_id, options()).await {
                Ok(workspace) => workspace,
                Err(error) => return report_run_error(&error),
            };
            let started = workspace.start_background(&command).await;
            let detached = workspace.detach().await;
            return match (started, detached) {
                (Ok(name), Ok(_)) => {
                    super::command_json::print_detached(&run_id, &name);
                    ExitCode::SUCCESS
                }
                (Err(error), _) | (Ok(_), Err(error)) => report_run_error(&error),
            };
        }
        let live = match Live::open(&runner, &run_id, options).await {
            Ok(live) => live,
            Err(error) => return report_run_error(&error),
        };
        let mut io = super::command_json::command_io(progress.as_ref(), args.capture);
        io.output_limit = output_limit;
        if interactive {
            io.stdin = Some(Box::pin(tokio::io::stdin()));
        }
        if let Some(progress) = &progress {
            progress.command_started(run_id.as_str());
        }
        let outcome = while_ticking(progress, live.exec(&command, io)).await;
        if let Ok(outcome) = &outcome {
            super::command_json::print_exec_end(&runner, &run_id, outcome, args.capture);
        }
        let left = live.leave().await;
        match (outcome, left) {
            // Interrupted: 130 or 143, as a shell reports it, whatever the
            // command's own end in its grace period was.
            (Ok(outcome), Ok(())) if outcome.exit.killed == Some(KillCause::Cancelled) => {
                ExitCode::from(interrupted_status())
            }
            (Ok(outcome), Ok(())) => {
                let status = outcome.shell_status().clamp(0, 255);
                ExitCode::from(u8::try_from(status).unwrap_or(EXIT_RUNNER_FAILED))
            }
            (Err(error), _) | (Ok(_), Err(error)) => report_run_error(&error),
        }
    })
}

/// The live run a command runs in: joined, beside other `exec`s, or, when it
/// cannot be joined as it is, taken back (resumed, sealed again) by this
/// process alone.
enum Live {
    Joined(Box<JoinedRun>),
    TakenBack(Box<Workspace>),
}

impl Live {
    async fn open(
        runner: &Runner,
        run_id: &RunId,
        options: impl Fn() -> CreateOptions,
    ) -> Result<Self, RunError> {
        match runner.join(run_id, options()).await {
            Ok(joined) => Ok(Self::Joined(Box::new(joined))),
            Err(error) if matches!(*error.kind, RunErrorKind::NotJoinable { .. }) => {
                let workspace = runner.resume(run_id, options()).await?;
                Ok(Self::TakenBack(Box::new(workspace)))
            }
            Err(error) => Err(error),
        }
    }

    async fn exec(
        &self,
        command: &CommandSpec,
        io: CommandIo<'_>,
    ) -> Result<CommandOutcome, RunError> {
        match self {
            Self::Joined(joined) => joined.exec(command, io).await,
            Self::TakenBack(workspace) => workspace.exec(command, io).await,
        }
    }

    /// Lets go of the run, its sandbox live: left, or detached again.
    async fn leave(self) -> Result<(), RunError> {
        match self {
            Self::Joined(joined) => joined.leave().await,
            Self::TakenBack(workspace) => workspace.detach().await.map(drop),
        }
    }
}
