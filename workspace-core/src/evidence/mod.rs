//! The evidence bundle: a directory per run that a reviewer can trust.
//!
//! Every run exports its evidence before cleanup, on every path (a failed run
//! still exports what exists), into `<root>/<run-id>/`:
//!
//! ```text
//! <root>/<run-id>/
//!   contract.json      the contract as declared            EvidenceFile::Contract
//!   source.json        the code and initial state received EvidenceFile::Source
//!   observed.json      what a probe inside the boundary saw EvidenceFile::Observed
//!   commands/0001/     one directory per command, in start order
//!     command.json     argv, cwd, start/end times, exit status, cause, bytes written
//!     stdout, stderr   the output, streamed to disk as it came (head and tail past the cap)
//!     late.stdout, late.stderr  what its background processes wrote after it ended
//!     whole.stdout, whole.stderr  all it wrote, when its runner died while it ran
//!   diff.patch         applies with `git apply` on the base EvidenceFile::Diff
//!   changes.json       changed paths, in or out of scope    EvidenceFile::Changes
//!   checks.json                                             EvidenceFile::Checks
//!   approvals.json                                          EvidenceFile::Approvals
//!   files.jsonl        writes, removals, renames through the files API  EvidenceFile::Files
//!   journal.jsonl      a copy of the run's journal          EvidenceFile::Journal
//!   manifest.json      sha256 and size of every other file  (written by seal)
//! ```
//!
//! ```
//! use workspace_core::RunId;
//! use workspace_core::evidence::{
//!     CommandEnd, CommandStart, EvidenceFile, EvidenceWriter, ExitStatusRecord, verify,
//! };
//! use std::io::Write;
//!
//! let root = tempfile::tempdir()?;
//! let writer = EvidenceWriter::create(root.path(), &RunId::new("run-1")?)?;
//! writer.write_json(EvidenceFile::Checks, &serde_json::json!({ "tests": "passed" }))?;
//! let mut cmd = writer.start_command(CommandStart::now(vec!["cargo".into(), "test".into()], "/work"))?;
//! cmd.stdout_writer().write_all(b"test result: ok\n")?;
//! cmd.finish(CommandEnd::now(ExitStatusRecord::Code(0)))?;
//! let manifest = writer.seal()?;
//! assert_eq!(manifest.files.len(), 4); // checks.json + command.json, stdout, stderr
//!
//! let report = verify(writer.dir())?;
//! assert!(report.is_intact());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # Writing
//! [`EvidenceWriter::create`] makes a fresh run directory (an existing one is an
//! error, never reused). Well-known files are named by [`EvidenceFile`], never by
//! free path strings, and written atomically (temp file, rename: a reader never
//! sees a torn file). The bundle becomes durable once, when it is sealed: every
//! file and directory is synced before the manifest is written (then synced
//! itself), so a run pays for its evidence's durability at export, not on every
//! record, and a host crash never leaves a sealed bundle short. (A bundle on a
//! memory file system, tmpfs, is not synced: nothing there outlives the host.) Commands are recorded with a [`CommandRecorder`]: its
//! `command.json` exists from the start, output goes straight to disk, and a
//! recorder dropped without [`CommandRecorder::finish`] still leaves a valid record
//! with [`ExitStatusRecord::Unknown`]. [`EvidenceWriter::seal`] writes
//! `manifest.json` and refuses every later write.
//!
//! Output files are written with blocking `std::io::Write`; tokio callers move an
//! [`OutputStream`] into `spawn_blocking`, or read the child's pipe asynchronously
//! and write each chunk (see [`OutputStream`] for why there is no `AsyncWrite`).
//!
//! # Why it is tamper-evident
//! `manifest.json` lists the sha256 and size of every other file, sorted by
//! relative `/`-separated path. [`verify`] re-walks the directory and reports every
//! difference: a changed byte, a missing file, an extra file, a planted symlink or
//! special file, or a manifest entry that is not a plain relative path. Neither
//! sealing nor verifying ever follows a link: entries are inspected with
//! `symlink_metadata`, only regular files found through real directories are
//! opened, and each opened file is checked to be the one inspected. So a planted
//! link cannot make a reviewer's tools hash (and so vouch for) a file outside the
//! bundle, and a manifest naming `../outside` is reported, not read.
//!
//! # What it is not
//! The manifest detects accidental corruption and naive tampering. It does not
//! stop an attacker who can rewrite `manifest.json` as well: they can recompute
//! every digest. Anchoring the manifest (signing it, or recording its digest
//! somewhere the agent cannot write) is out of scope for now.

mod atomic;
mod capped;
mod command;
mod completeness;
mod error;
mod files;
mod fingerprint;
mod layout;
mod manifest;
mod usage;
mod verify;
mod writer;

#[cfg(test)]
mod tests;

pub use capped::{CappedStream, HeadTail, OutputTally, StreamTally};
pub use command::{
    COMMAND_FILE, CommandEnd, CommandRecord, CommandRecorder, CommandStart, ExitStatusRecord,
    LATE_OUTPUT_PREFIX, OutputStream, STDERR_FILE, STDOUT_FILE, WHOLE_OUTPUT_PREFIX,
};
pub use completeness::Completeness;
pub use error::EvidenceError;
pub use files::{FileOp, FileRecord, FileRecordError};
pub use fingerprint::{FINGERPRINT_KEY_FILE, FingerprintKey, FingerprintKeyError};
pub use layout::{COMMANDS_DIR, EvidenceFile, MANIFEST_FILE};
pub use manifest::{Manifest, ManifestEntry};
pub use usage::ResourceUsage;
pub use verify::{Tamper, VerifyReport, verify};
pub use writer::EvidenceWriter;

// Handles are shared across tasks and threads.
const _: () = {
    const fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<EvidenceWriter>();
    assert_send_sync::<CommandRecorder>();
    assert_send_sync::<OutputStream>();
    assert_send_sync::<EvidenceError>();
};
