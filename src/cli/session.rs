//! What every subcommand that drives runs needs: an async runtime, the default
//! stack and a runner over the host's directories, and Ctrl-C as a cancel.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use std::sync::atomic::{AtomicI32, Ordering};

use tokio_util::sync::CancellationToken;
use workspace_core::RunId;
use workspace_core::runner::{Runner, RunnerConfig};

use super::backend::Backend;
use super::host::{HostArgs, host_capacity};
use super::json::{ErrorKind, Failure};
use super::{BadInput, EXIT_RUNNER_FAILED};

/// Runs `body` on a multi-threaded runtime and returns its exit code.
pub(crate) fn block_on(body: impl Future<Output = ExitCode>) -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            return Failure::new(
                ErrorKind::RunFailed,
                EXIT_RUNNER_FAILED,
                format!("cannot start the async runtime: {e}"),
            )
            .report();
        }
    };
    let code = runtime.block_on(body);
    // A finished run's output tasks have ended; do not wait for a stdin reader.
    runtime.shutdown_background();
    code
}

/// How much base-tree content the command's layered checkout cache keeps before
/// it evicts the least recently used trees.
pub(crate) const TREE_CACHE_BYTES: u64 = 10 << 30;

/// A runner over `backend`'s stack, the host's directories (evidence under
/// `evidence` when given) and the host's capacity: the namespace backend's
/// with layered checkouts (base trees cached under `<runtime>/trees`), or the
/// container backend's, which keeps its containers' state under
/// `<runtime>/containers` and uses the first OCI runtime on `PATH`.
pub(crate) fn runner_on(
    host: &HostArgs,
    evidence: Option<PathBuf>,
    backend: Backend,
    runtime: Option<&str>,
) -> Result<Runner, ExitCode> {
    let dirs = host.dirs();
    let cannot = |e: &dyn std::error::Error| {
        Failure::new(
            ErrorKind::BackendUnavailable,
            EXIT_RUNNER_FAILED,
            format!(
                "cannot set up the {} backend: {}",
                backend.name(),
                super::text::one_line(&workspace_core::error_chain(e))
            ),
        )
        .report()
    };
    // The runtime directory holds every run's files: closed to other users
    // before anything of a run is made there (the evidence root is closed
    // by the run's creation, so that input refused first leaves none).
    dirs.make_runtime_private().map_err(|e| cannot(&e))?;
    let stack = match backend {
        // Layered checkouts where this caller can mount overlayfs; else every
        // checkout is a standalone copy (a contract asking for `layered` is
        // then refused, naming `source.materialization`).
        Backend::Namespace if backend_namespace::host_check::layered_checkouts_here() => {
            agent_workspace::namespace_stack_layered(
                &host.cgroup_parent(),
                dirs.runtime.join("trees"),
                TREE_CACHE_BYTES,
            )
            .map_err(|e| cannot(&e))?
        }
        Backend::Namespace => {
            agent_workspace::namespace_stack(&host.cgroup_parent()).map_err(|e| cannot(&e))?
        }
        Backend::Container => agent_workspace::container_stack(
            &host.cgroup_parent(),
            runtime,
            &dirs.runtime.join("containers"),
        )
        .map_err(|e| cannot(&e))?,
    };
    // Credentials come from the invoking environment, by name (`env:NAME`).
    let mut stack = stack;
    let credentials = Arc::new(agent_workspace::HostEnvCredentials);
    stack.identity = match backend {
        Backend::Container => Arc::new(
            backend_container::identity::ContainerIdentity::with_credential_source(credentials),
        ),
        _ => Arc::new(
            backend_namespace::identity::NamespaceIdentity::with_credential_source(credentials),
        ),
    };
    let capacity = host_capacity(host);
    let mut config = RunnerConfig::new(dirs.runtime, evidence.unwrap_or(dirs.evidence));
    if let Some(wait) = host.wait() {
        config.timeouts.waiting = wait;
    }
    Ok(Runner::with_admission(stack, config, Arc::new(capacity)))
}

/// The signal that interrupted this process (`SIGINT` or `SIGTERM`), 0 before one
/// came.
static INTERRUPTED_BY: AtomicI32 = AtomicI32::new(0);

/// The exit status of a run or command this process ended because it was
/// interrupted: 128 + the signal, as a shell reports it (130 for Ctrl-C, 143 for
/// SIGTERM).
pub(crate) fn interrupted_status() -> u8 {
    match INTERRUPTED_BY.load(Ordering::Relaxed) {
        0 => 130,
        signal => u8::try_from(128 + signal).unwrap_or(130),
    }
}

/// A token cancelled by Ctrl-C (`SIGINT`) or `SIGTERM` (what CI, systemd,
/// `timeout` and `docker stop` send): the run's command gets `SIGTERM` and the
/// grace of `--stop-grace`, then its tree is killed. `then` says what the
/// subcommand does next, for the line printed when the signal comes.
pub(crate) fn cancel_on_signals(then: &'static str) -> CancellationToken {
    use tokio::signal::unix::{SignalKind, signal};
    let cancel = CancellationToken::new();
    let on_signal = cancel.clone();
    tokio::spawn(async move {
        let (Ok(mut interrupt), Ok(mut terminate)) = (
            signal(SignalKind::interrupt()),
            signal(SignalKind::terminate()),
        ) else {
            eprintln!("agent-workspace: cannot watch for SIGINT and SIGTERM");
            return;
        };
        let (signal, name) = tokio::select! {
            _ = interrupt.recv() => (libc_signal::SIGINT, "interrupted"),
            _ = terminate.recv() => (libc_signal::SIGTERM, "terminated"),
        };
        INTERRUPTED_BY.store(signal, Ordering::Relaxed);
        eprintln!("agent-workspace: {name}; {then}");
        on_signal.cancel();
    });
    cancel
}

/// The two signal numbers, without a crate for them.
mod libc_signal {
    pub(super) const SIGINT: i32 = 2;
    pub(super) const SIGTERM: i32 = 15;
}

/// The created run a subcommand acts on.
#[derive(Debug, clap::Args)]
pub(crate) struct TheRun {
    /// The run, as `create` printed it.
    #[arg(value_name = "RUN")]
    id: String,
    /// The backend the run is expected on; refused when another sealed it
    /// [default: the one that sealed it].
    #[arg(long, value_enum, value_name = "BACKEND")]
    backend: Option<Backend>,
}

/// Runs `body` with a runner over the host's directories and the run named on
/// the command line (`RUN`): the shape of every subcommand on a created run.
pub(crate) fn on_run<F, Fut>(host: &HostArgs, run: &TheRun, body: F) -> ExitCode
where
    F: FnOnce(Runner, RunId) -> Fut,
    Fut: Future<Output = ExitCode>,
{
    let run_id = match run_id(&run.id) {
        Ok(id) => id,
        Err(bad) => return bad_input(bad),
    };
    let runtime = host.dirs().runtime;
    let journal = workspace_core::recovery::journal_path(&runtime, &run_id);
    if let Err(bad) = this_users_run(&journal, &run_id, &runtime) {
        return bad_input(bad);
    }
    // A run is driven by the backend that sealed it, as it left itself there.
    let run_dir =
        workspace_core::runner::RunPaths::new(&runtime, &host.dirs().evidence, &run_id).run_dir;
    let backend = Backend::that_sealed(&run_dir);
    if let Some(expected) = run.backend.filter(|expected| *expected != backend) {
        return bad_input(
            BadInput::new(format!(
                "--backend {}: run {run_id} was sealed by the {} backend (leave --backend out, or give {})",
                expected.name(),
                backend.name(),
                backend.name()
            ))
            .with(|f| f.flag("--backend").run(&run_id)),
        );
    }
    let runtime = backend_container::process::sealed_runtime(&run_dir);
    let runtime = runtime.as_deref().and_then(|p| p.to_str());
    block_on(async move {
        match runner_on(host, None, backend, runtime) {
            Ok(runner) => body(runner, run_id).await,
            Err(code) => code,
        }
    })
}

/// Refuses a run that is not there, or not this user's: a run is driven by the
/// user that created it (its journal's owner). Another user's run is not
/// readable in full (its logs and state files are its owner's alone), and
/// acting on it would leave files of this user in the other's run; so
/// `logs`, `exec` and the rest refuse it by name instead of answering with
/// what little they could read.
fn this_users_run(journal: &Path, run_id: &RunId, runtime: &Path) -> Result<(), BadInput> {
    use std::os::unix::fs::MetadataExt;
    let meta = match std::fs::metadata(journal) {
        Ok(meta) => meta,
        // The runtime directory is closed to every user but its own: its
        // owner's runs are all in it.
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            match std::fs::metadata(runtime) {
                Ok(meta) => meta,
                Err(_) => {
                    return Err(BadInput::of_kind(
                        ErrorKind::NotYourRun,
                        format!(
                            "run {run_id}: cannot read its journal {}: {e} (a run is driven by the user that created it)",
                            journal.display()
                        ),
                    )
                    .with(|f| f.run(run_id).path(journal)));
                }
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(BadInput::of_kind(
                ErrorKind::NoSuchRun,
                format!(
                    "no run {run_id} under {} (`agent-workspace ls` lists the runs)",
                    runtime.display()
                ),
            )
            .with(|f| f.run(run_id).path(runtime)));
        }
        Err(e) => {
            return Err(BadInput::of_kind(
                ErrorKind::NotYourRun,
                format!(
                    "run {run_id}: cannot read its journal {}: {e} (a run is driven by the user that created it)",
                    journal.display()
                ),
            )
            .with(|f| f.run(run_id).path(journal)));
        }
    };
    let me = nix::unistd::geteuid().as_raw();
    if meta.uid() == me {
        return Ok(());
    }
    Err(BadInput::of_kind(
        ErrorKind::NotYourRun,
        format!(
            "run {run_id} belongs to {}, not to {}: a run is driven by the user that created it",
            user_named(meta.uid()),
            user_named(me)
        ),
    )
    .with(|f| f.run(run_id)))
}

/// `alice (uid 1000)`, or `uid 1000` when the name cannot be found.
fn user_named(uid: u32) -> String {
    match nix::unistd::User::from_uid(nix::unistd::Uid::from_raw(uid)) {
        Ok(Some(user)) => format!("{} (uid {uid})", user.name),
        _ => format!("uid {uid}"),
    }
}

/// A run id given on the command line.
fn run_id(text: &str) -> Result<RunId, BadInput> {
    RunId::new(text)
        .map_err(|e| BadInput::new(format!("RUN {text:?}: {e}")).with(|f| f.field("RUN")))
}

/// Prints bad input (its message's lines escaped: it may quote a contract
/// that came with the repository; under `--json` the error answer) and returns
/// exit status 2.
pub(crate) fn bad_input(BadInput(failure): BadInput) -> ExitCode {
    (*failure).report()
}
