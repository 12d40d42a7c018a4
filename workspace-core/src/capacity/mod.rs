//! Host capacity: reservations of cpu, memory, disk and concurrency slots with strict
//! FIFO admission that is visible (who holds, who waits, since when).
//!
//! ```
//! use workspace_core::capacity::{Capacity, Resources};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), workspace_core::capacity::CapacityError> {
//! let pool = Capacity::new(Resources { cpu_millis: 2000, memory_bytes: 4 << 30, disk_bytes: 10 << 30, slots: 4 });
//! let run = pool
//!     .reserve("run-42", Resources { cpu_millis: 1000, memory_bytes: 1 << 30, disk_bytes: 1 << 30, slots: 1 })
//!     .await?;
//! assert_eq!(pool.snapshot().holders[0].label, "run-42");
//! drop(run); // the capacity is back
//! assert_eq!(pool.snapshot().in_use, Resources::ZERO);
//! # Ok(()) }
//! ```
//!
//! # Admission
//! - A request larger than the total in any dimension fails at once with
//!   [`CapacityError::ExceedsTotal`] naming the dimension; it never waits forever.
//! - Otherwise it is granted at once if nobody waits and it fits, else it joins the
//!   queue. Only the head of the queue is ever admitted, and only when it fits: a large
//!   request is not starved by a stream of small ones, which wait behind it.
//! - [`Capacity::try_reserve`] never waits and never overtakes the queue.
//!
//! # Release
//! A [`Reservation`] is RAII: dropping it on any path (success, error, panic unwinding,
//! a cancelled future) returns its resources and admits the next waiters. Dropping a
//! waiting `reserve` future removes it from the queue; if it was granted at that same
//! instant the grant is released.

mod admission;
mod error;
pub mod host_pool;
mod queue;
mod reservation;
mod resources;
mod snapshot;

#[cfg(test)]
mod tests;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

pub use admission::{AdmissionControl, Grant, Held};
pub use error::CapacityError;
pub use host_pool::HostPool;
pub use reservation::Reservation;
pub use resources::{Dimension, Resources};
pub use snapshot::{CapacitySnapshot, Holder, Waiter};

use queue::{Admission, Shared};

/// A pool of host capacity. Cheap to clone: clones share the same pool.
#[derive(Clone)]
pub struct Capacity {
    shared: Arc<Shared>,
}

impl Capacity {
    /// A pool with `total` free.
    pub fn new(total: Resources) -> Self {
        Capacity {
            shared: Arc::new(Shared::new(total)),
        }
    }

    /// The pool's total.
    pub fn total(&self) -> Resources {
        self.shared.total
    }

    /// Reserves `request`, waiting in FIFO order until it is admitted.
    ///
    /// Fails at once with [`CapacityError::ExceedsTotal`] if the request can never fit.
    /// The request joins the queue when the future is first polled; dropping the
    /// future leaves the queue (see the [module docs](self)).
    pub async fn reserve(
        &self,
        label: impl Into<String>,
        request: Resources,
    ) -> Result<Reservation, CapacityError> {
        let label: Arc<str> = Arc::from(label.into());
        match self.shared.admit(label, request)? {
            Admission::Granted(reservation) => Ok(reservation),
            Admission::Queued(ticket) => ticket.wait().await,
        }
    }

    /// Reserves `request` only if that is possible now without overtaking anyone:
    /// fails with [`CapacityError::WouldWait`] if it does not fit or others wait.
    pub fn try_reserve(
        &self,
        label: impl Into<String>,
        request: Resources,
    ) -> Result<Reservation, CapacityError> {
        self.shared.try_admit(Arc::from(label.into()), request)
    }

    /// Like [`reserve`](Self::reserve), but gives up after `timeout` with
    /// [`CapacityError::Timeout`], leaving the queue.
    ///
    /// # Panics
    /// Must be called within a Tokio runtime with the time driver enabled.
    pub async fn reserve_timeout(
        &self,
        label: impl Into<String>,
        request: Resources,
        timeout: Duration,
    ) -> Result<Reservation, CapacityError> {
        let label = label.into();
        match tokio::time::timeout(timeout, self.reserve(label.clone(), request)).await {
            Ok(result) => result,
            Err(_elapsed) => Err(CapacityError::Timeout {
                label,
                requested: request,
                waited: timeout,
            }),
        }
    }

    /// Who holds what and who waits, since when.
    pub fn snapshot(&self) -> CapacitySnapshot {
        self.shared.snapshot()
    }
}

impl fmt::Debug for Capacity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Capacity")
            .field("total", &self.shared.total)
            .field("in_use", &self.shared.in_use())
            .finish()
    }
}

// Compile-time proof that the handles can cross threads and tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<Capacity>();
    send_sync::<Reservation>();
    send_sync::<CapacitySnapshot>();
};
