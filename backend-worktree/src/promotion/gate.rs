//! The rules a promotion is judged on: required checks and approvals, both bound
//! to the exact patch digest.

use workspace_core::boundary::{ApprovalRecord, CheckResult, PatchExport, PromotionRequest};
use workspace_core::contract::{Approval, PromotionSection};

use super::PromotionError;

/// Requires that every check in `contract.required_checks` passed on `digest`, and
/// that `request` is for `digest`.
///
/// A check counts only with a passing result bound to `digest`; one that ran only on
/// another patch is stale. Missing and failed checks are reported together as
/// [`PromotionError::ChecksNotPassed`] (stale ones listed as missing); when every
/// required check ran but some only on an earlier patch, the first of those is
/// [`PromotionError::StaleCheck`]. The request's own digest is checked last
/// ([`PromotionError::DigestMismatch`]).
pub fn require_checks(
    contract: &PromotionSection,
    request: &PromotionRequest,
    digest: &str,
) -> Result<(), PromotionError> {
    let mut missing = Vec::new();
    let mut failed = Vec::new();
    let mut stale = Vec::new();
    for required in &contract.required_checks {
        let results: Vec<&CheckResult> = request
            .checks
            .iter()
            .filter(|c| c.name == required.name)
            .collect();
        let mut current = results
            .iter()
            .filter(|c| c.patch_sha256 == digest)
            .peekable();
        if current.clone().any(|c| c.passed) {
            continue;
        }
        if current.peek().is_some() {
            failed.push(required.name.clone());
        } else if let Some(earlier) = results.first() {
            stale.push((required.name.clone(), earlier.patch_sha256.clone()));
        } else {
            missing.push(required.name.clone());
        }
    }
    if !missing.is_empty() || !failed.is_empty() {
        missing.extend(stale.into_iter().map(|(name, _)| name));
        return Err(PromotionError::ChecksNotPassed { missing, failed });
    }
    if let Some((name, ran_on)) = stale.into_iter().next() {
        return Err(PromotionError::StaleCheck {
            name,
            ran_on,
            current: digest.to_owned(),
        });
    }
    if request.patch_sha256 != digest {
        return Err(PromotionError::DigestMismatch {
            requested: request.patch_sha256.clone(),
            current: digest.to_owned(),
        });
    }
    Ok(())
}

/// Requires what `contract.merge_approval` asks of a merge candidate for `digest`:
/// nothing for [`Approval::DangerNone`], a recorded approval bound to `digest` for
/// [`Approval::Human`].
pub fn require_approval(
    contract: &PromotionSection,
    approvals: &[ApprovalRecord],
    digest: &str,
) -> Result<(), PromotionError> {
    match contract.merge_approval {
        Approval::DangerNone => Ok(()),
        Approval::Human => require_recorded_approval(approvals, digest),
    }
}

/// Requires that changes outside the declared outputs (`out_of_scope`, the paths at
/// fault) reach a review branch only with a recorded approval bound to `digest`,
/// whatever `merge_approval` says: [`PromotionError::OutOfScope`], whose source is
/// [`PromotionError::ApprovalMissing`] or [`PromotionError::StaleApproval`]. Nothing
/// is required when every change is in scope.
pub fn require_scope_approval(
    approvals: &[ApprovalRecord],
    digest: &str,
    out_of_scope: Vec<String>,
) -> Result<(), PromotionError> {
    if out_of_scope.is_empty() {
        return Ok(());
    }
    require_recorded_approval(approvals, digest).map_err(|reason| PromotionError::OutOfScope {
        paths: out_of_scope,
        digest: digest.to_owned(),
        approval: Box::new(reason),
    })
}

/// A recorded approval (non-empty approver) bound to `digest`.
fn require_recorded_approval(
    approvals: &[ApprovalRecord],
    digest: &str,
) -> Result<(), PromotionError> {
    let recorded: Vec<&ApprovalRecord> = approvals
        .iter()
        .filter(|a| !a.approver.trim().is_empty())
        .collect();
    if recorded.iter().any(|a| a.patch_sha256 == digest) {
        return Ok(());
    }
    match recorded.first() {
        Some(earlier) => Err(PromotionError::StaleApproval {
            approver: earlier.approver.clone(),
            approved: earlier.patch_sha256.clone(),
            current: digest.to_owned(),
        }),
        None => Err(PromotionError::ApprovalMissing {
            digest: digest.to_owned(),
        }),
    }
}

/// Requires that the patch carries every change `export` lists (none is
/// [`not_in_patch`](workspace_core::boundary::ChangedPath::not_in_patch)):
/// [`PromotionError::NotInPatch`] names the others.
pub fn require_complete(export: &PatchExport) -> Result<(), PromotionError> {
    let paths: Vec<String> = export
        .changes
        .iter()
        .filter(|c| c.not_in_patch.is_some())
        .map(|c| c.path.clone())
        .collect();
    if paths.is_empty() {
        Ok(())
    } else {
        Err(PromotionError::NotInPatch { paths })
    }
}
