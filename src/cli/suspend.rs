//! `agent-workspace suspend RUN` and `resume RUN`: freeze a live workspace in
//! place and thaw it again, from any process.

use std::process::ExitCode;

use clap::Args;
use serde::Serialize;
use workspace_core::RunId;
use workspace_core::boundary::Suspension;
use workspace_core::lifecycle::{StateName, Transition};
use workspace_core::runner::{CreateOptions, Runner};

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct SuspendArgs {
    #[command(flatten)]
    run: TheRun,
    /// Print `{"run_id", "state", "changed", ...}` on stdout instead of the
    /// line on stderr.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `suspend --json` and `resume --json`: the run's state now.
#[derive(Debug, Serialize)]
struct StateJson {
    /// The run.
    run_id: String,
    /// Its state now: `suspended`, or `detached` (live, waiting for `exec`).
    state: StateName,
    /// Whether this command changed it (`false`: it was so already).
    changed: bool,
    /// For `suspend`: how its processes were suspended: `frozen` (in place,
    /// they go on after `resume`) or `stopped` (they are gone; `resume`
    /// seals it again).
    #[serde(skip_serializing_if = "Option::is_none")]
    suspension: Option<&'static str>,
    /// For a frozen run: how many processes were frozen.
    #[serde(skip_serializing_if = "Option::is_none")]
    frozen_processes: Option<usize>,
}

impl StateJson {
    fn new(run_id: &RunId, state: StateName, changed: bool) -> Self {
        Self {
            run_id: run_id.to_string(),
            state,
            changed,
            suspension: None,
            frozen_processes: None,
        }
    }
}

/// The state the run's journal last recorded, when no process holds the run
/// (`None`: held, or nothing readable; what another process does with it is
/// then not known).
fn settled_state(runner: &Runner, run_id: &RunId) -> Option<StateName> {
    let path = workspace_core::recovery::journal_path(&runner.config().runtime_dir, run_id);
    if workspace_core::journal::is_held(&path).unwrap_or(true) {
        return None;
    }
    let read = workspace_core::journal::read::<Transition>(&path).ok()?;
    read.records.last().map(|record| record.event.to.name())
}

/// Freezes every process of the workspace where it is and gives its capacity
/// back; `resume` thaws it.
pub(crate) fn suspend(args: SuspendArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        // Already frozen: thawing it to freeze it again would let it run. (A
        // run another process holds goes on to be refused as in use.)
        if settled_state(&runner, &run_id) == Some(StateName::Suspended) {
            eprintln!("agent-workspace: run {run_id} is suspended already");
            super::json::print(&StateJson::new(&run_id, StateName::Suspended, false));
            return ExitCode::SUCCESS;
        }
        let workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        match workspace.suspend().await {
            Ok(suspended) => {
                let mut answer = StateJson::new(&run_id, StateName::Suspended, true);
                match suspended.suspension {
                    Suspension::Frozen { processes } => {
                        eprintln!(
                            "agent-workspace: run {run_id} suspended: {} processes frozen",
                            processes.len()
                        );
                        answer.suspension = Some("frozen");
                        answer.frozen_processes = Some(processes.len());
                    }
                    Suspension::Stopped => {
                        eprintln!(
                            "agent-workspace: run {run_id} suspended: its processes were stopped"
                        );
                        answer.suspension = Some("stopped");
                    }
                }
                super::json::print(&answer);
                ExitCode::SUCCESS
            }
            Err(error) => report_run_error(&error),
        }
    })
}

/// Re-verifies the workspace's checkout and thaws its processes (or seals it
/// again when they are gone, which it says), and leaves it live for `exec`.
pub(crate) fn resume(args: SuspendArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        // A live run is attached all the same: a sandbox found gone is sealed
        // again (and says so); only the line differs.
        let live = settled_state(&runner, &run_id) == Some(StateName::Detached);
        let workspace = match runner.resume(&run_id, CreateOptions::default()).await {
            Ok(workspace) => workspace,
            Err(error) => return report_run_error(&error),
        };
        match workspace.detach().await {
            Ok(_) => {
                if live {
                    eprintln!("agent-workspace: run {run_id} was not suspended; it is live");
                } else {
                    eprintln!("agent-workspace: run {run_id} resumed");
                }
                super::json::print(&StateJson::new(&run_id, StateName::Detached, !live));
                ExitCode::SUCCESS
            }
            Err(error) => report_run_error(&error),
        }
    })
}
