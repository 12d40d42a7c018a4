//! How long a run may stay in each transient state.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::StateName;

/// The limit of every transient state. A state that outlives its limit fails the
/// run with [`FailureCause::Timeout`](super::FailureCause::Timeout), from where
/// export and cleanup still follow, so no transient state can strand resources.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Timeouts {
    /// From creation to admission.
    pub requested: Duration,
    /// Waiting for capacity.
    pub waiting: Duration,
    /// Making or re-verifying the checkout.
    pub provisioning: Duration,
    /// Services becoming healthy.
    pub starting_services: Duration,
    /// In-flight commands finishing after a drain.
    pub draining: Duration,
    /// Writing the evidence.
    pub exporting: Duration,
    /// From evidence sealed to cleanup starting.
    pub exported: Duration,
    /// Tearing down.
    pub cleaning_up: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        const MINUTE: Duration = Duration::from_secs(60);
        Self {
            requested: MINUTE,
            waiting: 60 * MINUTE,
            provisioning: 10 * MINUTE,
            starting_services: 5 * MINUTE,
            draining: MINUTE,
            exporting: 5 * MINUTE,
            exported: 5 * MINUTE,
            cleaning_up: 5 * MINUTE,
        }
    }
}

impl Timeouts {
    /// The limit of `state`, or `None` for a state that waits for the caller
    /// (`Sealed`, `Suspended`) or is final.
    pub fn limit(&self, state: StateName) -> Option<Duration> {
        match state {
            StateName::Requested => Some(self.requested),
            StateName::Waiting => Some(self.waiting),
            StateName::Provisioning => Some(self.provisioning),
            StateName::StartingServices => Some(self.starting_services),
            StateName::Draining => Some(self.draining),
            StateName::Exporting => Some(self.exporting),
            StateName::Exported => Some(self.exported),
            StateName::CleaningUp => Some(self.cleaning_up),
            StateName::Sealed
            | StateName::Suspended
            | StateName::Detached
            | StateName::Cleaned
            | StateName::Failed => None,
        }
    }
}
