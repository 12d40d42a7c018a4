//! One ticket: a lock file `<seq>.ticket` its owner holds locked while it waits and
//! while it holds, with the owner's record in it.

use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::capacity::admission::Held;
use crate::capacity::{CapacityError, Resources};
use crate::lease::LeaseError;
use crate::lease::lock_file::{LockFile, probe};

/// Suffix of ticket files.
const SUFFIX: &str = ".ticket";

/// What a ticket's owner writes into its file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct TicketRecord {
    /// The label asked for (a run id).
    pub(super) label: String,
    /// The owner's process id.
    pub(super) pid: u32,
    /// What it requested (and holds once granted).
    pub(super) resources: Resources,
    /// When it took the ticket, in milliseconds since the Unix epoch.
    pub(super) since_unix_ms: u64,
    /// When it was granted; `None` while it waits.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(super) granted_unix_ms: Option<u64>,
}

/// A live ticket as found by [`scan`].
#[derive(Debug)]
pub(super) struct LiveTicket {
    /// The ticket's sequence number (its place in the FIFO order).
    pub(super) seq: u64,
    /// Its record; `None` when it could not be read (unreadable while locked on
    /// Windows; a corrupt file).
    pub(super) record: Option<TicketRecord>,
}

/// A ticket this process owns: its file stays locked until dropped, and dropping
/// removes the file, then unlocks.
///
/// Removing is safe here, unlike for leases: a number is taken under the pool lock
/// above every ticket file present, so no one creates a file at this path while
/// this one exists (a number may come again only after its file is gone, when the
/// counter was lost), and a scanner that opened the file before the removal only
/// sees a live or (after the unlock) a stale ticket that is gone already.
#[derive(Debug)]
pub(super) struct Ticket {
    pub(super) seq: u64,
    pub(super) record: TicketRecord,
    /// `None` once left to another holder of its descriptor.
    lock: Option<LockFile>,
    /// Whether a descriptor of the lock was handed out: from then on the
    /// kernel decides when the capacity is back (when the last copy closes),
    /// so this ticket never unlocks or removes it, even when dropped.
    shared: AtomicBool,
}

impl Ticket {
    /// Creates, locks and records ticket `seq` in `dir`. Call with the pool lock held,
    /// so no scanner probes the new file before it is locked.
    pub(super) fn create(
        dir: &Path,
        seq: u64,
        record: TicketRecord,
    ) -> Result<Self, CapacityError> {
        let path = ticket_path(dir, seq);
        let Some(lock) =
            LockFile::try_acquire(&path).map_err(|e| lock_error("locking", &path, e))?
        else {
            return Err(CapacityError::HostPool {
                action: "locking a new ticket (locked by someone else)",
                path,
                source: io::Error::from(io::ErrorKind::AlreadyExists),
            });
        };
        let mut ticket = Ticket {
            seq,
            record,
            lock: Some(lock),
            shared: AtomicBool::new(false),
        };
        ticket.write()?;
        Ok(ticket)
    }

    /// Marks the ticket as holding since now. Call with the pool lock held.
    pub(super) fn mark_granted(&mut self) -> Result<(), CapacityError> {
        self.record.granted_unix_ms = Some(unix_ms(SystemTime::now()));
        self.write()
    }

    fn write(&mut self) -> Result<(), CapacityError> {
        let record = self.record.clone();
        match &mut self.lock {
            Some(lock) => lock
                .record(&record)
                .map_err(|e| lock_error("writing", lock.path(), e)),
            None => Ok(()),
        }
    }
}

impl Held for Ticket {
    fn descriptor(&self) -> Option<io::Result<OwnedFd>> {
        let lock = self.lock.as_ref()?;
        self.shared.store(true, Ordering::SeqCst);
        Some(lock.descriptor())
    }

    fn leave(mut self: Box<Self>) {
        self.let_go();
    }
}

impl Ticket {
    /// Closes this process's descriptor only. The file and its record stay for
    /// as long as the lock is held elsewhere; then the next scan finds the file
    /// unlocked and removes it as stale.
    fn let_go(&mut self) {
        if let Some(lock) = self.lock.take() {
            lock.leave();
        }
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if self.shared.load(Ordering::SeqCst) {
            // Unlocking would release every copy of the lock (it belongs to the
            // open file), the one a live sandbox holds too.
            self.let_go();
            return;
        }
        let Some(lock) = &self.lock else { return };
        // Remove while still locked; the lock file's own drop then unlocks.
        match std::fs::remove_file(lock.path()) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(error) => {
                // Unlocked below, so the next scan removes it as stale.
                tracing::warn!(path = %lock.path().display(), %error, "removing capacity ticket");
            }
        }
    }
}

/// The path of ticket `seq`: zero-padded so names sort in ticket order.
pub(super) fn ticket_path(dir: &Path, seq: u64) -> PathBuf {
    dir.join(format!("{seq:020}{SUFFIX}"))
}

/// The sequence numbers of every ticket file in `dir` (live or stale), unsorted.
pub(super) fn ticket_files(dir: &Path) -> Result<Vec<(u64, PathBuf)>, CapacityError> {
    let list_error = |source| CapacityError::HostPool {
        action: "listing",
        path: dir.to_path_buf(),
        source,
    };
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(list_error)? {
        let path = entry.map_err(list_error)?.path();
        let seq = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(SUFFIX))
            .and_then(|n| n.parse::<u64>().ok());
        if let Some(seq) = seq {
            found.push((seq, path));
        }
    }
    Ok(found)
}

/// The live tickets in `dir` in ticket order, removing stale ones (files nobody holds
/// locked: their owner died). Call with the pool lock held: probing takes a shared
/// lock for an instant, which must not meet a new ticket's owner locking its file.
pub(super) fn scan(dir: &Path) -> Result<Vec<LiveTicket>, CapacityError> {
    let mut files = ticket_files(dir)?;
    files.sort_unstable_by_key(|(seq, _)| *seq);
    let mut live = Vec::new();
    for (seq, path) in files {
        match probe::<TicketRecord>(&path) {
            Ok(Some(record)) => live.push(LiveTicket { seq, record }),
            Ok(None) => match std::fs::remove_file(&path) {
                Ok(()) => {
                    tracing::debug!(path = %path.display(), "removed a stale capacity ticket")
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(CapacityError::HostPool {
                        action: "removing the stale ticket",
                        path,
                        source,
                    });
                }
            },
            // Released (and removed) between listing and probing.
            Err(LeaseError::OpenLockFile { source, .. })
                if source.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(lock_error("probing", &path, e)),
        }
    }
    Ok(live)
}

/// A lock-file failure as a pool error.
pub(super) fn lock_error(action: &'static str, path: &Path, error: LeaseError) -> CapacityError {
    CapacityError::HostPool {
        action,
        path: path.to_path_buf(),
        source: io::Error::other(error),
    }
}

pub(super) use crate::clock::unix_ms;

/// The inverse of [`unix_ms`].
pub(super) fn from_unix_ms(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}
