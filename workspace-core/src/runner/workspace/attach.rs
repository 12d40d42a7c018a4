//! A parked run taken back: attached to its live sandbox, or thawed, or,
//! where its processes are gone, sealed again on its checkout, re-verified.

use super::{Progress, Provisioned, Workspace};
use crate::boundary::{Attachment, EnvironmentPlan, SealPlan};
use crate::evidence::EvidenceFile;
use crate::lifecycle::StateName;
use crate::runner::bounded::bounded;
use crate::runner::disk;
use crate::runner::error::RunErrorKind;
use crate::runner::leases::{LEASES_STATE_FILE, LeasedNames};
use crate::runner::paths::CAPACITY_HELD_FILE;
use crate::runner::scrub::Scrubber;
use crate::runner::services::Services;
use crate::runner::state_files::read_state;

impl Workspace {
    /// Takes a parked run back: a detached one attached to its live sandbox
    /// ([`reattach`](Self::reattach)), a suspended one thawed
    /// ([`bring_back`](Self::bring_back)).
    pub(in crate::runner) async fn take(
        &mut self,
        provisioned: Provisioned,
    ) -> Result<(), RunErrorKind> {
        if self.state() == &crate::lifecycle::State::Detached {
            self.reattach(provisioned).await
        } else {
            self.bring_back(provisioned).await
        }
    }

    /// Brings a suspended run back to `Sealed`: capacity and leases again, the
    /// checkout re-verified against its record (a checkout that is not what it
    /// claims to be fails the run, never silently continues), then the frozen
    /// sandbox thawed, its processes going on where they were. Where they could
    /// not be kept (the host rebooted, the boundary cannot freeze) the run is
    /// sealed again and its services start again. `source.json` records which.
    pub(in crate::runner) async fn bring_back(
        &mut self,
        provisioned: Provisioned,
    ) -> Result<(), RunErrorKind> {
        let stack = self.stack.clone();
        // Its frozen sandbox may still be there: whatever fails from here on,
        // the conclusion tears it down.
        self.progress = Progress::Sandboxed(provisioned.clone());
        // Its services' records first: whatever fails next, they are exported.
        self.services = Services::load(&self.paths.run_dir)?;
        let environment = self.capacity_to_attach().await?;
        self.life.resume()?;
        self.lease_again(true)?;
        // The checkout is read from its disk: mounted again if the host restarted.
        disk::remount(stack.process.as_ref(), &self.run).await?;
        self.verify_source(&provisioned).await?;
        let plan = self.attach_plan(&provisioned, environment.clone()).await?;
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
                self.clear_lost_sandbox(&provisioned).await?;
                self.end_without_sandbox(reason.clone())?;
                self.lease_again(false)?;
                self.capacity_to_seal_again(&environment).await?;
                self.services.lost("gone when the run was resumed");
                self.record_resume(
                    None,
                    format!("resumed without its processes ({reason}); sealed again, services started again"),
                )?;
                self.seal(provisioned, environment).await
            }
        }
    }

    /// The environment of a run being attached again, and its capacity: a
    /// sandbox that holds it still does (admitting again would wait behind
    /// itself); otherwise it is reserved again.
    async fn capacity_to_attach(&mut self) -> Result<EnvironmentPlan, RunErrorKind> {
        let held = self.paths.run_dir.join(CAPACITY_HELD_FILE).exists();
        // Ending never queues: what the run ends with is what it has.
        if self.ending || (held && self.sandbox_holds_capacity()) {
            Ok(self.stack.environment.prepare(&self.run).await?)
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
    async fn clear_lost_sandbox(&mut self, provisioned: &Provisioned) -> Result<(), RunErrorKind> {
        let leaks = self.stack.process.teardown(&self.run).await?;
        if !leaks.is_clean() {
            return Err(RunErrorKind::LostSandboxLeft(leaks));
        }
        self.progress = Progress::Provisioned(provisioned.clone());
        Ok(())
    }

    /// The plans to attach with: the environment with the run's variables and
    /// the run's identity, as it was sealed on `provisioned`.
    async fn attach_plan(
        &self,
        provisioned: &Provisioned,
        environment: EnvironmentPlan,
    ) -> Result<SealPlan, RunErrorKind> {
        let identity = Self::run_identity(self.stack.identity.as_ref(), &self.run).await?;
        self.seal_plan(provisioned, self.with_run_vars(environment), identity)
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
    pub(in crate::runner) async fn reattach(
        &mut self,
        provisioned: Provisioned,
    ) -> Result<(), RunErrorKind> {
        let stack = self.stack.clone();
        // Its live sandbox is there: whatever fails from here on, the
        // conclusion tears it down.
        self.progress = Progress::Sandboxed(provisioned.clone());
        // Its services' records first: whatever fails next, they are exported.
        self.services = Services::load(&self.paths.run_dir)?;
        let environment = self.capacity_to_attach().await?;
        self.lease_again(true)?;
        let plan = self.attach_plan(&provisioned, environment.clone()).await?;
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
                self.clear_lost_sandbox(&provisioned).await?;
                self.end_without_sandbox(reason.clone())?;
                self.lease_again(false)?;
                self.capacity_to_seal_again(&environment).await?;
                self.services
                    .lost("its sandbox was gone when the run was attached again");
                self.life.resume()?;
                self.verify_source(&provisioned).await?;
                self.record_resume(
                    None,
                    format!("attached without its processes ({reason}); sealed again, services started again"),
                )?;
                self.seal(provisioned, environment).await
            }
        }
    }

    /// A run taken back to be ended whose sandbox is gone is not sealed again
    /// (a sandbox only to end it, waiting for capacity to do so): it fails
    /// here, and its conclusion exports what exists, its required checks not
    /// run.
    fn end_without_sandbox(&mut self, reason: String) -> Result<(), RunErrorKind> {
        if self.ending {
            self.services
                .lost("its sandbox was gone when the run was ended");
            return Err(RunErrorKind::SandboxGone { reason });
        }
        Ok(())
    }

    /// The cache prefix and schema names the run had, leased again; with
    /// `held_by_sandbox`, names its sandbox holds are taken as the run's (the
    /// attach that follows finds that sandbox alive, or, finding it gone,
    /// leases them again without that).
    fn lease_again(&mut self, held_by_sandbox: bool) -> Result<(), RunErrorKind> {
        let previous: Option<LeasedNames> =
            read_state(&self.paths.run_dir.join(LEASES_STATE_FILE))?;
        self.lease_held(Some(previous.unwrap_or_default()), held_by_sandbox)
    }

    /// Re-verifies the checkout against its record.
    async fn verify_source(&self, provisioned: &Provisioned) -> Result<(), RunErrorKind> {
        let limit = self.limit(StateName::Provisioning);
        bounded(StateName::Provisioning, limit, &self.cancel, async {
            self.stack
                .source
                .verify(&self.run, &provisioned.source)
                .await
                .map_err(RunErrorKind::from)
        })
        .await
    }
}
