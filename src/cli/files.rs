//! `agent-workspace files RUN ls|cat|write|rm|stat|mkdir|mv PATH`: a created
//! workspace's files, read and written inside its sandbox as its user.
//!
//! Each invocation joins the live run as `exec` does (`Runner::join`: beside
//! running commands and other processes, nothing taken over; a run that
//! cannot be joined as it is, a suspended one, is taken back and detached
//! again), does one operation through the library's
//! [`Files`](workspace_core::runner::Files) and lets go. Every change is in
//! the evidence's `files.jsonl`. Paths are relative to the workspace root or
//! absolute inside the sandbox.

use std::io::Write;
use std::process::ExitCode;

use clap::{Args, Subcommand};
use serde::Serialize;
use workspace_core::RunId;
use workspace_core::boundary::{DEFAULT_READ_LIMIT, FileError, FileInfo, FileKind, WriteOptions};
use workspace_core::runner::{
    CreateOptions, Files, JoinedRun, ReadOptions, RunError, RunErrorKind, Runner, Workspace,
    WriteOutcome,
};

use super::host::HostArgs;
use super::json::{self, ErrorKind, Failure};
use super::session::{TheRun, on_run};
use super::summary::report_run_error;
use super::text::escaped;
use super::{EXIT_BAD_INPUT, EXIT_RUNNER_FAILED};

/// Exit status of a file operation that was refused or failed.
const EXIT_FILE_ERROR: u8 = 1;

#[derive(Debug, Args)]
pub(crate) struct FilesArgs {
    #[command(flatten)]
    run: TheRun,
    /// Answer with one JSON document on stdout (`cat --json` carries the
    /// content inline: `content`, or `content_base64` when not UTF-8).
    #[arg(long, global = true)]
    pub(crate) json: bool,
    #[command(subcommand)]
    op: FilesOp,
}

#[derive(Debug, Subcommand)]
enum FilesOp {
    /// List a directory (a link to one followed; links below it listed, not
    /// followed): kind, mode, size, path.
    Ls {
        /// The directory [default: the workspace root].
        #[arg(default_value = ".")]
        path: String,
        /// How many levels down (1: its own entries).
        #[arg(long, default_value_t = 1, value_name = "N")]
        depth: u32,
    },
    /// Print a file's bytes (a range with --offset and --length).
    Cat {
        /// The file.
        path: String,
        /// Start this many bytes into the file.
        #[arg(long, default_value_t = 0, value_name = "BYTES")]
        offset: u64,
        /// At most this many bytes.
        #[arg(long, value_name = "BYTES")]
        length: Option<u64>,
        /// Refuse a file (or range) larger than this [default: 100 MiB].
        #[arg(long, value_name = "BYTES")]
        limit: Option<u64>,
    },
    /// Write standard input to a file (emptied first, or made).
    Write {
        /// The file.
        path: String,
        /// Make the missing directories above it.
        #[arg(short = 'p', long)]
        parents: bool,
        /// Refuse to replace an existing file.
        #[arg(long)]
        no_overwrite: bool,
        /// Its permission bits, in octal (644); 0644 for a new file otherwise.
        #[arg(long, value_name = "OCTAL", value_parser = octal)]
        mode: Option<u32>,
    },
    /// Remove a file, a link (never its target) or an empty directory.
    Rm {
        /// What to remove.
        path: String,
        /// A directory with everything in it.
        #[arg(short = 'r', long)]
        recursive: bool,
    },
    /// Say what is at a path (a link not followed).
    Stat {
        /// The path.
        path: String,
    },
    /// Make a directory.
    Mkdir {
        /// The directory.
        path: String,
        /// Make the missing ones above it too (one that exists is no error).
        #[arg(short = 'p', long)]
        parents: bool,
    },
    /// Rename an entry (a link itself, not its target).
    Mv {
        /// What to rename.
        from: String,
        /// Its new path.
        to: String,
    },
}

/// A mode in octal.
fn octal(text: &str) -> Result<u32, String> {
    u32::from_str_radix(text.trim_start_matches("0o"), 8)
        .map_err(|_| format!("{text:?}: write the mode in octal (644)"))
}

/// Joins the run, does the operation, lets go; exits 0, 1 when the
/// operation was refused or failed (2 for a path or mode no file can have).
pub(crate) fn run(args: FilesArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        let live = match Live::open(&runner, &run_id).await {
            Ok(live) => live,
            Err(error) => return report_run_error(&error),
        };
        let done = operate(&live.files(), &run_id, args.op).await;
        let left = live.leave().await;
        match (done, left) {
            (Ok(code), Ok(())) => code,
            (Err(error), _) => report_file_error(&run_id, &error),
            (Ok(_), Err(error)) => report_run_error(&error),
        }
    })
}

/// The live run the operation is done in: joined, or taken back by this
/// process alone when it cannot be joined as it is.
enum Live {
    Joined(Box<JoinedRun>),
    TakenBack(Box<Workspace>),
}

impl Live {
    async fn open(runner: &Runner, run_id: &RunId) -> Result<Self, RunError> {
        match runner.join(run_id, CreateOptions::default()).await {
            Ok(joined) => Ok(Self::Joined(Box::new(joined))),
            Err(error) if matches!(*error.kind, RunErrorKind::NotJoinable { .. }) => {
                let workspace = runner.resume(run_id, CreateOptions::default()).await?;
                Ok(Self::TakenBack(Box::new(workspace)))
            }
            Err(error) => Err(error),
        }
    }

    fn files(&self) -> Files<'_> {
        match self {
            Self::Joined(joined) => joined.files(),
            Self::TakenBack(workspace) => workspace.files(),
        }
    }

    async fn leave(self) -> Result<(), RunError> {
        match self {
            Self::Joined(joined) => joined.leave().await,
            Self::TakenBack(workspace) => workspace.detach().await.map(drop),
        }
    }
}

/// `{"run_id", ...}` around an answer.
#[derive(Serialize)]
struct Answer<'a, T: Serialize> {
    run_id: &'a str,
    #[serde(flatten)]
    body: T,
}

/// `ls --json`.
#[derive(Serialize)]
struct Listing<'a> {
    path: &'a str,
    entries: Vec<FileInfo>,
}

/// `cat --json`.
#[derive(Serialize)]
struct Content {
    path: String,
    bytes: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    content_base64: Option<String>,
}

/// `rm --json`, `mkdir --json`, `mv --json`.
#[derive(Serialize)]
struct Changed<'a> {
    op: &'a str,
    path: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    to: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    removed: Option<u64>,
}

/// Prints `body` as the answer under `--json`.
fn answer<T: Serialize>(run_id: &RunId, body: T) -> ExitCode {
    if json::print(&Answer {
        run_id: run_id.as_str(),
        body,
    }) {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(EXIT_RUNNER_FAILED)
    }
}

async fn operate(files: &Files<'_>, run_id: &RunId, op: FilesOp) -> Result<ExitCode, FileError> {
    let as_json = json::enabled();
    Ok(match op {
        FilesOp::Ls { path, depth } => {
            let entries = files.list(&path, depth).await?;
            if as_json {
                return Ok(answer(
                    run_id,
                    Listing {
                        path: &path,
                        entries,
                    },
                ));
            }
            let mut out = std::io::stdout().lock();
            for entry in &entries {
                let _ = writeln!(out, "{}", entry_line(entry));
            }
            ExitCode::SUCCESS
        }
        FilesOp::Cat {
            path,
            offset,
            length,
            limit,
        } => {
            let options = ReadOptions {
                offset,
                length,
                limit: limit.unwrap_or(DEFAULT_READ_LIMIT),
            };
            if as_json {
                let bytes = files.read_with(&path, options).await?;
                let (content, content_base64) = super::command_json::text_or_base64(bytes.clone());
                let path = files.stat(&path).await.map_or(path, |info| info.path);
                return Ok(answer(
                    run_id,
                    Content {
                        path,
                        bytes: bytes.len() as u64,
                        content,
                        content_base64,
                    },
                ));
            }
            // Streamed: a large file never sits in memory.
            let mut stdout = tokio::io::stdout();
            files.read_to(&path, &mut stdout, options).await?;
            ExitCode::SUCCESS
        }
        FilesOp::Write {
            path,
            parents,
            no_overwrite,
            mode,
        } => {
            let options = WriteOptions {
                create_parents: parents,
                overwrite: !no_overwrite,
                mode,
            };
            let mut stdin = tokio::io::stdin();
            let written = files.write_from(&path, &mut stdin, options).await?;
            if as_json {
                return Ok(answer::<&WriteOutcome>(run_id, &written));
            }
            println!(
                "{}: {} bytes, sha256 {}",
                escaped(&written.path),
                written.bytes,
                written.sha256
            );
            ExitCode::SUCCESS
        }
        FilesOp::Rm { path, recursive } => {
            let removed = files.remove(&path, recursive).await?;
            let path = workspace_path(files, &path);
            changed(run_id, "rm", &path, None, Some(removed))
        }
        FilesOp::Stat { path } => {
            let info = files.stat(&path).await?;
            if as_json {
                return Ok(answer(run_id, &info));
            }
            println!("{}", entry_line(&info));
            ExitCode::SUCCESS
        }
        FilesOp::Mkdir { path, parents } => {
            files.mkdir(&path, parents).await?;
            changed(run_id, "mkdir", &workspace_path(files, &path), None, None)
        }
        FilesOp::Mv { from, to } => {
            files.rename(&from, &to).await?;
            let (from, to) = (workspace_path(files, &from), workspace_path(files, &to));
            changed(run_id, "mv", &from, Some(&to), None)
        }
    })
}

/// `path` as the answer names it: absolute inside (as given when it cannot be).
fn workspace_path(files: &Files<'_>, path: &str) -> String {
    files.inside(path).unwrap_or_else(|_| path.to_owned())
}

/// The answer of a change: nothing without `--json`.
fn changed(
    run_id: &RunId,
    op: &str,
    path: &str,
    to: Option<&str>,
    removed: Option<u64>,
) -> ExitCode {
    if !json::enabled() {
        return ExitCode::SUCCESS;
    }
    answer(
        run_id,
        Changed {
            op,
            path,
            to,
            removed,
        },
    )
}

/// One entry as `ls` and `stat` print it: kind, mode, size, path (and a
/// link's target), escaped for the terminal (the workspace chose the names).
fn entry_line(entry: &FileInfo) -> String {
    let kind = match entry.kind {
        FileKind::File => "file",
        FileKind::Directory => "dir",
        FileKind::Symlink => "link",
        FileKind::Fifo => "fifo",
        FileKind::Socket => "socket",
        FileKind::CharDevice => "char",
        FileKind::BlockDevice => "block",
    };
    let mut line = format!(
        "{kind:6} {:04o} {:>12} {}",
        entry.mode,
        entry.size,
        escaped(&entry.path)
    );
    if let Some(target) = &entry.link_target {
        line.push_str(" -> ");
        line.push_str(&escaped(target));
    }
    line
}

/// Prints a refused or failed operation (its kind, its path) and returns 1,
/// or 2 for a path or mode no file can have.
fn report_file_error(run_id: &RunId, error: &FileError) -> ExitCode {
    let exit = if error.is_bad_input() {
        EXIT_BAD_INPUT
    } else {
        EXIT_FILE_ERROR
    };
    let mut failure = Failure::new(
        ErrorKind::File,
        exit,
        format!("run {run_id}: {}", workspace_core::error_chain(error)),
    )
    .run(run_id)
    .file_error(error.kind());
    if let Some(path) = error.path() {
        failure = failure.path(path);
    }
    failure.report()
}
