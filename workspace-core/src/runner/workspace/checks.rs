//! The contract's required checks, each bound to exactly what it verified.
//!
//! The patch is taken first; each check then runs against that state, and the
//! patch is taken again after it. A check that changed what it verified fails,
//! naming the paths whose part of the patch it changed, and its record carries
//! the digest of the state it saw, so a later check (or an approval) is never
//! bound to a state nobody verified. The run's patch is the one taken before the
//! first check: a check's own edits are never part of it.

use super::Workspace;
use crate::boundary::{CheckResult, CommandSpec};
use crate::runner::command_io::CommandIo;
use crate::runner::error::{RunError, RunErrorKind};
use crate::runner::execute::{describe_kill, millis};
use crate::runner::export::Verified;
use crate::runner::outcome::CommandOutcome;
use crate::runner::withhold::changed_between_exports;

impl Workspace {
    /// Runs the contract's required checks in the sealed workspace (see the
    /// module docs). A patch that cannot be taken fails every check, naming why;
    /// a check that cannot run fails the run as any command does.
    pub(super) async fn run_required_checks(&mut self) -> Result<Verified, RunError> {
        let required = self.run.contract.promotion.required_checks.clone();
        let Some(source) = self
            .progress
            .source()
            .cloned()
            .filter(|_| !required.is_empty())
        else {
            return Ok(Verified::default());
        };
        let promotion = self.stack.promotion.clone();
        let mut before = match promotion.export(&self.run, &source).await {
            Ok(patch) => patch,
            Err(e) => {
                let why = format!("the patch could not be taken: {}", crate::error_chain(&e));
                let checks = required
                    .iter()
                    .map(|check| CheckResult::failed(&check.name, "", why.as_str()))
                    .collect();
                return Ok(Verified {
                    checks,
                    patch: None,
                });
            }
        };
        let taken = before.clone();
        let mut checks = Vec::with_capacity(required.len());
        for check in &required {
            if self.cancel.is_cancelled() {
                break;
            }
            let spec = CommandSpec {
                timeout_ms: check.timeout.map(|t| millis(t.as_duration())),
                ..CommandSpec::new(check.command.clone())
            };
            let outcome = self.exec(&spec, CommandIo::captured()).await?;
            self.mark_check(outcome.seq, &check.name);
            // Named in its record too, so that a run read back from its
            // evidence (resumed, destroyed by another process) tells it from
            // the caller's commands.
            if let Err(error) = self.evidence.mark_check(outcome.seq, &check.name) {
                let kind = RunErrorKind::from(error);
                self.fail(kind.failure_cause());
                return Err(self.error(kind));
            }
            let after = promotion.export(&self.run, &source).await;
            let mut result = match exit_failure(&outcome) {
                None => CheckResult::passed(&check.name, &before.patch_sha256),
                Some(failure) => CheckResult::failed(&check.name, &before.patch_sha256, failure),
            };
            result.command_seq = Some(outcome.seq);
            match after {
                Ok(after) => {
                    let changed = changed_between_exports(&before, &after);
                    if !changed.is_empty() {
                        result.passed = false;
                        result.failure = Some(format!(
                            "it changed the workspace it verified: {}",
                            changed.join(", ")
                        ));
                        result.changed_paths = changed;
                    }
                    before = after;
                }
                Err(e) => {
                    result.passed = false;
                    result.failure = Some(format!(
                        "the patch could not be taken after it: {}",
                        crate::error_chain(&e)
                    ));
                }
            }
            // Its words may name a changed path, which may spell a value.
            checks.push(self.scrubber.redact_record(&result));
        }
        Ok(Verified {
            checks,
            patch: Some(taken),
        })
    }
}

/// Why a check's command did not pass, if it did not.
fn exit_failure(outcome: &CommandOutcome) -> Option<String> {
    if let Some(error) = &outcome.error {
        return Some(format!("it did not run: {error}"));
    }
    if let Some(killed) = &outcome.exit.killed {
        return Some(describe_kill(killed));
    }
    (!outcome.succeeded()).then(|| format!("it ended with {}", outcome.exit.status))
}
