//! Why a journal cannot be used: its errors, each naming the journal file.

use std::io;
use std::path::PathBuf;

use crate::RunId;

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
    /// accepts no more records. Drop it and reopen with [`Journal::open_for_recovery`](super::Journal::open_for_recovery).
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
