//! The end of one command as `exec --json` answers it and `run --json`
//! carries it (`command`), and how `run` and `exec` pass a command's output
//! with `--json` and `--capture`.
//!
//! Without `--capture` the command's stdout and stderr pass through to this
//! process's, as without `--json`, and the answer is stderr's last line. With
//! `--capture` nothing passes through: the answer, on stdout, carries the
//! output inline, read from the command's stream files in the evidence once
//! it ended (what the evidence kept of it, credentials redacted).

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Serialize;
use workspace_core::RunId;
use workspace_core::boundary::{KillCause, NotRunReason};
use workspace_core::evidence::{
    COMMAND_FILE, COMMANDS_DIR, CommandRecord, ExitStatusRecord, HeadTail, ResourceUsage,
    STDERR_FILE, STDOUT_FILE,
};
use workspace_core::runner::{CommandIo, CommandOutcome, RunPaths, Runner};

use super::progress::{Progress, passing_through};

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// A stream that passed the output cap, in `--json`.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct TruncatedStream {
    /// Every byte the command wrote to it.
    pub total_bytes: u64,
    /// The first bytes kept.
    pub head_bytes: u64,
    /// The last bytes kept.
    pub tail_bytes: u64,
}

impl TruncatedStream {
    fn of(total_bytes: u64, kept: Option<HeadTail>) -> Option<Self> {
        kept.map(|kept| Self {
            total_bytes,
            head_bytes: kept.head_bytes,
            tail_bytes: kept.tail_bytes,
        })
    }
}

/// How one command ended (`exec --json`; `command` in `run --json`).
#[derive(Debug, Serialize)]
pub(crate) struct CommandJson {
    /// The run it ran in.
    pub run_id: String,
    /// Its number in the run's evidence (`commands/NNNN`).
    pub seq: u32,
    /// The program and its arguments (credentials redacted).
    pub argv: Vec<String>,
    /// Its status as a shell reports it: the exit code; 128+N after signal
    /// N; 124 after a timeout; 126 when its program is not executable, 127
    /// when it did not start otherwise.
    pub exit_status: i32,
    /// The code it exited with, when it exited (none after a signal).
    pub exit_code: Option<i32>,
    /// The signal that ended it, when one did (`exit_status` is then 128+N).
    pub signal: Option<i32>,
    /// Why the runner killed it, when it did: `timeout`, `memory-limit`,
    /// `cancelled`, `teardown`.
    pub killed: Option<KillCause>,
    /// Whether its time ran out (`killed` is then `timeout`).
    pub timed_out: bool,
    /// Whether it started at all.
    pub started: bool,
    /// Why its program did not run, when the kernel would not run it:
    /// `not-found` (exit 127) or `not-executable` (exit 126).
    pub not_run: Option<NotRunReason>,
    /// Why it ended as it did, in words, when its status alone does not say
    /// (it did not start, its time ran out).
    pub cause: Option<String>,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// How many new processes the run's `pids` limit refused it.
    #[serde(skip_serializing_if = "is_zero")]
    pub forks_refused: u64,
    /// What its process tree used (peak memory, CPU time, peak processes),
    /// where the backend counts it.
    #[serde(skip_serializing_if = "ResourceUsage::is_empty")]
    pub usage: ResourceUsage,
    /// The size of its standard output, as its record counts it.
    pub stdout_bytes: Option<u64>,
    /// The size of its standard error, as its record counts it.
    pub stderr_bytes: Option<u64>,
    /// Its stdout, when it passed the output cap: how much it wrote and what
    /// the evidence kept of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<TruncatedStream>,
    /// Its stderr, when it passed the output cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<TruncatedStream>,
    /// Its record in the evidence (`<evidence>/commands/NNNN/command.json`).
    pub record: PathBuf,
    /// Its standard output in the evidence.
    pub stdout_path: PathBuf,
    /// Its standard error in the evidence.
    pub stderr_path: PathBuf,
    /// With `--capture`: its output inline.
    #[serde(flatten)]
    pub output: Option<InlineOutput>,
}

/// A command's output inline (`--capture`): each stream as text when it is
/// UTF-8, else as base64 (exactly one of the two is present for each).
#[derive(Debug, Default, Serialize)]
pub(crate) struct InlineOutput {
    /// Standard output, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout: Option<String>,
    /// Standard output as base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_base64: Option<String>,
    /// Standard error, when it is UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<String>,
    /// Standard error as base64, when it is not UTF-8.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_base64: Option<String>,
    /// Why a stream could not be read back from the evidence (it is then
    /// left out).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_error: Option<String>,
}

impl InlineOutput {
    /// The two stream files, read whole (a file that is not there is empty).
    fn read(stdout: &Path, stderr: &Path) -> Self {
        let mut inline = Self::default();
        for (path, text, base64) in [
            (stdout, &mut inline.stdout, &mut inline.stdout_base64),
            (stderr, &mut inline.stderr, &mut inline.stderr_base64),
        ] {
            match read_or_empty(path) {
                Ok(bytes) => (*text, *base64) = text_or_base64(bytes),
                Err(e) => {
                    inline.output_error = Some(format!("cannot read {}: {e}", path.display()));
                }
            }
        }
        inline
    }
}

fn read_or_empty(path: &Path) -> std::io::Result<Vec<u8>> {
    match std::fs::read(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        read => read,
    }
}

/// `bytes` as text when they are UTF-8, else as base64.
pub(crate) fn text_or_base64(bytes: Vec<u8>) -> (Option<String>, Option<String>) {
    match String::from_utf8(bytes) {
        Ok(text) => (Some(text), None),
        Err(e) => (
            None,
            Some(base64::engine::general_purpose::STANDARD.encode(e.as_bytes())),
        ),
    }
}

/// The directory of command `seq` in the evidence bundle `evidence`.
pub(crate) fn command_dir(evidence: &Path, seq: u32) -> PathBuf {
    evidence.join(COMMANDS_DIR).join(format!("{seq:04}"))
}

/// The evidence bundle of `run_id`, wherever its run put it.
pub(crate) fn evidence_of(runner: &Runner, run_id: &RunId) -> PathBuf {
    let config = runner.config();
    RunPaths::locate(&config.runtime_dir, &config.evidence_root, run_id).evidence
}

impl CommandJson {
    /// `command` of run `run_id` (evidence bundle `evidence`), with the sizes
    /// of its streams from its record; with `capture`, its output inline.
    /// What cannot be read of the record is left out (`null`), never guessed.
    pub(crate) fn of(
        run_id: &str,
        evidence: &Path,
        command: &CommandOutcome,
        capture: bool,
    ) -> Self {
        let dir = command_dir(evidence, command.seq);
        let record: Option<CommandRecord> = std::fs::read(dir.join(COMMAND_FILE))
            .ok()
            .and_then(|bytes| serde_json::from_slice(&bytes).ok());
        let (stdout_path, stderr_path) = (dir.join(STDOUT_FILE), dir.join(STDERR_FILE));
        let output = capture.then(|| InlineOutput::read(&stdout_path, &stderr_path));
        let (exit_code, signal) = match command.exit.status {
            ExitStatusRecord::Code(code) => (Some(code), None),
            ExitStatusRecord::Signal(signal) => (None, Some(signal)),
            ExitStatusRecord::NotStarted | ExitStatusRecord::Unknown => (None, None),
        };
        Self {
            run_id: run_id.to_owned(),
            seq: command.seq,
            argv: command.argv.clone(),
            exit_status: command.shell_status(),
            exit_code,
            signal,
            killed: command.exit.killed.clone(),
            timed_out: command.exit.killed == Some(KillCause::Timeout),
            started: command.exit.status != ExitStatusRecord::NotStarted,
            not_run: command.not_run,
            cause: command.error.clone().or_else(|| {
                record
                    .as_ref()
                    .and_then(|r| r.cause.clone())
                    .filter(|_| command.exit.killed.is_some())
            }),
            duration_ms: command.duration_ms,
            forks_refused: command.exit.forks_refused,
            usage: command.exit.usage,
            stdout_bytes: record.as_ref().and_then(|r| r.stdout_bytes),
            stderr_bytes: record.as_ref().and_then(|r| r.stderr_bytes),
            stdout_truncated: TruncatedStream::of(command.stdout_bytes, command.stdout_truncated),
            stderr_truncated: TruncatedStream::of(command.stderr_bytes, command.stderr_truncated),
            record: dir.join(COMMAND_FILE),
            stdout_path,
            stderr_path,
            output,
        }
    }
}

/// Where a command's input and output go for `run` and `exec`: passed
/// through (through the status line when there is one), or with `capture`
/// into the evidence only (the answer carries it).
pub(crate) fn command_io(progress: Option<&Progress>, capture: bool) -> CommandIo<'static> {
    if capture {
        CommandIo::captured()
    } else {
        passing_through(progress)
    }
}

/// The end of `exec`'s command: the summary line on stderr, or under `--json`
/// its [`CommandJson`] (on stdout with `--capture`, else as stderr's last
/// line).
pub(crate) fn print_exec_end(
    runner: &Runner,
    run_id: &RunId,
    command: &CommandOutcome,
    capture: bool,
) {
    if !super::json::enabled() {
        super::line_start::eprint_own_line(&format!(
            "agent-workspace: {}",
            super::command_words::command_line(run_id, command)
        ));
        return;
    }
    let evidence = evidence_of(runner, run_id);
    super::json::print(&CommandJson::of(
        run_id.as_str(),
        &evidence,
        command,
        capture,
    ));
}

/// `exec --detach --json`: the background command's name.
#[derive(Debug, Serialize)]
pub(crate) struct DetachedJson {
    /// The run it runs in.
    pub run_id: String,
    /// Its name (`exec-N`), for `logs RUN exec-N`.
    pub name: String,
}

/// Prints the name of a command `exec --detach` started: the name alone, or
/// under `--json` a [`DetachedJson`] on stdout.
pub(crate) fn print_detached(run_id: &RunId, name: &str) {
    if super::json::enabled() {
        super::json::print(&DetachedJson {
            run_id: run_id.to_string(),
            name: name.to_owned(),
        });
    } else {
        println!("{name}");
    }
}
