//! `WorktreeSource` through the `SourceBoundary` trait, from a multi-threaded runtime.

use std::fs;
use std::path::Path;
use std::sync::Arc;

use workspace_core::RunId;
use workspace_core::boundary::{OriginRecord, RunContext, SourceBoundary, SubmoduleRecord};
use workspace_core::contract::{
    CheckoutOrigin, Contract, Materialization, SourceSection, TaskShape, UntrackedInput,
};

use super::fixture::{Repo, git};
use crate::source::{CHECKOUT_DIR, WorktreeSource};

fn run(repo: &Repo, section: SourceSection, name: &str) -> RunContext {
    let runtime_dir = repo.dest("runtime");
    let run_dir = runtime_dir.join("runs").join(name);
    fs::create_dir_all(&run_dir).unwrap();
    RunContext {
        run_id: RunId::new(name).unwrap(),
        contract: Arc::new(Contract::preset(TaskShape::NarrowFix, "test", section)),
        run_dir,
        runtime_dir,
    }
}

fn section(repo: &Path, revision: &str) -> SourceSection {
    SourceSection::new(repo.to_str().unwrap(), revision)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_boundary_provision_verify_release() {
    let repo = Repo::standard();
    git(
        &repo.path,
        &[
            "config",
            "remote.origin.url",
            "https://u:p@example.com/r.git",
        ],
    );
    let mut declared = section(&repo.path, "v1");
    declared.inputs.push(UntrackedInput {
        from: ".env.example".into(),
        to: ".env".into(),
        from_host: false,
    });
    let ctx = run(&repo, declared, "run-1");
    let boundary: Arc<dyn SourceBoundary> = Arc::new(WorktreeSource::new());
    assert!(
        boundary
            .capabilities()
            .origins
            .contains(&CheckoutOrigin::Resumed)
    );

    let record = boundary.provision(&ctx).await.unwrap();
    let ws = ctx.run_dir.join(CHECKOUT_DIR);
    assert_eq!(record.workspace, ws);
    assert_eq!(record.commit, repo.rev("v1^{commit}"));
    assert_eq!(record.tree, repo.rev("v1^{tree}"));
    assert_eq!(record.origin, OriginRecord::Fresh);
    assert_eq!(record.materialization, Materialization::Standalone);
    assert_eq!(
        record.remote_urls,
        vec!["https://example.com/r.git".to_owned()]
    );
    assert_eq!(record.initial_diff, "");
    assert_eq!(record.inputs.len(), 1);
    assert!(ws.join(".env").is_file());
    // `.env.example` is protected (`**/.env.*`): the index leaves it out, so
    // git sees it removed from the index and untracked, never its blob id.
    assert_eq!(
        git(&ws, &["status", "--porcelain"]),
        "D  .env.example\n?? .env\n?? .env.example\n"
    );
    serde_json::to_string(&record).unwrap();

    boundary.verify(&ctx, &record).await.unwrap();
    git(&ws, &["checkout", "-q", "--detach", &repo.rev("main")]);
    let err = boundary.verify(&ctx, &record).await.unwrap_err();
    assert!(
        format!("{:#}", anyhowless(&err)).contains("HEAD moved"),
        "{err}"
    );

    // A symlink planted by the agent: release removes the link, not its target.
    let keep = repo.dest("keep-me");
    fs::create_dir(&keep).unwrap();
    fs::write(keep.join("precious"), "x").unwrap();
    std::os::unix::fs::symlink(&keep, ws.join("planted")).unwrap();
    boundary
        .release(
            &ctx,
            &record,
            &crate::test_support::cleanup_permit(&ctx.run_id),
        )
        .await
        .unwrap();
    assert!(!ws.exists());
    assert!(keep.join("precious").is_file());
}

/// The error and its causes on one line.
fn anyhowless(err: &(dyn std::error::Error + 'static)) -> String {
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
async fn source_boundary_resumed_origin_reverifies() {
    let repo = Repo::standard();
    let boundary = WorktreeSource::new();
    let ctx = run(&repo, section(&repo.path, "main"), "run-2");
    let first = boundary.provision(&ctx).await.unwrap();
    fs::write(first.workspace.join("a.txt"), "agent edit\n").unwrap();

    let mut resumed = section(&repo.path, "main");
    resumed.origin = CheckoutOrigin::Resumed;
    let ctx2 = RunContext {
        contract: Arc::new(Contract::preset(TaskShape::NarrowFix, "test", resumed)),
        ..ctx.clone()
    };
    let record = boundary.provision(&ctx2).await.unwrap();
    assert_eq!(
        record.origin,
        OriginRecord::Resumed {
            from: "run-2".into()
        }
    );
    assert_eq!(record.commit, first.commit);
    assert_eq!(record.initial_diff, "M\ta.txt\n");
    boundary
        .release(
            &ctx2,
            &record,
            &crate::test_support::cleanup_permit(&ctx2.run_id),
        )
        .await
        .unwrap();
    assert!(!record.workspace.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_boundary_linked_materialization() {
    let repo = Repo::standard();
    let mut linked = section(&repo.path, "main");
    linked.materialization = Materialization::Linked;
    let ctx = run(&repo, linked, "run-3");
    let boundary = WorktreeSource::new();
    let record = boundary.provision(&ctx).await.unwrap();
    assert_eq!(record.materialization, Materialization::Linked);
    assert_eq!(
        git(&record.workspace, &["rev-parse", "HEAD"]).trim(),
        repo.rev("main")
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
    assert!(!git(&repo.path, &["worktree", "list"]).contains("run-3"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_boundary_submodules() {
    let lib = Repo::init();
    lib.write("lib.txt", "library\n");
    lib.commit("lib");
    let other = Repo::init();
    other.write("other.txt", "other\n");
    other.commit("other");

    let repo = Repo::standard();
    for (dep, path) in [(&lib, "vendor/lib"), (&other, "vendor/other")] {
        git(
            &repo.path,
            &["submodule", "add", "-q", dep.path.to_str().unwrap(), path],
        );
    }
    let commit = repo.commit("submodules");
    let boundary = WorktreeSource::new();

    let mut declared = section(&repo.path, &commit);
    declared.submodules = vec!["vendor/lib".into()];
    let ctx = run(&repo, declared, "run-4");
    let record = boundary.provision(&ctx).await.unwrap();
    assert_eq!(
        record.submodules,
        vec![
            SubmoduleRecord {
                path: "vendor/lib".into(),
                initialized: true
            },
            SubmoduleRecord {
                path: "vendor/other".into(),
                initialized: false
            },
        ]
    );
    let ws = &record.workspace;
    assert_eq!(
        fs::read_to_string(ws.join("vendor/lib/lib.txt")).unwrap(),
        "library\n"
    );
    assert!(ws.join("vendor/other").is_dir());
    // Only the protected `.env.example`, left out of the index.
    assert_eq!(
        git(ws, &["status", "--porcelain"]),
        "D  .env.example\n?? .env.example\n"
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

    // A declared submodule the source has no copy of is an error, never skipped.
    fs::remove_dir_all(repo.path.join(".git/modules/vendor/other")).unwrap();
    let mut missing = section(&repo.path, &commit);
    missing.submodules = vec!["vendor/other".into()];
    let ctx = run(&repo, missing, "run-5");
    let err = boundary.provision(&ctx).await.unwrap_err();
    assert!(anyhowless(&err).contains("vendor/other"), "{err}");
    assert!(
        !ctx.run_dir.join(CHECKOUT_DIR).exists(),
        "the failed checkout is removed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_boundary_never_removes_an_existing_destination() {
    let repo = Repo::standard();
    let ctx = run(&repo, section(&repo.path, "main"), "run-6");
    let occupied = ctx.run_dir.join(CHECKOUT_DIR);
    fs::create_dir_all(&occupied).unwrap();
    fs::write(occupied.join("someone-elses"), "x").unwrap();
    let err = WorktreeSource::new().provision(&ctx).await.unwrap_err();
    assert!(anyhowless(&err).contains("not an empty directory"), "{err}");
    assert!(occupied.join("someone-elses").is_file());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_boundary_release_refuses_a_recorded_path_that_climbs_out() {
    let repo = Repo::standard();
    let ctx = run(&repo, section(&repo.path, "main"), "run-climb");
    let boundary = WorktreeSource::new();
    let record = boundary.provision(&ctx).await.unwrap();
    let victim = repo.dest("victim");
    fs::create_dir_all(victim.join("sub")).unwrap();
    fs::write(victim.join("sub/precious"), "precious\n").unwrap();
    let before = super::fixture::digest_tree(&victim);

    // `<run_dir>/../../../victim` starts with the run directory, component-wise.
    let mut crafted = record.clone();
    crafted.workspace = ctx.run_dir.join("../../../victim");
    assert!(crafted.workspace.starts_with(&ctx.run_dir));
    let permit = crate::test_support::cleanup_permit(&ctx.run_id);
    let err = boundary.release(&ctx, &crafted, &permit).await.unwrap_err();
    let source = std::error::Error::source(&err)
        .and_then(|e| e.downcast_ref::<crate::source::SourceError>());
    assert!(
        matches!(source, Some(crate::source::SourceError::PathEscape { .. })),
        "{}",
        anyhowless(&err)
    );
    assert_eq!(super::fixture::digest_tree(&victim), before);

    // The run directory itself is not a checkout either.
    crafted.workspace = ctx.run_dir.clone();
    assert!(boundary.release(&ctx, &crafted, &permit).await.is_err());
    assert!(record.workspace.exists());

    boundary.release(&ctx, &record, &permit).await.unwrap();
    assert!(!record.workspace.exists());
    assert_eq!(super::fixture::digest_tree(&victim), before);
}
