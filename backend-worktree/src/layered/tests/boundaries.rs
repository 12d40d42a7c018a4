//! A layered run through the Source and Promotion traits: provision, the agent's
//! changes in the overlay, export, a draft review, re-verification and release.

use std::sync::Arc;

use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{
    CheckResult, PromotionBoundary, PromotionRequest, RunContext, SourceBoundary,
};
use workspace_core::contract::{
    Contract, Materialization, PromotionTarget, RequiredCheck, SourceSection, TaskShape,
    UntrackedInput,
};

use super::equivalence::{git_output, source_repo};
use super::upper::in_overlay;
use crate::layered::cache::TreeCache;
use crate::promotion::WorktreePromotion;
use crate::source::WorktreeSource;

#[tokio::test(flavor = "multi_thread")]
async fn a_layered_run_is_provisioned_exported_promoted_and_released() {
    let dir = TempDir::new().unwrap();
    let repo = source_repo(dir.path());
    std::fs::write(repo.join(".env.example"), "KEY=value\n").unwrap();
    let cache = TreeCache::open(dir.path().join("cache"), u64::MAX).unwrap();
    let source: Arc<dyn SourceBoundary> =
        Arc::new(WorktreeSource::with_layered_cache(cache.clone()));
    assert!(
        source
            .capabilities()
            .materializations
            .contains(&Materialization::Layered)
    );

    let mut contract = Contract::preset(
        TaskShape::ParallelChanges,
        "layered run",
        SourceSection::new(repo.display().to_string(), "main"),
    );
    contract.source.inputs = vec![UntrackedInput {
        from: "README.md".into(),
        to: ".env".into(),
        from_host: false,
    }];
    contract.promotion.target = PromotionTarget::DraftReview;
    contract.promotion.required_checks = vec![RequiredCheck {
        name: "test".into(),
        command: vec!["true".into()],
        timeout: None,
    }];
    let run = RunContext {
        run_id: RunId::new("run-layered").unwrap(),
        contract: Arc::new(contract),
        run_dir: dir.path().join("runs/run-layered"),
        runtime_dir: dir.path().join("runtime"),
    };

    let record = source.provision(&run).await.unwrap();
    assert_eq!(record.materialization, Materialization::Layered);
    let layers = record.layers.clone().unwrap();
    assert_eq!(record.workspace, run.run_dir.join("merged"));
    assert_eq!(record.inputs[0].to, ".env");
    assert!(
        layers.upper.join(".env").is_file(),
        "inputs land in the upper directory"
    );
    assert!(
        cache.entries().unwrap()[0].in_use,
        "the base tree is held by the run"
    );

    in_overlay(
        &layers.lower,
        &layers.upper,
        &layers.work,
        &record.workspace,
        "echo fixed >> src/lib.rs; rm docs/guide.md; echo new > src/new.rs",
    );
    source.verify(&run, &record).await.unwrap();

    let promotion: Arc<dyn PromotionBoundary> = Arc::new(WorktreePromotion::new());
    let export = promotion.export(&run, &record).await.unwrap();
    let paths: Vec<&str> = export.changes.iter().map(|c| c.path.as_str()).collect();
    // The copied input is what the run was given: not part of its result.
    assert_eq!(paths, ["docs/guide.md", "src/lib.rs", "src/new.rs"]);

    let request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![CheckResult::passed("test", export.patch_sha256.clone())],
        approvals: Vec::new(),
    };
    let promoted = promotion.promote(&run, &record, &request).await.unwrap();
    let review_ref = promoted.review_ref.unwrap();
    assert_eq!(review_ref, "refs/heads/review/run-layered");
    let files = git_output(&repo, &["ls-tree", "-r", "--name-only", &review_ref]);
    assert!(
        files.contains("src/new.rs") && !files.contains("docs/guide.md"),
        "{files}"
    );
    assert_eq!(
        git_output(&repo, &["show", &format!("{review_ref}:src/lib.rs")]),
        "pub fn f() {}\nfixed\n"
    );

    // A moved HEAD in the run's .git fails re-verification.
    let head = layers.upper.join(".git/HEAD");
    let saved = std::fs::read(&head).unwrap();
    std::fs::write(&head, "0000000000000000000000000000000000000000\n").unwrap();
    let err = source.verify(&run, &record).await.unwrap_err();
    assert!(
        format!("{:?}", err).contains("RestoreIncomplete"),
        "{err:?}"
    );
    std::fs::write(&head, saved).unwrap();

    // A permit of another run releases nothing.
    let foreign = crate::test_support::cleanup_permit(&RunId::new("run-other").unwrap());
    assert!(source.release(&run, &record, &foreign).await.is_err());
    assert!(
        layers.upper.is_dir(),
        "a foreign permit removed the run's files"
    );
    source
        .release(
            &run,
            &record,
            &crate::test_support::cleanup_permit(&run.run_id),
        )
        .await
        .unwrap();
    for dir in [&layers.upper, &layers.work, &record.workspace] {
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
    let entries = cache.entries().unwrap();
    assert_eq!(
        entries.len(),
        1,
        "the base tree stays cached for the next run"
    );
    assert!(layers.lower.join("src/lib.rs").is_file());
}
