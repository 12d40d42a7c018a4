//! A point-in-time view of a pool: who holds, who waits, since when.

use std::time::SystemTime;

use serde::{Deserialize, Serialize};

use super::Resources;

/// What a pool looked like at one instant.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapacitySnapshot {
    /// The pool's total.
    pub total: Resources,
    /// The sum of all holders' resources.
    pub in_use: Resources,
    /// Current holders, oldest request first.
    pub holders: Vec<Holder>,
    /// Queued requests in admission order (the head first).
    pub waiters: Vec<Waiter>,
}

/// A granted reservation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Holder {
    /// Id of the request (also [`super::Reservation::id`]).
    pub id: u64,
    /// Label given to `reserve`.
    pub label: String,
    /// Amounts held.
    pub resources: Resources,
    /// When it was granted.
    pub since: SystemTime,
}

/// A request waiting in the FIFO queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiter {
    /// Id of the request (it keeps this id once granted).
    pub id: u64,
    /// Label given to `reserve`.
    pub label: String,
    /// Amounts requested.
    pub resources: Resources,
    /// When it started waiting.
    pub since: SystemTime,
    /// Place in the queue: 0 is the head, the next one admitted.
    pub position: usize,
}
