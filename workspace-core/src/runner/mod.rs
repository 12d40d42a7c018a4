//! The runner: one run through its whole lifecycle over a [`Stack`].
//!
//! [`Runner::create`] validates the contract and checks the stack can keep it
//! (refusing before anything is created), then journals each step before it takes
//! effect: admit (a FIFO [`Capacity`] reservation sized by the run's resolved
//! limits) → provision the source → start services → seal (the process boundary
//! applies the filesystem, environment and identity plans and probes them from
//! inside). [`Workspace::exec`] runs commands with their output streamed into the
//! evidence as it is produced, kept there to the output cap
//! (`environment.limits.output`: head and tail past it), passed whole to the
//! caller's sinks and, with [`CommandIo::capturing`], returned in the outcome
//! ([`CapturedOutput`]). [`Workspace::finish`] runs the contract's required
//! checks, stops every process, exports the evidence, and only then cleans up.
//!
//! Every way a run can end goes through the same conclusion: success, a non-zero
//! exit, a timeout, a cancel, a probe mismatch, a boundary error, an error of the
//! runner itself. The evidence bundle is always exported and sealed before the
//! checkout is removed; a run whose teardown cannot prove its processes and mounts
//! are gone is not cleaned up but left to [`Runner::recover`].
//!
//! Where things live is derived from the run id alone ([`RunPaths`]), so crash
//! recovery finds everything a dead runner left: its journal under
//! `<runtime>/journals`, its checkout under `<runtime>/runs`, its evidence under
//! the evidence root. The contract is the first file of the evidence, written
//! before the journal exists.
//!
//! Journal writes are small and done on the calling task (the few that must
//! survive a power cut are fsynced there); a host application
//! that cannot afford a few milliseconds of blocking per transition runs the
//! runner on a runtime of its own.
//!
//! [`Stack`]: crate::boundary::Stack
//! [`Capacity`]: crate::capacity::Capacity

mod bounded;
mod command_io;
mod credential_leaks;
mod disk;
mod drive;
mod error;
mod execute;
mod export;
mod files;
mod http;
mod identity_store;
mod joined;
mod kept_output;
mod late_output;
mod leases;
mod observed;
mod options;
mod outcome;
mod output_cap;
mod patch_reading;
mod paths;
mod preview;
mod recovery;
mod resume;
mod run_files;
mod scrub;
mod services;
mod spawned;
mod state_files;
mod template_store;
mod templates;
mod tree_removal;
mod withhold;
mod workspace;

use std::path::PathBuf;
use std::sync::Arc;

pub use command_io::{CommandIo, OutputSink};
pub use credential_leaks::{CredentialForm, CredentialLeak, MIN_REDACTED_LEN};
pub use error::{RunError, RunErrorKind};
pub use files::{Files, ReadOptions, WriteOutcome};
pub use joined::JoinedRun;
pub use late_output::LateOutput;
pub use leases::{CACHE_PREFIX_VAR, LEASES_STATE_FILE, LeasedNames, SCHEMA_VAR};
pub use observed::{AppliedEnvironment, ObservedRecord};
pub use options::{CreateOptions, FinishOptions, RunnerConfig};
pub use outcome::{CommandOutcome, NetworkCounts, Outcome, PromotionOutcome, RunReport};
pub use output_cap::{CapturedOutput, CapturedStream};
pub use paths::{EVIDENCE_POINTER_EXTENSION, FILESYSTEM_STATE_FILE, RUNS_DIR, RunPaths};
pub use preview::{PreviewCheckRecord, PreviewRecord};
pub use recovery::StackRecovery;
pub use scrub::Scrubber;
pub use services::{BACKGROUND_PREFIX, SERVICES_STATE_FILE, ServiceRecord, log_files};
pub use spawned::{CommandEvent, SpawnedCommand};
pub use template_store::{SpecialFile, TemplateError};
pub use templates::{TEMPLATES_STATE_FILE, TemplateRecord, prune_templates};
pub use workspace::{DetachedRun, SuspendedRun, Workspace};
use workspace::{Opened, Provisioned};

use crate::RunId;
use crate::boundary::{CommandOutput, PreviewEndpoint};
use crate::boundary::{CommandSpec, PatchExport, ResolvedSource, RunContext, Stack};
use crate::capacity::{AdmissionControl, Capacity};
use crate::clock::unix_ms_now;
use crate::contract::{CleanupOwner, Contract};
use crate::evidence::{EvidenceFile, EvidenceWriter};
use crate::lifecycle::Lifecycle;
use crate::lifecycle::StateName;
use crate::recovery::{RecoveryError, RecoveryReport, recover};

/// Drives runs over one [`Stack`], sharing one [`Capacity`]. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Runner {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    stack: Stack,
    config: RunnerConfig,
    admission: Arc<dyn AdmissionControl>,
}

impl Runner {
    /// A runner composing `stack`, admitting runs through `capacity` (this
    /// process's pool). Nothing is made yet: [`create`](Self::create) makes
    /// `config`'s directories the runner's alone before its first run.
    pub fn new(stack: Stack, config: RunnerConfig, capacity: Arc<Capacity>) -> Self {
        Self::with_admission(stack, config, capacity)
    }

    /// A runner composing `stack`, admitting runs through `admission` (e.g. a pool
    /// shared by every process on the host).
    pub fn with_admission(
        stack: Stack,
        config: RunnerConfig,
        admission: Arc<dyn AdmissionControl>,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                stack,
                config,
                admission,
            }),
        }
    }

    /// The boundaries.
    pub fn stack(&self) -> &Stack {
        &self.inner.stack
    }

    /// The configuration.
    pub fn config(&self) -> &RunnerConfig {
        &self.inner.config
    }

    /// Where runs are admitted.
    pub fn admission(&self) -> &Arc<dyn AdmissionControl> {
        &self.inner.admission
    }

    /// Every problem that would make [`create`](Self::create) refuse `contract`:
    /// its own validation, then what the stack cannot enforce.
    pub fn check(&self, contract: &Contract) -> Result<(), RunErrorKind> {
        contract.validate().map_err(RunErrorKind::InvalidContract)?;
        let mut problems = self.inner.stack.check(contract).err().unwrap_or_default();
        if contract.process.cleanup_owner == CleanupOwner::Caller {
            problems.push(
                "process.cleanup_owner",
                "the runner cleans up every run it exports; for a workspace its caller \
                 ends, create it (`Runner::create`, `agent-workspace create`) and finish \
                 it when done (`Workspace::finish`, `destroy`)",
            );
        }
        problems.into_result().map_err(RunErrorKind::Unsupported)
    }

    /// [`check`](Self::check), then the source boundary's resolution of
    /// `contract.source` (its repository opened, its revision resolved to a
    /// commit): everything [`create`](Self::create) refuses a contract for,
    /// and, where the boundary resolves ahead, what the run will get.
    /// Nothing is created.
    pub async fn resolve(
        &self,
        contract: &Contract,
    ) -> Result<Option<ResolvedSource>, RunErrorKind> {
        self.check(contract)?;
        self.inner
            .stack
            .source
            .resolve(&contract.source)
            .await
            .map_err(RunErrorKind::InvalidContract)
    }

    /// Whether a run of `contract` would go without changes its repository
    /// has (uncommitted changes at `HEAD`), as the source boundary answers
    /// [`SourceBoundary::uncommitted_changes`](crate::boundary::SourceBoundary::uncommitted_changes):
    /// a status of the repository's whole work tree, which [`create`](Self::create)
    /// never pays for. `None`: not known.
    pub async fn uncommitted_changes(&self, contract: &Contract) -> Option<bool> {
        self.inner
            .stack
            .source
            .uncommitted_changes(&contract.source)
            .await
    }

    /// Creates a run of `contract` and brings it to `Sealed`.
    ///
    /// An invalid or unsupported contract, or one whose source does not
    /// resolve, is refused before anything is created (the error has no
    /// evidence). Then the runtime directory and the evidence root are made
    /// the runner's alone ([`private_dirs::make_private`](crate::private_dirs::make_private)),
    /// or the run is refused naming the one that cannot be. Any later
    /// failure is concluded before this returns: the error names the
    /// exported evidence.
    ///
    /// # Ambient authority
    /// Creates the runner's directories, and closes them to other users.
    pub async fn create(
        &self,
        contract: Contract,
        options: CreateOptions,
    ) -> Result<Workspace, RunError> {
        let run_id = options.run_id.clone().unwrap_or_else(RunId::generate);
        let refuse = |kind: RunErrorKind, evidence: Option<PathBuf>| RunError {
            evidence,
            ..RunError::refused(&run_id, kind)
        };
        self.resolve(&contract)
            .await
            .map_err(|kind| refuse(kind, None))?;
        let config = &self.inner.config;
        // Every run's files live under these: closed to other users before
        // anything of this run is made there.
        crate::private_dirs::make_private(&config.runtime_dir, &config.evidence_root)
            .map_err(|e| refuse(e.into(), None))?;
        let paths = RunPaths::new(&config.runtime_dir, &config.evidence_root, &run_id);
        let started_unix_ms = unix_ms_now();
        let evidence = EvidenceWriter::create(&config.evidence_root, &run_id)
            .map_err(|e| refuse(e.into(), None))?;
        let evidence_dir = Some(evidence.dir().to_path_buf());
        evidence
            .write_json(EvidenceFile::Contract, &contract)
            .map_err(|e| refuse(e.into(), evidence_dir.clone()))?;
        if let Some(parent) = paths.journal.parent() {
            std::fs::create_dir_all(parent).map_err(|source| {
                refuse(
                    RunErrorKind::Io {
                        path: parent.to_path_buf(),
                        source,
                    },
                    evidence_dir.clone(),
                )
            })?;
        }
        paths.write_evidence_pointer().map_err(|source| {
            refuse(
                RunErrorKind::Io {
                    path: paths.evidence_pointer(),
                    source,
                },
                evidence_dir.clone(),
            )
        })?;
        let life = Lifecycle::create(&paths.journal, run_id.clone(), config.timeouts)
            .map_err(|e| refuse(e.into(), evidence_dir.clone()))?;
        let run = RunContext {
            run_id: run_id.clone(),
            contract: Arc::new(contract),
            run_dir: paths.run_dir.clone(),
            runtime_dir: config.runtime_dir.clone(),
        };
        let opened = Opened {
            run,
            paths,
            life,
            evidence,
            started_unix_ms,
            commands: Vec::new(),
        };
        let mut workspace = Workspace::open(
            self.stack().clone(),
            self.admission().clone(),
            opened,
            options,
        );
        match workspace.bring_up().await {
            Ok(()) => Ok(workspace),
            Err(kind) => Err(workspace.abort(kind).await),
        }
    }

    /// Takes a parked run (by this process or another) back to `Sealed`: its
    /// journal is locked again and its records are read back. A detached run is
    /// attached to its live sandbox (everything its commands left running is still
    /// there); one whose sandbox is gone (the host rebooted), like a suspended run,
    /// has its checkout re-verified and is sealed and probed again, and the journal
    /// says so. A run that is neither is refused and left as it is; a run that
    /// fails on the way is concluded (exported, cleaned up) and the error names its
    /// evidence.
    pub async fn resume(
        &self,
        run_id: &RunId,
        options: CreateOptions,
    ) -> Result<Workspace, RunError> {
        let (mut workspace, provisioned) = self.take_back(run_id, options)?;
        match workspace.take(provisioned).await {
            Ok(()) => Ok(workspace),
            Err(kind) => Err(workspace.abort(kind).await),
        }
    }

    /// Joins the detached run `run_id` to run commands in its live sandbox
    /// beside other processes (see [`JoinedRun`]): nothing is taken over, no
    /// capacity asked for, any number of processes at once. A run that must
    /// be taken back first (suspended, its sandbox gone, or a sandbox that
    /// does not keep its capacity and names) is refused with
    /// [`RunErrorKind::NotJoinable`]: [`resume`](Self::resume) it (and
    /// [`detach`](Workspace::detach) it again) to join it. `options` give the
    /// cancel token and grace of this process's commands.
    pub async fn join(
        &self,
        run_id: &RunId,
        options: CreateOptions,
    ) -> Result<JoinedRun, RunError> {
        let parked = resume::SharedParked::hold(&self.inner.config, run_id).await?;
        JoinedRun::join(
            self.stack(),
            parked,
            options.cancel.unwrap_or_default(),
            options.cancel_grace,
        )
        .await
    }

    /// A parked run opened again (its journal held), not yet attached.
    fn take_back(
        &self,
        run_id: &RunId,
        options: CreateOptions,
    ) -> Result<(Workspace, Provisioned), RunError> {
        let resume::Parked {
            paths,
            life,
            stored,
            run,
        } = resume::Parked::take(&self.inner.config, run_id)?;
        let opened = Opened {
            run,
            paths,
            life,
            evidence: stored.evidence,
            started_unix_ms: stored.started_unix_ms,
            commands: stored.commands,
        };
        let provisioned = Provisioned {
            source: stored.source,
            filesystem: stored.filesystem,
        };
        let workspace = Workspace::open(
            self.stack().clone(),
            self.admission().clone(),
            opened,
            options,
        );
        Ok((workspace, provisioned))
    }

    /// Ends a detached or suspended run: taken back as
    /// [`resume`](Self::resume) does, then [`finish`](Workspace::finish)ed.
    /// Ending never waits: no capacity is asked for (the run ends with what it
    /// holds), and a run whose sandbox is gone is not sealed again only to be
    /// ended: it is concluded as failed (the process boundary lost it), its
    /// evidence exported and its required checks not run.
    pub async fn end(&self, run_id: &RunId) -> Result<RunReport, RunError> {
        let (mut workspace, provisioned) = self.take_back(run_id, CreateOptions::default())?;
        workspace.ending = true;
        match workspace.take(provisioned).await {
            Ok(()) => workspace.finish().await,
            Err(kind) => Err(workspace.abort(kind).await),
        }
    }

    /// The current changes of a parked run (suspended, or detached and live),
    /// as its evidence would record them, without taking it back: commands
    /// joined to it go on meanwhile (the patch is the checkout as it was when
    /// taken), and no process ends it while the patch is taken.
    pub async fn export_patch(&self, run_id: &RunId) -> Result<PatchExport, RunError> {
        let parked = resume::SharedParked::hold(&self.inner.config, run_id).await?;
        let mut patch = self
            .inner
            .stack
            .promotion
            .export(&parked.run, &parked.stored.source)
            .await
            .map_err(|e| RunError::refused(run_id, e.into()))?;
        // What holds a credential of the run is withheld here as in the evidence:
        // the digest printed is the one its evidence will have.
        let identity = identity_store::load(&parked.run.run_dir)
            .map_err(|kind| RunError::refused(run_id, kind))?;
        drop(parked); // lets go of the journal
        if let Some(identity) = identity {
            withhold::withhold_leaks(&mut patch, &Scrubber::new(&identity.credentials));
        }
        Ok(patch)
    }

    /// The preview endpoints of a live run: each published port and the host
    /// address that forwards to it, as its seal bound them (`observed.json`).
    /// Empty when the run publishes no port or is not sealed.
    pub fn previews(&self, run_id: &RunId) -> Result<Vec<PreviewEndpoint>, RunError> {
        let paths = self.live_paths(run_id)?;
        paths
            .previews()
            .map_err(|kind| RunError::refused(run_id, kind))
    }

    /// The paths of `run_id`, refused with [`RunErrorKind::Ended`] once the
    /// run has ended: what its files say of its processes is history then
    /// (its endpoints closed, its services stopped; the evidence keeps them).
    fn live_paths(&self, run_id: &RunId) -> Result<RunPaths, RunError> {
        let config = &self.inner.config;
        let paths = RunPaths::locate(&config.runtime_dir, &config.evidence_root, run_id);
        let read = crate::journal::read::<crate::lifecycle::Transition>(&paths.journal);
        if let Some(state) = read
            .ok()
            .and_then(|read| read.records.last().map(|r| r.event.to.name()))
            && matches!(
                state,
                StateName::Exporting
                    | StateName::Exported
                    | StateName::CleaningUp
                    | StateName::Cleaned
                    | StateName::Failed
            )
        {
            return Err(RunError::refused(run_id, RunErrorKind::Ended { state }));
        }
        Ok(paths)
    }

    /// The services of a live run, as recorded so far (`services.json`);
    /// refused with [`RunErrorKind::Ended`] once the run has ended (its
    /// evidence keeps them).
    pub fn services(&self, run_id: &RunId) -> Result<Vec<ServiceRecord>, RunError> {
        let paths = self.live_paths(run_id)?;
        paths
            .services()
            .map_err(|kind| RunError::refused(run_id, kind))
    }

    /// The files the service `name` of a live run writes its stdout and stderr
    /// to (raw: not scrubbed of credential values, unlike the copies the
    /// evidence gets). `None` when the run has no such service running.
    pub fn service_logs(&self, run_id: &RunId, name: &str) -> Option<CommandOutput> {
        let config = &self.inner.config;
        let paths = RunPaths::locate(&config.runtime_dir, &config.evidence_root, run_id);
        let valid = !name.is_empty()
            && name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
        let logs = log_files(&paths.run_dir, name);
        (valid && logs.stdout.is_file()).then_some(logs)
    }

    /// One command in a fresh run of `contract`: create, exec, finish.
    ///
    /// `Ok` whenever the run was sealed and concluded; the report says how the
    /// command ended. `Err` when the run could not be created (with its evidence,
    /// if any was written).
    pub async fn run(
        &self,
        contract: Contract,
        command: &CommandSpec,
        io: CommandIo<'_>,
        options: CreateOptions,
    ) -> Result<RunReport, RunError> {
        let workspace = self.create(contract, options).await?;
        let output = match workspace.exec(command, io).await {
            Ok(outcome) => outcome.output.map(|output| (outcome.seq, output)),
            Err(e) => {
                tracing::warn!(error = %crate::error_chain(&e), "the command broke the run");
                None
            }
        };
        let mut report = workspace.finish().await?;
        // The captured output goes back with the command's outcome (the
        // report's copy, not outcome.json, which never holds it).
        if let Some((seq, output)) = output
            && let Some(command) = report.outcome.commands.iter_mut().find(|c| c.seq == seq)
        {
            command.output = Some(output);
        }
        Ok(report)
    }

    /// Finishes every run under this runner's runtime directory whose runner died
    /// (see [`crate::recovery`]), with this runner's stack.
    pub async fn recover(&self) -> Result<RecoveryReport, RecoveryError> {
        let hooks = StackRecovery::new(self.inner.stack.clone(), self.inner.config.clone());
        recover(
            &self.inner.config.runtime_dir,
            &hooks,
            self.inner.config.timeouts,
        )
        .await
    }
}
