//! The run journal: the durable, append-only record of one run's lifecycle.
//!
//! Every lifecycle transition of a run is appended to its journal as one JSON line
//! ([`JournalRecord`]) and made durable with `fsync` (`File::sync_data`) **before** the
//! transition takes effect. [`Journal::append`] returns only once the record is on
//! stable storage, and only then may the caller act on it.
//!
//! # Why fsync before effect
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
//! # Why the lock
//!
//! A journal that stops growing may belong to a dead runner or to a slow live one.
//! Timestamps and pids cannot tell them apart (pids are reused, clocks jump), so the
//! journal carries the answer itself: the runner that owns a run holds an exclusive
//! advisory lock on the journal file ([`File::try_lock`], `flock(2)` on Linux,
//! `LockFileEx` on Windows) for as long as its [`Journal`] is open. The kernel releases
//! the lock when the process dies, however it dies, even on `SIGKILL`. So:
//!
//! - [`is_held`] tells whether a live process owns the run;
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

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{self, BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::RunId;

/// One line of a journal: a lifecycle event of one run, numbered and timestamped.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalRecord<E> {
    /// The position of the record in its journal: 0 for the first, then 1, 2, ...
    /// without gaps.
    pub seq: u64,
    /// The run the journal belongs to; the same in every record of a journal.
    pub run_id: RunId,
    /// When the record was appended, in milliseconds since the Unix epoch (wall clock,
    /// for humans; ordering comes from `seq`).
    pub at_unix_ms: u64,
    /// The lifecycle event itself.
    pub event: E,
}

/// The serialised form of a [`JournalRecord`], borrowing the run id and the event so
/// that appending does not clone them. Field names and order must match
/// [`JournalRecord`].
#[derive(Serialize)]
struct RecordRef<'a, E> {
    seq: u64,
    run_id: &'a RunId,
    at_unix_ms: u64,
    event: &'a E,
}

/// A partial last line left by a crash in the middle of an append.
///
/// It was never confirmed to the appender, so it records nothing that took effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TornTail {
    /// The byte offset where the torn line starts (the end of the last complete record).
    pub offset: u64,
    /// The length of the torn line in bytes (including its `\n`, if it has one).
    pub bytes: u64,
}

/// What reading a journal found: every complete record, in order, and the torn tail if
/// there is one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JournalRead<E> {
    /// The complete records; `records[i].seq == i`.
    pub records: Vec<JournalRecord<E>>,
    /// A partial last line left by a crash mid-append, if any. After
    /// [`Journal::open_for_recovery`] it has been truncated from the file.
    pub torn_tail: Option<TornTail>,
}

impl<E> JournalRead<E> {
    /// The run the records belong to, or `None` if there are no complete records.
    pub fn run_id(&self) -> Option<&RunId> {
        self.records.first().map(|r| &r.run_id)
    }

    /// The sequence number the next appended record will get.
    pub fn next_seq(&self) -> u64 {
        // A `Vec` length always fits in a u64 on supported platforms.
        u64::try_from(self.records.len()).unwrap_or(u64::MAX)
    }
}

/// Why a line of a journal is corrupt (see [`JournalError::Corrupt`]).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Corruption {
    /// A line that is not the last one is not a valid record.
    #[error("the line is not a valid journal record")]
    Unparseable {
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The record's sequence number does not follow the previous one.
    #[error("expected seq {expected}, found seq {found}")]
    SeqGap {
        /// The sequence number the record should have had.
        expected: u64,
        /// The sequence number it has.
        found: u64,
    },
    /// The record belongs to another run.
    #[error("the record belongs to run {found}, not to run {expected}")]
    ForeignRunId {
        /// The run the journal belongs to.
        expected: RunId,
        /// The run named by the record.
        found: RunId,
    },
}

/// An error of the run journal. Every variant names the journal file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum JournalError {
    /// Creating a new journal file failed (for example because it already exists).
    #[error("cannot create journal {}", path.display())]
    Create {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Opening an existing journal file failed.
    #[error("cannot open journal {}", path.display())]
    Open {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A live process holds the journal's lock: the run has an owner.
    #[error("journal {} is held by a live process", path.display())]
    Held {
        /// The journal file.
        path: PathBuf,
    },
    /// Taking or testing the journal's lock failed for a reason other than contention.
    #[error("cannot lock journal {}", path.display())]
    Lock {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// A record could not be serialised to JSON.
    #[error("cannot serialise a record for journal {}", path.display())]
    Serialize {
        /// The journal file.
        path: PathBuf,
        /// The serialisation error.
        #[source]
        source: serde_json::Error,
    },
    /// Writing or syncing a record failed; the record is not durable and the
    /// transition must not take effect. The journal is poisoned afterwards.
    #[error("cannot append to journal {}", path.display())]
    Append {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// An earlier append failed, so the file may end in a partial line; this handle
    /// accepts no more records. Drop it and reopen with [`Journal::open_for_recovery`].
    #[error(
        "journal {} refuses appends after an earlier append failed; reopen it for recovery",
        path.display()
    )]
    Poisoned {
        /// The journal file.
        path: PathBuf,
    },
    /// Reading the journal failed.
    #[error("cannot read journal {}", path.display())]
    Read {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The journal has a bad record before its last line (or a record that breaks the
    /// sequence or names another run): it cannot be trusted and nothing is skipped.
    #[error("journal {} is corrupt at line {line}", path.display())]
    Corrupt {
        /// The journal file.
        path: PathBuf,
        /// The 1-based line number of the bad record.
        line: u64,
        /// What is wrong with it.
        #[source]
        reason: Corruption,
    },
    /// Truncating a torn tail during recovery failed.
    #[error("cannot truncate the torn tail of journal {}", path.display())]
    Truncate {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// Syncing the journal file or its directory to stable storage failed.
    #[error("cannot sync journal {} to stable storage", path.display())]
    Sync {
        /// The journal file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

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
    /// `sync_data`. Only after this returns `Ok` may the caller let the transition take
    /// effect. If it fails, the transition must not take effect, and this journal
    /// refuses further appends ([`JournalError::Poisoned`]): the file may now end in a
    /// partial line, which [`Journal::open_for_recovery`] will truncate.
    pub fn append(&mut self, event: &E) -> Result<u64, JournalError> {
        if self.poisoned {
            return Err(JournalError::Poisoned {
                path: self.path.clone(),
            });
        }
        let seq = self.next_seq;
        let record = RecordRef {
            seq,
            run_id: &self.run_id,
            at_unix_ms: now_unix_ms(),
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
            .and_then(|()| self.file.sync_data())
            .map_err(|source| JournalError::Append {
                path: self.path.clone(),
                source,
            })?;
        self.poisoned = false;
        self.next_seq += 1;
        tracing::debug!(run_id = %self.run_id, seq, path = %self.path.display(), "journal record appended");
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

/// Whether a live process holds the lock of the journal at `path` (owns the run).
///
/// This briefly takes the lock on a fresh handle and releases it at once. Meanwhile a
/// concurrent [`Journal::open_for_recovery`] or [`Journal::create`] of the same file
/// may fail with [`JournalError::Held`]; retry it. The answer can be stale as soon as it
/// is returned: to act on a run, take the lock with [`Journal::open_for_recovery`].
///
/// # Ambient authority
///
/// `path` is a host path, used as given.
pub fn is_held(path: impl AsRef<Path>) -> Result<bool, JournalError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| JournalError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    match file.try_lock() {
        Ok(()) => {
            // Closing the handle below also releases the lock; unlock explicitly to
            // make the intent plain.
            file.unlock().map_err(|source| JournalError::Lock {
                path: path.to_path_buf(),
                source,
            })?;
            Ok(false)
        }
        Err(TryLockError::WouldBlock) => Ok(true),
        Err(TryLockError::Error(source)) => Err(JournalError::Lock {
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// Reads the journal at `path` without taking its lock (for listing and inspection).
///
/// Applies the same rules as recovery: a torn last line is reported, a bad line before
/// it, a gap in `seq` or records of different runs are [`JournalError::Corrupt`]. The
/// file is not modified. If a live runner is appending at the same moment, the
/// reported torn tail may be an append in progress.
///
/// # Ambient authority
///
/// `path` is a host path, used as given.
pub fn read<E: DeserializeOwned>(path: impl AsRef<Path>) -> Result<JournalRead<E>, JournalError> {
    let path = path.as_ref();
    let file = File::open(path).map_err(|source| JournalError::Open {
        path: path.to_path_buf(),
        source,
    })?;
    parse(path, BufReader::new(file), None)
}

/// When the journal at `path` was begun (its first record's time, in
/// milliseconds since the Unix epoch): when the run was created. `None` when
/// the file is missing or its first line is not a record.
///
/// # Ambient authority
///
/// `path` is a host path, used as given.
pub fn begun_unix_ms(path: impl AsRef<Path>) -> Option<u64> {
    let mut first = String::new();
    BufReader::new(File::open(path).ok()?)
        .read_line(&mut first)
        .ok()?;
    #[derive(serde::Deserialize)]
    struct Stamp {
        at_unix_ms: u64,
    }
    serde_json::from_str::<Stamp>(&first)
        .ok()
        .map(|s| s.at_unix_ms)
}

/// Takes the exclusive lock on `file` without waiting.
fn lock(file: &File, path: &Path) -> Result<(), JournalError> {
    file.try_lock().map_err(|err| match err {
        TryLockError::WouldBlock => JournalError::Held {
            path: path.to_path_buf(),
        },
        TryLockError::Error(source) => JournalError::Lock {
            path: path.to_path_buf(),
            source,
        },
    })
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

fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or_default()
}

/// Reads records from `reader` (positioned at the start of the journal) and applies the
/// reading rules. With `expected`, every record must name that run; without it, every
/// record must name the same run as the first.
fn parse<E: DeserializeOwned, R: Read>(
    path: &Path,
    mut reader: BufReader<R>,
    expected: Option<&RunId>,
) -> Result<JournalRead<E>, JournalError> {
    let read_err = |source| JournalError::Read {
        path: path.to_path_buf(),
        source,
    };
    let corrupt = |line, reason| JournalError::Corrupt {
        path: path.to_path_buf(),
        line,
        reason,
    };
    let mut records: Vec<JournalRecord<E>> = Vec::new();
    let mut expected = expected.cloned();
    let mut offset: u64 = 0;
    let mut line_no: u64 = 0;
    let mut line = Vec::new();
    loop {
        line.clear();
        let n = reader.read_until(b'\n', &mut line).map_err(read_err)?;
        if n == 0 {
            return Ok(JournalRead {
                records,
                torn_tail: None,
            });
        }
        line_no += 1;
        let len = u64::try_from(n).unwrap_or(u64::MAX);
        let torn = TornTail { offset, bytes: len };
        let Some(body) = line.strip_suffix(b"\n") else {
            // No newline: the append that wrote this never returned.
            return Ok(JournalRead {
                records,
                torn_tail: Some(torn),
            });
        };
        let is_last = reader.fill_buf().map_err(read_err)?.is_empty();
        let record: JournalRecord<E> = match serde_json::from_slice(body) {
            Ok(record) => record,
            Err(_) if is_last => {
                return Ok(JournalRead {
                    records,
                    torn_tail: Some(torn),
                });
            }
            Err(source) => return Err(corrupt(line_no, Corruption::Unparseable { source })),
        };
        let want_seq = u64::try_from(records.len()).unwrap_or(u64::MAX);
        if record.seq != want_seq {
            return Err(corrupt(
                line_no,
                Corruption::SeqGap {
                    expected: want_seq,
                    found: record.seq,
                },
            ));
        }
        match &expected {
            Some(run) if *run != record.run_id => {
                return Err(corrupt(
                    line_no,
                    Corruption::ForeignRunId {
                        expected: run.clone(),
                        found: record.run_id,
                    },
                ));
            }
            Some(_) => {}
            None => expected = Some(record.run_id.clone()),
        }
        records.push(record);
        offset += len;
    }
}

#[cfg(test)]
mod tests;
