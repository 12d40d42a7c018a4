//! `WorktreePromotion` through the `PromotionBoundary` trait object.

use std::path::PathBuf;
use std::sync::Arc;

use workspace_core::RunId;
use workspace_core::boundary::{
    ApprovalRecord, OriginRecord, PromotionBoundary, PromotionRequest, RunContext, SourceRecord,
};
use workspace_core::contract::{
    Approval, Contract, Materialization, PromotionTarget, SourceSection, TaskShape,
};

use super::review::{check, contract, edit};
use crate::changes::tests::fixture::{Fixture, git};
use crate::promotion::WorktreePromotion;

fn run_context(fx: &Fixture, target: PromotionTarget) -> RunContext {
    let mut contract_doc = Contract::preset(
        TaskShape::NarrowFix,
        "test",
        SourceSection::new(fx.source.display().to_string(), fx.base.clone()),
    );
    contract_doc.filesystem.outputs = vec!["src".into()];
    contract_doc.source.generated = vec!["target".into()];
    contract_doc.promotion = contract(&["test"], Approval::Human);
    contract_doc.promotion.target = target;
    RunContext {
        run_id: RunId::new("run-boundary").unwrap(),
        contract: Arc::new(contract_doc),
        run_dir: fx.dir.path().join("run"),
        runtime_dir: fx.dir.path().join("runtime"),
    }
}

fn source_record(fx: &Fixture) -> SourceRecord {
    SourceRecord {
        repository: fx.source.display().to_string(),
        remote_urls: Vec::new(),
        commit: fx.base.clone(),
        tree: git(&fx.source, &["rev-parse", "HEAD^{tree}"]),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Standalone,
        workspace: PathBuf::from(&fx.workspace),
        layers: None,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_boundary_exports_and_promotes_a_draft_review() {
    let fx = Fixture::new();
    edit(&fx);
    fx.write("target/out.bin", b"generated");
    let boundary: Arc<dyn PromotionBoundary> = Arc::new(WorktreePromotion::new());
    assert_eq!(
        boundary.capabilities().targets,
        vec![PromotionTarget::Patch, PromotionTarget::DraftReview]
    );
    let run = run_context(&fx, PromotionTarget::DraftReview);
    let source = source_record(&fx);
    let export = boundary.export(&run, &source).await.unwrap();
    assert!(export.changes.iter().all(|c| !c.path.starts_with("target")));
    assert!(export.changes.iter().any(|c| c.in_scope));
    assert!(export.changes.iter().any(|c| !c.in_scope));
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&["target"])
    );

    let digest = export.patch_sha256.clone();
    let mut request = PromotionRequest {
        patch_sha256: digest.clone(),
        checks: vec![],
        approvals: vec![],
    };
    let err = boundary.promote(&run, &source, &request).await.unwrap_err();
    assert!(err.to_string().contains("promotion"), "{err}");

    request.checks = vec![check("test", true, &digest)];
    let record = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(
        record.review_ref.as_deref(),
        Some("refs/heads/review/run-boundary")
    );
    assert!(!record.merge_candidate, "no approval yet");

    request.approvals = vec![ApprovalRecord {
        approver: "reviewer".into(),
        patch_sha256: digest.clone(),
        at_unix_ms: 1,
    }];
    let marked = boundary.promote(&run, &source, &request).await.unwrap();
    assert!(marked.merge_candidate);
    assert_eq!(marked.review_commit, record.review_commit);
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_boundary_patch_target_writes_no_ref() {
    let fx = Fixture::new();
    edit(&fx);
    let boundary = WorktreePromotion::with_source_repo(&fx.source);
    let run = run_context(&fx, PromotionTarget::Patch);
    let source = source_record(&fx);
    let export = boundary.export(&run, &source).await.unwrap();
    let request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![check("test", true, &export.patch_sha256)],
        approvals: vec![],
    };
    let record = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(record.review_ref, None);
    assert_eq!(record.patch_sha256, export.patch_sha256);
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");
}
