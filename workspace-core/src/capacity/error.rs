//! Errors of the capacity pool.

use std::path::PathBuf;
use std::time::Duration;

use super::{Dimension, Resources};

/// Why a reservation was not granted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CapacityError {
    /// The request is larger than the pool's total in one dimension, so it could never
    /// be granted; it is refused at once instead of waiting forever.
    #[error(
        "reserving capacity for {label:?}: requested {requested} {dimension} but the host total is {total}"
    )]
    ExceedsTotal {
        /// Label of the refused request.
        label: String,
        /// The first dimension that exceeds the total.
        dimension: Dimension,
        /// Amount requested in that dimension.
        requested: u64,
        /// The pool's total in that dimension.
        total: u64,
    },
    /// A non-blocking reservation could not be granted now: the request does not fit
    /// in what is free, or others are already waiting (the queue is FIFO, nobody
    /// overtakes them).
    #[error(
        "reserving capacity for {label:?} without waiting: {waiting} request(s) already waiting, {available:?} free, {requested:?} requested"
    )]
    WouldWait {
        /// Label of the refused request.
        label: String,
        /// What was requested.
        requested: Resources,
        /// What was free at the time.
        available: Resources,
        /// How many requests were already queued.
        waiting: usize,
    },
    /// A reservation was not granted within the allowed time; it left the queue.
    #[error("reserving capacity for {label:?}: not granted within {waited:?}")]
    Timeout {
        /// Label of the request.
        label: String,
        /// What was requested.
        requested: Resources,
        /// How long it waited.
        waited: Duration,
    },
    /// The grant channel of a queued request closed without a grant. The pool never
    /// drops a queued request without granting it, so this indicates a bug in the pool;
    /// it is reported rather than turned into a panic.
    #[error("reserving capacity for {label:?}: the queue dropped the request without a grant")]
    GrantLost {
        /// Label of the request.
        label: String,
    },
    /// The host-wide pool's files (under its directory) could not be created, locked,
    /// read, written or listed.
    #[error("host capacity pool: {action} {path}")]
    HostPool {
        /// What was being done (`locking`, `listing`, ...).
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The underlying failure.
        #[source]
        source: std::io::Error,
    },
}
