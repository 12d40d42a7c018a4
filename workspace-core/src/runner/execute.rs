//! One command in a sealed run: spawned, its output streamed to the evidence (and
//! to the caller), waited for or cancelled, recorded.

use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::command_io::CommandIo;
use super::drive::{Driven, Driving, drive};
use super::error::RunErrorKind;
use super::late_output;
use super::outcome::CommandOutcome;
use super::output_cap::StreamEnd;
use super::scrub::Scrubber;
use crate::boundary::{CommandSpec, ExitRecord, KillCause, ProcessBoundary, RunContext};
use crate::evidence::{CommandEnd, CommandStart, EvidenceWriter, ExitStatusRecord, HeadTail};

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
    spec.number = Some(seq);
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
    let driven = drive(
        execution.as_mut(),
        (run, seq),
        [stdout_file, stderr_file],
        io,
        Driving {
            scrubber,
            end,
            cap,
            overflow,
            cancel,
            grace,
        },
    )
    .await;
    let Driven {
        waited,
        streamed,
        tally,
        captured,
        mut output_errors,
    } = driven;
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
