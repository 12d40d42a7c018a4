//! [`Reservation`]: the RAII handle of granted capacity.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::Resources;
use super::queue::Shared;

/// Capacity granted to one run. Dropping it (on success, error, panic unwinding or
/// cancellation alike) returns the resources to the pool and admits the next waiters.
///
/// The amounts are meant to become the enforced limits of that run.
#[must_use = "dropping a Reservation releases the capacity at once"]
pub struct Reservation {
    pub(super) shared: Arc<Shared>,
    pub(super) id: u64,
    pub(super) label: Arc<str>,
    pub(super) resources: Resources,
    pub(super) since: SystemTime,
    /// False only for a grant whose waiter had gone: the pool already took the
    /// resources back, so dropping it must not release them a second time.
    pub(super) armed: bool,
}

impl Reservation {
    /// The amounts held.
    pub fn resources(&self) -> Resources {
        self.resources
    }

    /// The label given to `reserve`.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// When the reservation was granted.
    pub fn since(&self) -> SystemTime {
        self.since
    }

    /// The id under which the pool's [`super::CapacitySnapshot`] lists this holder.
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl fmt::Debug for Reservation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Reservation")
            .field("id", &self.id)
            .field("label", &self.label)
            .field("resources", &self.resources)
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if self.armed {
            self.armed = false;
            self.shared.release(self.id);
        }
    }
}
