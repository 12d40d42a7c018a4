//! Reading a journal: the rules every reader applies (a torn tail tolerated and
//! reported, anything else out of place is corruption).

use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::de::DeserializeOwned;

use super::{Corruption, JournalError, JournalRead, JournalRecord, TornTail};
use crate::RunId;

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

/// Reads records from `reader` (positioned at the start of the journal) and applies the
/// reading rules. With `expected`, every record must name that run; without it, every
/// record must name the same run as the first.
pub(super) fn parse<E: DeserializeOwned, R: Read>(
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
