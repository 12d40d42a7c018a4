//! `commands/NNNN/`: one recorded command, its output streamed to disk as it comes.

use crate::clock::unix_ms_now;
use std::fs::{self, File};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::EvidenceError;
use super::ResourceUsage;
use super::atomic::{to_pretty_json, write_atomic};
use super::capped::{HeadTail, OutputTally, StreamTally};

/// The name of the record inside a command directory.
pub const COMMAND_FILE: &str = "command.json";
/// The name of the captured standard output inside a command directory.
pub const STDOUT_FILE: &str = "stdout";
/// The name of the captured standard error inside a command directory.
pub const STDERR_FILE: &str = "stderr";
/// The prefix of what a command's background processes wrote after it ended,
/// inside its directory: `late.stdout`, `late.stderr`.
pub const LATE_OUTPUT_PREFIX: &str = "late.";
/// The prefix of everything a command (and what it left running) wrote, for a
/// command whose runner died while it ran, so that its streamed `stdout` and
/// `stderr` may have stopped short: `whole.stdout`, `whole.stderr`.
pub const WHOLE_OUTPUT_PREFIX: &str = "whole.";

/// What is known when a command starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandStart {
    /// The program and its arguments, as passed to the process boundary.
    pub argv: Vec<String>,
    /// The working directory, as the command saw it (inside the workspace).
    pub cwd: String,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// The names of the variables set for this command alone (never their
    /// values, which may be credentials).
    pub env_names: Vec<String>,
}

impl CommandStart {
    /// A start record stamped with the current time.
    pub fn now(argv: Vec<String>, cwd: impl Into<String>) -> Self {
        Self {
            argv,
            cwd: cwd.into(),
            started_unix_ms: unix_ms_now(),
            env_names: Vec::new(),
        }
    }
}

/// What is known when a command ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CommandEnd {
    /// How it ended.
    pub exit: ExitStatusRecord,
    /// When it ended, in milliseconds since the Unix epoch.
    pub finished_unix_ms: u64,
    /// Why it ended abnormally, if known (e.g. "timed out after 600 s", "spawn
    /// failed: No such file or directory").
    pub cause: Option<String>,
    /// What its tree used, as its cgroup counted it.
    pub usage: ResourceUsage,
    /// Why the runner killed it, if it did.
    pub killed: Option<crate::boundary::KillCause>,
    /// What its streams carried and what was kept of each, as the writer of
    /// the output files counted it; `None`: the files hold all of it, and
    /// their sizes are recorded.
    pub output: Option<OutputTally>,
}

impl CommandEnd {
    /// An end record stamped with the current time, no cause and nothing
    /// counted.
    pub fn now(exit: ExitStatusRecord) -> Self {
        Self {
            exit,
            finished_unix_ms: unix_ms_now(),
            cause: None,
            usage: ResourceUsage::default(),
            killed: None,
            output: None,
        }
    }
}

/// How a command ended, as recorded in `command.json`
/// (`{"kind": "code", "value": 0}`, `{"kind": "not_started"}`, ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", content = "value", rename_all = "snake_case")]
pub enum ExitStatusRecord {
    /// It exited with this code.
    Code(i32),
    /// It was killed by this signal (Unix).
    Signal(i32),
    /// It never started (spawn failed, or the run was cancelled first).
    NotStarted,
    /// The end is not known: still running when recorded, or the recorder was
    /// dropped without [`CommandRecorder::finish`].
    Unknown,
}

impl std::fmt::Display for ExitStatusRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exit code {code}"),
            Self::Signal(signal) => write!(f, "signal {signal}"),
            Self::NotStarted => f.write_str("not started"),
            Self::Unknown => f.write_str("an unknown end"),
        }
    }
}

impl From<std::process::ExitStatus> for ExitStatusRecord {
    fn from(status: std::process::ExitStatus) -> Self {
        if let Some(code) = status.code() {
            return Self::Code(code);
        }
        #[cfg(unix)]
        {
            use std::os::unix::process::ExitStatusExt;
            if let Some(signal) = status.signal() {
                return Self::Signal(signal);
            }
        }
        Self::Unknown
    }
}

/// The contents of `commands/NNNN/command.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandRecord {
    /// The command's sequence number (1-based, in start order).
    pub seq: u32,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// The working directory.
    pub cwd: String,
    /// The names of the variables set for this command alone (never their
    /// values).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub env_names: Vec<String>,
    /// When it started, in milliseconds since the Unix epoch.
    pub started_unix_ms: u64,
    /// When it ended, if it was recorded as ended.
    pub finished_unix_ms: Option<u64>,
    /// How it ended ([`ExitStatusRecord::Unknown`] until finished).
    pub exit: ExitStatusRecord,
    /// Why it ended abnormally, if known.
    pub cause: Option<String>,
    /// Why the runner killed it (`timeout`, `cancelled`, ...), if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub killed: Option<crate::boundary::KillCause>,
    /// How many bytes it wrote to its stdout, once finished: the size of
    /// `stdout`, unless `stdout_truncated` says it keeps less.
    pub stdout_bytes: Option<u64>,
    /// Set when stdout passed the output cap (`environment.limits.output`):
    /// `stdout` holds its first `head_bytes` then its last `tail_bytes`, and
    /// the rest of `stdout_bytes` was dropped between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<HeadTail>,
    /// How many bytes it wrote to its stderr, once finished (see
    /// `stdout_bytes`).
    pub stderr_bytes: Option<u64>,
    /// Set when stderr passed the output cap (see `stdout_truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<HeadTail>,
    /// What its tree used, once finished (what its cgroup counted).
    #[serde(default, skip_serializing_if = "ResourceUsage::is_empty")]
    pub usage: ResourceUsage,
    /// The name of the contract's required check this command ran for, when
    /// it ran for one (absent in records of the caller's own commands, and in
    /// records written before checks were named here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
}

/// Records one command into its own directory `commands/NNNN/`.
///
/// `command.json` is written as soon as the recorder exists; `stdout` and `stderr`
/// are files the caller streams into (nothing is buffered in memory).
/// [`finish`](Self::finish) rewrites `command.json` with the end; a recorder
/// dropped without `finish` rewrites it with [`ExitStatusRecord::Unknown`] and a
/// cause saying so, which is still valid evidence.
///
/// While a recorder or one of its [`OutputStream`]s is alive, the bundle cannot be
/// sealed.
#[derive(Debug)]
pub struct CommandRecorder {
    dir: PathBuf,
    record: CommandRecord,
    stdout: File,
    stderr: File,
    finished: bool,
    _open: Arc<()>,
}

impl CommandRecorder {
    /// Creates `commands_dir/NNNN/` (which must not exist), writes the first
    /// `command.json` and creates the output files.
    pub(crate) fn start(
        commands_dir: &Path,
        seq: u32,
        start: CommandStart,
        open: Arc<()>,
    ) -> Result<Self, EvidenceError> {
        let dir = commands_dir.join(format!("{seq:04}"));
        fs::create_dir(&dir).map_err(|source| match source.kind() {
            io::ErrorKind::AlreadyExists => EvidenceError::AlreadyExists { path: dir.clone() },
            _ => EvidenceError::CreateDir {
                path: dir.clone(),
                source,
            },
        })?;
        let record = CommandRecord {
            seq,
            argv: start.argv,
            cwd: start.cwd,
            env_names: start.env_names,
            started_unix_ms: start.started_unix_ms,
            finished_unix_ms: None,
            exit: ExitStatusRecord::Unknown,
            cause: None,
            stdout_bytes: None,
            stdout_truncated: None,
            stderr_bytes: None,
            stderr_truncated: None,
            usage: ResourceUsage::default(),
            killed: None,
            check: None,
        };
        write_record(&dir, &record)?;
        let stdout = create_output(&dir.join(STDOUT_FILE))?;
        let stderr = create_output(&dir.join(STDERR_FILE))?;
        Ok(Self {
            dir,
            record,
            stdout,
            stderr,
            finished: false,
            _open: open,
        })
    }

    /// The command's sequence number (1-based, in start order).
    pub fn seq(&self) -> u32 {
        self.record.seq
    }

    /// The command's directory, `<run>/commands/NNNN/`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The `stdout` file, for writing the command's standard output as it comes.
    pub fn stdout_writer(&mut self) -> &mut File {
        &mut self.stdout
    }

    /// The `stderr` file, for writing the command's standard error as it comes.
    pub fn stderr_writer(&mut self) -> &mut File {
        &mut self.stderr
    }

    /// An owned handle on the `stdout` file that can be moved into another thread
    /// or into `tokio::task::spawn_blocking`. It keeps the bundle unsealable until
    /// it is dropped.
    pub fn stdout_stream(&self) -> Result<OutputStream, EvidenceError> {
        self.stream(&self.stdout, STDOUT_FILE)
    }

    /// An owned handle on the `stderr` file; see [`stdout_stream`](Self::stdout_stream).
    pub fn stderr_stream(&self) -> Result<OutputStream, EvidenceError> {
        self.stream(&self.stderr, STDERR_FILE)
    }

    fn stream(&self, file: &File, name: &str) -> Result<OutputStream, EvidenceError> {
        let path = self.dir.join(name);
        let file = file.try_clone().map_err(|source| EvidenceError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(OutputStream {
            file,
            path,
            _open: Arc::clone(&self._open),
        })
    }

    /// Syncs the output files and rewrites `command.json` with the end of the
    /// command. Returns the final record.
    pub fn finish(mut self, end: CommandEnd) -> Result<CommandRecord, EvidenceError> {
        self.finished = true;
        self.record.exit = end.exit;
        self.record.finished_unix_ms = Some(end.finished_unix_ms);
        self.record.cause = end.cause;
        self.record.usage = end.usage;
        self.record.killed = end.killed;
        self.close_and_write(end.output)?;
        Ok(self.record.clone())
    }

    /// Flushes the output files and rewrites `command.json`, with the
    /// streams' `output` tally when the writer counted one (the files then
    /// keep what the cap let them), else with the files' sizes.
    fn close_and_write(&mut self, output: Option<OutputTally>) -> Result<(), EvidenceError> {
        let stdout = output_size(&self.stdout, &self.dir.join(STDOUT_FILE))?;
        let stderr = output_size(&self.stderr, &self.dir.join(STDERR_FILE))?;
        let output = output.unwrap_or(OutputTally {
            stdout: StreamTally {
                total_bytes: stdout,
                truncated: None,
            },
            stderr: StreamTally {
                total_bytes: stderr,
                truncated: None,
            },
        });
        self.record.stdout_bytes = Some(output.stdout.total_bytes);
        self.record.stdout_truncated = output.stdout.truncated;
        self.record.stderr_bytes = Some(output.stderr.total_bytes);
        self.record.stderr_truncated = output.stderr.truncated;
        write_record(&self.dir, &self.record)
    }
}

impl Drop for CommandRecorder {
    fn drop(&mut self) {
        if self.finished {
            return;
        }
        self.record.exit = ExitStatusRecord::Unknown;
        self.record.cause = Some("the recorder was dropped before the command finished".into());
        if let Err(error) = self.close_and_write(None) {
            tracing::warn!(
                dir = %self.dir.display(),
                error = &error as &dyn std::error::Error,
                "could not record an unfinished command"
            );
        }
    }
}

/// An owned, `Send` handle on a command's `stdout` or `stderr` file.
///
/// Writes go straight to the file (blocking I/O). From tokio code, move the stream
/// into `tokio::task::spawn_blocking` (or a thread) together with a blocking reader,
/// or read the child's pipe asynchronously and write each chunk here. The evidence
/// module deliberately does not implement `AsyncWrite`: disk writes block, and
/// hiding that inside a future would stall the runtime.
#[derive(Debug)]
pub struct OutputStream {
    file: File,
    path: PathBuf,
    _open: Arc<()>,
}

impl OutputStream {
    /// The file this stream writes to.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Write for OutputStream {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file.write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// Names the required check `check` in the finished record of the command in
/// `dir` (`commands/NNNN/`): the command ran for that check, not for the caller.
pub(crate) fn record_check(dir: &Path, check: &str) -> Result<(), EvidenceError> {
    let path = dir.join(COMMAND_FILE);
    let bytes = fs::read(&path).map_err(|source| EvidenceError::Read {
        path: path.clone(),
        source,
    })?;
    let mut record: CommandRecord =
        serde_json::from_slice(&bytes).map_err(|e| EvidenceError::Read {
            path: path.clone(),
            source: io::Error::new(io::ErrorKind::InvalidData, e),
        })?;
    record.check = Some(check.to_owned());
    write_record(dir, &record)
}

fn write_record(dir: &Path, record: &CommandRecord) -> Result<(), EvidenceError> {
    let bytes = to_pretty_json(record, &dir.join(COMMAND_FILE))?;
    write_atomic(dir, COMMAND_FILE, &bytes)
}

fn create_output(path: &Path) -> Result<File, EvidenceError> {
    fs::OpenOptions::new()
        .append(true)
        .create_new(true)
        .open(path)
        .map_err(|source| EvidenceError::Write {
            path: path.to_path_buf(),
            source,
        })
}

/// Flushes an output file (synced with the bundle when it is sealed); returns
/// its size.
fn output_size(mut file: &File, path: &Path) -> Result<u64, EvidenceError> {
    let wrap = |source| EvidenceError::Write {
        path: path.to_path_buf(),
        source,
    };
    file.flush().map_err(wrap)?;
    Ok(file.metadata().map_err(wrap)?.len())
}
