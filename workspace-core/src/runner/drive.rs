//! One spawned command driven to its end: its output pumped (to the evidence,
//! kept to the cap, to the caller's sinks, and back when asked), its input fed,
//! beside the wait for it, which kills it on a cancel or, when the contract
//! says so, once its output passed the cap.
//!
//! Everything runs in the caller's future, joined, not on tasks of its own:
//! the caller's sinks and input may then borrow from it (the lifetime of
//! [`CommandIo`]).

use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio_util::sync::CancellationToken;

use super::command_io::CommandIo;
use super::late_output::Streamed;
use super::output_cap::{CapturedOutput, Pump, Pumped, StreamEnd, pump};
use super::scrub::Scrubber;
use crate::boundary::{BoundaryError, Execution, ExitRecord, KillCause, RunContext};
use crate::contract::OutputOverflow;
use crate::evidence::{HeadTail, OutputTally};

/// How long output may keep flowing after the command's tree has ended (the pipes
/// close when the last process holding them is gone, which the process boundary
/// guarantees; this bounds a misbehaving boundary).
const OUTPUT_DRAIN: Duration = Duration::from_secs(10);

/// How a command is driven.
pub(super) struct Driving<'r> {
    /// Redacts credential values from its output.
    pub scrubber: &'r Scrubber,
    /// What happens to the bytes a stream's scrubber holds back at its end.
    pub end: StreamEnd,
    /// What is kept of each stream.
    pub cap: HeadTail,
    /// What happens when a stream passes the cap.
    pub overflow: OutputOverflow,
    /// Cancels the command.
    pub cancel: &'r CancellationToken,
    /// How long a cancelled command gets for its own handler.
    pub grace: Option<Duration>,
}

/// What driving a command came to.
pub(super) struct Driven {
    /// How it ended.
    pub waited: Result<ExitRecord, BoundaryError>,
    /// How much of each raw stream went into the evidence.
    pub streamed: Streamed,
    /// What each stream carried and what was kept.
    pub tally: OutputTally,
    /// The kept output, when it was asked for.
    pub captured: Option<CapturedOutput>,
    /// What went wrong with its output.
    pub output_errors: Vec<String>,
}

/// Drives `execution` (command `seq` of `run`) to its end: its streams pumped
/// into the evidence `files` (stdout, stderr) and `io`'s sinks, `io`'s input
/// fed to it, waited for as `how` says.
pub(super) async fn drive(
    execution: &mut dyn Execution,
    (run, seq): (&RunContext, u32),
    [stdout_file, stderr_file]: [tokio::fs::File; 2],
    io: CommandIo<'_>,
    how: Driving<'_>,
) -> Driven {
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
    let pumping = |sink| Pump {
        scrubber: how.scrubber.clone(),
        end: how.end,
        cap: how.cap,
        sink,
        capture,
        overflowed: overflowed.clone(),
    };
    let stdout_pump = execution
        .take_stdout()
        .map(|stream| pump(stream, stdout_file, pumping(stdout)));
    let stderr_pump = execution
        .take_stderr()
        .map(|stream| pump(stream, stderr_file, pumping(stderr)));
    let command_stdin = execution.take_stdin();
    // `ended` tells the pumps and the feeder that the command ended.
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
        let optional = |pump: Option<_>| async move {
            match pump {
                Some(pump) => Some(pump.await),
                None => None,
            }
        };
        tokio::select! {
            pumped = async { tokio::join!(optional(stdout_pump), optional(stderr_pump)) } => Some(pumped),
            () = async {
                ended.cancelled().await;
                tokio::time::sleep(OUTPUT_DRAIN).await;
            } => None,
        }
    };
    let waiting = async {
        let waited = wait_for(
            execution,
            (run, seq),
            (how.cancel, how.grace),
            (&overflowed, how.overflow),
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
    Driven {
        waited,
        streamed: Streamed {
            stdout: out.as_ref().map_or(0, |p| p.carried),
            stderr: err.as_ref().map_or(0, |p| p.carried),
        },
        tally: OutputTally {
            stdout: out.as_ref().map(|p| p.tally).unwrap_or_default(),
            stderr: err.as_ref().map(|p| p.tally).unwrap_or_default(),
        },
        captured: capture.then(|| CapturedOutput {
            stdout: out.and_then(|p| p.captured).unwrap_or_default(),
            stderr: err.and_then(|p| p.captured).unwrap_or_default(),
        }),
        output_errors,
    }
}

/// Waits for the command to end: killed on a cancel (after `grace`, when
/// given, for its own handler) and, with [`OutputOverflow::Kill`], once its
/// output passed the cap.
async fn wait_for(
    execution: &mut dyn Execution,
    (run, seq): (&RunContext, u32),
    (cancel, grace): (&CancellationToken, Option<Duration>),
    (overflowed, overflow): (&CancellationToken, OutputOverflow),
) -> Result<ExitRecord, BoundaryError> {
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
