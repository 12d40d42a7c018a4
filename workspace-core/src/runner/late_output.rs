//! What a command's background processes write after the command ended.
//!
//! In a live workspace a command may leave processes running (`server &`) that
//! go on writing to the stdout and stderr they inherited. Each command therefore
//! writes to two files of the run (`<run dir>/command-output/NNNN.stdout`,
//! `.stderr`) that its streams follow until the command itself ended; the
//! runner records how much of each it streamed into the evidence then (a
//! line appended to `streamed.jsonl` beside them, because a later process may
//! conclude the run; one file for all the commands, so a command adds no file
//! of its own to the disk for it). When the run drains,
//! once every process has ended, the rest of
//! each file goes, scrubbed, to `commands/NNNN/late.stdout` and `late.stderr`.
//! A command without that record (its runner died while it ran, so its stream
//! may have stopped short) gets the whole file, scrubbed, beside them as
//! `whole.stdout` and `whole.stderr`: all it wrote, though what is late can no
//! longer be told apart. Nothing streamed into the evidence is ever replaced.
//!
//! A credential value cut by the end of a stream is not lost to the scrubber:
//! the stream leaves out what its scrubber held back (a strict prefix of a
//! value), and the late part is scrubbed from where those bytes begin.
//!
//! The files are held to the command's output cap by their keeper (see
//! [`kept_output`](super::kept_output)): past it, the late part keeps its head
//! and its tail, as a stream does, and `outcome.json` says how much it was.
//! A command whose cap is not the contract's has it recorded beside its
//! streams' (a line of the same file), so that its files are read as they
//! were kept, its runner dead or not.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::error::RunErrorKind;
use super::kept_output::read_kept;
use super::scrub::Scrubber;
use super::state_files::{create_dir, remove_if_present};
use crate::boundary::CommandOutput;
use crate::evidence::{EvidenceWriter, HeadTail};
use crate::step::{RunnerStep, StepError, StepErrors};

/// The directory of the commands' output files in a run directory.
const COMMAND_OUTPUT_DIR: &str = "command-output";
/// The record of how much of each command's output was streamed (and of a
/// cap of its own): JSON lines.
const STREAMED_FILE: &str = "streamed.jsonl";

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
/// `late.stderr` (or, when `whole`, `whole.stdout` and `whole.stderr`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LateOutput {
    /// The command (`commands/NNNN`).
    pub seq: u32,
    /// Bytes written to its standard output after it ended.
    pub stdout_bytes: u64,
    /// Bytes written to its standard error after it ended.
    pub stderr_bytes: u64,
    /// Set when what its standard output got late passed the output cap:
    /// `late.stdout` holds the first `head_bytes` of it, then the last
    /// `tail_bytes`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<HeadTail>,
    /// Set when what its standard error got late passed the output cap (see
    /// `stdout_truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<HeadTail>,
    /// Bytes of both streams not kept (between the head and the tail).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_kept_bytes: u64,
    /// Its runner died while it ran: these are all it wrote, from the start.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole: bool,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// The output files of command `seq`, in a directory made for them, held to
/// `bound` by their keeper.
pub(super) fn files(
    run_dir: &Path,
    seq: u32,
    bound: HeadTail,
) -> Result<CommandOutput, RunErrorKind> {
    let dir = run_dir.join(COMMAND_OUTPUT_DIR);
    create_dir(&dir)?;
    Ok(CommandOutput {
        stdout: dir.join(format!("{seq:04}.stdout")),
        stderr: dir.join(format!("{seq:04}.stderr")),
        follow: true,
        bound: Some(bound),
    })
}

/// One line of [`STREAMED_FILE`]: what a command streamed (both counts), or
/// the cap of its own it started with (`bound` alone), or both.
#[derive(Default, Serialize, Deserialize)]
struct StreamedLine {
    seq: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stdout: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    stderr: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    bound: Option<HeadTail>,
}

/// What [`STREAMED_FILE`] says of one command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct CommandRecord {
    /// What it streamed, once it ended.
    streamed: Option<Streamed>,
    /// Its own cap, when it had one.
    bound: Option<HeadTail>,
}

/// Records how much of command `seq`'s output was streamed: one line
/// appended, after a line break of its own so that a line an earlier write
/// left cut short (a full disk, a crash) ends there and takes no later line
/// with it; a cut line reads as no record, and that command's output is
/// exported whole.
pub(super) fn record_streamed(
    run_dir: &Path,
    seq: u32,
    streamed: Streamed,
) -> Result<(), RunErrorKind> {
    append_line(
        run_dir,
        &StreamedLine {
            seq,
            stdout: Some(streamed.stdout),
            stderr: Some(streamed.stderr),
            bound: None,
        },
    )
}

/// Records that command `seq` keeps its output to `bound`, not to the
/// contract's cap: a line of its own, before it starts.
pub(super) fn record_bound(run_dir: &Path, seq: u32, bound: HeadTail) -> Result<(), RunErrorKind> {
    append_line(
        run_dir,
        &StreamedLine {
            seq,
            bound: Some(bound),
            ..StreamedLine::default()
        },
    )
}

/// Appends `line` to [`STREAMED_FILE`] (see [`record_streamed`]).
fn append_line(run_dir: &Path, line: &StreamedLine) -> Result<(), RunErrorKind> {
    use std::io::Write;
    let path = streamed_path(run_dir);
    let io = |source| RunErrorKind::Io {
        path: path.clone(),
        source,
    };
    let mut bytes = vec![b'\n'];
    serde_json::to_writer(&mut bytes, line).map_err(|e| io(std::io::Error::other(e)))?;
    bytes.push(b'\n');
    std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(&path)
        .and_then(|mut file| file.write_all(&bytes))
        .map_err(io)
}

/// Every command's record: what it streamed and its own cap (the last of
/// each a command has); a line that does not parse is no record.
fn read_streamed(run_dir: &Path) -> Result<BTreeMap<u32, CommandRecord>, RunErrorKind> {
    let path = streamed_path(run_dir);
    let bytes = match std::fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(BTreeMap::new()),
        Err(source) => return Err(RunErrorKind::Io { path, source }),
    };
    let mut records = BTreeMap::<u32, CommandRecord>::new();
    for line in bytes
        .split(|b| *b == b'\n')
        .filter_map(|line| serde_json::from_slice::<StreamedLine>(line).ok())
    {
        let record = records.entry(line.seq).or_default();
        if let (Some(stdout), Some(stderr)) = (line.stdout, line.stderr) {
            record.streamed = Some(Streamed { stdout, stderr });
        }
        if line.bound.is_some() {
            record.bound = line.bound;
        }
    }
    Ok(records)
}

/// Copies every command's late output into the evidence, scrubbed, each held
/// to its cap (`cap`, the contract's, unless the command had one of its own);
/// call once the run's processes have all ended (the files are complete). A
/// command without a record of what it streamed (its runner died before it
/// ended) gets its whole output instead.
pub(super) fn export(
    run_dir: &Path,
    evidence: &EvidenceWriter,
    (scrubber, cap): (&Scrubber, HeadTail),
    errors: &mut StepErrors,
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
    // Unreadable, the record is none: every command's output goes whole
    // (what was streamed twice, rather than anything lost).
    let records = read_streamed(run_dir).unwrap_or_else(|e| {
        errors.push(
            RunnerStep::ExportLateOutput,
            StepError::new(
                RunnerStep::WriteEvidence {
                    file: "late output (the record of what was streamed)".into(),
                },
                e,
            ),
        );
        BTreeMap::new()
    });
    let mut late = Vec::new();
    for seq in seqs {
        // Without a record, from the start: all of it.
        let record = records.get(&seq).copied().unwrap_or_default();
        let (whole, from) = match record.streamed {
            Some(streamed) => (false, streamed),
            None => (true, Streamed::default()),
        };
        let bound = record.bound.unwrap_or(cap);
        let exported = export_one(run_dir, seq, (whole, from, bound), evidence, scrubber);
        match exported {
            Ok(Some(record)) => late.push(record),
            Ok(None) => {}
            Err(e) => errors.push(
                RunnerStep::ExportLateOutput,
                StepError::new(
                    RunnerStep::WriteEvidence {
                        file: format!("late output of command {seq}"),
                    },
                    e,
                ),
            ),
        }
    }
    late
}

/// What command `seq` wrote after `from` (what its streams carried; nothing
/// for a `whole` export), held to `bound`, as `late.*` or `whole.*`.
fn export_one(
    run_dir: &Path,
    seq: u32,
    (whole, from, bound): (bool, Streamed, HeadTail),
    evidence: &EvidenceWriter,
    scrubber: &Scrubber,
) -> Result<Option<LateOutput>, RunErrorKind> {
    let files = files(run_dir, seq, bound)?;
    let mut record = LateOutput {
        seq,
        stdout_bytes: 0,
        stderr_bytes: 0,
        stdout_truncated: None,
        stderr_truncated: None,
        not_kept_bytes: 0,
        whole,
    };
    for (stream, path, offset, (written, truncated)) in [
        (
            "stdout",
            &files.stdout,
            from.stdout,
            (&mut record.stdout_bytes, &mut record.stdout_truncated),
        ),
        (
            "stderr",
            &files.stderr,
            from.stderr,
            (&mut record.stderr_bytes, &mut record.stderr_truncated),
        ),
    ] {
        let kept = read_kept(path, offset, bound).map_err(|source| RunErrorKind::Io {
            path: path.clone(),
            source,
        })?;
        if kept.total == 0 {
            continue;
        }
        (*written, *truncated) = (kept.total, kept.truncated);
        record.not_kept_bytes += kept.truncated.map_or(0, |t| t.dropped_of(kept.total));
        // Head and tail apart: a value cut where the middle was dropped is
        // no value, and what the head held back of one is not kept.
        let mut bytes = match kept.truncated {
            Some(_) => scrubber.redact_cut(&kept.head),
            None => scrubber.redact_bytes(&kept.head),
        };
        bytes.extend(scrubber.redact_bytes(&kept.tail));
        evidence.write_late_output(seq, whole, stream, &bytes)?;
    }
    Ok((record.stdout_bytes + record.stderr_bytes > 0).then_some(record))
}

/// Removes the commands' output files from the run directory.
pub(super) fn remove_files(run_dir: &Path, errors: &mut StepErrors) {
    remove_if_present(&run_dir.join(COMMAND_OUTPUT_DIR), errors);
}

fn streamed_path(run_dir: &Path) -> PathBuf {
    run_dir.join(COMMAND_OUTPUT_DIR).join(STREAMED_FILE)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)] // panicking is how a test fails

    use super::*;
    use crate::RunId;
    use crate::boundary::IssuedCredential;

    fn scrubber() -> Scrubber {
        Scrubber::new(&[IssuedCredential::new("TOKEN", "tok-1234567890", 0)])
    }

    /// The cap of the tests' commands (16 MiB).
    fn cap() -> HeadTail {
        HeadTail::of_cap(16 << 20)
    }

    /// A run directory with command 1's stdout holding `stdout`, and an
    /// evidence bundle with command 1's directory.
    fn fixture(stdout: &[u8]) -> (tempfile::TempDir, EvidenceWriter) {
        let dir = tempfile::tempdir().unwrap();
        let files = files(dir.path(), 1, cap()).unwrap();
        std::fs::write(&files.stdout, stdout).unwrap();
        let evidence =
            EvidenceWriter::create(&dir.path().join("evidence"), &RunId::new("run-1").unwrap())
                .unwrap();
        let recorder = evidence
            .start_command(crate::evidence::CommandStart::now(vec!["sh".into()], "."))
            .unwrap();
        drop(recorder);
        (dir, evidence)
    }

    fn read(evidence: &EvidenceWriter, name: &str) -> String {
        std::fs::read_to_string(evidence.dir().join("commands/0001").join(name)).unwrap()
    }

    #[test]
    fn a_value_cut_by_the_end_of_the_stream_is_redacted_with_what_follows() {
        // The stream carried "early tok-12" and held the prefix back: it
        // recorded 6 bytes streamed ("early ").
        let (dir, evidence) = fixture(b"early tok-1234567890 late\n");
        record_streamed(
            dir.path(),
            1,
            Streamed {
                stdout: 6,
                stderr: 0,
            },
        )
        .unwrap();
        let late = export(
            dir.path(),
            &evidence,
            (&scrubber(), cap()),
            &mut StepErrors::default(),
        );
        assert_eq!(read(&evidence, "late.stdout"), "[redacted:TOKEN] late\n");
        assert_eq!(
            late,
            [LateOutput {
                seq: 1,
                stdout_bytes: 20,
                stderr_bytes: 0,
                stdout_truncated: None,
                stderr_truncated: None,
                not_kept_bytes: 0,
                whole: false,
            }]
        );
        assert!(!evidence.dir().join("commands/0001/late.stderr").exists());
    }

    #[test]
    fn nothing_after_the_stream_is_no_late_output() {
        let (dir, evidence) = fixture(b"all of it\n");
        record_streamed(
            dir.path(),
            1,
            Streamed {
                stdout: 10,
                stderr: 0,
            },
        )
        .unwrap();
        assert!(
            export(
                dir.path(),
                &evidence,
                (&scrubber(), cap()),
                &mut StepErrors::default()
            )
            .is_empty()
        );
        assert!(!evidence.dir().join("commands/0001/late.stdout").exists());
    }

    #[test]
    fn without_a_record_the_whole_output_is_kept_beside_the_streamed_one() {
        let (dir, evidence) = fixture(b"tok-1234567890 everything\n");
        let mut errors = StepErrors::default();
        let late = export(dir.path(), &evidence, (&scrubber(), cap()), &mut errors);
        assert!(errors.is_empty(), "{errors:?}");
        assert!(late[0].whole, "{late:?}");
        assert_eq!(
            read(&evidence, "whole.stdout"),
            "[redacted:TOKEN] everything\n"
        );
        // What was streamed stays as it was.
        assert_eq!(read(&evidence, "stdout"), "");
    }

    /// Every command's record is a line of one file; a line a crash cut
    /// short is no record (that command's output goes whole), and the lines
    /// of the others, the next one included, still count.
    #[test]
    fn one_file_holds_every_commands_record_and_a_torn_line_is_none_of_them() {
        let dir = tempfile::tempdir().unwrap();
        files(dir.path(), 1, cap()).unwrap();
        let streamed = |stdout| Streamed { stdout, stderr: 0 };
        record_streamed(dir.path(), 1, streamed(3)).unwrap();
        record_streamed(dir.path(), 2, streamed(5)).unwrap();
        let path = streamed_path(dir.path());
        // A write cut short (and a byte that is no text), then the next one.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"seq\":3,\"stdo\xff");
        std::fs::write(&path, bytes).unwrap();
        record_streamed(dir.path(), 4, streamed(7)).unwrap();

        let records = read_streamed(dir.path()).unwrap();

        assert_eq!(
            records
                .into_iter()
                .map(|(seq, record)| (seq, record.streamed))
                .collect::<Vec<_>>(),
            [
                (1, Some(streamed(3))),
                (2, Some(streamed(5))),
                (4, Some(streamed(7)))
            ]
        );
        let names: Vec<_> = std::fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(
            names.iter().all(|n| n != "0001.streamed"),
            "no file of its own: {names:?}"
        );
    }

    #[test]
    fn beyond_the_cap_the_head_and_the_tail_are_kept_and_the_rest_counted() {
        let mut late = b"HEAD".to_vec();
        late.extend(vec![b'x'; 100]);
        late.extend_from_slice(b"TAIL");
        let (dir, evidence) = fixture(&late);
        record_streamed(dir.path(), 1, Streamed::default()).unwrap();
        // A cap of its own, smaller than the contract's.
        let own = HeadTail {
            head_bytes: 4,
            tail_bytes: 4,
        };
        record_bound(dir.path(), 1, own).unwrap();
        let late = export(
            dir.path(),
            &evidence,
            (&scrubber(), cap()),
            &mut StepErrors::default(),
        );
        assert_eq!(late[0].stdout_bytes, 108);
        assert_eq!(late[0].stdout_truncated, Some(own));
        assert_eq!(late[0].not_kept_bytes, 100);
        assert_eq!(read(&evidence, "late.stdout"), "HEADTAIL");
    }

    #[test]
    fn a_value_cut_where_the_middle_was_dropped_leaves_nothing_of_its_start() {
        let (dir, evidence) = fixture(b"0123tok-1234567890 and more to drop ...end!");
        record_streamed(dir.path(), 1, Streamed::default()).unwrap();
        let bound = HeadTail {
            head_bytes: 10,
            tail_bytes: 4,
        };
        let late = export(
            dir.path(),
            &evidence,
            (&scrubber(), bound),
            &mut StepErrors::default(),
        );
        assert!(late[0].stdout_truncated.is_some());
        assert_eq!(read(&evidence, "late.stdout"), "0123end!");
    }
}
