//! `agent-workspace logs RUN [SERVICE]`: what a live workspace's services wrote.

use std::io::Write;
use std::process::ExitCode;

use clap::Args;

use super::host::HostArgs;
use super::session::{TheRun, on_run};
use super::summary::report_run_error;

#[derive(Debug, Args)]
pub(crate) struct LogsArgs {
    #[command(flatten)]
    run: TheRun,
    /// One service of `environment.services`; without it, every service, each
    /// line prefixed with `NAME | `.
    service: Option<String>,
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
        for name in &names {
            let Some(logs) = runner.service_logs(&run_id, name) else {
                let known = if known.is_empty() {
                    "it has none running (a finished run's logs are in its evidence, services/)"
                        .to_owned()
                } else {
                    format!("its services: {}", known.join(", "))
                };
                eprintln!("agent-workspace: run {run_id} has no service {name:?}; {known}");
                return ExitCode::from(super::EXIT_BAD_INPUT);
            };
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
                eprintln!("agent-workspace: run {run_id}: service {name}: {e}");
                return ExitCode::from(super::EXIT_RUNNER_FAILED);
            }
        }
        ExitCode::SUCCESS
    })
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
