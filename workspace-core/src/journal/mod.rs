//! The run journal: the durable, append-only record of one run's lifecycle.
//!
//! Every lifecycle transition of a run is appended to its journal as one JSON line
//! ([`JournalRecord`]) **before** the transition takes effect. [`Journal::append`]
//! returns once the record is on stable storage (`fsync`, `File::sync_data`);
//! [`Journal::append_unsynced`] once the kernel has it (one `write`). Only then may
//! the caller act on it.
//!
//! # Why write before effect
//!
//! A runner can die at any instant: a panic, an OOM kill, `SIGKILL`, a power cut. If a
//! transition took effect first (a namespace created, a port leased, a mount made) and
//! was recorded afterwards, a crash in between would leave a resource that no record
//! mentions, and nobody could ever clean it up. Writing ahead means the journal always
//! says *at least* as much as happened: the last record may describe a transition that
//! was about to happen and never did, so recovery treats the last record as "maybe
//! applied" and its clean-up steps must be idempotent. The opposite error (something
//! happened that the journal does not mention) cannot occur.
//!
//! # Which records are synced
//!
//! A written record outlives its runner's process, however it dies: it is in the
//! page cache. Only a power cut (or a kernel crash) can lose it, and a power cut also
//! ends every process, namespace, mount, cgroup and listener. So a record needs
//! `fsync` only when what follows it outlives a power cut too (files created or
//! deleted on disk) or when the state it enters must still be known after a reboot.
//! The caller says which ([`crate::lifecycle::Operation`] decides it for the
//! lifecycle). An unsynced record lost to a power cut takes only later records with
//! it: each sync covers the whole file, so what survives is always a prefix of what
//! was written, and it still names every effect that survived.
//!
//! # Why the lock
//!
//! A journal that stops growing may belong to a dead runner or to a slow live one.
//! Timestamps and pids cannot tell them apart (pids are reused, clocks jump), so the
//! journal carries the answer itself: the runner that owns a run holds an exclusive
//! advisory lock on the journal file ([`File::try_lock`], `flock(2)` on Linux,
//! `LockFileEx` on Windows) for as long as its [`Journal`] is open. The kernel releases
//! the lock when the process dies, however it dies, even on `SIGKILL`. So:
//!
//! - [`is_held`] tells whether a live process owns the run, or holds it shared;
//! - [`SharedHold`] holds the lock shared: processes that only *join* a parked
//!   run (run commands in its live sandbox, read its patch) write no record and
//!   may be many at once, but no process owns (ends, suspends, resumes, recovers)
//!   the run while one of them is there;
//! - [`Journal::open_for_recovery`] takes the lock without waiting and fails with
//!   [`JournalError::Held`] if a live process owns it, so two recoverers, or a recoverer
//!   and the live runner, never act on the same run at once.
//!
//! The lock is advisory: it coordinates processes that use this module, it does not
//! stop anything else from writing the file.
//!
//! # Torn tails and corruption
//!
//! A crash in the middle of an append can leave a partial last line. Such a *torn tail*
//! was never confirmed to the caller (the append had not returned), so it carries no
//! transition that took effect. Readers tolerate it and report it
//! ([`JournalRead::torn_tail`]); recovery truncates it so that new records continue
//! cleanly. Anything else that does not fit (a line in the middle that does not parse, a
//! gap in the sequence numbers, a record of another run) is reported as
//! [`JournalError::Corrupt`] and never skipped: a journal with a hole in it cannot be
//! trusted to list what must be cleaned up.
//!
//! # Blocking
//!
//! All functions here do blocking file I/O (and `fsync` can take milliseconds). From an
//! async runtime, call them inside `tokio::task::spawn_blocking`.

mod error;
mod lock;
mod read;
mod record;

use std::fs::{File, OpenOptions};
use std::io::{BufReader, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::RunId;
pub use error::{Corruption, JournalError};
use lock::lock;
pub use lock::{SharedHold, is_held};
use read::parse;
pub use read::{begun_unix_ms, read};
use record::RecordRef;
pub use record::{JournalRead, JournalRecord, TornTail};

/// The open journal of one run, owned by the process that runs it.
///
/// While it exists, it holds an exclusive advisory lock on the file, which tells other
/// processes that a live runner owns the run (see the [module docs](self)). Dropping it
/// closes the file and releases the lock.
///
/// `E` is the event type (typically the lifecycle transition enum).
pub struct Journal<E> {
    path: PathBuf,
    file: File,
    run_id: RunId,
    next_seq: u64,
    poisoned: bool,
    _event: PhantomData<fn(&E)>,
}

impl<E> std::fmt::Debug for Journal<E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Journal")
            .field("path", &self.path)
            .field("run_id", &self.run_id)
            .field("next_seq", &self.next_seq)
            .field("poisoned", &self.poisoned)
            .finish_non_exhaustive()
    }
}

// A journal handle can move to (and be shared with) a blocking thread whatever the
// event type is: it holds no `E`.
const _: fn() = || {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Journal<std::rc::Rc<()>>>();
};

impl<E> Journal<E> {
    /// The journal file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run this journal belongs to.
    pub fn run_id(&self) -> &RunId {
        &self.run_id
    }

    /// The sequence number the next appended record will get.
    pub fn next_seq(&self) -> u64 {
        self.next_seq
    }
}

impl<E: Serialize> Journal<E> {
    /// Creates the journal of `run_id` at `path` and takes its lock.
    ///
    /// The file must not exist yet. After creating it, this takes the exclusive lock
    /// (held until the journal is dropped) and syncs the parent directory so the new
    /// file survives a crash.
    ///
    /// Between the creation of the file and the lock there is a short window in which
    /// the file exists unlocked. If a recoverer takes the lock in that window, this
    /// fails with [`JournalError::Held`] and the recoverer finds an empty journal; the
    /// run has then not started and either way exactly one process owns the file. On
    /// any error the (empty) file is left in place.
    ///
    /// # Ambient authority
    ///
    /// `path` is a host path, used as given.
    pub fn create(path: impl AsRef<Path>, run_id: RunId) -> Result<Self, JournalError> {
        let path = path.as_ref().to_path_buf();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)
            .map_err(|source| JournalError::Create {
                path: path.clone(),
                source,
            })?;
        lock(&file, &path)?;
        sync_parent_dir(&path)?;
        tracing::debug!(run_id = %run_id, path = %path.display(), "journal created");
        Ok(Self {
            path,
            file,
            run_id,
            next_seq: 0,
            poisoned: false,
            _event: PhantomData,
        })
    }

    /// Appends `event` as the next record and makes it durable; returns its `seq`.
    ///
    /// The record is written as one line with a single `write_all` and then synced with
    /// `sync_data`, which also makes every earlier record durable. Only after this
    /// returns `Ok` may the caller let the transition take effect. If it fails, the
    /// transition must not take effect, and this journal refuses further appends
    /// ([`JournalError::Poisoned`]): the file may now end in a partial line, which
    /// [`Journal::open_for_recovery`] will truncate.
    pub fn append(&mut self, event: &E) -> Result<u64, JournalError> {
        self.write_record(event, true)
    }

    /// [`append`](Self::append) without the sync: the record survives the death of
    /// this process (the kernel holds it) but not a power cut, until the next
    /// [`append`](Self::append) or a recoverer's open syncs the file. For
    /// transitions whose effects a power cut undoes by itself (see the
    /// [module docs](self)).
    pub fn append_unsynced(&mut self, event: &E) -> Result<u64, JournalError> {
        self.write_record(event, false)
    }

    fn write_record(&mut self, event: &E, synced: bool) -> Result<u64, JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned {
                path: self.path.clone(),
            });
        }
        let seq = self.next_seq;
        let record = RecordRef {
            seq,
            run_id: &self.run_id,
            at_unix_ms: crate::clock::unix_ms_now(),
            event,
        };
        let mut line = serde_json::to_vec(&record).map_err(|source| JournalError::Serialize {
            path: self.path.clone(),
            source,
        })?;
        line.push(b'\n');
        // Poison first: any early return below leaves the journal poisoned.
        self.poisoned = true;
        self.file
            .write_all(&line)
            .and_then(|()| {
                if synced {
                    self.file.sync_data()
                } else {
                    Ok(())
                }
            })
            .map_err(|source| JournalError::Append {
                path: self.path.clone(),
                source,
            })?;
        self.poisoned = false;
        self.next_seq += 1;
        tracing::debug!(run_id = %self.run_id, seq, synced, path = %self.path.display(), "journal record appended");
        Ok(seq)
    }
}

impl<E: Serialize + DeserializeOwned> Journal<E> {
    /// Takes over the journal of a run whose runner is gone, to recover the run.
    ///
    /// Takes the exclusive lock without waiting ([`JournalError::Held`] if a live
    /// process owns the run), reads every record, checks that all belong to `run_id`,
    /// truncates a torn tail (reported in the returned [`JournalRead`]) and syncs the
    /// file, so that everything returned is durable and new appends continue with the
    /// next `seq`. A corrupt journal is an error and is left untouched.
    ///
    /// `run_id` is needed because a journal whose runner died before its first append
    /// has no record that names it.
    ///
    /// # Ambient authority
    ///
    /// `path` is a host path, used as given.
    pub fn open_for_recovery(
        path: impl AsRef<Path>,
        run_id: RunId,
    ) -> Result<(Self, JournalRead<E>), JournalError> {
        let path = path.as_ref().to_path_buf();
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .map_err(|source| JournalError::Open {
                path: path.clone(),
                source,
            })?;
        lock(&file, &path)?;
        let read = parse(&path, BufReader::new(&file), Some(&run_id))?;
        let end = match read.torn_tail {
            Some(torn) => {
                file.set_len(torn.offset)
                    .map_err(|source| JournalError::Truncate {
                        path: path.clone(),
                        source,
                    })?;
                tracing::warn!(
                    run_id = %run_id,
                    path = %path.display(),
                    offset = torn.offset,
                    bytes = torn.bytes,
                    "truncated the torn tail of a journal"
                );
                torn.offset
            }
            None => file
                .metadata()
                .map_err(|source| JournalError::Read {
                    path: path.clone(),
                    source,
                })?
                .len(),
        };
        // Make durable what the dead runner wrote but may not have synced, and the
        // truncation; the recoverer is about to act on it.
        file.sync_all().map_err(|source| JournalError::Sync {
            path: path.clone(),
            source,
        })?;
        sync_parent_dir(&path)?;
        file.seek(SeekFrom::Start(end))
            .map_err(|source| JournalError::Read {
                path: path.clone(),
                source,
            })?;
        tracing::debug!(
            run_id = %run_id,
            path = %path.display(),
            records = read.records.len(),
            "journal opened for recovery"
        );
        let journal = Self {
            path,
            file,
            run_id,
            next_seq: read.next_seq(),
            poisoned: false,
            _event: PhantomData,
        };
        Ok((journal, read))
    }
}

/// Syncs the directory containing `path`, so that a created file's directory entry is
/// durable.
#[cfg(unix)]
fn sync_parent_dir(path: &Path) -> Result<(), JournalError> {
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(parent)
        .and_then(|dir| dir.sync_all())
        .map_err(|source| JournalError::Sync {
            path: path.to_path_buf(),
            source,
        })
}

/// Directories cannot be opened and synced with std outside Unix; NTFS journals its
/// metadata, so the created entry is durable with the file itself.
#[cfg(not(unix))]
fn sync_parent_dir(_path: &Path) -> Result<(), JournalError> {
    Ok(())
}

#[cfg(test)]
mod tests;
