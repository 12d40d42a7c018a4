//! One command in a sealed run: spawned, its output streamed to the evidence (and
//! to the caller), waited for or cancelled, recorded.

use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::error::RunErrorKind;
use super::late_output::{self, Streamed};
use super::outcome::CommandOutcome;
use super::scrub::Scrubber;
use crate::boundary::{
    CommandSpec, ExitRecord, KillCause, OutputStream, ProcessBoundary, RunContext,
};
use crate::evidence::{CommandEnd, CommandStart, EvidenceWriter, ExitStatusRecord};

/// How long output may keep flowing after the command's tree has ended (the pipes
/// close when the last process holding them is gone, which the process boundary
/// guarantees; this bounds a misbehaving boundary).
const OUTPUT_DRAIN: Duration = Duration::from_secs(10);

/// A writable sink for a command's output.
pub type OutputSink = Pin<Box<dyn AsyncWrite + Send>>;

/// Where a command's input comes from and where its output goes besides the
/// evidence (which always gets all of it).
#[derive(Default)]
pub struct CommandIo {
    /// Bytes fed to the command's standard input; `None` closes it at once.
    pub stdin: Option<Pin<Box<dyn AsyncRead + Send>>>,
    /// A copy of standard output (e.g. the host's stdout); `None`: evidence only.
    pub stdout: Option<OutputSink>,
    /// A copy of standard error; `None`: evidence only.
    pub stderr: Option<OutputSink>,
}

impl std::fmt::Debug for CommandIo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandIo")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .finish()
    }
}

impl CommandIo {
    /// Output captured to the evidence only, no input.
    pub fn captured() -> Self {
        Self::default()
    }

    /// Output captured and also passed to `stdout` and `stderr`.
    pub fn passing_to(
        stdout: impl AsyncWrite + Send + 'static,
        stderr: impl AsyncWrite + Send + 'static,
    ) -> Self {
        Self {
            stdin: None,
            stdout: Some(Box::pin(stdout)),
            stderr: Some(Box::pin(stderr)),
        }
    }
}

/// Runs `spec` as command `seq`'s recorder says and records how it ended.
///
/// A command without a terminal writes to output files in `run_dir`, when the
/// process boundary keeps [`output_files`](crate::boundary::ProcessCapabilities::output_files),
/// which its streams follow until it ended (what its background processes
/// write later is [`late_output`]'s).
///
/// A command that cannot be spawned is recorded as not started (with the reason)
/// and reported as such, not as an error: the run goes on to export.
pub(super) async fn execute(
    process: &dyn ProcessBoundary,
    run: &RunContext,
    (evidence, run_dir): (&EvidenceWriter, &std::path::Path),
    spec: &CommandSpec,
    io: CommandIo,
    (cancel, grace, scrubber): (&CancellationToken, Option<Duration>, &Scrubber),
) -> Result<CommandOutcome, RunErrorKind> {
    // The command line is a record too: a credential in it is redacted there.
    let argv: Vec<String> = spec.argv.iter().map(|a| scrubber.redact(a)).collect();
    let mut start = CommandStart::now(argv.clone(), &spec.cwd);
    start.env_names = spec.env.keys().cloned().collect();
    let mut recorder = evidence.start_command(start)?;
    let seq = recorder.seq();
    let mut spec = spec.clone();
    spec.number = Some(seq);
    let followed = !spec.tty && spec.output.is_none() && process.capabilities().output_files;
    if followed {
        spec.output = Some(late_output::files(run_dir, seq)?);
    }
    let spec = &spec;
    let started = Instant::now();
    let outcome = |exit: ExitRecord, error: Option<String>| CommandOutcome {
        seq,
        argv: argv.clone(),
        exit,
        duration_ms: millis(started.elapsed()),
        error,
        check: None,
        not_run: None,
    };
    let spawned = tokio::select! {
        spawned = process.spawn(run, spec) => Some(spawned),
        () = cancel.cancelled() => None,
    };
    let mut execution = match spawned {
        Some(Ok(execution)) => execution,
        Some(Err(error)) => {
            let message = crate::error_chain(&error);
            tracing::warn!(run_id = %run.run_id, seq, error = %message, "command did not start");
            let end = CommandEnd {
                cause: Some(format!("did not start: {message}")),
                ..CommandEnd::now(ExitStatusRecord::NotStarted)
            };
            recorder.finish(end)?;
            let exit = ExitRecord::ended(ExitStatusRecord::NotStarted);
            return Ok(CommandOutcome {
                not_run: error.program_not_run().map(|program| program.reason),
                ..outcome(exit, Some(message))
            });
        }
        None => {
            let end = CommandEnd {
                cause: Some("cancelled before it started".into()),
                killed: Some(KillCause::Cancelled),
                ..CommandEnd::now(ExitStatusRecord::NotStarted)
            };
            recorder.finish(end)?;
            let exit = ExitRecord {
                killed: Some(KillCause::Cancelled),
                ..ExitRecord::ended(ExitStatusRecord::NotStarted)
            };
            return Ok(outcome(exit, None));
        }
    };
    tracing::info!(run_id = %run.run_id, seq, ?argv, "command started");

    let to_file = |file: &mut std::fs::File| {
        file.try_clone()
            .map(tokio::fs::File::from_std)
            .map_err(|source| crate::evidence::EvidenceError::Write {
                path: recorder_path(evidence, seq),
                source,
            })
    };
    let stdout_file = to_file(recorder.stdout_writer())?;
    let stderr_file = to_file(recorder.stderr_writer())?;
    let end = if followed {
        TeeEnd::Hold
    } else {
        TeeEnd::Flush
    };
    let stdout_pump = execution
        .take_stdout()
        .map(|stream| tokio::spawn(tee(stream, stdout_file, io.stdout, (scrubber.clone(), end))));
    let stderr_pump = execution
        .take_stderr()
        .map(|stream| tokio::spawn(tee(stream, stderr_file, io.stderr, (scrubber.clone(), end))));
    let feeder = match (execution.take_stdin(), io.stdin) {
        (Some(mut sink), Some(mut source)) => Some(tokio::spawn(async move {
            let _ = tokio::io::copy(&mut source, &mut sink).await;
            let _ = sink.shutdown().await;
        })),
        _ => None, // dropping the command's stdin closes it
    };

    let waited = tokio::select! {
        waited = execution.wait() => waited,
        () = cancel.cancelled() => {
            tracing::info!(run_id = %run.run_id, seq, ?grace, "cancelling the command");
            match grace {
                // Asked to stop first: it ends as it ends, killed after the grace.
                Some(grace) => execution.terminate(grace).await.map(|exit| ExitRecord {
                    killed: Some(KillCause::Cancelled),
                    ..exit
                }),
                None => match execution.kill(KillCause::Cancelled).await {
                    Ok(()) => execution.wait().await,
                    Err(error) => Err(error),
                },
            }
        }
    };
    if let Some(feeder) = feeder {
        feeder.abort();
    }
    let mut output_errors = Vec::new();
    let mut streamed = Streamed::default();
    for (pump, count) in [
        (stdout_pump, &mut streamed.stdout),
        (stderr_pump, &mut streamed.stderr),
    ] {
        let Some(pump) = pump else { continue };
        match tokio::time::timeout(OUTPUT_DRAIN, pump).await {
            Ok(Ok(Ok(bytes))) => *count = bytes,
            Ok(Ok(Err(e))) => output_errors.push(format!("capturing output: {e}")),
            Ok(Err(e)) => output_errors.push(format!("capturing output: {e}")),
            Err(_) => output_errors.push(format!(
                "output still open {} s after the command ended",
                OUTPUT_DRAIN.as_secs()
            )),
        }
    }
    // Only a complete stream says where the late output begins.
    if followed
        && output_errors.is_empty()
        && let Err(e) = late_output::record_streamed(run_dir, seq, streamed)
    {
        output_errors.push(format!(
            "recording how much output was streamed: {}",
            crate::error_chain(&e)
        ));
    }
    let (exit, error) = match waited {
        Ok(exit) => (exit, None),
        Err(error) => (
            ExitRecord::ended(ExitStatusRecord::Unknown),
            Some(crate::error_chain(&error)),
        ),
    };
    let mut causes: Vec<String> = exit.killed.iter().map(describe_kill).collect();
    if exit.forks_refused > 0 {
        causes.push(describe_forks_refused(exit.forks_refused));
    }
    causes.extend(error.iter().cloned());
    causes.extend(output_errors);
    let end = CommandEnd {
        cause: (!causes.is_empty()).then(|| causes.join("; ")),
        usage: exit.usage,
        killed: exit.killed.clone(),
        ..CommandEnd::now(exit.status)
    };
    recorder.finish(end)?;
    tracing::info!(run_id = %run.run_id, seq, status = ?exit.status, killed = ?exit.killed, "command ended");
    Ok(outcome(exit, error))
}

/// What [`tee`] does at the end of a stream with the bytes its scrubber holds
/// back (a strict prefix of a credential's value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TeeEnd {
    /// Writes them: the stream is all there is.
    Flush,
    /// Keeps them out: the output goes on in a file (what background processes
    /// write later), whose rest is scrubbed from where they begin, so a value
    /// cut at the end of the stream is still found whole.
    Hold,
}

/// Copies `stream`, with credential values redacted, to the evidence `file` and,
/// while it accepts writes, to `sink`. A sink that fails (a closed pipe) is
/// dropped; the evidence keeps everything. Returns how many bytes of the stream
/// went to the evidence (all it carried, but what `end` holds back).
async fn tee(
    mut stream: OutputStream,
    mut file: tokio::fs::File,
    mut sink: Option<OutputSink>,
    (mut scrubber, end): (Scrubber, TeeEnd),
) -> std::io::Result<u64> {
    let mut buffer = vec![0u8; 64 * 1024];
    let mut carried = 0u64;
    loop {
        let read = stream.read(&mut buffer).await?;
        carried += read as u64;
        let data = match (read, end) {
            (0, TeeEnd::Flush) => scrubber.finish(),
            (0, TeeEnd::Hold) => {
                carried -= scrubber.finish().len() as u64;
                Vec::new()
            }
            _ => scrubber.feed(&buffer[..read]),
        };
        file.write_all(&data).await?;
        if let Some(out) = sink.as_mut()
            && out.write_all(&data).await.is_err()
        {
            sink = None;
        }
        if read == 0 {
            break;
        }
    }
    if let Some(out) = sink.as_mut() {
        let _ = out.flush().await;
    }
    // Written through, not synced: the bundle is synced when it is sealed.
    file.flush().await?;
    Ok(carried)
}

/// Why a command may have failed though nothing killed it.
pub(super) fn describe_forks_refused(count: u64) -> String {
    format!("the run's pids limit refused {count} new process(es)")
}

pub(super) fn describe_kill(cause: &KillCause) -> String {
    match cause {
        KillCause::Timeout => "killed: wall-time limit reached".into(),
        KillCause::Cancelled => "killed: cancelled".into(),
        KillCause::MemoryLimit => "killed: memory limit".into(),
        KillCause::Teardown => "killed: the run was torn down".into(),
    }
}

fn recorder_path(evidence: &EvidenceWriter, seq: u32) -> std::path::PathBuf {
    evidence
        .dir()
        .join(crate::evidence::COMMANDS_DIR)
        .join(format!("{seq:04}"))
}

pub(super) fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}
