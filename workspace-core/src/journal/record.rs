//! What a journal holds: its records, and what reading it found.

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
pub(super) struct RecordRef<'a, E> {
    pub(super) seq: u64,
    pub(super) run_id: &'a RunId,
    pub(super) at_unix_ms: u64,
    pub(super) event: &'a E,
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
    /// [`Journal::open_for_recovery`](super::Journal::open_for_recovery) it has been truncated from the file.
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
