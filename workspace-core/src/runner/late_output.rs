//! What a command's background processes write after the command ended.
//!
//! In a live workspace a command may leave processes running (`server &`) that
//! go on writing to the stdout and stderr they inherited. Each command therefore
//! writes to two files of the run (`<run dir>/command-output/NNNN.stdout`,
//! `.stderr`) that its streams follow until the command itself ended; the
//! runner records how much of each it streamed into the evidence then
//! (`NNNN.streamed`, a file of its own because a later process may conclude
//! the run). When the run drains, once every process has ended, the rest of
//! each file goes, scrubbed, to `commands/NNNN/late.stdout` and `late.stderr`.
//! A command without that record (its runner died while it ran, so its stream
//! may have stopped short) gets the whole file, scrubbed, as its `stdout` and
//! `stderr`: all it wrote, though what is late can no longer be told apart.

use std::collections::BTreeSet;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::RunErrorKind;
use super::scrub::Scrubber;
use super::state_files::{create_dir, read_state, remove_if_present, write_state};
use crate::boundary::CommandOutput;
use crate::evidence::EvidenceWriter;

/// The directory of the commands' output files in a run directory.
const COMMAND_OUTPUT_DIR: &str = "command-output";
/// The extension of the record of how much of a command's output was streamed.
const STREAMED_EXTENSION: &str = "streamed";
/// The most of one stream's late output kept in the evidence; the rest is
/// counted in [`LateOutput`], not kept.
const LATE_OUTPUT_LIMIT: u64 = 16 << 20;

/// How much of a command's output its streams carried into the evidence.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(super) struct Streamed {
    /// Bytes of standard output.
    pub stdout: u64,
    /// Bytes of standard error.
    pub stderr: u64,
}

/// What one command's background processes wrote after it ended: in
/// `outcome.json`, and in the evidence as `commands/NNNN/late.stdout` and
/// `late.stderr`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateOutput {
    /// The command (`commands/NNNN`).
    pub seq: u32,
    /// Bytes written to its standard output after it ended.
    pub stdout_bytes: u64,
    /// Bytes written to its standard error after it ended.
    pub stderr_bytes: u64,
    /// Bytes beyond the first 16 MiB of each stream, not kept.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_kept_bytes: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The output files of command `seq`, in a directory made for them.
pub(super) fn files(run_dir: &Path, seq: u32) -> Result<CommandOutput, RunErrorKind> {
    let dir = run_dir.join(COMMAND_OUTPUT_DIR);
    create_dir(&dir)?;
    Ok(CommandOutput {
        stdout: dir.join(format!("{seq:04}.stdout")),
        stderr: dir.join(format!("{seq:04}.stderr")),
        follow: true,
    })
}

/// Records how much of command `seq`'s output was streamed.
pub(super) fn record_streamed(
    run_dir: &Path,
    seq: u32,
    streamed: Streamed,
) -> Result<(), RunErrorKind> {
    write_state(&streamed_path(run_dir, seq), &streamed)
}

/// Copies every command's late output into the evidence, scrubbed; call once
/// the run's processes have all ended (the files are complete). A command
/// without a record of what it streamed (its runner died before it ended) gets
/// its whole output instead.
pub(super) fn export(
    run_dir: &Path,
    evidence: &EvidenceWriter,
    scrubber: &Scrubber,
    errors: &mut Vec<String>,
) -> Vec<LateOutput> {
    let dir = run_dir.join(COMMAND_OUTPUT_DIR);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let seqs: BTreeSet<u32> = entries
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            path.file_stem()?.to_str()?.parse().ok()
        })
        .collect();
    let mut late = Vec::new();
    for seq in seqs {
        let exported = match read_state::<Streamed>(&streamed_path(run_dir, seq)) {
            Ok(Some(streamed)) => export_late(run_dir, seq, streamed, evidence, scrubber),
            Ok(None) => export_whole(run_dir, seq, evidence, scrubber).map(|()| None),
            Err(e) => Err(e),
        };
        match exported {
            Ok(Some(record)) => late.push(record),
            Ok(None) => {}
            Err(e) => errors.push(format!(
                "exporting the late output of command {seq}: {}",
                crate::error_chain(&e)
            )),
        }
    }
    late
}

/// The whole output of command `seq` as its `stdout` and `stderr` in the
/// evidence (a file that is not there, from a backend that keeps none, leaves
/// the evidence as it streamed).
fn export_whole(
    run_dir: &Path,
    seq: u32,
    evidence: &EvidenceWriter,
    scrubber: &Scrubber,
) -> Result<(), RunErrorKind> {
    let files = files(run_dir, seq)?;
    for (stream, path) in [("stdout", &files.stdout), ("stderr", &files.stderr)] {
        if !path.exists() {
            continue;
        }
        let (bytes, _) = read_from(path, 0)?;
        evidence.write_command_output(seq, stream, &scrubber.redact_bytes(&bytes))?;
    }
    Ok(())
}

/// What command `seq`'s background processes wrote after `streamed`.
fn export_late(
    run_dir: &Path,
    seq: u32,
    streamed: Streamed,
    evidence: &EvidenceWriter,
    scrubber: &Scrubber,
) -> Result<Option<LateOutput>, RunErrorKind> {
    let files = files(run_dir, seq)?;
    let mut record = LateOutput {
        seq,
        stdout_bytes: 0,
        stderr_bytes: 0,
        not_kept_bytes: 0,
    };
    let mut not_kept = 0;
    for (stream, path, offset, written) in [
        (
            "stdout",
            &files.stdout,
            streamed.stdout,
            &mut record.stdout_bytes,
        ),
        (
            "stderr",
            &files.stderr,
            streamed.stderr,
            &mut record.stderr_bytes,
        ),
    ] {
        let (bytes, total) = read_from(path, offset)?;
        if total == 0 {
            continue;
        }
        *written = total;
        not_kept += total - bytes.len() as u64;
        evidence.write_late_output(seq, stream, &scrubber.redact_bytes(&bytes))?;
    }
    record.not_kept_bytes = not_kept;
    Ok((record.stdout_bytes + record.stderr_bytes > 0).then_some(record))
}

/// The first [`LATE_OUTPUT_LIMIT`] bytes of `path` after `offset`, and how many
/// there are in all. A file that is shorter (the command truncated its own
/// output) or missing (a backend that keeps no files) has none.
fn read_from(path: &Path, offset: u64) -> Result<(Vec<u8>, u64), RunErrorKind> {
    let io = |source| RunErrorKind::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(io(e)),
    };
    let size = file.metadata().map_err(io)?.len();
    let total = size.saturating_sub(offset);
    if total == 0 {
        return Ok((Vec::new(), 0));
    }
    file.seek(SeekFrom::Start(offset)).map_err(io)?;
    let mut bytes = Vec::new();
    file.take(total.min(LATE_OUTPUT_LIMIT))
        .read_to_end(&mut bytes)
        .map_err(io)?;
    Ok((bytes, total))
}

/// Removes the commands' output files from the run directory.
pub(super) fn remove_files(run_dir: &Path, errors: &mut Vec<String>) {
    remove_if_present(&run_dir.join(COMMAND_OUTPUT_DIR), errors);
}

fn streamed_path(run_dir: &Path, seq: u32) -> PathBuf {
    run_dir
        .join(COMMAND_OUTPUT_DIR)
        .join(format!("{seq:04}.{STREAMED_EXTENSION}"))
}
