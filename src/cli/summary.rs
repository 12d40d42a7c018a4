//! The end of `run`: one summary line on stderr, or a JSON summary, and the exit
//! status.

use std::path::PathBuf;

use serde::Serialize;
use std::process::ExitCode;
use workspace_core::boundary::{ChangedPath, KillCause, NotInPatch};
use workspace_core::step::StepFailure;

use workspace_core::journal::JournalError;
use workspace_core::lifecycle::{FailureCause, LifecycleError, StateName};
use workspace_core::runner::{
    CommandOutcome, CredentialLeak, LateOutput, NetworkCounts, RunError, RunErrorKind, RunReport,
};

use super::check_report::{CheckJson, failed_check_lines, recorded_checks};
use super::command_json::CommandJson;
use super::command_words::status_words;
use super::json::{ErrorKind, Failure};
use super::session::interrupted_status;
use super::text::{escaped, one_line};
use super::{EXIT_BAD_INPUT, EXIT_BUSY, EXIT_RUNNER_FAILED};

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// The answer of `run --json`, `destroy --json` and `promote --json`: how a
/// run ended.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    /// The run.
    pub run_id: String,
    /// The command's status as a shell reports it (124 timeout, 128+N signal).
    pub exit_status: Option<i32>,
    /// Why the runner killed the command, when it did (`timeout`,
    /// `memory-limit`, `cancelled`, `teardown`).
    pub killed: Option<KillCause>,
    /// Why the command ended as it did when its status alone does not say: it
    /// did not start (not found, not executable), its time ran out.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cause: Option<String>,
    /// Why the run failed, when it did (not the command in it).
    pub failure: Option<FailureCause>,
    /// The run's evidence bundle.
    pub evidence: PathBuf,
    /// Whether the bundle was sealed (its manifest written).
    pub evidence_sealed: bool,
    /// How many paths the run changed.
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
    /// The digest of `diff.patch`, when a patch was exported.
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
    /// Wall time from request to cleaned up, in milliseconds.
    pub duration_ms: u64,
    /// Whether the run was cleaned up.
    pub cleaned: bool,
    /// Processes still running at the end, stopped with the workspace.
    #[serde(skip_serializing_if = "is_zero")]
    pub stopped: u32,
    /// What promoting the patch came to (`promotion.json`: where it went),
    /// when the run was promoted or refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub promotion: Option<workspace_core::runner::PromotionOutcome>,
    /// How the run's last command (the caller's, not a required check's)
    /// ended; with `run --capture` its output inline.
    #[serde(rename = "command", skip_serializing_if = "Option::is_none")]
    pub command_json: Option<CommandJson>,
    /// The contract's required checks, as `checks.json` records them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckJson>,
    /// The command the line is about (not printed in JSON).
    #[serde(skip)]
    pub command: Option<CommandOutcome>,
}

impl Summary {
    /// The summary of `report`, reading the sizes of its last command's
    /// streams (and, with `capture`, their bytes) and its checks from its
    /// evidence.
    pub(crate) fn of(report: &RunReport, capture: bool) -> Self {
        let command = report.last_command();
        let run_id = report.run_id.to_string();
        let checks = recorded_checks(&report.evidence)
            .iter()
            .map(|check| CheckJson::of(check, &report.evidence))
            .collect();
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
            command_json: command.map(|c| CommandJson::of(&run_id, &report.evidence, c, capture)),
            checks,
            command: command.cloned(),
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

/// Prints the end of a run (the summary line, or its JSON answer) and returns
/// its exit status ([`exit_code`]).
pub(crate) fn report_summary(report: &RunReport, capture: bool) -> ExitCode {
    print_summary(report, capture);
    ExitCode::from(exit_code(report))
}

/// Prints the end of a run: each required check that failed (the end of its
/// output and its record) and the summary line on stderr, or under `--json`
/// the [`Summary`] as the answer (with `capture` its last command's output
/// inline).
pub(crate) fn print_summary(report: &RunReport, capture: bool) {
    let summary = Summary::of(report, capture);
    if super::json::enabled() {
        super::json::print(&summary);
        return;
    }
    for check in summary.checks.iter().filter(|c| !c.result.passed) {
        let mut lines = failed_check_lines(&check.result, &report.evidence).into_iter();
        if let Some(first) = lines.next() {
            super::line_start::eprint_own_line(&format!("agent-workspace: required check {first}"));
        }
        for line in lines {
            super::line_start::eprint_own_line(&line);
        }
    }
    super::line_start::eprint_own_line(&summary.line());
}

/// Prints a run that could not be created or resumed, with its evidence if any
/// (under `--json` the error answer), and returns its exit status: 2 for a run
/// that has ended, 75 for one in use or capacity that did not come in time,
/// 125 otherwise.
pub(crate) fn report_run_error(error: &RunError) -> ExitCode {
    run_error_failure(error).report()
}

/// The failure [`report_run_error`] prints.
pub(crate) fn run_error_failure(error: &RunError) -> Failure {
    let run = &error.run_id;
    let with_run = |failure: Failure| failure.run(run).evidence(error.evidence.clone());
    match error.kind.as_ref() {
        // Asking an ended run for more is bad input, not a failure of the run.
        RunErrorKind::NotSuspended { state } | RunErrorKind::Ended { state } => {
            let next = if *state == StateName::Cleaned {
                "there is nothing left to do with it"
            } else {
                "`agent-workspace recover` finishes it"
            };
            return with_run(Failure::new(
                ErrorKind::RunEnded,
                EXIT_BAD_INPUT,
                format!("run {run} has ended ({state}); {next}"),
            ));
        }
        RunErrorKind::Lifecycle(LifecycleError::Open {
            source: JournalError::Held { path },
            ..
        }) => {
            let holder = lock_holder(path)
                .map(|pid| format!("process {pid}"))
                .unwrap_or_else(|| "another process".to_owned());
            return with_run(Failure::new(
                ErrorKind::RunBusy,
                EXIT_BUSY,
                format!("run {run} is in use by {holder}; try again when it is done"),
            ));
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
    if let RunErrorKind::Failed(
        cause @ FailureCause::Timeout {
            state: StateName::Waiting,
            limit_ms,
        },
    ) = error.kind.as_ref()
    {
        return with_run(Failure::new(
            ErrorKind::CapacityTimeout,
            EXIT_BUSY,
            format!(
                "run {run} gave up waiting for capacity after {} s (--wait); try again later{evidence}",
                limit_ms / 1000
            ),
        ))
        .failure(Some(cause.clone()));
    }
    let failure = Some(error.kind.failure_cause());
    with_run(Failure::new(
        ErrorKind::RunFailed,
        EXIT_RUNNER_FAILED,
        format!(
            "{}{evidence}",
            one_line(&workspace_core::error_chain(error))
        ),
    ))
    .failure(failure)
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
