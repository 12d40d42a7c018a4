//! `WorktreePromotion` through the `PromotionBoundary` trait object.

use std::path::PathBuf;
use std::sync::Arc;

use workspace_core::RunId;
use workspace_core::boundary::{
    ApprovalRecord, LayersRecord, OriginRecord, PromotionBoundary, PromotionRequest, RunContext,
    SourceRecord,
};
use workspace_core::contract::{
    Approval, Contract, Materialization, PromotionTarget, SourceSection, TaskShape,
};

use super::review::{check, contract, edit};
use crate::changes::tests::fixture::{Fixture, git};
use crate::promotion::{PromotionError, WorktreePromotion};

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
        pinned: Vec::new(),
        objects: None,
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
    // Changes outside `filesystem.outputs` need an approval of this patch.
    let err = boundary.promote(&run, &source, &request).await.unwrap_err();
    let cause = err.source.downcast_ref::<PromotionError>();
    assert!(
        matches!(cause, Some(PromotionError::OutOfScope { paths, .. }) if paths.contains(&"run.sh".to_owned())),
        "{err:?}"
    );
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");

    request.approvals = vec![ApprovalRecord {
        approver: "reviewer".into(),
        patch_sha256: digest.clone(),
        at_unix_ms: 1,
        recorded_by: None,
    }];
    let marked = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(
        marked.review_ref.as_deref(),
        Some("refs/heads/review/run-boundary")
    );
    assert!(marked.merge_candidate);
    let again = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(again.review_commit, marked.review_commit);
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_boundary_in_scope_review_without_approval_is_not_a_merge_candidate() {
    let fx = Fixture::new();
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    3\n}\n");
    fx.write("src/new.rs", b"pub fn two() {}\n");
    let boundary = WorktreePromotion::new();
    let run = run_context(&fx, PromotionTarget::DraftReview);
    let source = source_record(&fx);
    let export = boundary.export(&run, &source).await.unwrap();
    assert!(export.changes.iter().all(|c| c.in_scope));
    let request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![check("test", true, &export.patch_sha256)],
        approvals: vec![],
    };
    let record = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(
        record.review_ref.as_deref(),
        Some("refs/heads/review/run-boundary")
    );
    assert!(!record.merge_candidate, "no approval yet");
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_boundary_layered_patch_refusal_names_the_upper_directory() {
    let fx = Fixture::new();
    let upper = fx.dir.path().join("upper");
    let merged = fx.dir.path().join("merged");
    std::fs::create_dir_all(upper.join("src")).unwrap();
    std::fs::write(upper.join("src/new.rs"), b"pub fn two() {}\n").unwrap();
    let run = run_context(&fx, PromotionTarget::Patch);
    let mut source = source_record(&fx);
    source.materialization = Materialization::Layered;
    source.workspace = merged;
    source.layers = Some(LayersRecord {
        lower: fx.workspace.clone(),
        upper: upper.clone(),
        work: fx.dir.path().join("work"),
    });
    let boundary = WorktreePromotion::new();
    let export = boundary.export(&run, &source).await.unwrap();
    assert_eq!(export.changes.len(), 1);
    let request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![],
        approvals: vec![],
    };
    let err = boundary.promote(&run, &source, &request).await.unwrap_err();
    assert_eq!(err.operation, "promote patch");
    assert_eq!(err.path.as_deref(), Some(upper.as_path()), "{err:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn promotion_boundary_patch_target_writes_no_ref() {
    let fx = Fixture::new();
    edit(&fx);
    let boundary = WorktreePromotion::with_source_repo(&fx.source);
    let run = run_context(&fx, PromotionTarget::Patch);
    let source = source_record(&fx);
    let export = boundary.export(&run, &source).await.unwrap();
    let mut request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![check("test", true, &export.patch_sha256)],
        approvals: vec![],
    };
    // A promoted patch needs the approval the contract asks for, of this digest.
    let refused = boundary.promote(&run, &source, &request).await.unwrap_err();
    assert!(refused.to_string().contains("promote patch"), "{refused}");
    let approval = |digest: &str| ApprovalRecord {
        approver: "reviewer".into(),
        patch_sha256: digest.into(),
        at_unix_ms: 1,
        recorded_by: None,
    };
    request.approvals = vec![approval(&"0".repeat(64))];
    assert!(boundary.promote(&run, &source, &request).await.is_err());
    request.approvals = vec![approval(&export.patch_sha256)];
    let record = boundary.promote(&run, &source, &request).await.unwrap();
    assert_eq!(record.review_ref, None);
    assert_eq!(record.patch_sha256, export.patch_sha256);
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");
}
