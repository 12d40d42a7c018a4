//! [`AdmissionControl`]: where a runner gets a run's capacity. This process's
//! [`Capacity`] is one; a pool shared by every process on the host is another.

use std::fmt;
use std::time::SystemTime;

use async_trait::async_trait;

use super::{Capacity, CapacityError, Resources};

/// Grants capacity to runs in FIFO order, waiting while it does not fit.
#[async_trait]
pub trait AdmissionControl: Send + Sync + fmt::Debug + 'static {
    /// Waits until `request` is granted to `label` (in FIFO order among waiters);
    /// fails at once when it can never fit. Dropping the future leaves the queue.
    async fn admit(&self, label: &str, request: Resources) -> Result<Grant, CapacityError>;
}

/// Capacity granted by an [`AdmissionControl`]: released when dropped, on every
/// path (success, error, panic unwinding, cancellation).
#[must_use = "dropping a Grant releases the capacity at once"]
pub struct Grant {
    label: String,
    resources: Resources,
    since: SystemTime,
    /// What keeps the capacity held; dropping it releases.
    _held: Box<dyn Send + Sync>,
}

impl Grant {
    /// A grant of `resources` to `label`, held by `held` until dropped.
    pub fn new(
        label: impl Into<String>,
        resources: Resources,
        held: impl Send + Sync + 'static,
    ) -> Self {
        Self {
            label: label.into(),
            resources,
            since: SystemTime::now(),
            _held: Box::new(held),
        }
    }

    /// The amounts held.
    pub fn resources(&self) -> Resources {
        self.resources
    }

    /// The label the grant was asked for with.
    pub fn label(&self) -> &str {
        &self.label
    }

    /// When it was granted.
    pub fn since(&self) -> SystemTime {
        self.since
    }
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("label", &self.label)
            .field("resources", &self.resources)
            .field("since", &self.since)
            .finish_non_exhaustive()
    }
}

#[async_trait]
impl AdmissionControl for Capacity {
    async fn admit(&self, label: &str, request: Resources) -> Result<Grant, CapacityError> {
        let reservation = self.reserve(label, request).await?;
        Ok(Grant {
            label: label.to_owned(),
            resources: reservation.resources(),
            since: reservation.since(),
            _held: Box::new(reservation),
        })
    }
}
