//! `agent-workspace run`: one command in a fresh, isolated workspace.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use clap::{Args, ValueEnum};
use tokio_util::sync::CancellationToken;
use workspace_core::boundary::CommandSpec;
use workspace_core::contract::{
    ByteSize, Contract, DurationSpec, NetworkMode, SourceSection, TaskShape,
};
use workspace_core::runner::{
    CommandIo, CreateOptions, RunErrorKind, RunReport, Runner, RunnerConfig,
};

use super::host::{HostArgs, host_capacity};
use super::summary::{Summary, exit_code};
use super::{BadInput, EXIT_BAD_INPUT, EXIT_RUNNER_FAILED, contract::load_contract};

/// The isolation backend of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Backend {
    /// Linux namespaces, cgroups and seccomp, embedded (the default).
    Namespace,
    /// An OCI runtime (crun, runc, youki).
    Container,
}

/// The network of a run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(crate) enum Network {
    /// Nothing but a private loopback interface.
    Deny,
    /// A private loopback for the run's own services.
    Loopback,
}

#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The workspace contract (TOML, or JSON for `.json`); without one, the
    /// "narrow fix" preset. The flags below override its values.
    #[arg(long, value_name = "FILE")]
    contract: Option<PathBuf>,
    /// The source repository [default: the contract's, else `.`].
    #[arg(long, value_name = "PATH")]
    repo: Option<PathBuf>,
    /// The revision to check out [default: the contract's, else `HEAD`].
    #[arg(long, value_name = "REV")]
    rev: Option<String>,
    /// The isolation backend.
    #[arg(long, value_enum, default_value_t = Backend::Namespace)]
    backend: Backend,
    /// The network policy [default: the contract's, else `deny`].
    #[arg(long, value_enum)]
    network: Option<Network>,
    /// Wall-clock limit of the command in seconds; after it the whole process tree
    /// is killed and the exit status is 124.
    #[arg(long, value_name = "SECS")]
    timeout: Option<u64>,
    /// Memory cap (bytes, or with a unit: `512MiB`, `2GiB`).
    #[arg(long, value_name = "BYTES")]
    memory: Option<ByteSize>,
    /// Cap on processes and threads.
    #[arg(long, value_name = "N")]
    pids: Option<u32>,
    /// Where evidence goes (`DIR/<run-id>/`)
    /// [default: `$XDG_STATE_HOME/agent-workspace/evidence`].
    #[arg(long, value_name = "DIR")]
    evidence: Option<PathBuf>,
    /// Print a JSON summary on stdout instead of the summary line (the command's
    /// own stdout then goes to stderr, so stdout is only the summary).
    #[arg(long)]
    json: bool,
    /// The command and its arguments, after `--`. A program name without `/` is
    /// looked up in the run's `PATH`.
    #[arg(last = true, required = true, value_name = "CMD")]
    command: Vec<String>,
}

/// A run ready to start: everything checked that can be checked up front.
struct Prepared {
    contract: Contract,
    command: CommandSpec,
}

pub(crate) fn run(args: RunArgs, host: &HostArgs) -> ExitCode {
    let json = args.json;
    let evidence_root = args
        .evidence
        .clone()
        .unwrap_or_else(|| host.dirs().evidence);
    let prepared = match prepare(args) {
        Ok(prepared) => prepared,
        Err(BadInput(message)) => {
            eprintln!("agent-workspace: {message}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("agent-workspace: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_RUNNER_FAILED);
        }
    };
    let code = runtime.block_on(execute(prepared, host, evidence_root, json));
    // Output tasks of a finished run have ended; do not wait for stdin readers.
    runtime.shutdown_background();
    code
}

fn prepare(args: RunArgs) -> Result<Prepared, BadInput> {
    if args.backend == Backend::Container {
        return Err(BadInput(
            "--backend container: the container backend is not available yet; use --backend namespace"
                .into(),
        ));
    }
    let mut contract = match &args.contract {
        Some(file) => load_contract(file)?,
        None => Contract::preset(
            TaskShape::NarrowFix,
            "agent-workspace run",
            SourceSection::new(".", "HEAD"),
        ),
    };
    if let Some(repo) = &args.repo {
        contract.source.repo = repo.to_string_lossy().into_owned();
    }
    if let Some(rev) = &args.rev {
        contract.source.revision = rev.clone();
    }
    let repo = check_repository(Path::new(&contract.source.repo), args.repo.is_some())?;
    contract.source.repo = repo.to_string_lossy().into_owned();
    check_revision(&repo, &contract.source.revision, args.rev.is_some())?;
    if let Some(network) = args.network {
        contract.environment.network.mode = match network {
            Network::Deny => NetworkMode::Deny,
            Network::Loopback => NetworkMode::Loopback,
        };
    }
    let limits = &mut contract.environment.limits;
    if let Some(secs) = args.timeout {
        if secs == 0 {
            return Err(BadInput(
                "--timeout 0: the timeout must be at least 1 second".into(),
            ));
        }
        limits.wall_time = Some(DurationSpec::from_secs(secs));
    }
    if let Some(memory) = args.memory {
        limits.memory = Some(memory);
    }
    if let Some(pids) = args.pids {
        limits.pids = Some(pids);
    }
    if let Err(problems) = contract.validate() {
        return Err(BadInput(format!(
            "the contract is invalid: {}",
            one_line(&problems.to_string())
        )));
    }
    let command = CommandSpec {
        argv: args.command,
        cwd: ".".into(),
        timeout_ms: None, // the contract's wall time applies
        tty: false,
    };
    Ok(Prepared { contract, command })
}

/// The repository as an absolute path, or why it is not one.
fn check_repository(repo: &Path, from_flag: bool) -> Result<PathBuf, BadInput> {
    let named = if from_flag { "--repo" } else { "source.repo" };
    let absolute = std::fs::canonicalize(repo)
        .map_err(|e| BadInput(format!("{named} {}: {}", repo.display(), io_reason(&e))))?;
    backend_worktree::source::open_source_repo(&absolute).map_err(|e| {
        BadInput(format!(
            "{named} {}: not a git repository ({})",
            repo.display(),
            one_line(&workspace_core::error_chain(&e))
        ))
    })?;
    Ok(absolute)
}

fn check_revision(repo: &Path, rev: &str, from_flag: bool) -> Result<(), BadInput> {
    let named = if from_flag {
        "--rev"
    } else {
        "source.revision"
    };
    let opened = backend_worktree::source::open_source_repo(repo)
        .map_err(|e| BadInput(one_line(&workspace_core::error_chain(&e))))?;
    backend_worktree::source::resolve_revision(&opened, rev).map_err(|e| {
        BadInput(format!(
            "{named} {rev}: not a commit of {} ({})",
            repo.display(),
            one_line(&workspace_core::error_chain(&e))
        ))
    })?;
    Ok(())
}

async fn execute(
    prepared: Prepared,
    host: &HostArgs,
    evidence_root: PathBuf,
    json: bool,
) -> ExitCode {
    let Prepared { contract, command } = prepared;
    let stack = match agent_workspace::namespace_stack(&host.cgroup_parent) {
        Ok(stack) => stack,
        Err(e) => {
            eprintln!(
                "agent-workspace: cannot set up the namespace backend: {}",
                workspace_core::error_chain(&e)
            );
            return ExitCode::from(EXIT_RUNNER_FAILED);
        }
    };
    let config = RunnerConfig::new(host.dirs().runtime, evidence_root);
    let runner = Runner::new(stack, config, Arc::new(host_capacity()));
    if let Err(kind) = runner.check(&contract) {
        let message = match &kind {
            RunErrorKind::InvalidContract(problems) | RunErrorKind::Unsupported(problems) => {
                format!("{kind}").replace(&problems.to_string(), &one_line(&problems.to_string()))
            }
            other => other.to_string(),
        };
        eprintln!("agent-workspace: {message}");
        return ExitCode::from(EXIT_BAD_INPUT);
    }
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            eprintln!("agent-workspace: interrupted; stopping the run and exporting its evidence");
            on_signal.cancel();
        }
    });
    let io = if json {
        CommandIo::passing_to(tokio::io::stderr(), tokio::io::stderr())
    } else {
        CommandIo::passing_to(tokio::io::stdout(), tokio::io::stderr())
    };
    let options = CreateOptions {
        run_id: None,
        cancel: Some(cancel),
    };
    match runner.run(contract, &command, io, options).await {
        Ok(report) => finish(&report, json),
        Err(error) => {
            let evidence = error
                .evidence
                .as_ref()
                .map(|dir| format!("; evidence: {}", dir.display()))
                .unwrap_or_default();
            eprintln!(
                "agent-workspace: {}{evidence}",
                one_line(&workspace_core::error_chain(&error))
            );
            ExitCode::from(EXIT_RUNNER_FAILED)
        }
    }
}

fn finish(report: &RunReport, json: bool) -> ExitCode {
    let summary = Summary::of(report);
    if json {
        match serde_json::to_string(&summary) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("agent-workspace: cannot print the summary: {e}"),
        }
    } else {
        eprintln!("{}", summary.line());
    }
    ExitCode::from(exit_code(report))
}

fn io_reason(error: &std::io::Error) -> String {
    match error.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => error.to_string(),
    }
}

/// Text on one line: newlines become "; ".
pub(crate) fn one_line(text: &str) -> String {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}
