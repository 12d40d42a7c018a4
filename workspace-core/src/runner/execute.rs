//! One command in a sealed run: spawned, its output streamed to the evidence (and
//! to the caller), waited for or cancelled, recorded.

use std::pin::Pin;
use std::time::{Duration, Instant};

use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio_util::sync::CancellationToken;

use super::error::RunErrorKind;
use super::late_output::{self, Streamed};
use super::outcome::CommandOutcome;
use super::output_cap::{CapturedOutput, Pump, Pumped, StreamEnd, pump};
use super::scrub::Scrubber;
use crate::boundary::{CommandSpec, Execution, ExitRecord, KillCause, ProcessBoundary, RunContext};
use crate::contract::OutputOverflow;
use crate::evidence::{
    CommandEnd, CommandStart, EvidenceWriter, ExitStatusRecord, HeadTail, OutputTally,
};

/// How long output may keep flowing after the command's tree has ended (the pipes
/// close when the last process holding them is gone, which the process boundary
/// guarantees; this bounds a misbehaving boundary).
const OUTPUT_DRAIN: Duration = Duration::from_secs(10);

/// A writable sink for a command's output; it may borrow from the caller
/// (`&mut Vec<u8>`, a buffer of its own) for as long as the command runs.
pub type OutputSink<'a> = Pin<Box<dyn AsyncWrite + Send + 'a>>;

/// Where a command's input comes from, where its output goes besides the
/// evidence (which always records it, to the output cap), and whether it is
/// returned in the [`CommandOutcome`].
#[derive(Default)]
pub struct CommandIo<'a> {
    /// Bytes fed to the command's standard input; `None` closes it at once.
    pub stdin: Option<Pin<Box<dyn AsyncRead + Send + 'a>>>,
    /// A copy of standard output (e.g. the host's stdout), every byte of it
    /// however much the evidence keeps; `None`: evidence only.
    pub stdout: Option<OutputSink<'a>>,
    /// A copy of standard error; `None`: evidence only.
    pub stderr: Option<OutputSink<'a>>,
    /// Whether the output comes back in [`CommandOutcome::output`], kept to
    /// the cap as the evidence keeps it.
    pub capture: bool,
    /// The most of each stream kept for this command, in bytes, over the
    /// contract's `environment.limits.output`.
    pub output_limit: Option<u64>,
}

impl std::fmt::Debug for CommandIo<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommandIo")
            .field("stdin", &self.stdin.is_some())
            .field("stdout", &self.stdout.is_some())
            .field("stderr", &self.stderr.is_some())
            .field("capture", &self.capture)
            .field("output_limit", &self.output_limit)
            .finish()
    }
}

impl<'a> CommandIo<'a> {
    /// Output kept in the evidence only (to the cap), no input.
    pub fn captured() -> Self {
        Self::default()
    }

    /// Output kept in the evidence and returned in
    /// [`CommandOutcome::output`] (stdout and stderr apart, byte for byte, to
    /// the cap), no input.
    pub fn capturing() -> Self {
        Self {
            capture: true,
            ..Self::default()
        }
    }

    /// Output kept in the evidence and also passed, all of it, to `stdout`
    /// and `stderr`, which may be borrowed (`&mut Vec<u8>`).
    pub fn passing_to(
        stdout: impl AsyncWrite + Send + 'a,
        stderr: impl AsyncWrite + Send + 'a,
    ) -> Self {
        Self {
            stdout: Some(Box::pin(stdout)),
            stderr: Some(Box::pin(stderr)),
            ..Self::default()
        }
    }

    /// The same, with the most of each stream kept (in the evidence and
    /// returned) set to `bytes` for this command.
    pub fn with_output_limit(mut self, bytes: u64) -> Self {
        self.output_limit = Some(bytes);
        self
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
    io: CommandIo<'_>,
    (cancel, grace, scrubber): (&CancellationToken, Option<Duration>, &Scrubber),
) -> Result<CommandOutcome, RunErrorKind> {
    let limits = &run.contract.environment.limits;
    let cap = HeadTail::of_cap(io.output_limit.unwrap_or_else(|| limits.output_bytes()));
    let overflow = limits.output_overflow.unwrap_or_default();
    // The command line is a record too: a credential in it is redacted there.
    let argv: Vec<String> = spec.argv.iter().map(|a| scrubber.redact(a)).collect();
    let mut start = CommandStart::now(argv.clone(), &spec.cwd);
    start.env_names = spec.env.keys().cloned().collect();
    let mut recorder = evidence.start_command(start)?;
    let seq = recorder.seq();
    let mut spec = spec.clone();
    let followed = !spec.tty && spec.output.is_none() && process.capabilities().output_files;
    if followed {
        spec.output = Some(late_output::files(run_dir, seq, cap)?);
        // A cap of its own is recorded: its files are read as they are kept.
        if io
            .output_limit
            .is_some_and(|own| own != limits.output_bytes())
        {
            late_output::record_bound(run_dir, seq, cap)?;
        }
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
        stdout_bytes: 0,
        stdout_truncated: None,
        stderr_bytes: 0,
        stderr_truncated: None,
        output: None,
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
        StreamEnd::Hold
    } else {
        StreamEnd::Flush
    };
    let CommandIo {
        stdin,
        stdout,
        stderr,
        capture,
        output_limit: _,
    } = io;
    // Cancelled once a stream passed the cap: the command is killed for it
    // when the contract says so.
    let overflowed = CancellationToken::new();
    let how = |sink| Pump {
        scrubber: scrubber.clone(),
        end,
        cap,
        sink,
        capture,
        overflowed: overflowed.clone(),
    };
    let stdout_pump = execution
        .take_stdout()
        .map(|stream| pump(stream, stdout_file, how(stdout)));
    let stderr_pump = execution
        .take_stderr()
        .map(|stream| pump(stream, stderr_file, how(stderr)));
    let command_stdin = execution.take_stdin();
    // The pumps and the feeder run in this future (so that the caller's
    // sinks may be borrowed), beside the wait; `ended` tells them the
    // command ended.
    let ended = CancellationToken::new();
    let feeding = async {
        // Without both ends, dropping the command's stdin closes it.
        let (Some(mut sink), Some(mut source)) = (command_stdin, stdin) else {
            return;
        };
        tokio::select! {
            _ = tokio::io::copy(&mut source, &mut sink) => {
                let _ = sink.shutdown().await;
            }
            () = ended.cancelled() => {}
        }
    };
    let draining = async {
        let pumps = async {
            let optional = |pump: Option<_>| async move {
                match pump {
                    Some(pump) => Some(pump.await),
                    None => None,
                }
            };
            tokio::join!(optional(stdout_pump), optional(stderr_pump))
        };
        tokio::select! {
            pumped = pumps => Some(pumped),
            () = async {
                ended.cancelled().await;
                tokio::time::sleep(OUTPUT_DRAIN).await;
            } => None,
        }
    };
    let waiting = async {
        let waited = wait_for(
            execution.as_mut(),
            run,
            seq,
            (cancel, grace),
            (&overflowed, overflow),
        )
        .await;
        ended.cancel();
        waited
    };
    let (waited, drained, ()) = tokio::join!(waiting, draining, feeding);

    let mut output_errors = Vec::new();
    let (out, err) = drained.unwrap_or_else(|| {
        output_errors.push(format!(
            "output still open {} s after the command ended",
            OUTPUT_DRAIN.as_secs()
        ));
        (None, None)
    });
    let mut finished = |pumped: Option<std::io::Result<Pumped>>| match pumped? {
        Ok(pumped) => Some(pumped),
        Err(e) => {
            output_errors.push(format!("capturing output: {e}"));
            None
        }
    };
    let (out, err) = (finished(out), finished(err));
    let streamed = Streamed {
        stdout: out.as_ref().map_or(0, |p| p.carried),
        stderr: err.as_ref().map_or(0, |p| p.carried),
    };
    let tally = OutputTally {
        stdout: out.as_ref().map(|p| p.tally).unwrap_or_default(),
        stderr: err.as_ref().map(|p| p.tally).unwrap_or_default(),
    };
    let captured = capture.then(|| CapturedOutput {
        stdout: out.and_then(|p| p.captured).unwrap_or_default(),
        stderr: err.and_then(|p| p.captured).unwrap_or_default(),
    });
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
        output: Some(tally),
        ..CommandEnd::now(exit.status)
    };
    recorder.finish(end)?;
    tracing::info!(run_id = %run.run_id, seq, status = ?exit.status, killed = ?exit.killed, "command ended");
    Ok(CommandOutcome {
        stdout_bytes: tally.stdout.total_bytes,
        stdout_truncated: tally.stdout.truncated,
        stderr_bytes: tally.stderr.total_bytes,
        stderr_truncated: tally.stderr.truncated,
        output: captured,
        ..outcome(exit, error)
    })
}

/// Waits for the command to end: killed on a cancel (after `grace`, when
/// given, for its own handler) and, with [`OutputOverflow::Kill`], once its
/// output passed the cap.
async fn wait_for(
    execution: &mut dyn Execution,
    run: &RunContext,
    seq: u32,
    (cancel, grace): (&CancellationToken, Option<Duration>),
    (overflowed, overflow): (&CancellationToken, OutputOverflow),
) -> Result<ExitRecord, crate::boundary::BoundaryError> {
    let kill_on_overflow = overflow == OutputOverflow::Kill;
    tokio::select! {
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
        () = overflowed.cancelled(), if kill_on_overflow => {
            tracing::info!(run_id = %run.run_id, seq, "killing the command: its output passed the cap");
            match execution.kill(KillCause::OutputLimit).await {
                Ok(()) => execution.wait().await.map(|exit| ExitRecord {
                    killed: Some(KillCause::OutputLimit),
                    ..exit
                }),
                Err(error) => Err(error),
            }
        }
    }
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
        KillCause::OutputLimit => "killed: its output passed the output cap".into(),
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
