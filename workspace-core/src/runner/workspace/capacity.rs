//! The run's share of the host: its capacity reservation (and who holds it
//! while the run is parked) and its leased names.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use super::Workspace;
use crate::boundary::EnvironmentPlan;
use crate::capacity::{Grant, Resources};
use crate::lifecycle::StateName;
use crate::runner::bounded::bounded;
use crate::runner::error::RunErrorKind;
use crate::runner::leases::{LEASES_STATE_FILE, LeasedNames, RunLeases};
use crate::runner::paths::CAPACITY_HELD_FILE;
use crate::runner::state_files::write_state;

impl Workspace {
    /// Resolves the environment and reserves the capacity its limits need
    /// (waiting in FIFO order, within the `waiting` limit).
    pub(super) async fn reserve(&mut self) -> Result<EnvironmentPlan, RunErrorKind> {
        let environment = self.stack.environment.prepare(&self.run).await?;
        self.admit(&environment).await?;
        Ok(environment)
    }

    /// Reserves the capacity `environment`'s limits need (waiting in FIFO
    /// order, within the `waiting` limit).
    pub(super) async fn admit(
        &mut self,
        environment: &EnvironmentPlan,
    ) -> Result<(), RunErrorKind> {
        let request = reserve_request(
            &environment.limits,
            self.run.contract.environment.reservation.as_ref(),
        );
        let limit = self.limit(StateName::Waiting);
        let admission = self.admission.clone();
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
    pub(super) fn sandbox_holds_capacity(&self) -> bool {
        self.stack.process.capabilities().holds_capacity
    }

    /// What the sandbox keeps open for its life, when the process boundary
    /// holds capacity: the capacity ticket's lock (when the admission control
    /// has one: a host-wide pool) and the locks of the run's leased names, so
    /// that both stay the workspace's while no runner drives it.
    pub(super) fn held_open(&mut self) -> Vec<Arc<OwnedFd>> {
        if !self.sandbox_holds_capacity() {
            return Vec::new();
        }
        let mut held = Vec::new();
        match self.reservation.as_ref().and_then(Grant::descriptor) {
            Some(Ok(fd)) => held.push(Arc::new(fd)),
            Some(Err(error)) => {
                // The run goes on; its capacity is then given back on detach.
                tracing::warn!(run_id = %self.run.run_id, %error,
                    "the capacity ticket cannot be handed to the sandbox");
            }
            None => {}
        }
        match self.leases.share() {
            Ok(locks) => held.extend(locks.into_iter().map(Arc::new)),
            // The run goes on; its names are then given back on detach.
            Err(error) => tracing::warn!(run_id = %self.run.run_id, %error,
                "the leased names cannot be handed to the sandbox"),
        }
        held
    }

    /// Records whether the sandbox about to be sealed holds the run's
    /// capacity, for the runner that attaches to it later.
    pub(super) fn record_capacity_holder(&self, held: bool) -> Result<(), RunErrorKind> {
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
    pub(super) fn let_go_of_capacity(&mut self) {
        if let Some(grant) = self.reservation.take()
            && self.sandbox_holds_capacity()
            && self.paths.run_dir.join(CAPACITY_HELD_FILE).exists()
        {
            grant.leave();
        }
    }

    /// Leases the run's cache prefix, schema name and (without a private network)
    /// ports, and records the names for a later resume (a run that leases
    /// nothing records nothing: a missing `leases.json` reads as no names).
    pub(super) fn lease(&mut self, previous: Option<LeasedNames>) -> Result<(), RunErrorKind> {
        self.lease_held(previous, false)
    }

    /// [`lease`](Self::lease); with `held_by_sandbox`, previous names taken
    /// under the run's own record are its live sandbox's (see `leases.rs`).
    pub(super) fn lease_held(
        &mut self,
        previous: Option<LeasedNames>,
        held_by_sandbox: bool,
    ) -> Result<(), RunErrorKind> {
        let private_network = self.stack.process.capabilities().private_network;
        // The locks this process held go first: taking a name again must not
        // find this very process in the way.
        self.leases = RunLeases::default();
        self.leases = RunLeases::acquire(
            &self.run.runtime_dir,
            &self.run.run_id,
            &self.run.contract.process,
            private_network,
            previous.as_ref(),
            held_by_sandbox && self.sandbox_holds_capacity(),
        )?;
        if self.leases.names == LeasedNames::default() {
            return Ok(());
        }
        write_state(
            &self.paths.run_dir.join(LEASES_STATE_FILE),
            &self.leases.names,
        )
    }
}

/// What a run with `limits` reserves: the cores and memory it needs
/// (`reservation`, else the defaults or its caps when smaller), its disk cap
/// and one slot.
pub(in crate::runner) fn reserve_request(
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
