//! [`Workspace`]: one run between its creation and its cleanup.
//!
//! Bringing a run up is a pipeline: admitted, then provisioned
//! ([`bring_up`]), then sealed on what was provisioned; a parked run is taken
//! back ([`attach`]). Each stage is recorded in [`Progress`], which the one
//! conclusion every run goes through ([`conclude`]) reads to know what to undo.

mod attach;
mod bring_up;
mod capacity;
mod checks;
mod conclude;
mod park;
mod progress;

use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::command_io::CommandIo;
use super::error::{RunError, RunErrorKind};
use super::execute::execute;
use super::export::Verified;
use super::identity_store;
use super::leases::RunLeases;
use super::options::{CreateOptions, FinishOptions};
use super::outcome::{CommandOutcome, RunReport};
use super::paths::RunPaths;
use super::scrub::Scrubber;
use super::services::Services;
use super::spawned::SpawnedCommand;
use crate::boundary::{CommandSpec, RunContext, SourceRecord, Stack};
use crate::capacity::{AdmissionControl, Grant};
use crate::evidence::EvidenceWriter;
use crate::lifecycle::{FailureCause, Lifecycle, State, StateName};
use crate::step::{RunnerStep, StepErrors};

pub(super) use bring_up::{seal_plan, with_run_vars};
pub use park::{DetachedRun, SuspendedRun};
pub(super) use progress::{Progress, Provisioned};

/// A run that is sealed (or failed on the way) and not yet cleaned up.
///
/// Made by [`Runner::create`](super::Runner::create). Run commands with
/// [`exec`](Self::exec), any number at once (it takes `&self`: join their
/// futures, or share the workspace in an [`Arc`] across tasks), then end it
/// with [`finish`](Self::finish) (or [`cancel`](Self::cancel)): both stop
/// every process of the run, export the evidence and clean up, in that order.
///
/// A `Workspace` dropped without `finish` leaves its run to crash recovery
/// ([`Runner::recover`](super::Runner::recover)): its journal is no longer
/// held, so recovery takes it over.
#[derive(Debug)]
pub struct Workspace {
    stack: Stack,
    admission: Arc<dyn AdmissionControl>,
    run: RunContext,
    paths: RunPaths,
    life: Lifecycle,
    evidence: EvidenceWriter,
    /// How far the run was brought up.
    progress: Progress,
    reservation: Option<Grant>,
    leases: RunLeases,
    /// The commands that ended, in the order they started.
    commands: Mutex<Vec<CommandOutcome>>,
    /// Why a command broke the run (its journal or evidence refused), for the
    /// next step that may change its state to fail it with.
    broken: Mutex<Option<FailureCause>>,
    /// Steps of core's that failed so far, for the outcome.
    errors: StepErrors,
    started_unix_ms: u64,
    cancel: CancellationToken,
    /// How a running command ends on a cancel (see
    /// [`CreateOptions::cancel_grace`](super::CreateOptions::cancel_grace)).
    cancel_grace: Option<Duration>,
    /// Redacts the run's credential values from command output.
    scrubber: Scrubber,
    /// The run's services.
    services: Services,
    /// What [`check`](Self::check) verified, while no command ran since.
    checked: Mutex<Option<Verified>>,
    /// Taken back only to be ended ([`Runner::end`](super::Runner::end)): no
    /// capacity is asked for, and a sandbox found gone is not sealed again.
    pub(super) ending: bool,
}

/// What a [`Workspace`] is opened on: a fresh run's records, or a parked
/// run's read back.
pub(super) struct Opened {
    pub(super) run: RunContext,
    pub(super) paths: RunPaths,
    pub(super) life: Lifecycle,
    pub(super) evidence: EvidenceWriter,
    pub(super) started_unix_ms: u64,
    /// The commands a parked run ran.
    pub(super) commands: Vec<CommandOutcome>,
}

impl Workspace {
    /// The workspace of `opened`, driven over `stack` and admitted by
    /// `admission`, before anything of the run is brought up (nothing sealed,
    /// no capacity or leases held).
    pub(super) fn open(
        stack: Stack,
        admission: Arc<dyn AdmissionControl>,
        opened: Opened,
        options: CreateOptions,
    ) -> Self {
        let Opened {
            run,
            paths,
            mut life,
            evidence,
            started_unix_ms,
            commands,
        } = opened;
        if let Some(observer) = options.observer {
            life.observe(observer);
        }
        // A parked run's credentials, kept since it was first sealed: whatever
        // fails before it is attached again, nothing it exports shows them.
        let scrubber = match identity_store::load(&paths.run_dir) {
            Ok(identity) => Scrubber::new(&identity.map(|i| i.credentials).unwrap_or_default()),
            Err(error) => {
                tracing::warn!(run_id = %run.run_id, error = %crate::error_chain(&error),
                    "the run's kept credentials cannot be read");
                Scrubber::default()
            }
        };
        Self {
            stack,
            admission,
            run,
            paths,
            life,
            evidence,
            progress: Progress::Opened,
            reservation: None,
            leases: RunLeases::default(),
            commands: Mutex::new(commands),
            broken: Mutex::new(None),
            errors: StepErrors::default(),
            started_unix_ms,
            cancel: options.cancel.unwrap_or_default(),
            cancel_grace: options.cancel_grace,
            scrubber,
            services: Services::default(),
            checked: Mutex::new(None),
            ending: false,
        }
    }

    /// The run's id.
    pub fn run_id(&self) -> &crate::RunId {
        &self.run.run_id
    }

    /// The run's context (contract, directories).
    pub fn context(&self) -> &RunContext {
        &self.run
    }

    /// The evidence bundle being written.
    pub fn evidence_dir(&self) -> &Path {
        self.evidence.dir()
    }

    /// What the run received, once provisioned.
    pub fn source(&self) -> Option<&SourceRecord> {
        self.progress.source()
    }

    /// The run's current lifecycle state.
    pub fn state(&self) -> &State {
        self.life.state()
    }

    /// The capacity the run holds.
    pub fn reservation(&self) -> Option<&Grant> {
        self.reservation.as_ref()
    }

    /// A token that cancels the run: a running command is killed (cause
    /// "cancelled") and no further command starts.
    pub fn cancel_token(&self) -> CancellationToken {
        self.cancel.clone()
    }

    /// Runs `command` in the sealed workspace, streaming its output into the
    /// evidence (and to `io`'s sinks; returned in the outcome when `io`
    /// captures it), and records how it ended.
    ///
    /// Commands run at once when called at once: each takes its own number
    /// and record in the evidence, nothing of the workspace is held for a
    /// command's duration.
    ///
    /// A command that exits non-zero, times out or is killed is a normal outcome,
    /// not an error. An error means the run itself broke (its evidence); the
    /// run is then failed and [`finish`](Self::finish) exports and cleans it up.
    pub async fn exec(
        &self,
        command: &CommandSpec,
        io: CommandIo<'_>,
    ) -> Result<CommandOutcome, RunError> {
        self.exec_until(command, io, &self.cancel).await
    }

    /// Starts `command` to be watched as it runs (see [`SpawnedCommand`]):
    /// its output as events, its input written as it runs, a kill of its
    /// tree; recorded as [`exec`](Self::exec) records it.
    pub fn spawn(&self, command: &CommandSpec) -> SpawnedCommand<'_> {
        let kill = self.cancel.child_token();
        let command = command.clone();
        SpawnedCommand::start(kill.clone(), move |io| async move {
            self.exec_until(&command, io, &kill).await
        })
    }

    /// [`exec`](Self::exec), its command killed when `cancel` is (the run's
    /// token, or a child of it for this command alone).
    async fn exec_until(
        &self,
        command: &CommandSpec,
        io: CommandIo<'_>,
        cancel: &CancellationToken,
    ) -> Result<CommandOutcome, RunError> {
        if cancel.is_cancelled() {
            return Err(self.error(RunErrorKind::Failed(FailureCause::Cancelled)));
        }
        if let Some(cause) = lock(&self.broken).clone() {
            return Err(self.error(RunErrorKind::Failed(cause)));
        }
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            return Err(self.error(RunErrorKind::NotSealed {
                step: "a command",
                state,
            }));
        }
        // A command may change what the checks verified.
        *lock(&self.checked) = None;
        let process = self.stack.process.clone();
        let ran = execute(
            process.as_ref(),
            &self.run,
            (&self.evidence, &self.paths.run_dir),
            command,
            io,
            (cancel, self.cancel_grace, &self.scrubber),
        )
        .await;
        match ran {
            Ok(mut outcome) => {
                // The run's record of it, without the output returned.
                let output = outcome.output.take();
                let mut commands = lock(&self.commands);
                let at = commands.partition_point(|c| c.seq < outcome.seq);
                commands.insert(at, outcome.clone());
                outcome.output = output;
                Ok(outcome)
            }
            Err(kind) => {
                lock(&self.broken).get_or_insert_with(|| kind.failure_cause());
                Err(self.error(kind))
            }
        }
    }

    /// The workspace's files, read and written inside its sandbox as its
    /// user, each change recorded in the evidence (see [`Files`](super::Files));
    /// any number of operations at once, beside commands. Refused while the
    /// run is not sealed.
    pub fn files(&self) -> super::Files<'_> {
        let state = self.life.state().name();
        super::Files::new(
            self.stack.process.as_ref(),
            &self.run,
            &self.evidence,
            &self.scrubber,
            (state != StateName::Sealed).then_some(state),
        )
    }

    /// Starts `command` in the sealed workspace to run on in the background
    /// (what `exec --detach` does): it is not waited for, its output goes to
    /// log files of the run (`logs RUN exec-N`) and, scrubbed, into the
    /// evidence as `services/exec-N/`; `services.json` records it; it is
    /// stopped with the services when the run drains. Returns its name,
    /// `exec-N`.
    pub async fn start_background(&mut self, command: &CommandSpec) -> Result<String, RunError> {
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            return Err(self.error(RunErrorKind::NotSealed {
                step: "a background command",
                state,
            }));
        }
        let process = self.stack.process.clone();
        let started = self
            .services
            .start_background(process.as_ref(), &self.run, command, &self.scrubber)
            .await;
        started.map_err(|kind| self.error(kind))
    }

    /// Ends the run: runs the contract's required checks (while sealed and not
    /// cancelled), stops every process, exports and seals the evidence, cleans up.
    ///
    /// `Ok` whenever the run was concluded, including runs that failed on the way:
    /// [`RunReport::outcome`] says how it ended. `Err` only when the run's own
    /// journal refused to go on; the run is then left to crash recovery.
    pub async fn finish(self) -> Result<RunReport, RunError> {
        self.finish_with(FinishOptions::default()).await
    }

    /// [`finish`](Self::finish), and promote the exported patch to the contract's
    /// target when `options.promote` says so: the promotion boundary gets the checks
    /// (bound to the patch digest) and the approvals, and decides; what it did or
    /// why it refused is `promotion.json` in the sealed evidence. A failed run is
    /// never promoted.
    pub async fn finish_with(mut self, options: FinishOptions) -> Result<RunReport, RunError> {
        self.fail_if_broken();
        let mut verified = Verified::default();
        if let Some(checked) = self
            .checked
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
        {
            // Checked just before, and no command ran since.
            verified = checked;
        } else if self.life.state() == &State::Sealed && !self.cancel.is_cancelled() {
            verified = self.run_required_checks().await?;
        }
        if self.cancel.is_cancelled() {
            self.fail(FailureCause::Cancelled);
        }
        if !matches!(self.life.state(), State::Failed { .. }) {
            self.journal(|life| life.drain().map(drop))?;
        }
        self.conclude(verified, options.promote).await
    }

    /// Runs the contract's required checks now, each against the patch taken
    /// before it (see [`finish_with`](Self::finish_with)), without ending the
    /// workspace: a caller sees what fails, lets the agent fix it and checks
    /// again. A [`finish_with`](Self::finish_with) right after (no command in
    /// between) promotes on these results instead of running the checks again.
    pub async fn check(&mut self) -> Result<Vec<crate::boundary::CheckResult>, RunError> {
        self.fail_if_broken();
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            return Err(self.error(RunErrorKind::NotSealed {
                step: "the checks",
                state,
            }));
        }
        let verified = self.run_required_checks().await?;
        let results = verified.checks.clone();
        *lock(&self.checked) = Some(verified);
        Ok(results)
    }

    /// Why promoting the workspace as it is now with `approvals` would be
    /// refused, or `None` when it would not; nothing ends and nothing is
    /// promoted. The required checks run first unless they ran since the last
    /// command (a [`finish_with`](Self::finish_with) right after promotes on
    /// those results); a failing check is a refusal.
    pub async fn promotion_refusal(
        &mut self,
        approvals: &[crate::boundary::ApprovalRecord],
    ) -> Result<Option<String>, RunError> {
        // A refusal's words may name a changed path, which may spell a value.
        let refusal = self.refusal(approvals).await?;
        Ok(refusal.map(|reason| self.scrubber.redact(&reason)))
    }

    /// [`promotion_refusal`](Self::promotion_refusal), unredacted.
    async fn refusal(
        &mut self,
        approvals: &[crate::boundary::ApprovalRecord],
    ) -> Result<Option<String>, RunError> {
        let checked = lock(&self.checked).as_ref().map(|v| v.checks.clone());
        let checks = match checked {
            Some(checks) => checks,
            None => self.check().await?,
        };
        if let Some(failed) = checks.iter().find(|c| !c.passed) {
            return Ok(Some(format!(
                "required check {:?} failed: {}",
                failed.name,
                failed.failure.as_deref().unwrap_or("it did not pass")
            )));
        }
        let Some(source) = self.progress.source().cloned() else {
            return Err(self.error(RunErrorKind::NotProvisioned { step: "promote" }));
        };
        let promotion = self.stack.promotion.clone();
        let checked_digest = lock(&self.checked)
            .as_ref()
            .and_then(|v| v.patch.as_ref())
            .map(|patch| patch.patch_sha256.clone());
        let digest = match checked_digest {
            Some(digest) => digest,
            None => match promotion.export(&self.run, &source).await {
                Ok(patch) => patch.patch_sha256,
                Err(e) => return Ok(Some(crate::error_chain(&e))),
            },
        };
        // An approval given for another patch never counts; given, it was
        // meant for this one: a refusal, not silence.
        if let Some(stale) = approvals.iter().find(|a| a.patch_sha256 != digest) {
            return Ok(Some(format!(
                "{:?} approved patch {}, the patch is now {digest}",
                stale.approver, stale.patch_sha256
            )));
        }
        let request = crate::boundary::PromotionRequest {
            patch_sha256: digest,
            checks,
            approvals: approvals.to_vec(),
        };
        Ok(promotion
            .preflight(&self.run, &source, &request)
            .await
            .err()
            .map(|e| crate::error_chain(&e)))
    }

    /// Cancels the run (a running command is killed) and concludes it as failed
    /// with cause `cancelled`.
    pub async fn cancel(mut self) -> Result<RunReport, RunError> {
        self.cancel.cancel();
        self.fail(FailureCause::Cancelled);
        self.conclude(Verified::default(), None).await
    }

    /// Marks command `seq` as the run of the required check `name`.
    fn mark_check(&self, seq: u32, name: &str) {
        if let Some(recorded) = lock(&self.commands).iter_mut().find(|c| c.seq == seq) {
            recorded.check = Some(name.to_owned());
        }
    }

    /// Fails the run with the cause a command broke it with, if one did.
    pub(super) fn fail_if_broken(&mut self) {
        let broken = self
            .broken
            .get_mut()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(cause) = broken {
            self.fail(cause);
        }
    }

    /// Fails the run (keeping an earlier cause) and records why.
    fn fail(&mut self, cause: FailureCause) {
        if matches!(self.life.state(), State::Failed { .. } | State::Cleaned) {
            return;
        }
        tracing::warn!(run_id = %self.run.run_id, ?cause, "run failed");
        if let Err(e) = self.life.fail(cause) {
            self.errors.push(RunnerStep::Journal, e);
        }
    }

    /// Fails the run with `kind`'s cause, concludes it (stops, exports, cleans up)
    /// and returns the error naming its evidence.
    pub(super) async fn abort(mut self, kind: RunErrorKind) -> RunError {
        self.fail(kind.failure_cause());
        let error = self.error(kind);
        match self.conclude(Verified::default(), None).await {
            Ok(report) => tracing::info!(run_id = %report.run_id, cleaned = report.cleaned,
                "a run that failed before it was sealed was concluded"),
            Err(e) => tracing::error!(error = %crate::error_chain(&e),
                "a run that failed before it was sealed could not be concluded"),
        }
        error
    }

    /// Applies one journaled lifecycle step, naming the run if it is refused.
    fn journal<T>(
        &mut self,
        step: impl FnOnce(&mut Lifecycle) -> Result<T, crate::lifecycle::LifecycleError>,
    ) -> Result<T, RunError> {
        step(&mut self.life).map_err(|e| self.error(e.into()))
    }

    fn error(&self, kind: RunErrorKind) -> RunError {
        RunError {
            run_id: self.run.run_id.clone(),
            evidence: Some(self.evidence.dir().to_path_buf()),
            kind: Box::new(kind),
        }
    }

    fn limit(&self, state: StateName) -> Option<Duration> {
        self.life.timeouts().limit(state)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        // A run that ended, or was parked on purpose, needs nothing more; any
        // other (not finished, or concluded without proof its processes are
        // gone) is recovery's now that its journal is let go.
        let state = self.life.state().name();
        if !matches!(
            state,
            StateName::Cleaned | StateName::Detached | StateName::Suspended
        ) {
            tracing::warn!(run_id = %self.run.run_id, %state,
                "the workspace is let go before it was cleaned up; the run is left to crash recovery");
        }
    }
}

/// `mutex`'s value; a holder that panicked left it consistent (each is one
/// value replaced whole, or a list inserted into).
fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
