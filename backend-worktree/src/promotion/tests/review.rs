//! Draft review branches and merge-candidate marks: the rules, the idempotence and
//! that the source repository's HEAD, branch, index and working tree stay as they were.

use std::fs;
use std::path::Path;

use workspace_core::RunId;
use workspace_core::boundary::{
    ApprovalRecord, CheckResult, PatchExport, PromotionRecord, PromotionRequest,
};
use workspace_core::contract::{Approval, PromotionSection, PromotionTarget, RequiredCheck};
use workspace_core::digest::sha256_hex;

use crate::changes::ChangeOptions;
use crate::changes::tests::fixture::{Fixture, binary, git};
use crate::promotion::{PromotionError, create_review_branch, export_patch, mark_merge_candidate};

pub(super) fn contract(checks: &[&str], approval: Approval) -> PromotionSection {
    PromotionSection {
        target: PromotionTarget::DraftReview,
        required_checks: checks
            .iter()
            .map(|name| RequiredCheck {
                name: (*name).into(),
                command: vec!["true".into()],
                timeout: None,
            })
            .collect(),
        merge_approval: approval,
    }
}

pub(super) fn check(name: &str, passed: bool, digest: &str) -> CheckResult {
    if passed {
        CheckResult::passed(name, digest)
    } else {
        CheckResult::failed(name, digest, "exit code 1")
    }
}

fn approval(digest: &str) -> ApprovalRecord {
    ApprovalRecord {
        approver: "reviewer@example.com".into(),
        patch_sha256: digest.into(),
        at_unix_ms: 1,
        recorded_by: None,
    }
}

fn request(digest: &str, checks: Vec<CheckResult>) -> PromotionRequest {
    PromotionRequest {
        patch_sha256: digest.into(),
        checks,
        approvals: Vec::new(),
    }
}

fn run() -> RunId {
    RunId::new("run-1").unwrap()
}

pub(super) fn edit(fx: &Fixture) {
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    1 + 0\n}\n");
    fx.write("src/new.rs", b"pub fn two() {}\n");
    fx.remove("doc/remove-me.txt");
    fx.rename("docs/old-name.md", "docs/renamed.md");
    fx.chmod("run.sh", true);
    fx.write("data.bin", &binary(5, 1000));
    fx.symlink("README.md", "becomes-link.txt");
    fx.symlink("src/lib.rs", "new-link");
    fx.write("café/naïve file.txt", b"changed\n");
}

fn export(fx: &Fixture) -> PatchExport {
    export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap()
}

fn promote(
    fx: &Fixture,
    export: &PatchExport,
    req: &PromotionRequest,
    c: &PromotionSection,
) -> Result<PromotionRecord, PromotionError> {
    create_review_branch(
        &fx.source,
        &run(),
        &fx.base,
        &fx.workspace,
        export,
        &[".".into()],
        req,
        c,
    )
}

/// HEAD, the current branch, the index file and every working-tree file of `repo`,
/// read without running git commands that could refresh the index.
pub(super) fn source_state(repo: &Path) -> String {
    let mut state = vec![
        git(repo, &["rev-parse", "HEAD"]),
        git(repo, &["symbolic-ref", "HEAD"]),
        sha256_hex(&fs::read(repo.join(".git/index")).unwrap()),
    ];
    let mut stack = vec![repo.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let meta = fs::symlink_metadata(&path).unwrap();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            } else if meta.is_dir() {
                stack.push(path);
            } else if meta.is_symlink() {
                state.push(format!(
                    "{} -> {:?}",
                    path.display(),
                    fs::read_link(&path).unwrap()
                ));
            } else {
                state.push(format!(
                    "{} {}",
                    path.display(),
                    sha256_hex(&fs::read(&path).unwrap())
                ));
            }
        }
    }
    state.sort();
    state.join("\n")
}

#[test]
fn promotion_review_refuses_without_passing_checks() {
    let fx = Fixture::new();
    edit(&fx);
    let export = export(&fx);
    let digest = &export.patch_sha256;
    let c = contract(&["test", "lint"], Approval::Human);
    let err = promote(&fx, &export, &request(digest, vec![]), &c).unwrap_err();
    assert!(
        matches!(&err, PromotionError::ChecksNotPassed { missing, failed } if missing == &["test", "lint"] && failed.is_empty()),
        "{err}"
    );
    let checks = vec![check("test", true, digest), check("lint", false, digest)];
    let err = promote(&fx, &export, &request(digest, checks), &c).unwrap_err();
    assert!(
        matches!(&err, PromotionError::ChecksNotPassed { missing, failed } if missing.is_empty() && failed == &["lint"]),
        "{err}"
    );
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");
}

#[test]
fn promotion_review_refuses_a_stale_check() {
    let fx = Fixture::new();
    edit(&fx);
    let first = export(&fx);
    let checks = vec![check("test", true, &first.patch_sha256)];
    fx.write(
        "src/new.rs",
        b"pub fn two() { /* changed after the checks */ }\n",
    );
    let second = export(&fx);
    assert_ne!(first.patch_sha256, second.patch_sha256);
    let c = contract(&["test"], Approval::Human);
    let err = promote(&fx, &second, &request(&second.patch_sha256, checks), &c).unwrap_err();
    assert!(
        matches!(&err, PromotionError::StaleCheck { name, ran_on, current }
            if name == "test" && ran_on == &first.patch_sha256 && current == &second.patch_sha256),
        "{err}"
    );
}

#[test]
fn promotion_review_refuses_a_request_for_another_patch() {
    let fx = Fixture::new();
    edit(&fx);
    let export = export(&fx);
    let checks = vec![check("test", true, &export.patch_sha256)];
    let c = contract(&["test"], Approval::Human);
    let err = promote(&fx, &export, &request("0".repeat(64).as_str(), checks), &c).unwrap_err();
    assert!(
        matches!(err, PromotionError::DigestMismatch { .. }),
        "{err}"
    );
}

#[test]
fn promotion_review_refuses_a_workspace_changed_after_export() {
    let fx = Fixture::new();
    edit(&fx);
    let export = export(&fx);
    let digest = export.patch_sha256.clone();
    let c = contract(&["test"], Approval::Human);
    let req = request(&digest, vec![check("test", true, &digest)]);
    fx.write(
        "src/new.rs",
        b"pub fn two() { /* sneaked in after the checks */ }\n",
    );
    let err = promote(&fx, &export, &req, &c).unwrap_err();
    assert!(
        matches!(err, PromotionError::DigestMismatch { .. }),
        "{err}"
    );
    fx.remove("src/new.rs");
    let err = promote(&fx, &export, &req, &c).unwrap_err();
    assert!(
        matches!(err, PromotionError::ExportOutdated { .. }),
        "{err}"
    );
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");
}

#[test]
fn promotion_review_branch_is_written_idempotently_and_leaves_the_source_alone() {
    let fx = Fixture::new();
    edit(&fx);
    let before = source_state(&fx.source);
    let export = export(&fx);
    let digest = export.patch_sha256.clone();
    let c = contract(&["test"], Approval::Human);
    let req = request(
        &digest,
        vec![check("test", false, "old"), check("test", true, &digest)],
    );

    let record = promote(&fx, &export, &req, &c).unwrap();
    assert_eq!(
        record.review_ref.as_deref(),
        Some("refs/heads/review/run-1")
    );
    assert!(!record.merge_candidate);
    let commit = record.review_commit.clone().unwrap();
    assert_eq!(
        git(&fx.source, &["rev-parse", "refs/heads/review/run-1"]),
        commit
    );
    assert_eq!(
        git(&fx.source, &["rev-parse", &format!("{commit}^{{tree}}")]),
        fx.workspace_tree(&[])
    );
    assert_eq!(
        git(&fx.source, &["rev-parse", &format!("{commit}^")]),
        fx.base
    );
    assert_eq!(
        git(
            &fx.source,
            &["log", "-1", "--format=%an <%ae>|%cn <%ce>", &commit]
        ),
        "agent-workspace <agent-workspace@localhost>|agent-workspace <agent-workspace@localhost>"
    );
    let message = git(&fx.source, &["log", "-1", "--format=%B", &commit]);
    assert!(
        message.contains("run-1") && message.contains(&digest),
        "{message}"
    );

    let again = promote(&fx, &export, &req, &c).unwrap();
    assert_eq!(again, record);
    assert_eq!(source_state(&fx.source), before);
    assert_eq!(git(&fx.source, &["fsck", "--no-progress"]), "");
}

#[test]
fn promotion_review_refuses_a_ref_pointing_elsewhere() {
    let fx = Fixture::new();
    edit(&fx);
    git(
        &fx.source,
        &["update-ref", "refs/heads/review/run-1", &fx.base],
    );
    let export = export(&fx);
    let c = contract(&[], Approval::Human);
    let err = promote(&fx, &export, &request(&export.patch_sha256, vec![]), &c).unwrap_err();
    assert!(
        matches!(&err, PromotionError::RefExists { existing, .. } if existing == &fx.base),
        "{err}"
    );
    assert_eq!(
        git(&fx.source, &["rev-parse", "refs/heads/review/run-1"]),
        fx.base
    );
}

#[test]
fn promotion_review_refuses_the_current_unborn_branch() {
    let fx = Fixture::new();
    edit(&fx);
    git(
        &fx.source,
        &["symbolic-ref", "HEAD", "refs/heads/review/run-1"],
    );
    let export = export(&fx);
    let c = contract(&[], Approval::Human);
    let err = promote(&fx, &export, &request(&export.patch_sha256, vec![]), &c).unwrap_err();
    assert!(
        matches!(err, PromotionError::RefIsCurrentBranch { .. }),
        "{err}"
    );
}

#[test]
fn promotion_merge_mark_requires_an_approval_of_this_patch() {
    let fx = Fixture::new();
    edit(&fx);
    let export = export(&fx);
    let digest = export.patch_sha256.clone();
    let c = contract(&["test"], Approval::Human);
    let mut req = request(&digest, vec![check("test", true, &digest)]);
    let record = promote(&fx, &export, &req, &c).unwrap();
    let mark = |req: &PromotionRequest| mark_merge_candidate(&fx.source, &run(), &record, req, &c);

    let err = mark(&req).unwrap_err();
    assert!(
        matches!(err, PromotionError::ApprovalMissing { .. }),
        "{err}"
    );
    req.approvals = vec![approval(&"1".repeat(64))];
    let err = mark(&req).unwrap_err();
    assert!(
        matches!(&err, PromotionError::StaleApproval { approved, current, .. }
            if approved == &"1".repeat(64) && current == &digest),
        "{err}"
    );
    assert_eq!(
        git(
            &fx.source,
            &["for-each-ref", "refs/review-merge-candidates"]
        ),
        ""
    );
    let no_checks = PromotionRequest {
        checks: vec![],
        approvals: vec![approval(&digest)],
        ..req.clone()
    };
    let err = mark(&no_checks).unwrap_err();
    assert!(
        matches!(err, PromotionError::ChecksNotPassed { .. }),
        "{err}"
    );

    req.approvals.push(approval(&digest));
    let marked = mark(&req).unwrap();
    assert!(marked.merge_candidate);
    let commit = record.review_commit.clone().unwrap();
    assert_eq!(
        git(
            &fx.source,
            &["rev-parse", "refs/review-merge-candidates/run-1"]
        ),
        commit
    );
    assert_eq!(mark(&req).unwrap(), marked, "marking twice is idempotent");
}

#[test]
fn promotion_merge_mark_with_danger_none_needs_only_checks() {
    let fx = Fixture::new();
    edit(&fx);
    let export = export(&fx);
    let digest = export.patch_sha256.clone();
    let c = contract(&["test"], Approval::DangerNone);
    let req = request(&digest, vec![check("test", true, &digest)]);
    let record = promote(&fx, &export, &req, &c).unwrap();
    let marked = mark_merge_candidate(&fx.source, &run(), &record, &req, &c).unwrap();
    assert!(marked.merge_candidate);
    let stale = request(&digest, vec![check("test", true, &"2".repeat(64))]);
    let err = mark_merge_candidate(&fx.source, &run(), &record, &stale, &c).unwrap_err();
    assert!(matches!(err, PromotionError::StaleCheck { .. }), "{err}");
}

#[test]
fn promotion_review_tree_handles_directory_and_file_swaps() {
    let fx = Fixture::new();
    fs::remove_dir_all(fx.ws("doc")).unwrap();
    fx.write("doc", b"a file where a directory was\n");
    fx.remove("notes.txt");
    fx.write("notes.txt/inside.txt", b"a directory where a file was\n");
    let export = export(&fx);
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&[])
    );
    let c = contract(&[], Approval::DangerNone);
    let record = promote(&fx, &export, &request(&export.patch_sha256, vec![]), &c).unwrap();
    let commit = record.review_commit.unwrap();
    assert_eq!(
        git(&fx.source, &["rev-parse", &format!("{commit}^{{tree}}")]),
        fx.workspace_tree(&[])
    );
}
