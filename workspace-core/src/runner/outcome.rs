//! What a run reports: to its caller and in `outcome.json`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::credential_leaks::CredentialLeak;
use super::late_output::LateOutput;
use super::output_cap::CapturedOutput;
use crate::RunId;
use crate::boundary::{ExitRecord, KillCause, LeakReport, PromotionRecord};
use crate::evidence::{ExitStatusRecord, HeadTail, ResourceUsage};
use crate::lifecycle::{FailureCause, StateName};
use crate::step::StepFailure;

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// How one command ended.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommandOutcome {
    /// Its number in the evidence (`commands/NNNN`).
    pub seq: u32,
    /// The program and arguments.
    pub argv: Vec<String>,
    /// How it ended, and why it was killed if it was.
    pub exit: ExitRecord,
    /// How long it ran, in milliseconds.
    pub duration_ms: u64,
    /// Why it could not start, if it did not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// The required check it ran for, if it was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    /// Why its program did not run, when the kernel would not run it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_run: Option<crate::boundary::NotRunReason>,
    /// How many bytes it wrote to its standard output.
    #[serde(default)]
    pub stdout_bytes: u64,
    /// Set when its standard output passed the output cap: what was kept of
    /// it (the first `head_bytes`, the last `tail_bytes`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_truncated: Option<HeadTail>,
    /// How many bytes it wrote to its standard error.
    #[serde(default)]
    pub stderr_bytes: u64,
    /// Set when its standard error passed the output cap (see
    /// `stdout_truncated`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_truncated: Option<HeadTail>,
    /// Its output, when the caller asked for it
    /// ([`CommandIo::capturing`](super::CommandIo::capturing)); never in
    /// `outcome.json`, whose record of the output is the evidence's.
    #[serde(skip)]
    pub output: Option<CapturedOutput>,
}

impl CommandOutcome {
    /// The exit status a shell reports for this command: the exit code; 124 after a
    /// timeout (as `timeout(1)`); 128 + N after signal N; 126 when its program is
    /// not executable, 127 when it never started otherwise.
    pub fn shell_status(&self) -> i32 {
        if self.exit.killed == Some(KillCause::Timeout) {
            return 124;
        }
        match self.exit.status {
            ExitStatusRecord::Code(code) => code,
            ExitStatusRecord::Signal(signal) => 128 + signal,
            ExitStatusRecord::NotStarted
                if self.not_run == Some(crate::boundary::NotRunReason::NotExecutable) =>
            {
                126
            }
            ExitStatusRecord::NotStarted => 127,
            ExitStatusRecord::Unknown => 125,
        }
    }

    /// Whether a stream passed the output cap (the evidence keeps its head
    /// and tail).
    pub fn truncated(&self) -> bool {
        self.stdout_truncated.is_some() || self.stderr_truncated.is_some()
    }

    /// Whether it exited with status 0.
    pub fn succeeded(&self) -> bool {
        self.exit.status == ExitStatusRecord::Code(0) && self.exit.killed.is_none()
    }
}

/// How a run ended: `outcome.json` in its evidence.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Outcome {
    /// The run.
    pub run_id: RunId,
    /// The terminal state this outcome belongs to: `exported` for a run whose
    /// work finished normally (the outcome is part of that export), `failed`
    /// otherwise.
    pub ended_in: StateName,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<FailureCause>,
    /// Every command, in order.
    pub commands: Vec<CommandOutcome>,
    /// The commands whose background processes wrote output after they ended
    /// (kept as `commands/NNNN/late.stdout` and `late.stderr`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub late_output: Vec<LateOutput>,
    /// Processes still running when the run ended (what its commands left in
    /// the background; services a runner of another process started), which
    /// ended with it: not a leak, a record of what the workspace ran.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub stopped: u32,
    /// What the process boundary's teardown found still alive (empty when clean),
    /// or `None` when teardown itself failed (see `errors`).
    pub leaks: Option<LeakReport>,
    /// What the whole workspace used, as its boundary counted it just before
    /// teardown (every command, service and what they left running).
    #[serde(default, skip_serializing_if = "ResourceUsage::is_empty")]
    pub usage: ResourceUsage,
    /// What the run's capped disk held at the end and at most, when it had one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::boundary::DiskUsage>,
    /// The digest of `diff.patch`, when a patch was exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub patch_sha256: Option<String>,
    /// How many paths changed.
    pub changed_paths: usize,
    /// Paths that changed after the patch the required checks verified was
    /// taken (by a check, or a process left running): not part of the patch,
    /// and the run is not promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub changed_after_checks: Vec<String>,
    /// The changes `diff.patch` does not carry, as `changes.json` lists them
    /// (a path git refuses, a name that is not UTF-8 or holds a credential's
    /// value, a nested repository): the run is not promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_in_patch: Vec<crate::boundary::ChangedPath>,
    /// Why the run's changes could not be exported, when they could not:
    /// `diff.patch` and `changes.json` are missing (or one of them is), so the
    /// bundle does not record what the run changed. `verify` reports it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub export_failed: Option<StepFailure>,
    /// Credential values found in the patch (those files are withheld from
    /// `diff.patch`, and the run is not promoted).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credential_leaks: Vec<super::credential_leaks::CredentialLeak>,
    /// Host-wide leases the run held (ports, cache prefix, schema name).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub leases: Vec<String>,
    /// How many connection attempts the run's egress proxy allowed and
    /// denied (`network.jsonl`), for an allowlisted run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<NetworkCounts>,
    /// When the run was requested and when its export started (Unix milliseconds).
    pub started_unix_ms: u64,
    /// When the export started (Unix milliseconds).
    pub exported_unix_ms: u64,
    /// The state a run whose runner died was found in, when crash recovery
    /// exported it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub recovered_from: Option<StateName>,
    /// Steps of core's that failed on the way (export problems included).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<StepFailure>,
}

/// What [`Workspace::finish`](super::Workspace::finish) and
/// [`Runner::run`](super::Runner::run) return.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunReport {
    /// The run.
    pub run_id: RunId,
    /// Its sealed evidence bundle.
    pub evidence: PathBuf,
    /// Whether the bundle was sealed (its manifest written).
    pub evidence_sealed: bool,
    /// How it ended (the same as its `outcome.json`).
    pub outcome: Outcome,
    /// What promotion did, when it was asked for (the same as `promotion.json`).
    pub promotion: Option<PromotionOutcome>,
    /// Whether cleanup finished (the run reached `Cleaned`).
    pub cleaned: bool,
    /// Steps of cleanup that failed (after the evidence was sealed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub cleanup_errors: Vec<StepFailure>,
    /// Wall time from request to cleaned, in milliseconds.
    pub duration_ms: u64,
}

impl RunReport {
    /// The last command the caller ran (the required checks that ran after it
    /// are not counted), if any ran.
    pub fn last_command(&self) -> Option<&CommandOutcome> {
        self.outcome
            .commands
            .iter()
            .rev()
            .find(|c| c.check.is_none())
    }
}

/// The attempts of `network.jsonl`, counted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkCounts {
    /// Attempts the policy allowed.
    pub allowed: u32,
    /// Of those, the ones that then failed (the name did not resolve, the
    /// destination did not answer).
    #[serde(default)]
    pub failed: u32,
    /// Attempts it denied.
    pub denied: u32,
}

impl NetworkCounts {
    /// The counts of the attempt log `text` (one JSON record per line; a line
    /// that is not a record is not counted).
    pub fn of(text: &str) -> Self {
        let mut counts = Self::default();
        for line in text.lines() {
            match serde_json::from_str::<crate::egress::NetworkAttempt>(line) {
                Ok(attempt) if attempt.decision.allowed() => {
                    counts.allowed += 1;
                    counts.failed += u32::from(attempt.error.is_some());
                }
                Ok(_) => counts.denied += 1,
                Err(_) => {}
            }
        }
        counts
    }
}

/// What promoting a run's patch came to: `promotion.json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum PromotionOutcome {
    /// The promotion boundary did what the contract's target asks.
    Promoted {
        /// What it did.
        record: PromotionRecord,
    },
    /// It refused, or there was nothing it could promote.
    Refused {
        /// Why, in one line.
        reason: String,
    },
    /// Not offered to the promotion boundary: the patch holds the value of a
    /// credential the run was given (those files are withheld from `diff.patch`).
    CredentialInPatch {
        /// Each credential found, where, and in which form.
        leaks: Vec<CredentialLeak>,
    },
}
