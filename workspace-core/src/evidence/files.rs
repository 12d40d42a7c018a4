//! `files.jsonl`: one line per change made through a workspace's files API.
//!
//! Several tasks of one process and several processes (each joined to the
//! run) change files of one workspace at once, so the record is appended, not
//! rewritten: each line is written whole with one `write` to a file opened for
//! appending, under an exclusive lock of the file (`flock`), so lines never
//! interleave and none is lost. A bundle that is sealed (its manifest exists)
//! takes no more lines. The contents written are not recorded, only their
//! size and sha256: a file the agent writes may hold a credential.

use std::fs::OpenOptions;
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;

use serde::{Deserialize, Serialize};

use super::EvidenceError;
use super::layout::{EvidenceFile, MANIFEST_FILE};
use super::writer::EvidenceWriter;

/// What a change through the files API did.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum FileOp {
    /// A file's content was written.
    Write,
    /// A file, link or directory (with what it held) was removed.
    Remove,
    /// A directory was made.
    Mkdir,
    /// An entry was renamed.
    Rename,
}

/// One line of `files.jsonl`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecord {
    /// When it ended, in milliseconds since the Unix epoch.
    pub time_unix_ms: u64,
    /// What was done.
    pub op: FileOp,
    /// The path, absolute inside the sandbox (redacted of credential values).
    pub path: String,
    /// A rename's destination.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    /// How many bytes were written (a write).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<u64>,
    /// The sha256 of what was written (a write that wrote it all).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// Whether the write made the file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<bool>,
    /// The permission bits asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<u32>,
    /// Whether a removal was recursive, or a directory was made with its
    /// parents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recursive: Option<bool>,
    /// How many entries a removal removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub removed: Option<u64>,
    /// The process that did it.
    pub pid: u32,
    /// Why it was refused or failed; absent when it succeeded. A write that
    /// failed part way changed the file: `bytes` says how much was written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<FileRecordError>,
}

impl FileRecord {
    /// A record of `op` on `path`, now, by this process, nothing else known.
    pub fn now(op: FileOp, path: impl Into<String>) -> Self {
        Self {
            time_unix_ms: crate::clock::unix_ms_now(),
            op,
            path: path.into(),
            to: None,
            bytes: None,
            sha256: None,
            created: None,
            mode: None,
            recursive: None,
            removed: None,
            pid: std::process::id(),
            error: None,
        }
    }
}

/// Why a recorded change was refused or failed.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRecordError {
    /// Its kind (`permission-denied`, `read-only`, ...).
    pub kind: String,
    /// In words.
    pub message: String,
}

impl EvidenceWriter {
    /// Appends `record` as one line to `files.jsonl`, safely beside other
    /// tasks and processes appending to the same bundle: one `write` of the
    /// whole line to the file opened for appending, under an exclusive lock
    /// of it. Refused once the bundle is sealed (by any process).
    pub fn append_file_record(&self, record: &FileRecord) -> Result<(), EvidenceError> {
        self.while_unsealed(|| self.append_line(record))
    }

    fn append_line(&self, record: &FileRecord) -> Result<(), EvidenceError> {
        let path = self.path_of(EvidenceFile::Files);
        let mut line = serde_json::to_vec(record).map_err(|source| EvidenceError::Serialize {
            path: path.clone(),
            source,
        })?;
        line.push(b'\n');
        let write = |source| EvidenceError::Write {
            path: path.clone(),
            source,
        };
        let mut file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o600)
            .open(&path)
            .map_err(write)?;
        file.lock().map_err(write)?;
        // Another process may have sealed the bundle meanwhile (it ended the
        // run): its manifest would no longer match.
        match std::fs::symlink_metadata(self.dir().join(MANIFEST_FILE)) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            _ => {
                return Err(EvidenceError::Sealed {
                    path: self.dir().to_path_buf(),
                });
            }
        }
        // One write of the whole line: appended at the end as one piece.
        file.write_all(&line).map_err(write)
        // The lock goes with the file.
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RunId;

    #[test]
    fn lines_appended_by_many_threads_are_whole_and_a_sealed_bundle_takes_none() {
        let root = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let run = RunId::new("run-files").unwrap_or_else(|e| panic!("{e}"));
        let writer = std::sync::Arc::new(
            EvidenceWriter::create(root.path(), &run).unwrap_or_else(|e| panic!("{e}")),
        );
        // Two writers of one bundle, as two processes have.
        let other = std::sync::Arc::new(
            EvidenceWriter::reopen(writer.dir()).unwrap_or_else(|e| panic!("{e}")),
        );
        let threads: Vec<_> = (0..8)
            .map(|t| {
                let writer = if t % 2 == 0 {
                    writer.clone()
                } else {
                    other.clone()
                };
                std::thread::spawn(move || {
                    for i in 0..50 {
                        let mut record = FileRecord::now(FileOp::Write, format!("/w/{t}/{i}"));
                        record.sha256 = Some("a".repeat(64));
                        writer
                            .append_file_record(&record)
                            .unwrap_or_else(|e| panic!("{e}"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread
                .join()
                .unwrap_or_else(|_| panic!("a writer panicked"));
        }
        let text = std::fs::read_to_string(writer.path_of(EvidenceFile::Files))
            .unwrap_or_else(|e| panic!("{e}"));
        let mut paths: Vec<String> = text
            .lines()
            .map(|line| {
                serde_json::from_str::<FileRecord>(line)
                    .unwrap_or_else(|e| panic!("{line}: {e}"))
                    .path
            })
            .collect();
        paths.sort();
        paths.dedup();
        assert_eq!(paths.len(), 400);
        writer.seal().unwrap_or_else(|e| panic!("{e}"));
        let refused = other.append_file_record(&FileRecord::now(FileOp::Mkdir, "/w/late"));
        assert!(
            matches!(refused, Err(EvidenceError::Sealed { .. })),
            "{refused:?}"
        );
        let report = super::super::verify(writer.dir()).unwrap_or_else(|e| panic!("{e}"));
        assert!(report.is_intact(), "{:?}", report.problems);
    }
}
