//! `origin = "snapshot"` through the `SourceBoundary` trait.

use std::fs;
use std::sync::Arc;

use workspace_core::RunId;
use workspace_core::boundary::{OriginRecord, RunContext, SourceBoundary};
use workspace_core::contract::{CheckoutOrigin, Contract, SourceSection, TaskShape};

use super::fixture::{Fixture, agent_edits, contents};
use crate::changes::ChangeOptions;
use crate::snapshot::{SnapshotError, capture};
use crate::source::{CHECKOUT_DIR, SourceError, WorktreeSource};

fn run(fx: &Fixture, name: &str, revision: &str, digest: &str) -> RunContext {
    let runtime_dir = fx.path("runtime");
    let run_dir = runtime_dir.join("runs").join(name);
    fs::create_dir_all(&run_dir).unwrap();
    let mut section = SourceSection::new(fx.repo.to_str().unwrap(), revision);
    section.origin = CheckoutOrigin::Snapshot;
    section.snapshot = Some(digest.to_owned());
    RunContext {
        run_id: RunId::new(name).unwrap(),
        contract: Arc::new(Contract::preset(TaskShape::NarrowFix, "test", section)),
        run_dir,
        runtime_dir,
    }
}

/// The error and its causes on one line.
fn chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut out = err.to_string();
    let mut cause = err.source();
    while let Some(c) = cause {
        out.push_str(": ");
        out.push_str(&c.to_string());
        cause = c.source();
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_origin_provisions_a_restored_checkout_through_the_boundary() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    agent_edits(&ws);
    let snapshot = capture(
        &fx.repo,
        &fx.commit,
        &ws,
        &fx.store,
        &ChangeOptions::default(),
    )
    .unwrap();

    let boundary: Arc<dyn SourceBoundary> =
        Arc::new(WorktreeSource::new().with_snapshot_store(&fx.store));
    assert!(
        boundary
            .capabilities()
            .origins
            .contains(&CheckoutOrigin::Snapshot)
    );
    let ctx = run(&fx, "run-restored", "main", &snapshot.digest);
    let record = boundary.provision(&ctx).await.unwrap();
    assert_eq!(record.workspace, ctx.run_dir.join(CHECKOUT_DIR));
    assert_eq!(record.commit, fx.commit);
    assert_eq!(
        record.origin,
        OriginRecord::Restored {
            snapshot_digest: snapshot.digest.clone()
        }
    );
    assert!(
        record.initial_diff.contains("M\tsrc/lib.rs\n"),
        "{}",
        record.initial_diff
    );
    assert!(record.initial_diff.contains("A\tnew/dir/file.txt\n"));
    assert!(record.initial_diff.contains("D\tREADME.md\n"));
    let restored = fx.changes(&record.workspace);
    assert_eq!(restored, fx.changes(&ws));
    assert_eq!(
        contents(&record.workspace, &restored),
        contents(&ws, &restored)
    );

    boundary.verify(&ctx, &record).await.unwrap();
    boundary
        .release(
            &ctx,
            &record,
            &crate::test_support::cleanup_permit(&ctx.run_id),
        )
        .await
        .unwrap();
    assert!(!record.workspace.exists());

    // A snapshot of another commit than the revision is refused, nothing is left.
    super::fixture::write(&fx.repo, "next.txt", b"next\n");
    super::fixture::git(&fx.repo, &["add", "-A"]);
    super::fixture::git(&fx.repo, &["commit", "-q", "-m", "next"]);
    let ctx = run(&fx, "run-moved", "main", &snapshot.digest);
    let err = boundary.provision(&ctx).await.unwrap_err();
    let SourceError::Snapshot(typed) = err_source(&err) else {
        panic!("{}", chain(&err));
    };
    assert!(
        matches!(**typed, SnapshotError::BaseCommitMismatch { .. }),
        "{}",
        chain(&err)
    );
    assert!(!ctx.run_dir.join(CHECKOUT_DIR).exists());
}

fn err_source(err: &workspace_core::boundary::BoundaryError) -> &SourceError {
    std::error::Error::source(err)
        .and_then(|e| e.downcast_ref::<SourceError>())
        .expect("a SourceError")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_origin_without_a_store_is_unsupported() {
    let fx = Fixture::new();
    let boundary = WorktreeSource::new();
    assert!(
        !boundary
            .capabilities()
            .origins
            .contains(&CheckoutOrigin::Snapshot)
    );
    let ctx = run(&fx, "run-no-store", "main", &"a".repeat(64));
    let err = boundary.provision(&ctx).await.unwrap_err();
    assert!(
        matches!(err_source(&err), SourceError::Unsupported { setting } if setting.contains("without a snapshot store")),
        "{}",
        chain(&err)
    );
    assert!(!ctx.run_dir.join(CHECKOUT_DIR).exists());
}
