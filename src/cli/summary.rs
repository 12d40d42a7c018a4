//! The end of `run`: one summary line on stderr, or a JSON summary, and the exit
//! status.

use std::path::PathBuf;

use serde::Serialize;
use std::process::ExitCode;
use workspace_core::boundary::{ChangedPath, KillCause, NotInPatch};
use workspace_core::evidence::HeadTail;
use workspace_core::step::StepFailure;

use workspace_core::journal::JournalError;
use workspace_core::lifecycle::{FailureCause, LifecycleError, StateName};
use workspace_core::runner::{
    CommandOutcome, CredentialLeak, LateOutput, NetworkCounts, RunError, RunErrorKind, RunReport,
};

use super::session::interrupted_status;
use super::text::{escaped, one_line};
use super::{EXIT_BAD_INPUT, EXIT_BUSY, EXIT_RUNNER_FAILED};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// What `--json` prints.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    pub run_id: String,
    /// The command's status as a shell reports it (124 timeout, 128+N signal).
    pub exit_status: Option<i32>,
    pub killed: Option<KillCause>,
    /// Why the command ended as it did when its status alone does not say: it
    /// did not start (not found, not executable), its time ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    pub failure: Option<FailureCause>,
    pub evidence: PathBuf,
    pub evidence_sealed: bool,
    pub changed_paths: usize,
    /// Paths changed after the required checks' patch was taken (not in it).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub changed_after_checks: Vec<String>,
    /// Changes `diff.patch` does not carry, with why (`changes.json`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub not_in_patch: Vec<ChangedPath>,
    /// Why the run's changes could not be exported, when they could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub export_failed: Option<StepFailure>,
    /// Credential values found in the patch (those files withheld).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub credential_leaks: Vec<CredentialLeak>,
    pub patch_sha256: Option<String>,
    /// An allowlisted run's connection attempts, allowed and denied.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkCounts>,
    /// What the run's capped disk held at the end and at most, when it had one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disk: Option<workspace_core::boundary::DiskUsage>,
    /// The commands whose background processes wrote after they ended.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub late_output: Vec<LateOutput>,
    pub duration_ms: u64,
    pub cleaned: bool,
    /// Processes still running at the end, stopped with the workspace.
    #[serde(skip_serializing_if = "is_zero")]
    pub stopped: u32,
    /// What promoting the patch came to (`promotion.json`: where it went),
    /// when the run was promoted or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<workspace_core::runner::PromotionOutcome>,
    /// The command the line is about (not printed in JSON).
    #[serde(skip)]
    pub command: Option<CommandOutcome>,
    /// The command's stdout, when it passed the output cap: how much it
    /// wrote and what the evidence kept of it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<TruncatedStream>,
    /// The command's stderr, when it passed the output cap.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<TruncatedStream>,
}

/// A stream that passed the output cap, in `--json`.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct TruncatedStream {
    /// Every byte the command wrote to it.
    pub total_bytes: u64,
    /// The first bytes kept.
    pub head_bytes: u64,
    /// The last bytes kept.
    pub tail_bytes: u64,
}

impl TruncatedStream {
    fn of(total_bytes: u64, kept: Option<HeadTail>) -> Option<Self> {
        kept.map(|kept| Self {
            total_bytes,
            head_bytes: kept.head_bytes,
            tail_bytes: kept.tail_bytes,
        })
    }
}

impl Summary {
    pub(crate) fn of(report: &RunReport) -> Self {
        let command = report.last_command();
        Self {
            run_id: report.run_id.to_string(),
            exit_status: command.map(|c| c.shell_status()),
            killed: command.and_then(|c| c.exit.killed.clone()),
            cause: command.and_then(|c| c.error.clone()),
            failure: report.outcome.failure.clone(),
            evidence: report.evidence.clone(),
            evidence_sealed: report.evidence_sealed,
            changed_paths: report.outcome.changed_paths,
            changed_after_checks: report.outcome.changed_after_checks.clone(),
            not_in_patch: report.outcome.not_in_patch.clone(),
            export_failed: report.outcome.export_failed.clone(),
            credential_leaks: report.outcome.credential_leaks.clone(),
            patch_sha256: report.outcome.patch_sha256.clone(),
            network: report.outcome.network,
            disk: report.outcome.disk,
            late_output: report.outcome.late_output.clone(),
            duration_ms: report.duration_ms,
            cleaned: report.cleaned,
            stopped: report.outcome.stopped,
            promotion: report.promotion.clone(),
            command: command.cloned(),
            stdout_truncated: command
                .and_then(|c| TruncatedStream::of(c.stdout_bytes, c.stdout_truncated)),
            stderr_truncated: command
                .and_then(|c| TruncatedStream::of(c.stderr_bytes, c.stderr_truncated)),
        }
    }

    /// `agent-workspace: run <id>: exit 0, 1 changed file, 2.3 s; evidence <dir>`.
    pub(crate) fn line(&self) -> String {
        let status = match &self.command {
            Some(command) => status_words(
                command.shell_status(),
                command.exit.killed.as_ref(),
                command,
            ),
            None => "no command ran".to_owned(),
        };
        let files = match self.changed_paths {
            // Nothing was counted: zero would claim the run changed nothing.
            _ if self.export_failed.is_some() => "changes not exported".to_owned(),
            1 => "1 changed file".to_owned(),
            n => format!("{n} changed files"),
        };
        let mut line = format!(
            "agent-workspace: run {}: {status}, {files}, {:.1} s; evidence {}",
            self.run_id,
            self.duration_ms as f64 / 1000.0,
            self.evidence.display()
        );
        if let Some(network) = &self.network {
            let failed = match network.failed {
                0 => String::new(),
                n => format!(" ({n} of them failed)"),
            };
            line.push_str(&format!(
                "; network: {} allowed{failed}, {} denied (network.jsonl)",
                network.allowed, network.denied
            ));
        }
        if let Some(disk) = &self.disk {
            let at_most = disk.peak_bytes.map_or(String::new(), |peak| {
                format!(
                    ", {} at most written out",
                    workspace_core::contract::ByteSize(peak).approx()
                )
            });
            line.push_str(&format!(
                "; disk: {} used at the end{at_most}",
                workspace_core::contract::ByteSize(disk.used_bytes).approx()
            ));
        }
        match self.late_output.as_slice() {
            [] => {}
            [one] => line.push_str(&format!(
                "; output written after command {} ended: commands/{:04}/late.*",
                one.seq, one.seq
            )),
            many => line.push_str(&format!(
                "; output written after {} commands ended: commands/NNNN/late.*",
                many.len()
            )),
        }
        if let Some(failure) = &self.failure
            && !matches!(failure, FailureCause::Cancelled)
        {
            // A service's failure quotes its log: one line, escaped.
            line.push_str(&format!("; run failed: {}", one_line(&failure.to_string())));
        }
        if let Some(failed) = &self.export_failed {
            line.push_str(&format!(
                "; the export failed, its changes are not recorded ({}): {}",
                failed.step,
                escaped(&failed.cause)
            ));
        }
        if !self.not_in_patch.is_empty() {
            // A name holding a credential's value is named with the leaks below.
            let paths: Vec<String> = self
                .not_in_patch
                .iter()
                .filter_map(|c| match &c.not_in_patch {
                    Some(NotInPatch::CredentialInName { .. }) => None,
                    Some(why) => Some(format!("{} ({why})", escaped(&c.path))),
                    None => Some(escaped(&c.path).into_owned()),
                })
                .collect();
            if !paths.is_empty() {
                line.push_str(&format!(
                    "; not in the patch, and not promoted: {} (changes.json)",
                    paths.join(", ")
                ));
            }
        }
        if !self.credential_leaks.is_empty() {
            let paths: Vec<_> = self
                .credential_leaks
                .iter()
                .map(|l| escaped(&l.path))
                .collect();
            line.push_str(&format!(
                "; a credential's value is in {} (withheld from the patch)",
                paths.join(", ")
            ));
        }
        if !self.changed_after_checks.is_empty() {
            let paths: Vec<_> = self
                .changed_after_checks
                .iter()
                .map(|p| escaped(p))
                .collect();
            line.push_str(&format!(
                "; changed after its checks, not in the patch: {}",
                paths.join(", ")
            ));
        }
        if self.stopped > 0 {
            line.push_str(&format!(
                "; {} process(es) still running were stopped with the workspace",
                self.stopped
            ));
        }
        if !self.cleaned {
            line.push_str("; not cleaned up (run `agent-workspace recover`)");
        }
        line
    }
}

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
fn status_words(status: i32, killed: Option<&KillCause>, command: &CommandOutcome) -> String {
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

/// The exit status of `run`: the command's, as a shell reports it (127 when it
/// could not start, 124 after a timeout, 128+N after signal N); 130 when the run
/// was cancelled (Ctrl-C); 125 when the run failed before its command, or when
/// its changes could not be exported (the evidence does not record them, so
/// the command's own status would call the run done).
pub(crate) fn exit_code(report: &RunReport) -> u8 {
    match report.last_command() {
        Some(command) if command.exit.killed == Some(KillCause::Cancelled) => interrupted_status(),
        Some(_) if report.outcome.export_failed.is_some() => EXIT_RUNNER_FAILED,
        Some(command) => {
            u8::try_from(command.shell_status().clamp(0, 255)).unwrap_or(EXIT_RUNNER_FAILED)
        }
        None if matches!(report.outcome.failure, Some(FailureCause::Cancelled)) => {
            interrupted_status()
        }
        None => EXIT_RUNNER_FAILED,
    }
}

/// Prints the end of a run (the summary line, or JSON on stdout) and returns its
/// exit status ([`exit_code`]).
pub(crate) fn report_summary(report: &RunReport, json: bool) -> ExitCode {
    print_summary(report, json);
    ExitCode::from(exit_code(report))
}

/// Prints the end of a run: the summary line on stderr, or JSON on stdout.
pub(crate) fn print_summary(report: &RunReport, json: bool) {
    let summary = Summary::of(report);
    if json {
        match serde_json::to_string(&summary) {
            Ok(line) => println!("{line}"),
            Err(e) => eprintln!("agent-workspace: cannot print the summary: {e}"),
        }
    } else {
        super::line_start::eprint_own_line(&summary.line());
    }
}

/// Prints a run that could not be created or resumed, with its evidence if any,
/// and returns exit status 125.
pub(crate) fn report_run_error(error: &RunError) -> ExitCode {
    let run = &error.run_id;
    match error.kind.as_ref() {
        // Asking an ended run for more is bad input, not a failure of the run.
        RunErrorKind::NotSuspended { state } | RunErrorKind::Ended { state } => {
            let next = if *state == StateName::Cleaned {
                "there is nothing left to do with it"
            } else {
                "`agent-workspace recover` finishes it"
            };
            eprintln!("agent-workspace: run {run} has ended ({state}); {next}");
            return ExitCode::from(EXIT_BAD_INPUT);
        }
        RunErrorKind::Lifecycle(LifecycleError::Open {
            source: JournalError::Held { path },
            ..
        }) => {
            let holder = lock_holder(path)
                .map(|pid| format!("process {pid}"))
                .unwrap_or_else(|| "another process".to_owned());
            eprintln!(
                "agent-workspace: run {run} is in use by {holder}; try again when it is done"
            );
            return ExitCode::from(EXIT_BUSY);
        }
        _ => {}
    }
    let evidence = error
        .evidence
        .as_ref()
        .map(|dir| format!("; evidence: {}", dir.display()))
        .unwrap_or_default();
    // Capacity that did not come in time (`--wait`): try again later, as a
    // busy run says.
    if let RunErrorKind::Failed(FailureCause::Timeout {
        state: StateName::Waiting,
        limit_ms,
    }) = error.kind.as_ref()
    {
        eprintln!(
            "agent-workspace: run {run} gave up waiting for capacity after {} s (--wait); try again later{evidence}",
            limit_ms / 1000
        );
        return ExitCode::from(EXIT_BUSY);
    }
    eprintln!(
        "agent-workspace: {}{evidence}",
        one_line(&workspace_core::error_chain(error))
    );
    ExitCode::from(EXIT_RUNNER_FAILED)
}

/// The process holding the lock of `file`, from `/proc/locks` (a `FLOCK` on its
/// inode); `None` when it cannot be told.
fn lock_holder(file: &std::path::Path) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let inode = std::fs::metadata(file).ok()?.ino();
    let locks = std::fs::read_to_string("/proc/locks").ok()?;
    locks.lines().find_map(|line| {
        // `1: FLOCK  ADVISORY  WRITE 4242 fd:01:123456 0 EOF`
        let fields: Vec<&str> = line.split_whitespace().collect();
        let (pid, id) = (fields.get(4)?, fields.get(5)?);
        (id.rsplit(':').next()? == inode.to_string()).then(|| pid.parse().ok())?
    })
}
