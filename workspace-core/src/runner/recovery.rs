//! [`StackRecovery`]: crash recovery of runs made by a [`Runner`](super::Runner),
//! with the boundaries of a [`Stack`].

use std::path::Path;
use std::sync::Arc;

use async_trait::async_trait;

use super::export::{ExportInputs, export_bundle};
use super::identity_store;
use super::late_output;
use super::options::RunnerConfig;
use super::outcome::Outcome;
use super::paths::{FILESYSTEM_STATE_FILE, RunPaths};
use super::run_files::remove_run_files;
use super::scrub::Scrubber;
use super::state_files::{read_required, read_state};
use crate::boundary::{FilesystemRecord, RunContext, SourceRecord, Stack};
use crate::clock::unix_ms_now;
use crate::contract::Contract;
use crate::evidence::{EvidenceFile, EvidenceWriter};
use crate::lifecycle::{CleanupPermit, FailureCause, StateName};
use crate::recovery::{LostRun, RecoveryHooks, RecoveryStepError};
use crate::step::{RunnerStep, StepError, StepErrors};

/// Finishes lost runs with a stack's boundaries: the process boundary's teardown
/// kills what the run left running (it finds a run by its id, so a new process
/// can do it), the promotion boundary exports what the checkout holds, the source
/// and filesystem boundaries remove it. Leases are file locks the dead runner's
/// process held: they were released when it died.
#[derive(Debug)]
pub struct StackRecovery {
    stack: Stack,
    config: RunnerConfig,
}

impl StackRecovery {
    /// Hooks for runs made under `config` with `stack`.
    pub fn new(stack: Stack, config: RunnerConfig) -> Self {
        Self { stack, config }
    }

    fn paths(&self, run: &LostRun) -> RunPaths {
        RunPaths::locate(
            &self.config.runtime_dir,
            &self.config.evidence_root,
            &run.run_id,
        )
    }

    /// The lost run's context, from the contract at the head of its evidence.
    fn context(&self, run: &LostRun) -> Result<(RunPaths, RunContext), RecoveryStepError> {
        let paths = self.paths(run);
        let contract_path = paths.evidence.join(EvidenceFile::Contract.file_name());
        let contract: Contract = read_json(&contract_path)?;
        let context = RunContext {
            run_id: run.run_id.clone(),
            contract: Arc::new(contract),
            run_dir: paths.run_dir.clone(),
            runtime_dir: self.config.runtime_dir.clone(),
        };
        Ok((paths, context))
    }
}

#[async_trait]
impl RecoveryHooks for StackRecovery {
    async fn reap(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        let (_, context) = self.context(run)?;
        let leaks = self.stack.process.teardown(&context).await?;
        if leaks.is_clean() {
            Ok(())
        } else {
            Err(RecoveryStepError::Leaked {
                leaks: format!("{leaks:?}"),
            })
        }
    }

    async fn export(&self, run: &LostRun) -> Result<(), RecoveryStepError> {
        let (paths, context) = self.context(run)?;
        let evidence = EvidenceWriter::reopen(&paths.evidence).map_err(|e| {
            RecoveryStepError::Export(StepErrors(vec![StepError::new(RunnerStep::Evidence, e)]))
        })?;
        if evidence.is_sealed() {
            return Ok(());
        }
        let source: Option<SourceRecord> =
            read_optional(&paths.evidence.join(EvidenceFile::Source.file_name()))?;
        // The checkout may be gone (lost during cleanup): export only what exists.
        let source = source.filter(|s| s.workspace.exists());
        // The credentials its processes held, kept with the run: none of their
        // values may reach the evidence of a recovered run either.
        let mut identity_error = None;
        let credentials = match identity_store::load(&paths.run_dir) {
            Ok(identity) => identity.map(|i| i.credentials).unwrap_or_default(),
            Err(e) => {
                // Scrubbing stays on what it can: the patch's files holding a
                // credential are withheld by the digest check all the same.
                let path = paths.run_dir.join(super::paths::IDENTITY_STATE_FILE);
                identity_error = Some(StepError::new(RunnerStep::RunState { path }, e).failure());
                Vec::new()
            }
        };
        let scrubber = Scrubber::new(&credentials);
        // What the run's egress proxy recorded before it was killed with the run
        // (a destination's name is the run's to choose: it may spell a value).
        let attempts = paths.run_dir.join(crate::egress::ATTEMPT_LOG_FILE);
        let network = std::fs::read_to_string(&attempts).ok().map(|text| {
            let copied = evidence.copy_file_mapped(EvidenceFile::Network, &attempts, |bytes| {
                scrubber.redact_bytes(&bytes)
            });
            if let Err(e) = copied {
                tracing::warn!(error = %e, "exporting the network attempts of a lost run");
            }
            super::outcome::NetworkCounts::of(&text)
        });
        let mut outcome = Outcome {
            run_id: run.run_id.clone(),
            ended_in: StateName::Failed,
            failure: Some(FailureCause::RunnerLost),
            // What the lost runner recorded, a command it was running included
            // (without an exit).
            commands: super::resume::previous_commands(
                &paths.evidence.join(crate::evidence::COMMANDS_DIR),
            )
            .map(|found| found.into_iter().map(|(_, outcome)| outcome).collect())
            .unwrap_or_default(),
            late_output: Vec::new(),
            stopped: 0,
            leaks: None,
            usage: Default::default(),
            disk: None,
            patch_sha256: None,
            changed_paths: 0,
            changed_after_checks: Vec::new(),
            not_in_patch: Vec::new(),
            export_failed: None,
            credential_leaks: Vec::new(),
            leases: Vec::new(),
            network,
            started_unix_ms: crate::journal::begun_unix_ms(&paths.journal).unwrap_or(0),
            exported_unix_ms: unix_ms_now(),
            recovered_from: Some(run.found_in.name()),
            errors: Vec::new(),
        };
        outcome.errors.extend(identity_error);
        let mut late = StepErrors::default();
        let cap =
            crate::evidence::HeadTail::of_cap(context.contract.environment.limits.output_bytes());
        outcome.late_output =
            late_output::export(&paths.run_dir, &evidence, (&scrubber, cap), &mut late);
        // Its processes are reaped: nothing writes to its disk any more.
        outcome.disk = super::disk::usage(self.stack.process.as_ref(), &context, &mut late).await;
        outcome.errors.extend(late.failures());
        export_bundle(
            self.stack.promotion.as_ref(),
            &context,
            &evidence,
            ExportInputs {
                source: source.as_ref(),
                checks: &[],
                verified: None,
                scrubber: &scrubber,
                promote: None,
                journal: &paths.journal,
            },
            &mut outcome,
        )
        .await
        .map(drop)
        .map_err(RecoveryStepError::Export)
    }

    async fn clean_up(
        &self,
        run: &LostRun,
        permit: &CleanupPermit,
    ) -> Result<(), RecoveryStepError> {
        let (paths, context) = self.context(run)?;
        let filesystem: Option<FilesystemRecord> =
            read_optional(&paths.run_dir.join(FILESYSTEM_STATE_FILE))?;
        if let Some(filesystem) = filesystem {
            self.stack
                .filesystem
                .release(&context, &filesystem, permit)
                .await?;
        }
        let source: Option<SourceRecord> =
            read_optional(&paths.evidence.join(EvidenceFile::Source.file_name()))?;
        match source {
            Some(source) => self.stack.source.release(&context, &source, permit).await?,
            // The runner died while provisioning, before the record was written.
            None => {
                self.stack
                    .source
                    .release_unrecorded(&context, permit)
                    .await?
            }
        }
        super::disk::remove(self.stack.process.as_ref(), &context).await?;
        let mut errors = StepErrors::default();
        remove_run_files(&paths.run_dir, &mut errors);
        if errors.is_empty() {
            Ok(())
        } else {
            Err(RecoveryStepError::State {
                run_dir: paths.run_dir,
                problems: errors,
            })
        }
    }
}

/// A record of the lost run, or the boundary error recovery reports.
fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, RecoveryStepError> {
    read_required(path).map_err(|e| RecoveryStepError::Record {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}

/// A record of the lost run that may not exist.
fn read_optional<T: serde::de::DeserializeOwned>(
    path: &Path,
) -> Result<Option<T>, RecoveryStepError> {
    read_state(path).map_err(|e| RecoveryStepError::Record {
        path: path.to_path_buf(),
        source: Box::new(e),
    })
}
