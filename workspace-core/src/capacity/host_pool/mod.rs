//! [`HostPool`]: one capacity pool shared by every process on the host, kept in a
//! directory of lock files.
//!
//! ```
//! use workspace_core::capacity::{AdmissionControl, HostPool, Resources};
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! let total = Resources { cpu_millis: 2000, memory_bytes: 4 << 30, disk_bytes: 0, slots: 1 };
//! let pool = HostPool::open(dir.path(), total);
//! let one = Resources { slots: 1, ..Resources::ZERO };
//! let grant = pool.admit("run-42", one).await?;
//! assert_eq!(pool.snapshot()?.holders[0].label, "run-42");
//! drop(grant); // released for every process
//! assert!(pool.snapshot()?.holders.is_empty());
//! # Ok(()) }
//! ```
//!
//! # Files
//! - `pool.lock`: the pool lock. Taking a ticket, deciding an admission, removing
//!   stale tickets and taking a snapshot all happen under it, so they never interleave.
//! - `next_ticket`: the next sequence number, written over in place under the
//!   pool lock. If it is lost or cut short, numbering continues after the highest
//!   ticket file present, so order is never reversed among live tickets.
//! - `<seq>.ticket`: one per request, created and locked by its owner
//!   ([`crate::lease`]'s lock file: `flock` on Unix, `LockFileEx` on Windows) and kept
//!   locked while it waits and while it holds, with `{label, pid, resources,
//!   since_unix_ms, granted_unix_ms}` in it. Releasing removes it.
//!
//! # Admission
//! The same rules as [`Capacity`](super::Capacity), across processes: a request
//! larger than a total fails at once with [`CapacityError::ExceedsTotal`]; otherwise
//! it takes a ticket and is admitted only when it is the oldest live waiter and fits
//! in the totals minus what the live holders hold. A waiter checks every
//! [`POLL_INTERVAL`], sleeping in between.
//!
//! # Dead processes
//! The kernel drops a dead owner's lock however it died (even SIGKILL); a ticket file
//! nobody holds locked is stale, ignored and removed by the next scan. Its capacity is
//! back at once.
//!
//! # Release and cancellation
//! The ticket is RAII: dropping the [`Grant`] (or the `admit` future while it waits)
//! removes the file and unlocks.
//!
//! # Totals
//! Every process passes its own totals to [`HostPool::open`]; each admits against
//! those it was given, so processes sharing a directory should agree on them.
//!
//! # Portability
//! Only std file locks. On Windows a locked file cannot be read by other processes, so
//! another process's record is unreadable there: an unreadable live ticket older than
//! a waiter blocks it (it may be a holder of anything) and is left out of snapshots.

mod ticket;

#[cfg(test)]
mod tests;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;

use super::{AdmissionControl, CapacityError, CapacitySnapshot, Grant, Holder, Resources, Waiter};
use crate::lease::lock_file::LockFile;
use ticket::{LiveTicket, Ticket, TicketRecord, from_unix_ms, lock_error, scan, unix_ms};

/// How often a waiter checks whether it is admitted.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How long to sleep between attempts to take the pool lock (held only for
/// the instant of one decision).
const LOCK_RETRY: Duration = Duration::from_millis(2);

const POOL_LOCK: &str = "pool.lock";
const COUNTER: &str = "next_ticket";

/// A capacity pool shared by every process that opens the same directory: strict
/// FIFO admission across processes, visible in [`HostPool::snapshot`]. See the
/// [module docs](self).
#[derive(Debug, Clone)]
pub struct HostPool {
    dir: PathBuf,
    total: Resources,
}

impl HostPool {
    /// The pool in `dir` with `total` to share. Touches nothing yet: the directory
    /// is created by the first admission, and a snapshot of a pool without one is
    /// empty.
    ///
    /// # Ambient authority
    /// Admissions create and lock files under the host path `dir`; every process
    /// that passes the same directory shares the pool.
    pub fn open(dir: impl Into<PathBuf>, total: Resources) -> Self {
        HostPool {
            dir: dir.into(),
            total,
        }
    }

    /// The pool's total (as given to [`open`](Self::open)).
    pub fn total(&self) -> Resources {
        self.total
    }

    /// The pool's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Who holds what and who waits, since when, in every process; stale tickets
    /// are removed on the way. Blocks (briefly) while another process holds the pool
    /// lock.
    pub fn snapshot(&self) -> Result<CapacitySnapshot, CapacityError> {
        let mut snapshot = CapacitySnapshot {
            total: self.total,
            in_use: Resources::ZERO,
            holders: Vec::new(),
            waiters: Vec::new(),
        };
        if !self.dir.is_dir() {
            return Ok(snapshot);
        }
        let tickets = {
            let _pool = loop {
                if let Some(lock) = self.try_lock_pool()? {
                    break lock;
                }
                std::thread::sleep(LOCK_RETRY);
            };
            scan(&self.dir)?
        };
        for LiveTicket { seq, record } in tickets {
            let Some(record) = record else { continue };
            match record.granted_unix_ms {
                Some(granted) => {
                    snapshot.in_use = snapshot.in_use.saturating_add(&record.resources);
                    snapshot.holders.push(Holder {
                        id: seq,
                        label: record.label,
                        resources: record.resources,
                        since: from_unix_ms(granted),
                    });
                }
                None => snapshot.waiters.push(Waiter {
                    id: seq,
                    label: record.label,
                    resources: record.resources,
                    since: from_unix_ms(record.since_unix_ms),
                    position: snapshot.waiters.len(),
                }),
            }
        }
        Ok(snapshot)
    }

    fn try_lock_pool(&self) -> Result<Option<LockFile>, CapacityError> {
        let path = self.dir.join(POOL_LOCK);
        LockFile::try_acquire(&path).map_err(|e| lock_error("locking", &path, e))
    }

    async fn lock_pool(&self) -> Result<LockFile, CapacityError> {
        loop {
            if let Some(lock) = self.try_lock_pool()? {
                return Ok(lock);
            }
            tokio::time::sleep(LOCK_RETRY).await;
        }
    }

    /// Takes the next ticket. Call with the pool lock held.
    fn take_ticket(&self, label: &str, request: Resources) -> Result<Ticket, CapacityError> {
        let counter = self.dir.join(COUNTER);
        let stored = std::fs::read_to_string(&counter)
            .ok()
            .and_then(|text| text.trim().parse::<u64>().ok())
            .unwrap_or(0);
        let after_files = ticket::ticket_files(&self.dir)?
            .into_iter()
            .map(|(seq, _)| seq.saturating_add(1))
            .max()
            .unwrap_or(0);
        let seq = stored.max(after_files);
        write_in_place(&counter, seq + 1)?;
        let record = TicketRecord {
            label: label.to_owned(),
            pid: std::process::id(),
            resources: request,
            since_unix_ms: unix_ms(SystemTime::now()),
            granted_unix_ms: None,
        };
        Ticket::create(&self.dir, seq, record)
    }

    /// Whether `ticket` may be granted now, given the live tickets.
    fn admissible(&self, ticket: &Ticket, live: &[LiveTicket]) -> bool {
        // Only older tickets matter: a newer one cannot hold while an older waits.
        // A grant of the same label is the run's own, held by its live sandbox
        // (a run sealed again asks once more): a run never waits behind itself.
        // Its own older requests that still wait keep their turn.
        let mut held = Resources::ZERO;
        let older = live.iter().filter(|t| t.seq < ticket.seq);
        for other in older.filter(|t| {
            t.record.as_ref().is_none_or(|record| {
                record.label != ticket.record.label || record.granted_unix_ms.is_none()
            })
        }) {
            match &other.record {
                Some(TicketRecord {
                    granted_unix_ms: Some(_),
                    resources,
                    ..
                }) => held = held.saturating_add(resources),
                // An older waiter, or unreadable: not our turn.
                _ => return false,
            }
        }
        ticket
            .record
            .resources
            .fits(&self.total.saturating_sub(&held))
    }
}

#[async_trait]
impl AdmissionControl for HostPool {
    async fn admit(&self, label: &str, request: Resources) -> Result<Grant, CapacityError> {
        if let Some((dimension, requested, total)) = request.first_exceeding(&self.total) {
            return Err(CapacityError::ExceedsTotal {
                label: label.to_owned(),
                dimension,
                requested,
                total,
            });
        }
        std::fs::create_dir_all(&self.dir).map_err(|source| CapacityError::HostPool {
            action: "creating",
            path: self.dir.clone(),
            source,
        })?;
        let mut ticket = {
            let _pool = self.lock_pool().await?;
            self.take_ticket(label, request)?
        };
        // From here on, dropping this future drops `ticket`: the file goes.
        loop {
            {
                let _pool = self.lock_pool().await?;
                let live = scan(&self.dir)?;
                if self.admissible(&ticket, &live) {
                    ticket.mark_granted()?;
                    tracing::debug!(label, seq = ticket.seq, "host capacity granted");
                    return Ok(Grant::held_by(label, request, ticket));
                }
            }
            tokio::time::sleep(POLL_INTERVAL).await;
        }
    }
}

/// Writes `value` over `path`'s contents, in place: the file and its inode
/// stay (a replacing rename would make and free one per admission). A write
/// cut short by a crash leaves any number, or none: a new ticket still takes
/// the larger of it and the highest ticket file present plus one, under the
/// pool lock, so live tickets keep their order and never share a number.
fn write_in_place(path: &Path, value: u64) -> Result<(), CapacityError> {
    let write = || -> io::Result<()> {
        let text = format!("{value}\n");
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)?;
        file.write_all(text.as_bytes())?;
        file.set_len(text.len() as u64)
    };
    write().map_err(|source| CapacityError::HostPool {
        action: "writing",
        path: path.to_path_buf(),
        source,
    })
}

// Compile-time proof that the pool can cross threads and tasks.
const _: fn() = || {
    fn send_sync<T: Send + Sync>() {}
    send_sync::<HostPool>();
    send_sync::<Ticket>();
};
