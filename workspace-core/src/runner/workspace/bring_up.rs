//! A new run brought up: admitted, provisioned, then sealed on what was
//! provisioned. Each step hands the next the record it made.

use std::time::Instant;

use super::{Progress, Provisioned, Workspace};
use crate::boundary::{EnvironmentPlan, IdentityBoundary, IdentityPlan, RunContext, SealPlan};
use crate::contract::CheckoutOrigin;
use crate::evidence::{EvidenceFile, FingerprintKey};
use crate::lifecycle::{Origin, StateName};
use crate::runner::bounded::bounded;
use crate::runner::disk;
use crate::runner::error::RunErrorKind;
use crate::runner::identity_store;
use crate::runner::leases::LeasedNames;
use crate::runner::observed::{AppliedEnvironment, ObservedRecord};
use crate::runner::paths::FILESYSTEM_STATE_FILE;
use crate::runner::scrub::Scrubber;
use crate::runner::services::connection_vars;
use crate::runner::state_files::{create_dir, write_state};
use crate::runner::templates;

impl Workspace {
    /// Admits, provisions and seals a new run; on failure the caller concludes it.
    pub(in crate::runner) async fn bring_up(&mut self) -> Result<(), RunErrorKind> {
        self.life.admit()?;
        let environment = self.reserve().await?;
        let provisioned = self.provision().await?;
        self.seal(provisioned, environment).await
    }

    /// Makes the run's checkout and prepares its grants, recording each as it
    /// is made (`source.json`, the filesystem state) so that whatever fails
    /// next, the conclusion releases it.
    async fn provision(&mut self) -> Result<Provisioned, RunErrorKind> {
        let stack = self.stack.clone();
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
        let source = bounded(StateName::Provisioning, limit, &self.cancel, async {
            // The checkout is provisioned on the run's disk, when it has one.
            disk::make(stack.process.as_ref(), &self.run).await?;
            stack
                .source
                .provision(&self.run)
                .await
                .map_err(RunErrorKind::from)
        })
        .await?;
        self.progress = Progress::Checkout(source.clone());
        self.evidence.write_json(EvidenceFile::Source, &source)?;
        // A fixture that is not what the contract pins fails the run before
        // anything ran in it.
        if let Some(mismatch) = source.fixture_mismatch(&self.run.contract.environment) {
            return Err(RunErrorKind::Failed(mismatch));
        }
        let filesystem = stack.filesystem.prepare(&self.run, &source).await?;
        let provisioned = Provisioned { source, filesystem };
        self.progress = Progress::Provisioned(provisioned.clone());
        write_state(
            &self.paths.run_dir.join(FILESYSTEM_STATE_FILE),
            &provisioned.filesystem,
        )?;
        Ok(provisioned)
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

    /// The run's identity: as kept since it was first sealed (its credentials are
    /// issued once, and its processes hold those values), else prepared by the
    /// identity boundary now and kept.
    pub(super) async fn run_identity(
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

    /// Applies the boundaries on `provisioned`, probes them and starts the
    /// services: `Sealed`.
    pub(super) async fn seal(
        &mut self,
        provisioned: Provisioned,
        environment: EnvironmentPlan,
    ) -> Result<(), RunErrorKind> {
        let environment = self.with_run_vars(environment);
        let services = self.run.contract.environment.services.clone();
        let stack = self.stack.clone();
        let cancel = self.cancel.clone();
        self.life.start_services()?;
        let identity = Self::run_identity(stack.identity.as_ref(), &self.run).await?;
        self.scrubber = Scrubber::new(&identity.credentials);
        let mut plan = self.seal_plan(&provisioned, environment.clone(), identity.clone())?;
        plan.held_open = self.held_open();
        self.record_capacity_holder(!plan.held_open.is_empty())?;
        let filesystem = plan.filesystem.clone();
        self.progress = Progress::Sandboxed(provisioned);
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
            disk: disk::record(&self.paths.run_dir)?,
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
    pub(super) fn with_run_vars(&self, environment: EnvironmentPlan) -> EnvironmentPlan {
        with_run_vars(environment, &self.run, &self.leases.names)
    }

    /// The plans the process boundary applies on `provisioned`.
    pub(super) fn seal_plan(
        &self,
        provisioned: &Provisioned,
        environment: EnvironmentPlan,
        identity: IdentityPlan,
    ) -> Result<SealPlan, RunErrorKind> {
        seal_plan(&self.run, provisioned, environment, identity)
    }
}

/// `environment` with what `run` adds for its commands: its leased `names`
/// and its services' connection variables.
pub(in crate::runner) fn with_run_vars(
    mut environment: EnvironmentPlan,
    run: &RunContext,
    names: &LeasedNames,
) -> EnvironmentPlan {
    let leased = names.vars();
    let services = &run.contract.environment.services;
    environment.vars.extend(connection_vars(services, &leased));
    environment.vars.extend(leased);
    environment
}

/// The plans the process boundary applies on `provisioned` for `run`.
pub(in crate::runner) fn seal_plan(
    run: &RunContext,
    provisioned: &Provisioned,
    environment: EnvironmentPlan,
    identity: IdentityPlan,
) -> Result<SealPlan, RunErrorKind> {
    let templates = templates::layers(run, &provisioned.source, &identity)?;
    Ok(SealPlan {
        source: provisioned.source.clone(),
        filesystem: provisioned.filesystem.clone(),
        environment,
        identity,
        templates,
        held_open: Vec::new(),
    })
}
