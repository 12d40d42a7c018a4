//! [`AdmissionControl`]: where a runner gets a run's capacity. This process's
//! [`Capacity`] is one; a pool shared by every process on the host is another.

use std::fmt;
use std::io;
use std::os::fd::OwnedFd;
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
    held: Option<Box<dyn Held>>,
}

/// What keeps a [`Grant`]'s capacity held, when a process other than its
/// owner can keep it held too: an admission control across processes whose
/// hold is an open file (a [`HostPool`](super::HostPool) ticket's lock).
pub trait Held: Send + Sync + fmt::Debug {
    /// A descriptor that keeps the capacity held while any process has it
    /// open; `None`: only this value holds it. Once one is handed out, the
    /// capacity is back only when every copy is closed: dropping this value
    /// then lets go as [`leave`](Self::leave) does.
    fn descriptor(&self) -> Option<io::Result<OwnedFd>> {
        None
    }

    /// Lets go without releasing what a copy of [`descriptor`](Self::descriptor)
    /// still holds; the capacity is back once the last copy is closed. The
    /// default releases (drops `self`).
    fn leave(self: Box<Self>) {}
}

/// A holder only its owner has: dropping it releases.
struct Owned<T>(T);

impl<T> fmt::Debug for Owned<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Owned")
    }
}

impl<T: Send + Sync> Held for Owned<T> {}

impl Grant {
    /// A grant of `resources` to `label`, held by `held` until dropped.
    pub fn new(
        label: impl Into<String>,
        resources: Resources,
        held: impl Send + Sync + 'static,
    ) -> Self {
        Self::held_by(label, resources, Owned(held))
    }

    /// A grant of `resources` to `label` whose hold another process can keep
    /// (see [`Held`]).
    pub fn held_by(
        label: impl Into<String>,
        resources: Resources,
        held: impl Held + 'static,
    ) -> Self {
        Self {
            label: label.into(),
            resources,
            since: SystemTime::now(),
            held: Some(Box::new(held)),
        }
    }

    /// A descriptor that keeps this grant's capacity held while any process
    /// has it open (for a sandbox that outlives the process that asked for
    /// it); `None` when only this value can hold it. From then on dropping
    /// the grant no longer releases what a copy holds.
    pub fn descriptor(&self) -> Option<io::Result<OwnedFd>> {
        self.held.as_ref().and_then(|held| held.descriptor())
    }

    /// Lets go of the grant, leaving its capacity held for as long as a copy
    /// of its [`descriptor`](Self::descriptor) is open elsewhere (a live
    /// sandbox's); a grant without one is released.
    pub fn leave(mut self) {
        if let Some(held) = self.held.take() {
            held.leave();
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
            held: Some(Box::new(Owned(reservation))),
        })
    }
}
