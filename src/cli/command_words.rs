//! A command's end in words, for the lines `run` and `exec` print:
//! `exit 0`, `timed out after 30.0 s (exit 124)`, `did not start: ...`,
//! `stdout truncated at the output cap (...)`.

use workspace_core::boundary::KillCause;
use workspace_core::evidence::HeadTail;
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
    let mut words = ended_words(status, killed, command);
    if let n @ 1.. = command.exit.forks_refused {
        words.push_str(&format!(
            " (the run's pids limit refused {n} new process(es))"
        ));
    }
    for (name, total, kept) in [
        ("stdout", command.stdout_bytes, command.stdout_truncated),
        ("stderr", command.stderr_bytes, command.stderr_truncated),
    ] {
        if let Some(kept) = kept {
            words.push_str(&format!(", {name} {}", truncated_words(total, kept)));
        }
    }
    words
}

/// `truncated at the output cap (1.0 GiB written; its first 8.0 MiB and
/// last 8.0 MiB kept)`.
fn truncated_words(total: u64, kept: HeadTail) -> String {
    let size = |n| workspace_core::contract::ByteSize(n).approx();
    format!(
        "truncated at the output cap ({} written; its first {} and last {} kept)",
        size(total),
        size(kept.head_bytes),
        size(kept.tail_bytes)
    )
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
        Some(KillCause::OutputLimit) => {
            format!("killed when its output passed the output cap (exit {status})")
        }
        None => format!("exit {status}"),
    }
}
