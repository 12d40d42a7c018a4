//! Writing and sealing a run's evidence bundle: the same steps for a run that
//! ends normally, one that fails and one finished by crash recovery.

use std::path::Path;

use crate::boundary::{CheckResult, PromotionBoundary, RunContext, SourceRecord};
use crate::evidence::{EvidenceFile, EvidenceWriter};

use super::outcome::Outcome;

/// A required check's result before the patch digest it is bound to is known.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CheckRun {
    pub name: String,
    pub passed: bool,
}

/// Exports the changes (when there is a checkout), the checks bound to the patch
/// digest, the approvals (none yet), the outcome and a copy of the journal, then
/// seals the bundle. Every step is attempted even when an earlier one failed; the
/// failures are added to `outcome.errors` and returned.
///
/// The run's processes must already be stopped: nothing may change the workspace
/// while its patch is taken.
pub(super) async fn export_bundle(
    promotion: &dyn PromotionBoundary,
    run: &RunContext,
    evidence: &EvidenceWriter,
    source: Option<&SourceRecord>,
    checks: &[CheckRun],
    outcome: &mut Outcome,
    journal: &Path,
) -> Result<(), Vec<String>> {
    let mut errors = Vec::new();
    let fail = |errors: &mut Vec<String>, step: &str, error: &dyn std::error::Error| {
        errors.push(format!("{step}: {}", crate::error_chain(error)));
    };
    if let Some(source) = source {
        match promotion.export(run, source).await {
            Ok(patch) => {
                outcome.patch_sha256 = Some(patch.patch_sha256.clone());
                outcome.changed_paths = patch.changes.len();
                if let Err(e) = evidence.write_bytes(EvidenceFile::Diff, &patch.patch) {
                    fail(&mut errors, "writing diff.patch", &e);
                }
                if let Err(e) = evidence.write_json(EvidenceFile::Changes, &patch.changes) {
                    fail(&mut errors, "writing changes.json", &e);
                }
            }
            Err(e) => fail(&mut errors, "exporting the patch", &e),
        }
    }
    let bound: Vec<CheckResult> = checks
        .iter()
        .map(|check| CheckResult {
            name: check.name.clone(),
            passed: check.passed,
            patch_sha256: outcome.patch_sha256.clone().unwrap_or_default(),
        })
        .collect();
    if let Err(e) = evidence.write_json(EvidenceFile::Checks, &bound) {
        fail(&mut errors, "writing checks.json", &e);
    }
    if !evidence.path_of(EvidenceFile::Approvals).exists()
        && let Err(e) = evidence.write_json(EvidenceFile::Approvals, &Vec::<()>::new())
    {
        fail(&mut errors, "writing approvals.json", &e);
    }
    if let Err(e) = evidence.copy_file(EvidenceFile::Journal, journal) {
        fail(&mut errors, "copying the journal", &e);
    }
    // The outcome lists every failure so far; the last two can only be returned.
    outcome.errors.extend(errors.iter().cloned());
    if let Err(e) = evidence.write_json(EvidenceFile::Outcome, &*outcome) {
        fail(&mut errors, "writing outcome.json", &e);
    }
    if let Err(e) = evidence.seal() {
        fail(&mut errors, "sealing the bundle", &e);
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors)
    }
}
