//! The workspace handover of `NamespaceProcess::seal` on REAL checkouts made by
//! backend-worktree (owned by host root): the run's identity can write its
//! workspace and use git there, and nothing the handover walks is followed out of
//! the workspace. Run as root, with real namespaces and cgroups.
#![allow(clippy::unwrap_used, clippy::expect_used)] // panicking is how a test fails

// The namespace backend's own run helpers: these tests need a real worktree
// checkout too, so they live here, where every backend is a dependency.
#[path = "../backend-namespace/tests/runs/mod.rs"]
mod runs;

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;

use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_namespace::process::{NamespaceProcess, ProcessOptions};
use backend_worktree::layered::cache::TreeCache;
use backend_worktree::source::WorktreeSource;
use runs::ParentGuard;
use runs::checkout::{RUN_HOST_ID, base_with_repo, owner, sh, teardown_is_clean};
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{
    EnvironmentBoundary, FilesystemRecord, IdentityBoundary, ProcessBoundary, RunContext, SealPlan,
    SourceBoundary,
};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape};
use workspace_core::evidence::ExitStatusRecord;

struct Fixture {
    base: TempDir,
    run: RunContext,
    plan: SealPlan,
    process: NamespaceProcess,
    _parent: ParentGuard,
}

/// A real checkout of a fresh repository by `source`, with a narrow-fix contract
/// asking for `materialization`, and the boundary.
async fn fixture(test: &str, source: Option<WorktreeSource>, layered: bool) -> Fixture {
    let (base, repo) = base_with_repo();
    let mut section = SourceSection::new(repo.to_string_lossy(), "HEAD");
    section.materialization = if layered {
        Materialization::Layered
    } else {
        Materialization::Standalone
    };
    let contract = Contract::preset(TaskShape::NarrowFix, "handover tests", section);
    let run = RunContext {
        run_id: RunId::new(format!("handover-{test}")).unwrap(),
        contract: Arc::new(contract),
        run_dir: base.path().join("run"),
        runtime_dir: base.path().join("runtime"),
    };
    std::fs::create_dir(&run.run_dir).unwrap();
    let source = source.unwrap_or_default();
    let record = source.provision(&run).await.unwrap();
    assert_eq!(record.layers.is_some(), layered, "{record:?}");
    let environment = NamespaceEnvironment::with_host_vars(Default::default())
        .prepare(&run)
        .await
        .unwrap();
    let identity = NamespaceIdentity::new().prepare(&run).await.unwrap();
    assert_eq!((identity.uid, identity.gid), (1000, 1000));
    let plan = SealPlan {
        source: record,
        filesystem: FilesystemRecord::default(),
        environment,
        identity,
        templates: Vec::new(),
        held_open: Vec::new(),
    };
    let parent = format!(
        "agent-workspace-test-{}-handover-{test}",
        std::process::id()
    );
    let process = NamespaceProcess::new(ProcessOptions::probe(parent.clone()).unwrap());
    Fixture {
        base,
        run,
        plan,
        process,
        _parent: ParentGuard(parent),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_root_owned_standalone_checkout_is_handed_over_and_git_works_inside() {
    let f = fixture("standalone", None, false).await;
    let workspace = f.plan.source.workspace.clone();
    // What backend-worktree made is host root's: the run could not write it.
    assert_eq!(owner(&workspace), (0, 0));
    assert_eq!(owner(&workspace.join(".git/index")), (0, 0));

    let observed = f.process.seal(&f.run, &f.plan).await.unwrap();
    assert_eq!(observed.mismatches, Vec::<String>::new());
    let handover = &observed.facts["handover"];
    assert_eq!(handover[0]["dir"], serde_json::json!(workspace));
    assert!(
        handover[0]["outcome"]["changed"].as_u64().unwrap() > 5,
        "{handover}"
    );
    for path in [".", ".git", ".git/index", ".git/HEAD", "src", "src/lib.txt"] {
        assert_eq!(
            owner(&workspace.join(path)),
            (RUN_HOST_ID, RUN_HOST_ID),
            "{path}"
        );
    }

    let (status, out, err) = sh(
        &f.process,
        &f.run,
        "echo hi > x && git status --porcelain > status.txt && echo ok",
    )
    .await;
    assert_eq!(
        status,
        ExitStatusRecord::Code(0),
        "stdout {out:?} stderr {err:?}"
    );
    assert_eq!(
        std::fs::read_to_string(workspace.join("x")).unwrap(),
        "hi\n"
    );
    let git_status = std::fs::read_to_string(workspace.join("status.txt")).unwrap();
    assert!(git_status.lines().any(|l| l == "?? x"), "{git_status:?}");
    assert_eq!(owner(&workspace.join("x")), (RUN_HOST_ID, RUN_HOST_ID));
    teardown_is_clean(&f.process, &f.run).await;
}

/// Attack: links planted in the checkout before the seal (to a host file and a
/// host directory the test made) must not give the run ownership of their targets.
#[tokio::test(flavor = "multi_thread")]
async fn the_handover_does_not_follow_a_planted_symlink() {
    let f = fixture("symlink", None, false).await;
    let workspace = f.plan.source.workspace.clone();
    let host_file = f.base.path().join("host-file");
    std::fs::write(&host_file, "host only\n").unwrap();
    let host_dir = f.base.path().join("host-dir");
    std::fs::create_dir(&host_dir).unwrap();
    std::fs::write(host_dir.join("inner"), "host only\n").unwrap();
    std::os::unix::fs::symlink(&host_file, workspace.join("evil-file")).unwrap();
    std::os::unix::fs::symlink(&host_dir, workspace.join("src/evil-dir")).unwrap();
    let before = [&host_file, &host_dir, &host_dir.join("inner")]
        .map(|p| std::fs::symlink_metadata(p).unwrap());

    f.process.seal(&f.run, &f.plan).await.unwrap();

    // Negative: every target is exactly as it was (owner, mode, contents).
    for (path, meta) in [&host_file, &host_dir, &host_dir.join("inner")]
        .into_iter()
        .zip(&before)
    {
        let now = std::fs::symlink_metadata(path).unwrap();
        assert_eq!((now.uid(), now.gid()), (0, 0), "{}", path.display());
        assert_eq!(now.mode(), meta.mode(), "{}", path.display());
        assert_eq!(now.ctime_nsec(), meta.ctime_nsec(), "{}", path.display());
    }
    assert_eq!(std::fs::read_to_string(&host_file).unwrap(), "host only\n");
    // The links themselves are the run's (lchown), like the rest of the checkout.
    assert_eq!(
        owner(&workspace.join("evil-file")),
        (RUN_HOST_ID, RUN_HOST_ID)
    );
    assert_eq!(
        owner(&workspace.join("src/evil-dir")),
        (RUN_HOST_ID, RUN_HOST_ID)
    );
    // Positive control: the run writes its workspace.
    let (status, _, err) = sh(&f.process, &f.run, "echo hi > x").await;
    assert_eq!(status, ExitStatusRecord::Code(0), "{err}");
    assert_eq!(
        std::fs::read_to_string(workspace.join("x")).unwrap(),
        "hi\n"
    );
    teardown_is_clean(&f.process, &f.run).await;
}

/// A layered run of a fresh repository, its tree cache kept in the test's own
/// directory (`cache_dir`).
async fn layered_fixture(test: &str, cache_dir: &Path) -> Fixture {
    let cache = TreeCache::open(cache_dir.join("cache"), u64::MAX).unwrap();
    fixture(test, Some(WorktreeSource::with_layered_cache(cache)), true).await
}

/// With the lower layer owned by the run's mapped id already (the test changes the
/// owner of its own cache), no idmapped mount is made (`spawn/idmapped.rs`): upper
/// and work are handed over and overlayfs copy-up works in the run's user namespace
/// over the plain lower. The usual case, a root-owned cache, is in `tests/layered.rs`.
#[tokio::test(flavor = "multi_thread")]
async fn a_layered_checkout_hands_over_upper_and_work_and_the_run_edits_tracked_files() {
    let cache_dir = tempfile::tempdir_in("/var/tmp").unwrap();
    let f = layered_fixture("layered", cache_dir.path()).await;
    let layers = f.plan.source.layers.clone().unwrap();
    let id = RUN_HOST_ID.to_string();
    let status = Command::new("chown")
        .args(["-hR", &format!("{id}:{id}")])
        .arg(&layers.lower)
        .status()
        .unwrap();
    assert!(status.success());

    let observed = f.process.seal(&f.run, &f.plan).await.unwrap();
    assert_eq!(observed.mismatches, Vec::<String>::new());
    assert_eq!(owner(&layers.upper), (RUN_HOST_ID, RUN_HOST_ID));
    assert_eq!(owner(&layers.work), (RUN_HOST_ID, RUN_HOST_ID));
    assert_eq!(
        owner(&layers.upper.join(".git/HEAD")),
        (RUN_HOST_ID, RUN_HOST_ID)
    );

    let (status, out, err) = sh(
        &f.process,
        &f.run,
        "echo hi > x && echo more >> README.md && echo deep >> src/lib.txt \
         && git status --porcelain > status.txt && echo ok",
    )
    .await;
    assert_eq!(
        status,
        ExitStatusRecord::Code(0),
        "stdout {out:?} stderr {err:?}"
    );
    // The changes are in the run's upper layer on the host ...
    assert_eq!(
        std::fs::read_to_string(layers.upper.join("x")).unwrap(),
        "hi\n"
    );
    assert_eq!(
        std::fs::read_to_string(layers.upper.join("README.md")).unwrap(),
        "readme\nmore\n"
    );
    assert_eq!(
        std::fs::read_to_string(layers.upper.join("src/lib.txt")).unwrap(),
        "lib\ndeep\n"
    );
    let git_status = std::fs::read_to_string(layers.upper.join("status.txt")).unwrap();
    for line in ["?? x", " M README.md", " M src/lib.txt"] {
        assert!(
            git_status.lines().any(|l| l == line),
            "{line}: {git_status:?}"
        );
    }
    // ... and the shared lower layer is untouched.
    assert_eq!(
        std::fs::read_to_string(layers.lower.join("README.md")).unwrap(),
        "readme\n"
    );
    teardown_is_clean(&f.process, &f.run).await;
}
