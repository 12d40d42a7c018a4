//! A detached run joined by a process that runs commands in its live sandbox
//! beside other processes' ([`Runner::join`](super::Runner::join)).
//!
//! Joining takes nothing over: the run stays `Detached` in its journal, whose
//! lock the joined run holds shared, so any number of processes run commands
//! at once while none can end, suspend or take the run back under them. The
//! sandbox keeps the run's capacity and leased names for its life, so a
//! joined run asks for neither. Each command takes its own number and record
//! in the evidence.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::command_io::CommandIo;
use super::error::{RunError, RunErrorKind};
use super::execute::execute;
use super::identity_store;
use super::leases::{LEASES_STATE_FILE, LeasedNames};
use super::outcome::CommandOutcome;
use super::paths::{CAPACITY_HELD_FILE, RunPaths};
use super::resume::SharedParked;
use super::scrub::Scrubber;
use super::spawned::SpawnedCommand;
use super::state_files::read_state;
use super::workspace::{Provisioned, seal_plan, with_run_vars};
use crate::RunId;
use crate::boundary::{Attachment, CommandSpec, ProcessBoundary, RunContext, Stack};
use crate::evidence::EvidenceWriter;
use crate::journal::SharedHold;
use crate::lifecycle::{FailureCause, State};

/// A detached run this process runs commands in, beside any other process
/// doing the same (see the module docs). Made by
/// [`Runner::join`](super::Runner::join); [`leave`](Self::leave) lets go of it,
/// the sandbox going on as before.
#[derive(Debug)]
pub struct JoinedRun {
    process: Arc<dyn ProcessBoundary>,
    run: RunContext,
    paths: RunPaths,
    evidence: EvidenceWriter,
    scrubber: Scrubber,
    cancel: CancellationToken,
    cancel_grace: Option<Duration>,
    /// Keeps the run from being taken over while joined.
    _hold: SharedHold,
}

impl JoinedRun {
    /// Joins the detached run `parked` holds, attaching `stack`'s process
    /// boundary to its live sandbox; refused with
    /// [`RunErrorKind::NotJoinable`] when it must be taken back instead.
    pub(super) async fn join(
        stack: &Stack,
        parked: SharedParked,
        cancel: CancellationToken,
        cancel_grace: Option<Duration>,
    ) -> Result<Self, RunError> {
        let SharedParked {
            paths,
            state,
            stored,
            run,
            hold,
        } = parked;
        let refuse = |kind| RunError::refused(&run.run_id, kind);
        let not_joinable = |why: &str| {
            refuse(RunErrorKind::NotJoinable {
                why: why.to_owned(),
            })
        };
        if state == State::Suspended {
            return Err(not_joinable("it is suspended"));
        }
        // What the sandbox does not keep for its life would be nobody's while
        // the run is joined.
        if !stack.process.capabilities().holds_capacity
            || !paths.run_dir.join(CAPACITY_HELD_FILE).exists()
        {
            return Err(not_joinable(
                "its sandbox does not keep its capacity and leased names",
            ));
        }
        let identity = identity_store::load(&run.run_dir)
            .map_err(refuse)?
            .ok_or_else(|| not_joinable("its sealed identity is not kept"))?;
        let environment = stack
            .environment
            .prepare(&run)
            .await
            .map_err(|e| refuse(e.into()))?;
        let names: LeasedNames = read_state(&paths.run_dir.join(LEASES_STATE_FILE))
            .map_err(refuse)?
            .unwrap_or_default();
        let provisioned = Provisioned {
            source: stored.source,
            filesystem: stored.filesystem,
        };
        let environment = with_run_vars(environment, &run, &names);
        let plan = seal_plan(&run, &provisioned, environment, identity).map_err(refuse)?;
        match stack.process.attach(&run, &plan).await {
            Ok(Attachment::Live { .. }) => {}
            Ok(Attachment::Lost { reason }) => {
                return Err(not_joinable(&format!("its sandbox is gone: {reason}")));
            }
            // A sandbox that cannot be entered (its door gone) is broken: the
            // process that takes the run back fails and concludes it.
            Err(e) => {
                return Err(not_joinable(&format!(
                    "its sandbox cannot be entered: {}",
                    crate::error_chain(&e)
                )));
            }
        }
        tracing::debug!(run_id = %run.run_id, "joined the live sandbox");
        Ok(Self {
            process: stack.process.clone(),
            scrubber: Scrubber::new(&plan.identity.credentials),
            run,
            paths,
            evidence: stored.evidence,
            cancel,
            cancel_grace,
            _hold: hold,
        })
    }

    /// The run's id.
    pub fn run_id(&self) -> &RunId {
        &self.run.run_id
    }

    /// The run's evidence bundle (unsealed until the run ends).
    pub fn evidence_dir(&self) -> &Path {
        self.evidence.dir()
    }

    /// A token that kills the commands of this process's (cause
    /// "cancelled"), the run going on.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Runs `command` in the run's sandbox, as
    /// [`Workspace::exec`](super::Workspace::exec) does: its output streamed
    /// into the evidence (and to `io`'s sinks), how it ended recorded. Any
    /// number at once, from this process and others.
    pub async fn exec(
        &self,
        command: &CommandSpec,
        io: CommandIo<'_>,
    ) -> Result<CommandOutcome, RunError> {
        self.exec_until(command, io, &self.cancel).await
    }

    /// Starts `command` to be watched as it runs, as
    /// [`Workspace::spawn`](super::Workspace::spawn) does.
    pub fn spawn(&self, command: &CommandSpec) -> SpawnedCommand<'_> {
        let kill = self.cancel.child_token();
        let command = command.clone();
        SpawnedCommand::start(kill.clone(), move |io| async move {
            self.exec_until(&command, io, &kill).await
        })
    }

    /// The run's files, read and written inside its sandbox as its user,
    /// each change recorded in the evidence, as
    /// [`Workspace::files`](super::Workspace::files) does.
    pub fn files(&self) -> super::Files<'_> {
        super::Files::new(
            self.process.as_ref(),
            &self.run,
            &self.evidence,
            &self.scrubber,
            None,
        )
    }

    /// [`exec`](Self::exec), its command killed when `cancel` is.
    async fn exec_until(
        &self,
        command: &CommandSpec,
        io: CommandIo<'_>,
        cancel: &CancellationToken,
    ) -> Result<CommandOutcome, RunError> {
        if cancel.is_cancelled() {
            return Err(self.error(RunErrorKind::Failed(FailureCause::Cancelled)));
        }
        execute(
            self.process.as_ref(),
            &self.run,
            (&self.evidence, &self.paths.run_dir),
            command,
            io,
            (cancel, self.cancel_grace, &self.scrubber),
        )
        .await
        .map_err(|kind| self.error(kind))
    }

    /// Lets go of the run: its sandbox goes on (what the commands left running
    /// with it), as detached as before.
    pub async fn leave(self) -> Result<(), RunError> {
        self.process
            .detach(&self.run)
            .await
            .map_err(|e| self.error(e.into()))
    }

    fn error(&self, kind: RunErrorKind) -> RunError {
        RunError {
            run_id: self.run.run_id.clone(),
            evidence: Some(self.evidence.dir().to_path_buf()),
            kind: Box::new(kind),
        }
    }
}
