//! The shared state of a pool: what is in use, who holds, the FIFO queue of waiters,
//! and the one place where grants happen ([`Shared::grant_ready`]).
//!
//! Locking rule: the state lock is a `std::sync::Mutex` held only for short, non-async
//! bookkeeping. An armed [`Reservation`] is never dropped while the lock is held (its
//! `Drop` takes the lock): a grant whose waiter has gone is *disarmed* under the lock
//! (its resources are given back right there) and the inert value is dropped after
//! the lock is released.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::SystemTime;

use tokio::sync::oneshot;

use super::{CapacityError, CapacitySnapshot, Holder, Reservation, Resources, Waiter};

/// The pool behind every clone of a [`super::Capacity`] and every [`Reservation`].
pub(super) struct Shared {
    pub(super) total: Resources,
    state: Mutex<State>,
}

struct State {
    in_use: Resources,
    next_id: u64,
    holders: BTreeMap<u64, HolderEntry>,
    waiters: VecDeque<WaiterEntry>,
}

impl State {
    fn take_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }
}

struct HolderEntry {
    label: Arc<str>,
    resources: Resources,
    since: SystemTime,
}

struct WaiterEntry {
    id: u64,
    label: Arc<str>,
    resources: Resources,
    since: SystemTime,
    grant: oneshot::Sender<Reservation>,
}

/// Outcome of asking for admission.
pub(super) enum Admission {
    /// Granted at once.
    Granted(Reservation),
    /// Queued; await the ticket.
    Queued(WaitTicket),
}

impl Shared {
    pub(super) fn new(total: Resources) -> Self {
        Shared {
            total,
            state: Mutex::new(State {
                in_use: Resources::ZERO,
                next_id: 1,
                holders: BTreeMap::new(),
                waiters: VecDeque::new(),
            }),
        }
    }

    /// The state lock. The state is only mutated by panic-free bookkeeping, so a
    /// poisoned lock (a panic elsewhere while holding it) still guards consistent data.
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses a request that could never fit.
    fn check_total(&self, label: &str, request: &Resources) -> Result<(), CapacityError> {
        match request.first_exceeding(&self.total) {
            Some((dimension, requested, total)) => Err(CapacityError::ExceedsTotal {
                label: label.to_string(),
                dimension,
                requested,
                total,
            }),
            None => Ok(()),
        }
    }

    /// Grants `request` now if nobody waits and it fits, otherwise queues it.
    pub(super) fn admit(
        self: &Arc<Self>,
        label: Arc<str>,
        request: Resources,
    ) -> Result<Admission, CapacityError> {
        self.check_total(&label, &request)?;
        let mut state = self.lock();
        let id = state.take_id();
        let now = SystemTime::now();
        if state.waiters.is_empty() && request.fits(&self.total.saturating_sub(&state.in_use)) {
            let reservation = self.allocate(&mut state, id, label, request, now, now);
            return Ok(Admission::Granted(reservation));
        }
        let (grant, receiver) = oneshot::channel();
        state.waiters.push_back(WaiterEntry {
            id,
            label: Arc::clone(&label),
            resources: request,
            since: now,
            grant,
        });
        tracing::debug!(
            id,
            label = &*label,
            ?request,
            position = state.waiters.len() - 1,
            "capacity request queued"
        );
        Ok(Admission::Queued(WaitTicket {
            shared: Arc::clone(self),
            id,
            label,
            receiver,
            granted: false,
        }))
    }

    /// Grants `request` now if nobody waits and it fits, otherwise refuses it.
    pub(super) fn try_admit(
        self: &Arc<Self>,
        label: Arc<str>,
        request: Resources,
    ) -> Result<Reservation, CapacityError> {
        self.check_total(&label, &request)?;
        let mut state = self.lock();
        let available = self.total.saturating_sub(&state.in_use);
        if !state.waiters.is_empty() || !request.fits(&available) {
            return Err(CapacityError::WouldWait {
                label: label.to_string(),
                requested: request,
                available,
                waiting: state.waiters.len(),
            });
        }
        let id = state.take_id();
        let now = SystemTime::now();
        Ok(self.allocate(&mut state, id, label, request, now, now))
    }

    /// Records a holder and builds its armed reservation. Caller holds the lock and has
    /// checked that `request` fits.
    fn allocate(
        self: &Arc<Self>,
        state: &mut State,
        id: u64,
        label: Arc<str>,
        request: Resources,
        queued_since: SystemTime,
        now: SystemTime,
    ) -> Reservation {
        state.in_use = state.in_use.saturating_add(&request);
        state.holders.insert(
            id,
            HolderEntry {
                label: Arc::clone(&label),
                resources: request,
                since: now,
            },
        );
        tracing::debug!(
            id,
            label = &*label,
            ?request,
            in_use = ?state.in_use,
            waited_ms = now.duration_since(queued_since).map_or(0, |d| d.as_millis()),
            "capacity granted"
        );
        Reservation {
            shared: Arc::clone(self),
            id,
            label,
            resources: request,
            since: now,
            armed: true,
        }
    }

    /// Removes a holder and gives its resources back. Caller holds the lock.
    fn deallocate(&self, state: &mut State, id: u64) {
        if let Some(holder) = state.holders.remove(&id) {
            state.in_use = state.in_use.saturating_sub(&holder.resources);
            tracing::debug!(
                id,
                label = &*holder.label,
                resources = ?holder.resources,
                in_use = ?state.in_use,
                "capacity released"
            );
        }
    }

    /// Admits waiters from the head of the queue while the head fits (strict FIFO: a
    /// head that does not fit blocks everyone behind it, so it cannot be starved).
    /// Grants whose waiter has gone are disarmed and pushed to `inert` for the caller
    /// to drop after releasing the lock.
    fn grant_ready(self: &Arc<Self>, state: &mut State, inert: &mut Vec<Reservation>) {
        loop {
            let available = self.total.saturating_sub(&state.in_use);
            let head_fits = state
                .waiters
                .front()
                .is_some_and(|head| head.resources.fits(&available));
            if !head_fits {
                return;
            }
            let Some(waiter) = state.waiters.pop_front() else {
                return;
            };
            let reservation = self.allocate(
                state,
                waiter.id,
                waiter.label,
                waiter.resources,
                waiter.since,
                SystemTime::now(),
            );
            if let Err(mut unclaimed) = waiter.grant.send(reservation) {
                // The waiting future was dropped (cancelled) before it was granted.
                self.deallocate(state, unclaimed.id);
                unclaimed.armed = false;
                inert.push(unclaimed);
            }
        }
    }

    /// Gives a holder's resources back and admits whoever now fits.
    pub(super) fn release(self: &Arc<Self>, id: u64) {
        let mut inert = Vec::new();
        {
            let mut state = self.lock();
            self.deallocate(&mut state, id);
            self.grant_ready(&mut state, &mut inert);
        }
        drop(inert);
    }

    /// Removes a waiter that gave up (its future was dropped). If it already left the
    /// queue, it was granted and its reservation is released by whoever drops it.
    fn abandon(self: &Arc<Self>, id: u64) {
        let mut inert = Vec::new();
        {
            let mut state = self.lock();
            if let Some(index) = state.waiters.iter().position(|w| w.id == id) {
                if let Some(waiter) = state.waiters.remove(index) {
                    tracing::debug!(id, label = &*waiter.label, "capacity request abandoned");
                }
                // The head may have been blocking requests that fit now.
                self.grant_ready(&mut state, &mut inert);
            }
        }
        drop(inert);
    }

    pub(super) fn snapshot(&self) -> CapacitySnapshot {
        let state = self.lock();
        CapacitySnapshot {
            total: self.total,
            in_use: state.in_use,
            holders: state
                .holders
                .iter()
                .map(|(&id, h)| Holder {
                    id,
                    label: h.label.to_string(),
                    resources: h.resources,
                    since: h.since,
                })
                .collect(),
            waiters: state
                .waiters
                .iter()
                .enumerate()
                .map(|(position, w)| Waiter {
                    id: w.id,
                    label: w.label.to_string(),
                    resources: w.resources,
                    since: w.since,
                    position,
                })
                .collect(),
        }
    }

    pub(super) fn in_use(&self) -> Resources {
        self.lock().in_use
    }
}

/// A queued request. Dropping it before the grant arrives removes it from the queue;
/// a grant that arrives at the same instant sits in the channel and is released when
/// the channel (and so the reservation inside it) is dropped.
pub(super) struct WaitTicket {
    shared: Arc<Shared>,
    id: u64,
    label: Arc<str>,
    receiver: oneshot::Receiver<Reservation>,
    granted: bool,
}

impl WaitTicket {
    pub(super) async fn wait(mut self) -> Result<Reservation, CapacityError> {
        match (&mut self.receiver).await {
            Ok(reservation) => {
                self.granted = true;
                Ok(reservation)
            }
            Err(_) => Err(CapacityError::GrantLost {
                label: self.label.to_string(),
            }),
        }
    }
}

impl Drop for WaitTicket {
    fn drop(&mut self) {
        if !self.granted {
            // Runs before `receiver` is dropped, and releases the lock before
            // returning, so a reservation left in the channel is dropped unlocked.
            self.shared.abandon(self.id);
        }
    }
}
