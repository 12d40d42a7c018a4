//! The end every run goes through: stop, export, clean up.

use super::{Workspace, lock};
use crate::boundary::{ApprovalRecord, BoundaryKind, LeakReport};
use crate::clock::unix_ms_now;
use crate::evidence::EvidenceFile;
use crate::evidence::HeadTail;
use crate::evidence::ResourceUsage;
use crate::lifecycle::{FailureCause, Lifecycle, State, StateName};
use crate::runner::disk;
use crate::runner::error::RunError;
use crate::runner::export::{ExportInputs, Verified, export_bundle};
use crate::runner::late_output;
use crate::runner::leases::RunLeases;
use crate::runner::outcome::{NetworkCounts, Outcome, RunReport};
use crate::runner::preview::{self, PreviewRecord};
use crate::runner::run_files::{remove_run_dir, remove_run_files_alongside};
use crate::step::{RunnerStep, StepErrors};

impl Workspace {
    /// Writes `preview.json` when the run published ports: the endpoints, and
    /// the contract's preview check when the run is draining normally.
    async fn export_preview(&mut self, healthy: bool) {
        let observed = self.evidence.path_of(EvidenceFile::Observed);
        let endpoints = match preview::endpoints(&observed) {
            Ok(endpoints) => endpoints,
            Err(e) => {
                self.errors.push(RunnerStep::Preview, e);
                return;
            }
        };
        let declared = self.run.contract.process.preview_check.clone();
        if endpoints.is_empty() && declared.is_none() {
            return;
        }
        let check = match (&declared, healthy) {
            (Some(check), true) => Some(preview::check(&endpoints, check).await),
            _ => None,
        };
        let record = PreviewRecord { endpoints, check };
        if let Err(e) = self.evidence.write_json(EvidenceFile::Preview, &record) {
            let file = EvidenceFile::Preview.file_name().to_owned();
            self.errors.push(RunnerStep::WriteEvidence { file }, e);
        }
    }

    /// `network.jsonl` into the evidence, when the run's egress proxy kept
    /// one (its processes are stopped: the log is complete), and its counts.
    fn export_network(&mut self) -> Option<NetworkCounts> {
        let log = self.paths.run_dir.join(crate::egress::ATTEMPT_LOG_FILE);
        let text = std::fs::read_to_string(&log).ok()?;
        // A destination's name is the run's to choose: it may spell a value.
        let scrubber = &self.scrubber;
        if let Err(e) = self
            .evidence
            .copy_file_mapped(EvidenceFile::Network, &log, |bytes| {
                scrubber.redact_bytes(&bytes)
            })
        {
            self.errors.push(RunnerStep::Network, e);
        }
        Some(NetworkCounts::of(&text))
    }

    /// Stops the processes, exports, cleans up: the common end of every run.
    pub(super) async fn conclude(
        mut self,
        verified: Verified,
        promote: Option<Vec<ApprovalRecord>>,
    ) -> Result<RunReport, RunError> {
        let stack = self.stack.clone();
        let failure = match self.life.state() {
            State::Failed { cause, .. } => Some(cause.clone()),
            _ => None,
        };
        // The outcome is part of the export it describes: a run whose work ended
        // normally ends in `exported` (an export that then fails leaves the
        // bundle unsealed, which `verify` reports), a failed one in `failed`.
        let ended_in = if failure.is_some() {
            StateName::Failed
        } else {
            StateName::Exported
        };
        // Stop every process before the workspace is read: nothing may change it
        // while its patch is taken, and nothing may be running when it is removed.
        // The preview is asked first, while everything still runs; services are
        // stopped gently before the rest is killed.
        let mut stopped_at_drain = 0;
        let sandboxed = self.progress.sandboxed();
        if sandboxed {
            self.export_preview(failure.is_none()).await;
            let services = self.run.contract.environment.services.clone();
            let mut errors = StepErrors::default();
            stopped_at_drain = self
                .services
                .stop_all(stack.process.as_ref(), &self.run, &services, &mut errors)
                .await;
            self.errors.append(&mut errors);
        }
        let cap = HeadTail::of_cap(self.run.contract.environment.limits.output_bytes());
        if let Err(e) =
            self.services
                .export(&self.evidence, &self.paths.run_dir, (&self.scrubber, cap))
        {
            self.errors.push(RunnerStep::ExportServices, e);
        }
        // Read while everything of the run still exists.
        let usage = if sandboxed {
            stack.process.usage(&self.run)
        } else {
            ResourceUsage::default()
        };
        let leaks = if sandboxed {
            match stack.process.teardown(&self.run).await {
                Ok(report) => Some(report),
                Err(e) => {
                    self.errors.push(RunnerStep::Teardown, e);
                    None
                }
            }
        } else {
            Some(LeakReport::default())
        };
        // Every process of the run ended: nothing writes to its disk any more.
        let disk = disk::usage(stack.process.as_ref(), &self.run, &mut self.errors).await;
        self.journal(|life| life.export().map(drop))?;
        let network = self.export_network();
        let late_output = late_output::export(
            &self.paths.run_dir,
            &self.evidence,
            (&self.scrubber, cap),
            &mut self.errors,
        );
        let mut outcome = Outcome {
            run_id: self.run.run_id.clone(),
            ended_in,
            failure,
            commands: lock(&self.commands).clone(),
            late_output,
            stopped: stopped_at_drain + leaks.as_ref().map_or(0, |leaks| leaks.stopped),
            leaks: leaks.clone(),
            usage,
            disk,
            patch_sha256: None,
            changed_paths: 0,
            changed_after_checks: Vec::new(),
            not_in_patch: Vec::new(),
            export_failed: None,
            credential_leaks: Vec::new(),
            leases: self.leases.names.describe(),
            network,
            started_unix_ms: self.started_unix_ms,
            exported_unix_ms: unix_ms_now(),
            recovered_from: None,
            errors: std::mem::take(&mut self.errors).failures(),
        };
        let exported = export_bundle(
            stack.promotion.as_ref(),
            &self.run,
            &self.evidence,
            ExportInputs {
                source: self.progress.source(),
                checks: &verified.checks,
                verified: verified.patch.as_ref(),
                promote: promote.as_deref(),
                journal: &self.paths.journal,
                scrubber: &self.scrubber,
            },
            &mut outcome,
        )
        .await;
        let promotion = exported.as_ref().ok().cloned().flatten();
        match &exported {
            Ok(_) => {
                self.journal(|life| life.finish_export().map(drop))?;
            }
            Err(errors) => self.fail(FailureCause::Runner {
                failed: errors.failures(),
            }),
        }

        let mut cleanup_errors = StepErrors::default();
        let mut cleaned = false;
        let stopped = leaks.as_ref().is_some_and(LeakReport::is_clean);
        if !stopped {
            // Removing files while a process or mount of the run may live could reach
            // through that mount into the host: leave the run to recovery.
            cleanup_errors.push(
                RunnerStep::CleanUp,
                "held back: teardown did not prove every process and mount gone; the run is left for recovery",
            );
        } else {
            let permit = self.journal(Lifecycle::clean_up)?;
            if let Some(filesystem) = self.progress.filesystem()
                && let Err(e) = stack
                    .filesystem
                    .release(&self.run, filesystem, &permit)
                    .await
            {
                let boundary = BoundaryKind::Filesystem;
                cleanup_errors.push(RunnerStep::Release { boundary }, e);
            }
            // Provisioning failed before it made a record: remove what it left.
            let release = async {
                match self.progress.source() {
                    Some(source) => stack.source.release(&self.run, source, &permit).await,
                    None => stack.source.release_unrecorded(&self.run, &permit).await,
                }
            };
            let released =
                remove_run_files_alongside(&self.paths.run_dir, release, &mut cleanup_errors).await;
            if let Err(e) = released {
                let boundary = BoundaryKind::Source;
                cleanup_errors.push(RunnerStep::Release { boundary }, e);
            } else if let Err(e) = disk::remove(stack.process.as_ref(), &self.run).await {
                // Only once the checkout on it is released.
                let boundary = BoundaryKind::Process;
                cleanup_errors.push(RunnerStep::Release { boundary }, e);
            }
            remove_run_dir(&self.paths.run_dir, &mut cleanup_errors);
            self.reservation = None;
            self.leases = RunLeases::default();
            if cleanup_errors.is_empty() {
                self.journal(|life| life.finish_clean_up().map(drop))?;
                cleaned = true;
            } else {
                self.fail(FailureCause::Runner {
                    failed: cleanup_errors.failures(),
                });
            }
        }
        tracing::info!(run_id = %self.run.run_id, cleaned, "run concluded");
        Ok(RunReport {
            run_id: self.run.run_id.clone(),
            evidence: self.evidence.dir().to_path_buf(),
            evidence_sealed: self.evidence.is_sealed(),
            outcome,
            promotion,
            cleaned,
            cleanup_errors: cleanup_errors.failures(),
            // The workspace's lifetime, across the processes that drove it.
            duration_ms: unix_ms_now().saturating_sub(self.started_unix_ms),
        })
    }
}
