//! [`Workspace`]: one run between its creation and its cleanup.

use std::future::Future;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::execute::{CommandIo, execute, millis};
use super::export::Verified;
use super::identity_store;
use super::leases::{LEASES_STATE_FILE, LeasedNames, RunLeases};
use super::observed::{AppliedEnvironment, ObservedRecord};
use super::outcome::{CommandOutcome, RunReport};
use super::paths::{CAPACITY_HELD_FILE, FILESYSTEM_STATE_FILE, RunPaths};
use super::scrub::Scrubber;
use super::services::{Services, connection_vars};
use super::state_files::{create_dir, read_state, write_state};
use super::templates;
use super::{CreateOptions, FinishOptions};
use super::{RunError, RunErrorKind, Runner};
use crate::boundary::{
    Attachment, CommandSpec, EnvironmentPlan, FilesystemRecord, IdentityBoundary, IdentityPlan,
    RunContext, SealPlan, SourceRecord, Suspension,
};
use crate::capacity::{Grant, Resources};
use crate::contract::CheckoutOrigin;
use crate::evidence::{EvidenceFile, EvidenceWriter, FingerprintKey};
use crate::lifecycle::{FailureCause, Lifecycle, Origin, State, StateName};

/// A run that is sealed (or failed on the way) and not yet cleaned up.
///
/// Made by [`Runner::create`]. Run commands with [`exec`](Self::exec), then end it
/// with [`finish`](Self::finish) (or [`cancel`](Self::cancel)): both stop every
/// process of the run, export the evidence and clean up, in that order.
///
/// A `Workspace` dropped without `finish` leaves its run to crash recovery
/// ([`Runner::recover`]): its journal is no longer held, so recovery takes it over.
#[derive(Debug)]
pub struct Workspace {
    pub(super) runner: Runner,
    pub(super) run: RunContext,
    pub(super) paths: RunPaths,
    pub(super) life: Lifecycle,
    pub(super) evidence: EvidenceWriter,
    pub(super) reservation: Option<Grant>,
    pub(super) leases: RunLeases,
    pub(super) source: Option<SourceRecord>,
    pub(super) filesystem: Option<FilesystemRecord>,
    /// Whether `seal` was attempted, so the process boundary may hold resources.
    pub(super) sealing: bool,
    pub(super) commands: Vec<CommandOutcome>,
    pub(super) errors: Vec<String>,
    pub(super) started_unix_ms: u64,
    pub(super) cancel: CancellationToken,
    /// How a running command ends on a cancel (see
    /// [`CreateOptions::cancel_grace`](super::CreateOptions::cancel_grace)).
    pub(super) cancel_grace: Option<Duration>,
    /// Redacts the run's credential values from command output.
    pub(super) scrubber: Scrubber,
    /// The run's services.
    pub(super) services: Services,
    /// What [`check`](Self::check) verified, while no command ran since.
    pub(super) checked: Option<Verified>,
    pub(super) concluded: bool,
}

/// What a [`Workspace`] is opened on: a fresh run's records, or a parked
/// run's read back.
pub(super) struct Opened {
    pub(super) run: RunContext,
    pub(super) paths: RunPaths,
    pub(super) life: Lifecycle,
    pub(super) evidence: EvidenceWriter,
    pub(super) started_unix_ms: u64,
    /// The checkout and grants a parked run was provisioned with.
    pub(super) provisioned: Option<(SourceRecord, FilesystemRecord)>,
    /// The commands a parked run ran.
    pub(super) commands: Vec<CommandOutcome>,
}

impl Workspace {
    /// The workspace of `opened`, before anything of the run is brought up
    /// (nothing sealed, no capacity or leases held).
    pub(super) fn open(runner: Runner, opened: Opened, options: CreateOptions) -> Self {
        let Opened {
            run,
            paths,
            mut life,
            evidence,
            started_unix_ms,
            provisioned,
            commands,
        } = opened;
        if let Some(observer) = options.observer {
            life.observe(observer);
        }
        let (source, filesystem) = provisioned.unzip();
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
            runner,
            run,
            paths,
            life,
            evidence,
            reservation: None,
            leases: RunLeases::default(),
            source,
            filesystem,
            sealing: false,
            commands,
            errors: Vec::new(),
            started_unix_ms,
            cancel: options.cancel.unwrap_or_default(),
            cancel_grace: options.cancel_grace,
            scrubber,
            services: Services::default(),
            checked: None,
            concluded: false,
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
        self.source.as_ref()
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

    /// Admits, provisions and seals a new run; on failure the caller concludes it.
    pub(super) async fn bring_up(&mut self) -> Result<(), RunErrorKind> {
        let stack = self.runner.stack().clone();
        let cancel = self.cancel.clone();
        self.life.admit()?;
        let environment = self.reserve().await?;
        // The journal records where the checkout comes from, as the contract asks.
        let origin = match self.run.contract.source.origin {
            CheckoutOrigin::Fresh => Origin::Fresh,
            CheckoutOrigin::Resumed => Origin::Resumed,
            CheckoutOrigin::Snapshot => Origin::Restored,
        };
        self.life.provision(origin)?;
        create_dir(&self.paths.run_dir)?;
        self.lease(None)?;
        let limit = self.limit(StateName::Provisioning);
        let source = bounded(StateName::Provisioning, limit, &cancel, async {
            stack
                .source
                .provision(&self.run)
                .await
                .map_err(RunErrorKind::from)
        })
        .await?;
        self.evidence.write_json(EvidenceFile::Source, &source)?;
        self.source = Some(source.clone());
        // A fixture that is not what the contract pins fails the run before
        // anything ran in it.
        if let Some(mismatch) = source.fixture_mismatch(&self.run.contract.environment) {
            return Err(RunErrorKind::Failed(mismatch));
        }
        let filesystem = stack.filesystem.prepare(&self.run, &source).await?;
        write_state(&self.paths.run_dir.join(FILESYSTEM_STATE_FILE), &filesystem)?;
        self.filesystem = Some(filesystem);
        self.seal(environment).await
    }

    /// Brings a suspended run back to `Sealed`: capacity and leases again, the
    /// checkout re-verified against its record (a checkout that is not what it
    /// claims to be fails the run, never silently continues), then the frozen
    /// sandbox thawed, its processes going on where they were. Where they could
    /// not be kept (the host rebooted, the boundary cannot freeze) the run is
    /// sealed again and its services start again. `source.json` records which.
    pub(super) async fn bring_back(&mut self) -> Result<(), RunErrorKind> {
        let stack = self.runner.stack().clone();
        // Its frozen sandbox may still be there: whatever fails from here on,
        // the conclusion tears it down.
        self.sealing = true;
        // Its services' records first: whatever fails next, they are exported.
        self.services = Services::load(&self.paths.run_dir)?;
        let environment = self.capacity_to_attach().await?;
        self.life.resume()?;
        self.lease_again()?;
        self.verify_source().await?;
        let plan = self.attach_plan(environment.clone()).await?;
        match stack.process.attach(&self.run, &plan).await? {
            Attachment::Live { processes } => {
                self.scrubber = Scrubber::new(&plan.identity.credentials);
                self.life.start_services()?;
                self.life.seal()?;
                let note = format!("resumed with {} live processes", processes.len());
                tracing::info!(run_id = %self.run.run_id, %note);
                self.record_resume(Some(processes.len()), note)
            }
            Attachment::Lost { reason } => {
                tracing::warn!(run_id = %self.run.run_id, %reason,
                    "the suspended run's processes are gone; sealing it again");
                self.clear_lost_sandbox().await?;
                self.capacity_to_seal_again(&environment).await?;
                self.services.lost("gone when the run was resumed");
                self.record_resume(
                    None,
                    format!("resumed without its processes ({reason}); sealed again, services started again"),
                )?;
                self.seal(environment).await
            }
        }
    }

    /// The environment of a run being attached again, and its capacity: a
    /// sandbox that holds it still does (admitting again would wait behind
    /// itself); otherwise it is reserved again.
    async fn capacity_to_attach(&mut self) -> Result<EnvironmentPlan, RunErrorKind> {
        let held = self.paths.run_dir.join(CAPACITY_HELD_FILE).exists();
        if held && self.sandbox_holds_capacity() {
            Ok(self.runner.stack().environment.prepare(&self.run).await?)
        } else {
            self.reserve().await
        }
    }

    /// The capacity of a run sealed again after its sandbox was lost: what
    /// the sandbox held went with it.
    async fn capacity_to_seal_again(
        &mut self,
        environment: &EnvironmentPlan,
    ) -> Result<(), RunErrorKind> {
        if self.reservation.is_none() {
            self.admit(environment).await?;
        }
        Ok(())
    }

    /// Removes what a lost sandbox left (cgroups that outlived its pid 1, its
    /// record, its output files) before the run is sealed again; fails unless
    /// nothing of it is left.
    async fn clear_lost_sandbox(&mut self) -> Result<(), RunErrorKind> {
        let leaks = self.runner.stack().process.teardown(&self.run).await?;
        if !leaks.is_clean() {
            return Err(RunErrorKind::LostSandboxLeft(leaks));
        }
        self.sealing = false;
        Ok(())
    }

    /// The identity boundary's plan, each credential fingerprinted under the
    /// host's key before anything records it.
    async fn prepare_identity(
        identity: &dyn IdentityBoundary,
        run: &RunContext,
    ) -> Result<IdentityPlan, RunErrorKind> {
        let mut identity = identity.prepare(run).await?;
        if !identity.credentials.is_empty() {
            let key =
                FingerprintKey::load_or_create(&run.runtime_dir).map_err(|e| RunErrorKind::Io {
                    path: e.path,
                    source: e.source,
                })?;
            for credential in &mut identity.credentials {
                credential.fingerprint_with(&key);
            }
        }
        Ok(identity)
    }

    /// The plans to attach with: the environment with the run's variables and
    /// the run's identity, as it was sealed.
    async fn attach_plan(&self, environment: EnvironmentPlan) -> Result<SealPlan, RunErrorKind> {
        let stack = self.runner.stack().clone();
        let identity = Self::run_identity(stack.identity.as_ref(), &self.run).await?;
        self.seal_plan(self.with_run_vars(environment), identity)
    }

    /// The run's identity: as kept since it was first sealed (its credentials are
    /// issued once, and its processes hold those values), else prepared by the
    /// identity boundary now and kept.
    async fn run_identity(
        identity: &dyn IdentityBoundary,
        run: &RunContext,
    ) -> Result<IdentityPlan, RunErrorKind> {
        if let Some(kept) = identity_store::load(&run.run_dir)? {
            return Ok(kept);
        }
        let prepared = Self::prepare_identity(identity, run).await?;
        identity_store::store(&run.run_dir, &prepared)?;
        Ok(prepared)
    }

    /// Adds what a resume inherited to `resumes` in `source.json`.
    fn record_resume(
        &self,
        live_processes: Option<usize>,
        note: String,
    ) -> Result<(), RunErrorKind> {
        let path = self.evidence.path_of(EvidenceFile::Source);
        let mut source: serde_json::Value = read_state(&path)?.unwrap_or_default();
        let resume = serde_json::json!({
            "at_unix_ms": crate::clock::unix_ms_now(),
            "live_processes": live_processes,
            "note": note,
        });
        if let Some(object) = source.as_object_mut() {
            match object.get_mut("resumes").and_then(|r| r.as_array_mut()) {
                Some(resumes) => resumes.push(resume),
                None => {
                    object.insert("resumes".into(), serde_json::json!([resume]));
                }
            }
        }
        self.evidence.write_json(EvidenceFile::Source, &source)?;
        Ok(())
    }

    /// Attaches a detached run to its live sandbox: capacity and leases again,
    /// the environment prepared again and the identity it was sealed with,
    /// then the process boundary takes the sandbox over. A sandbox that is gone is
    /// not pretended to be there: the run goes through `Provisioning(Resumed)`
    /// (the checkout re-verified) and is sealed again, as after a suspend.
    pub(super) async fn reattach(&mut self) -> Result<(), RunErrorKind> {
        let stack = self.runner.stack().clone();
        // Its live sandbox is there: whatever fails from here on, the
        // conclusion tears it down.
        self.sealing = true;
        // Its services' records first: whatever fails next, they are exported.
        self.services = Services::load(&self.paths.run_dir)?;
        let environment = self.capacity_to_attach().await?;
        self.lease_again()?;
        let plan = self.attach_plan(environment.clone()).await?;
        match stack.process.attach(&self.run, &plan).await? {
            Attachment::Live { processes } => {
                self.scrubber = Scrubber::new(&plan.identity.credentials);
                self.life.attach()?;
                tracing::info!(run_id = %self.run.run_id, processes = processes.len(),
                    "attached to the live sandbox");
                Ok(())
            }
            Attachment::Lost { reason } => {
                tracing::warn!(run_id = %self.run.run_id, %reason,
                    "the detached sandbox is gone; sealing the run again");
                self.clear_lost_sandbox().await?;
                self.capacity_to_seal_again(&environment).await?;
                self.services
                    .lost("its sandbox was gone when the run was attached again");
                self.life.resume()?;
                self.verify_source().await?;
                self.seal(environment).await
            }
        }
    }

    /// The cache prefix and schema names the run had, leased again.
    fn lease_again(&mut self) -> Result<(), RunErrorKind> {
        let previous: Option<LeasedNames> =
            read_state(&self.paths.run_dir.join(LEASES_STATE_FILE))?;
        self.lease(Some(previous.unwrap_or_default()))
    }

    /// Re-verifies the checkout against its record.
    async fn verify_source(&mut self) -> Result<(), RunErrorKind> {
        let stack = self.runner.stack().clone();
        let cancel = self.cancel.clone();
        let source = self
            .source
            .clone()
            .ok_or(RunErrorKind::NotProvisioned { step: "verify" })?;
        let limit = self.limit(StateName::Provisioning);
        bounded(StateName::Provisioning, limit, &cancel, async {
            stack
                .source
                .verify(&self.run, &source)
                .await
                .map_err(RunErrorKind::from)
        })
        .await
    }

    /// Resolves the environment and reserves the capacity its limits need
    /// (waiting in FIFO order, within the `waiting` limit).
    async fn reserve(&mut self) -> Result<EnvironmentPlan, RunErrorKind> {
        let environment = self.runner.stack().environment.prepare(&self.run).await?;
        self.admit(&environment).await?;
        Ok(environment)
    }

    /// Reserves the capacity `environment`'s limits need (waiting in FIFO
    /// order, within the `waiting` limit).
    async fn admit(&mut self, environment: &EnvironmentPlan) -> Result<(), RunErrorKind> {
        let request = reserve_request(
            &environment.limits,
            self.run.contract.environment.reservation.as_ref(),
        );
        let limit = self.limit(StateName::Waiting);
        let admission = self.runner.admission().clone();
        let label = self.run.run_id.to_string();
        let reservation = bounded(StateName::Waiting, limit, &self.cancel, async move {
            admission
                .admit(&label, request)
                .await
                .map_err(RunErrorKind::from)
        })
        .await?;
        self.reservation = Some(reservation);
        Ok(())
    }

    /// Whether the run's live sandbox holds its capacity while no runner does.
    fn sandbox_holds_capacity(&self) -> bool {
        self.runner.stack().process.capabilities().holds_capacity
    }

    /// What the sandbox keeps open for its life: the capacity ticket's lock,
    /// when the process boundary holds capacity and the admission control
    /// has one (a host-wide pool).
    fn held_open(&self) -> Vec<Arc<OwnedFd>> {
        if !self.sandbox_holds_capacity() {
            return Vec::new();
        }
        match self.reservation.as_ref().and_then(Grant::descriptor) {
            Some(Ok(fd)) => vec![Arc::new(fd)],
            Some(Err(error)) => {
                // The run goes on; its capacity is then given back on detach.
                tracing::warn!(run_id = %self.run.run_id, %error,
                    "the capacity ticket cannot be handed to the sandbox");
                Vec::new()
            }
            None => Vec::new(),
        }
    }

    /// Records whether the sandbox about to be sealed holds the run's
    /// capacity, for the runner that attaches to it later.
    fn record_capacity_holder(&self, held: bool) -> Result<(), RunErrorKind> {
        let path = self.paths.run_dir.join(CAPACITY_HELD_FILE);
        let written = if held {
            std::fs::write(&path, b"")
        } else {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                other => other,
            }
        };
        written.map_err(|source| RunErrorKind::Io { path, source })
    }

    /// Gives the capacity back, or, when the live sandbox holds it, leaves it
    /// to the sandbox (until the sandbox ends).
    fn let_go_of_capacity(&mut self) {
        if let Some(grant) = self.reservation.take()
            && self.sandbox_holds_capacity()
            && self.paths.run_dir.join(CAPACITY_HELD_FILE).exists()
        {
            grant.leave();
        }
    }

    /// Leases the run's cache prefix, schema name and (without a private network)
    /// ports, and records the names for a later resume.
    fn lease(&mut self, previous: Option<LeasedNames>) -> Result<(), RunErrorKind> {
        let private_network = self.runner.stack().process.capabilities().private_network;
        self.leases = RunLeases::acquire(
            &self.run.runtime_dir,
            &self.run.run_id,
            &self.run.contract.process,
            private_network,
            previous.as_ref(),
        )?;
        write_state(
            &self.paths.run_dir.join(LEASES_STATE_FILE),
            &self.leases.names,
        )
    }

    /// Starts services, applies the boundaries and probes them: `Sealed`.
    async fn seal(&mut self, environment: EnvironmentPlan) -> Result<(), RunErrorKind> {
        let environment = self.with_run_vars(environment);
        let services = self.run.contract.environment.services.clone();
        let stack = self.runner.stack().clone();
        let cancel = self.cancel.clone();
        self.life.start_services()?;
        let identity = Self::run_identity(stack.identity.as_ref(), &self.run).await?;
        self.scrubber = Scrubber::new(&identity.credentials);
        let mut plan = self.seal_plan(environment.clone(), identity.clone())?;
        plan.held_open = self.held_open();
        self.record_capacity_holder(!plan.held_open.is_empty())?;
        let filesystem = plan.filesystem.clone();
        self.sealing = true;
        let limit = self.limit(StateName::StartingServices);
        let state_started = Instant::now();
        let probe = bounded(StateName::StartingServices, limit, &cancel, async {
            stack
                .process
                .seal(&self.run, &plan)
                .await
                .map_err(RunErrorKind::from)
        })
        .await?;
        let observed = ObservedRecord {
            probe,
            filesystem,
            environment: AppliedEnvironment::from(&environment),
            identity,
        };
        self.evidence
            .write_json(EvidenceFile::Observed, &observed)?;
        let process = stack.process.clone();
        // One limit for the whole state: the services get what the seal left.
        let left = limit.map(|limit| limit.saturating_sub(state_started.elapsed()));
        let started = bounded(StateName::StartingServices, left, &cancel, async {
            self.services
                .start_all(
                    process.as_ref(),
                    &self.run,
                    (&services, &plan.templates),
                    &cancel,
                    &self.scrubber,
                )
                .await
        });
        started.await?;
        self.life.seal()?;
        Ok(())
    }

    /// `environment` with what the run adds for its commands: its leased names
    /// and its services' connection variables.
    fn with_run_vars(&self, mut environment: EnvironmentPlan) -> EnvironmentPlan {
        let leased = self.leases.names.vars();
        let services = &self.run.contract.environment.services;
        environment.vars.extend(connection_vars(services, &leased));
        environment.vars.extend(leased);
        environment
    }

    /// The plans the process boundary applies, from the provisioned records.
    fn seal_plan(
        &self,
        environment: EnvironmentPlan,
        identity: IdentityPlan,
    ) -> Result<SealPlan, RunErrorKind> {
        let (Some(source), Some(filesystem)) = (self.source.clone(), self.filesystem.clone())
        else {
            return Err(RunErrorKind::NotProvisioned { step: "seal" });
        };
        let templates = templates::layers(&self.run, &identity)?;
        Ok(SealPlan {
            source,
            filesystem,
            environment,
            identity,
            templates,
            held_open: Vec::new(),
        })
    }

    /// Lets go of the sealed run without stopping anything: it is parked in
    /// `Detached`, its sandbox stays live (what its commands left running goes
    /// on), the leases are given back and the journal is released. Its capacity
    /// stays held by the sandbox when the process boundary
    /// [`holds_capacity`](crate::boundary::ProcessCapabilities::holds_capacity)
    /// and the admission control is a host-wide pool; otherwise it is given back.
    /// [`Runner::resume`] (in this process or another) attaches to it again;
    /// crash recovery leaves a detached run alone. This is how a workspace lives
    /// across separate processes (`create`, then `exec`, `exec`, `promote`).
    ///
    /// Only a sealed run (no command running) can be detached; a run the process
    /// boundary cannot detach is failed and concluded instead.
    pub async fn detach(mut self) -> Result<DetachedRun, RunError> {
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            let refused = self.life.detach().map(drop).map_err(RunErrorKind::from);
            return Err(self.error(refused.err().unwrap_or(RunErrorKind::NotSealed {
                step: "detaching",
                state,
            })));
        }
        let stack = self.runner.stack().clone();
        self.services.release();
        if let Err(e) = stack.process.detach(&self.run).await {
            return Err(self.abort(e.into()).await);
        }
        self.sealing = false;
        self.journal(|life| life.detach().map(drop))?;
        self.let_go_of_capacity();
        self.leases = RunLeases::default();
        self.concluded = true;
        tracing::info!(run_id = %self.run.run_id, "run detached");
        Ok(DetachedRun {
            run_id: self.run.run_id.clone(),
            evidence: self.evidence.dir().to_path_buf(),
        })
    }

    /// Suspends the run and parks it in `Suspended`: its processes are frozen
    /// in place (or, where the process boundary cannot freeze, stopped), the
    /// checkout and the evidence stay, the capacity is kept by the frozen
    /// sandbox as by a detached one (given back when its processes were
    /// stopped), the journal is released. [`Runner::resume`] (in this process or another) re-verifies
    /// the checkout and thaws the processes; crash recovery leaves a suspended
    /// run alone.
    ///
    /// Only a sealed run (no command running) can be suspended; a run whose
    /// processes can be neither frozen nor proven stopped is failed and
    /// concluded instead.
    pub async fn suspend(mut self) -> Result<SuspendedRun, RunError> {
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            let refused = self.life.suspend().map(drop).map_err(RunErrorKind::from);
            return Err(self.error(refused.err().unwrap_or(RunErrorKind::NotSealed {
                step: "suspending",
                state,
            })));
        }
        let stack = self.runner.stack().clone();
        self.services.release();
        let suspension = match stack.process.suspend(&self.run).await {
            Ok(suspension) => suspension,
            // The boundary's own error (it names the operation), as any
            // boundary's failure.
            Err(e) => return Err(self.abort(e.into()).await),
        };
        self.sealing = false;
        self.journal(|life| life.suspend().map(drop))?;
        self.let_go_of_capacity();
        self.leases = RunLeases::default();
        self.concluded = true;
        tracing::info!(run_id = %self.run.run_id, ?suspension, "run suspended");
        Ok(SuspendedRun {
            run_id: self.run.run_id.clone(),
            evidence: self.evidence.dir().to_path_buf(),
            suspension,
        })
    }

    /// Runs `command` in the sealed workspace, streaming its output into the
    /// evidence (and to `io`'s sinks), and records how it ended.
    ///
    /// A command that exits non-zero, times out or is killed is a normal outcome,
    /// not an error. An error means the run itself broke (its journal or its
    /// evidence); the run is then failed and [`finish`](Self::finish) exports and
    /// cleans it up.
    pub async fn exec(
        &mut self,
        command: &CommandSpec,
        io: CommandIo,
    ) -> Result<CommandOutcome, RunError> {
        let seq = u32::try_from(self.commands.len() + 1).unwrap_or(u32::MAX);
        let result = self.exec_inner(seq, command, io).await;
        match result {
            Ok(outcome) => {
                self.commands.push(outcome.clone());
                Ok(outcome)
            }
            Err(kind) => {
                self.fail(kind.failure_cause());
                Err(self.error(kind))
            }
        }
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
        let process = self.runner.stack().process.clone();
        let started = self
            .services
            .start_background(process.as_ref(), &self.run, command, &self.scrubber)
            .await;
        started.map_err(|kind| self.error(kind))
    }

    async fn exec_inner(
        &mut self,
        seq: u32,
        command: &CommandSpec,
        io: CommandIo,
    ) -> Result<CommandOutcome, RunErrorKind> {
        if self.cancel.is_cancelled() {
            return Err(RunErrorKind::Failed(FailureCause::Cancelled));
        }
        self.life.run(seq)?;
        // A command may change what the checks verified.
        self.checked = None;
        let process = self.runner.stack().process.clone();
        let outcome = execute(
            process.as_ref(),
            &self.run,
            (&self.evidence, &self.paths.run_dir),
            command,
            io,
            (&self.cancel, self.cancel_grace, &self.scrubber),
        )
        .await?;
        self.life.finish()?;
        Ok(outcome)
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
        let mut verified = Verified::default();
        if let Some(checked) = self.checked.take() {
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
        if self.life.state() != &State::Sealed {
            let state = self.life.state().name();
            return Err(self.error(RunErrorKind::NotSealed {
                step: "the checks",
                state,
            }));
        }
        let verified = self.run_required_checks().await?;
        let results = verified.checks.clone();
        self.checked = Some(verified);
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
        let checks = match &self.checked {
            Some(verified) => verified.checks.clone(),
            None => self.check().await?,
        };
        if let Some(failed) = checks.iter().find(|c| !c.passed) {
            return Ok(Some(format!(
                "required check {:?} failed: {}",
                failed.name,
                failed.failure.as_deref().unwrap_or("it did not pass")
            )));
        }
        let Some(source) = self.source.clone() else {
            return Err(self.error(RunErrorKind::NotProvisioned { step: "promote" }));
        };
        let promotion = self.runner.stack().promotion.clone();
        let digest = match self.checked.as_ref().and_then(|v| v.patch.as_ref()) {
            Some(patch) => patch.patch_sha256.clone(),
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

    /// Fails the run (keeping an earlier cause) and records why.
    pub(super) fn fail(&mut self, cause: FailureCause) {
        if matches!(self.life.state(), State::Failed { .. } | State::Cleaned) {
            return;
        }
        tracing::warn!(run_id = %self.run.run_id, ?cause, "run failed");
        if let Err(e) = self.life.fail(cause) {
            self.errors
                .push(format!("recording the failure: {}", crate::error_chain(&e)));
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
    pub(super) fn journal<T>(
        &mut self,
        step: impl FnOnce(&mut Lifecycle) -> Result<T, crate::lifecycle::LifecycleError>,
    ) -> Result<T, RunError> {
        step(&mut self.life).map_err(|e| self.error(e.into()))
    }

    pub(super) fn error(&self, kind: RunErrorKind) -> RunError {
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
        if !self.concluded {
            tracing::warn!(run_id = %self.run.run_id, state = %self.life.state().name(),
                "workspace dropped without finish; the run is left to crash recovery");
        }
    }
}

/// A run parked in `Detached` by [`Workspace::detach`], its sandbox live.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DetachedRun {
    /// The run, for [`Runner::resume`].
    pub run_id: crate::RunId,
    /// Its evidence bundle (unsealed until the run ends).
    pub evidence: std::path::PathBuf,
}

/// A run parked in `Suspended` by [`Workspace::suspend`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SuspendedRun {
    /// The run, for [`Runner::resume`].
    pub run_id: crate::RunId,
    /// Its evidence bundle (unsealed until the run ends).
    pub evidence: std::path::PathBuf,
    /// Whether its processes were frozen or stopped.
    pub suspension: Suspension,
}

/// What a run with `limits` reserves: the cores and memory it needs
/// (`reservation`, else the defaults or its caps when smaller), its disk cap
/// and one slot.
pub(super) fn reserve_request(
    limits: &crate::boundary::ResolvedLimits,
    reservation: Option<&crate::contract::Reservation>,
) -> Resources {
    use crate::contract::Reservation;
    Resources {
        cpu_millis: Reservation::cpu_millis(reservation, limits.cpu_millis),
        memory_bytes: Reservation::memory_bytes(reservation, limits.memory_bytes),
        disk_bytes: limits.disk_bytes.unwrap_or(0),
        slots: 1,
    }
}

/// Awaits `step` unless the state's time limit passes or the run is cancelled.
async fn bounded<T>(
    state: StateName,
    limit: Option<Duration>,
    cancel: &CancellationToken,
    step: impl Future<Output = Result<T, RunErrorKind>>,
) -> Result<T, RunErrorKind> {
    let timed = async {
        match limit {
            Some(limit) => tokio::time::timeout(limit, step).await.unwrap_or_else(|_| {
                Err(RunErrorKind::Failed(FailureCause::Timeout {
                    state,
                    limit_ms: millis(limit),
                }))
            }),
            None => step.await,
        }
    };
    tokio::select! {
        result = timed => result,
        () = cancel.cancelled() => Err(RunErrorKind::Failed(FailureCause::Cancelled)),
    }
}
