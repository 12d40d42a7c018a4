//! Writing and sealing a run's evidence bundle: the same steps for a run that
//! ends normally, one that fails and one finished by crash recovery.

use std::path::Path;

use crate::boundary::{
    ApprovalRecord, CheckResult, PatchExport, PromotionBoundary, PromotionRequest, RunContext,
    SourceRecord,
};
use crate::evidence::{EvidenceFile, EvidenceWriter};

use super::outcome::{Outcome, PromotionOutcome};
use super::scrub::Scrubber;
use super::withhold::{changed_between_exports, withhold_leaks};
use crate::step::{RunnerStep, StepError, StepErrors};

/// What the required checks verified.
#[derive(Debug, Default)]
pub(super) struct Verified {
    /// One result per check that ran, in contract order.
    pub checks: Vec<CheckResult>,
    /// The patch taken before the first check: the run's patch.
    pub patch: Option<PatchExport>,
}

/// What a bundle is exported from, besides the boundaries and the outcome.
pub(super) struct ExportInputs<'a> {
    /// The checkout, when one was provisioned (and still exists).
    pub source: Option<&'a SourceRecord>,
    /// The required checks that ran, each bound to the patch it verified.
    pub checks: &'a [CheckResult],
    /// The patch taken before the checks ran, when they did: the run's patch.
    pub verified: Option<&'a PatchExport>,
    /// Approvals to promote with; `None`: no promotion.
    pub promote: Option<&'a [ApprovalRecord]>,
    /// The run's journal, copied into the bundle.
    pub journal: &'a Path,
    /// The run's credentials: none of their values may leave in the patch.
    pub scrubber: &'a Scrubber,
}

/// Exports the changes (when there is a checkout), the checks, the approvals, the
/// promotion (when `promote` carries approvals), the outcome and a copy of the
/// journal, then seals the bundle. Every step is attempted even when an earlier one
/// failed; the failures are added to `outcome.errors` and returned.
///
/// When required checks ran, the patch is the one they verified. The workspace is
/// still compared with it: what changed since (a check's own edits, a background
/// process) is listed in `outcome.changed_after_checks`, is not part of the patch,
/// and the run is not promoted.
///
/// The run's processes must already be stopped: nothing may change the workspace
/// while its patch is taken.
pub(super) async fn export_bundle(
    promotion: &dyn PromotionBoundary,
    run: &RunContext,
    evidence: &EvidenceWriter,
    inputs: ExportInputs<'_>,
    outcome: &mut Outcome,
) -> Result<Option<PromotionOutcome>, StepErrors> {
    let ExportInputs {
        source,
        checks,
        verified,
        promote,
        journal,
        scrubber,
    } = inputs;
    let mut errors = StepErrors::default();
    let writing = |file: EvidenceFile| RunnerStep::WriteEvidence {
        file: file.file_name().to_owned(),
    };
    let mut changed_since = Vec::new();
    if let Some(source) = source {
        // Every failure here leaves the run's changes unrecorded, in part or
        // whole: the outcome says so on its own, not only among the errors.
        let mut failed: Option<StepError> = None;
        match promotion.export(run, source).await {
            Ok(now) => {
                let mut patch = match verified {
                    Some(verified) => {
                        changed_since = changed_between_exports(verified, &now);
                        verified.clone()
                    }
                    None => now,
                };
                // The evidence is shared with reviewers: it must not carry the
                // values either, in contents or in names.
                outcome.credential_leaks = withhold_leaks(&mut patch, scrubber);
                outcome.patch_sha256 = Some(patch.patch_sha256.clone());
                outcome.changed_paths = patch.changes.iter().filter(|c| !c.ignored).count();
                outcome.not_in_patch = patch
                    .changes
                    .iter()
                    .filter(|c| c.not_in_patch.is_some())
                    .cloned()
                    .collect();
                if let Err(e) = evidence.write_bytes(EvidenceFile::Diff, &patch.patch) {
                    failed.get_or_insert(StepError::new(writing(EvidenceFile::Diff), e));
                }
                let changes = scrubber.redact_record(&patch.changes);
                if let Err(e) = evidence.write_json(EvidenceFile::Changes, &changes) {
                    failed.get_or_insert(StepError::new(writing(EvidenceFile::Changes), e));
                }
            }
            Err(e) => {
                failed = Some(StepError::new(RunnerStep::ExportPatch, e));
            }
        }
        if let Some(failed) = failed {
            outcome.export_failed = Some(failed.failure());
            errors.0.push(failed);
        }
    }
    let drift = (!changed_since.is_empty()).then(|| {
        format!(
            "the workspace changed after the patch its checks verified was taken ({}); \
             those changes are not part of the patch",
            changed_since.join(", ")
        )
    });
    outcome.changed_after_checks = changed_since;
    let checks = &scrubber.redact_record(&checks.to_vec());
    if let Err(e) = evidence.write_json(EvidenceFile::Checks, &checks) {
        errors.push(writing(EvidenceFile::Checks), e);
    }
    let approvals = promote.unwrap_or_default();
    if let Err(e) = evidence.write_json(EvidenceFile::Approvals, &approvals) {
        errors.push(writing(EvidenceFile::Approvals), e);
    }
    let promotion = match (promote, source, &outcome.patch_sha256) {
        (None, ..) => None,
        (Some(_), _, _) if outcome.failure.is_some() => Some(PromotionOutcome::Refused {
            reason: "the run failed; a failed run is never promoted".into(),
        }),
        (Some(_), ..) if !outcome.credential_leaks.is_empty() => {
            Some(PromotionOutcome::CredentialInPatch {
                leaks: outcome.credential_leaks.clone(),
            })
        }
        (Some(_), ..) if !outcome.not_in_patch.is_empty() => Some(PromotionOutcome::Refused {
            reason: format!(
                "the patch does not carry every change: {} (changes.json says why)",
                outcome
                    .not_in_patch
                    .iter()
                    .map(|c| c.path.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        }),
        (Some(_), ..) if drift.is_some() => {
            // Name the check that did it, when one did.
            let culprit = checks.iter().find(|c| !c.changed_paths.is_empty());
            let reason = match culprit {
                Some(check) => format!(
                    "required check {:?} failed: {}",
                    check.name,
                    check
                        .failure
                        .as_deref()
                        .unwrap_or("it changed the workspace")
                ),
                None => drift.clone().unwrap_or_default(),
            };
            Some(PromotionOutcome::Refused { reason })
        }
        (Some(approvals), Some(source), Some(digest)) => {
            let request = PromotionRequest {
                patch_sha256: digest.clone(),
                checks: checks.to_vec(),
                approvals: approvals.to_vec(),
            };
            Some(match promotion.promote(run, source, &request).await {
                Ok(record) => PromotionOutcome::Promoted { record },
                Err(e) => PromotionOutcome::Refused {
                    reason: crate::error_chain(&e),
                },
            })
        }
        (Some(_), ..) => Some(PromotionOutcome::Refused {
            reason: "no patch was exported".into(),
        }),
    };
    // A refusal's words may quote a path or an error naming one.
    let promotion = promotion.map(|p| scrubber.redact_record(&p));
    if let Some(promotion) = &promotion
        && let Err(e) = evidence.write_json(EvidenceFile::Promotion, promotion)
    {
        errors.push(writing(EvidenceFile::Promotion), e);
    }
    // The journal's failure causes may name a changed path.
    if let Err(e) = evidence.copy_file_mapped(EvidenceFile::Journal, journal, |bytes| {
        scrubber.redact_bytes(&bytes)
    }) {
        errors.push(RunnerStep::CopyJournal, e);
    }
    // The outcome lists every failure so far; the last two can only be returned.
    outcome.errors.extend(errors.failures());
    // Every field a path or an error reaches, redacted, for the bundle and for
    // the caller (its summary) alike.
    *outcome = scrubber.redact_record(&*outcome);
    if let Err(e) = evidence.write_json(EvidenceFile::Outcome, &*outcome) {
        errors.push(writing(EvidenceFile::Outcome), e);
    }
    if let Err(e) = evidence.seal() {
        errors.push(RunnerStep::SealEvidence, e);
    }
    if errors.is_empty() {
        Ok(promotion)
    } else {
        Err(errors)
    }
}
