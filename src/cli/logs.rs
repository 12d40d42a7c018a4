//! `agent-workspace logs RUN [SERVICE]`: what a live workspace's services wrote.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::Args;
use serde::Serialize;

use super::BadInput;
use super::host::HostArgs;
use super::json::{ErrorKind, Failure};
use super::session::{TheRun, bad_input, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    run: TheRun,
    /// One service of `environment.services`; without it, every service, each
    /// line prefixed with `NAME | `.
    service: Option<String>,
    /// Print `{"run_id", "logs": [{"name", "stdout_path", "stderr_path",
    /// "stdout_bytes", "stderr_bytes"}]}` on stdout, naming the log files
    /// instead of printing them.
    #[arg(long)]
    pub(crate) json: bool,
}

/// The answer of `logs --json`.
#[derive(Debug, Serialize)]
struct LogsJson {
    /// The run.
    run_id: String,
    /// Each service (or detached command, `exec-N`) asked for.
    logs: Vec<LogJson>,
}

/// The log files of one service of a live run (the raw files, as written so
/// far; the evidence's copies are redacted when the run ends).
#[derive(Debug, Serialize)]
struct LogJson {
    /// The service's name (`exec-N` for a detached command).
    name: String,
    /// Its standard output.
    stdout_path: PathBuf,
    /// Its standard error.
    stderr_path: PathBuf,
    /// How much it has written to stdout so far (0 before its first write).
    stdout_bytes: u64,
    /// How much it has written to stderr so far.
    stderr_bytes: u64,
}

/// The size of a log file, 0 when it is not there yet.
fn size(path: &Path) -> std::io::Result<u64> {
    match std::fs::metadata(path) {
        Ok(meta) => Ok(meta.len()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(0),
        Err(e) => Err(std::io::Error::new(
            e.kind(),
            format!("cannot read {}: {e}", path.display()),
        )),
    }
}

/// Prints a service's stdout on stdout and its stderr on stderr, as written so
/// far. These are the raw files of the live run: the copies in the evidence are
/// scrubbed of credential values when the run ends. They pass through byte for
/// byte, as a command's output does through `exec`; only the lines the CLI
/// composes itself are escaped (`text::escaped`).
pub(crate) fn run(args: LogsArgs, host: &HostArgs) -> ExitCode {
    on_run(host, &args.run, |runner, run_id| async move {
        // An ended run's logs are in its evidence: asking for them is refused.
        // A record being rewritten just now (an `exec --detach` adding to it)
        // keeps no one from a service named here.
        let known: Vec<String> = match runner.services(&run_id) {
            Ok(records) => records.into_iter().map(|r| r.name).collect(),
            Err(error) if args.service.is_none() || is_ended(&error) => {
                return report_run_error(&error);
            }
            Err(_) => Vec::new(),
        };
        let names = match &args.service {
            Some(name) => vec![name.clone()],
            None => known.clone(),
        };
        let prefix = args.service.is_none();
        let mut answer = LogsJson {
            run_id: run_id.to_string(),
            logs: Vec::new(),
        };
        for name in &names {
            let Some(logs) = runner.service_logs(&run_id, name) else {
                let known = if known.is_empty() {
                    "it has none running (a finished run's logs are in its evidence, services/)"
                        .to_owned()
                } else {
                    format!("its services: {}", known.join(", "))
                };
                return bad_input(
                    BadInput::new(format!("run {run_id} has no service {name:?}; {known}"))
                        .with(|f| f.field("SERVICE").run(&run_id)),
                );
            };
            if args.json {
                let sizes = size(&logs.stdout).and_then(|out| Ok((out, size(&logs.stderr)?)));
                match sizes {
                    Ok((stdout_bytes, stderr_bytes)) => answer.logs.push(LogJson {
                        name: name.clone(),
                        stdout_path: logs.stdout.clone(),
                        stderr_path: logs.stderr.clone(),
                        stdout_bytes,
                        stderr_bytes,
                    }),
                    Err(e) => return unreadable(&run_id, name, &e),
                }
                continue;
            }
            let print = |path: &std::path::Path, out: &mut dyn Write| {
                // A log that cannot be read is an error, never an empty log.
                let bytes = match read_kept(path) {
                    Ok(bytes) => bytes,
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
                    Err(e) => {
                        return Err(std::io::Error::new(
                            e.kind(),
                            format!("cannot read {}: {e}", path.display()),
                        ));
                    }
                };
                if !prefix {
                    return out.write_all(&bytes);
                }
                for line in bytes.split_inclusive(|b| *b == b'\n') {
                    write!(out, "{name} | ")?;
                    out.write_all(line)?;
                }
                Ok(())
            };
            let written = print(&logs.stdout, &mut std::io::stdout().lock())
                .and_then(|()| print(&logs.stderr, &mut std::io::stderr().lock()));
            if let Err(e) = written {
                return unreadable(&run_id, name, &e);
            }
        }
        super::json::print(&answer);
        ExitCode::SUCCESS
    })
}

/// A log that could not be read (or written out): exit 125.
fn unreadable(run_id: &workspace_core::RunId, name: &str, e: &std::io::Error) -> ExitCode {
    Failure::new(
        ErrorKind::Io,
        super::EXIT_RUNNER_FAILED,
        format!("run {run_id}: service {name}: {e}"),
    )
    .run(run_id)
    .report()
}

/// What `path` holds, without the middle its keeper released once the log
/// passed the output cap (a hole: it would read as zeros). A file system
/// that cannot say where its holes are gives the whole file.
fn read_kept(path: &std::path::Path) -> std::io::Result<Vec<u8>> {
    use nix::unistd::{Whence, lseek};
    use std::io::{Read, Seek, SeekFrom};
    use std::os::fd::AsFd;
    let mut file = std::fs::File::open(path)?;
    let size = file.metadata()?.len();
    let mut bytes = Vec::new();
    let mut at = 0u64;
    while at < size {
        let offset = i64::try_from(at).unwrap_or(i64::MAX);
        let data = match lseek(file.as_fd(), offset, Whence::SeekData) {
            Ok(data) => data,
            // No data after `at`: the rest is a hole.
            Err(nix::errno::Errno::ENXIO) => break,
            Err(_) if at == 0 => {
                file.seek(SeekFrom::Start(0))?;
                file.read_to_end(&mut bytes)?;
                return Ok(bytes);
            }
            Err(e) => return Err(e.into()),
        };
        let hole = lseek(file.as_fd(), data, Whence::SeekHole)?;
        let (data, hole) = (data.unsigned_abs(), hole.unsigned_abs());
        file.seek(SeekFrom::Start(data))?;
        (&mut file).take(hole - data).read_to_end(&mut bytes)?;
        at = hole;
    }
    Ok(bytes)
}

/// Whether `error` says the run has ended.
fn is_ended(error: &workspace_core::runner::RunError) -> bool {
    matches!(
        error.kind.as_ref(),
        workspace_core::runner::RunErrorKind::Ended { .. }
    )
}
