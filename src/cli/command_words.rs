//! A command's end in words, for the lines `run` and `exec` print:
//! `exit 0`, `timed out after 30.0 s (exit 124)`, `did not start: ...`.

use workspace_core::boundary::KillCause;
use workspace_core::runner::CommandOutcome;

use super::text::one_line;

/// `run R: command N: exit 0, 0.1 s` (with why it was killed or did not start):
/// what `exec` prints on stderr when its command ends.
pub(crate) fn command_line(run: &workspace_core::RunId, command: &CommandOutcome) -> String {
    let status = status_words(
        command.shell_status(),
        command.exit.killed.as_ref(),
        command,
    );
    format!(
        "run {run}: command {}: {status}, {:.1} s",
        command.seq,
        command.duration_ms as f64 / 1000.0
    )
}

/// A command's end in words: `exit 0`, `timed out after 30.0 s (exit 124)`,
/// `did not start: not found: NAME (exit 127)` (126 when it is not executable).
pub(crate) fn status_words(
    status: i32,
    killed: Option<&KillCause>,
    command: &CommandOutcome,
) -> String {
    let words = ended_words(status, killed, command);
    match command.exit.forks_refused {
        0 => words,
        n => format!("{words} (the run's pids limit refused {n} new process(es))"),
    }
}

fn ended_words(status: i32, killed: Option<&KillCause>, command: &CommandOutcome) -> String {
    if let Some(error) = &command.error {
        return format!("did not start: {} (exit {status})", one_line(error));
    }
    let seconds = command.duration_ms as f64 / 1000.0;
    match killed {
        Some(KillCause::Timeout) => format!("timed out after {seconds:.1} s (exit {status})"),
        Some(KillCause::MemoryLimit) => format!("killed at the memory limit (exit {status})"),
        // The status `agent-workspace` exits with (130 or 143); the command's
        // own end in its grace period follows.
        Some(KillCause::Cancelled) => format!(
            "cancelled (exit {}; the command ended with {status})",
            super::session::interrupted_status()
        ),
        Some(KillCause::Teardown) => format!("killed as the run ended (exit {status})"),
        None => format!("exit {status}"),
    }
}
