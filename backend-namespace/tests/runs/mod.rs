//! Runs over a standalone workspace, for the `NamespaceProcess` tests; real
//! checkouts by backend-worktree in [`checkout`].
#![allow(clippy::unwrap_used, dead_code)] // test support: panicking is how a test fails

pub mod checkout;

use std::os::unix::fs::{PermissionsExt, chown};
use std::sync::Arc;

use backend_namespace::cgroup::{CgroupLayout, remove_parent};
use backend_namespace::environment::NamespaceEnvironment;
use backend_namespace::identity::NamespaceIdentity;
use backend_namespace::process::DEFAULT_HOST_ID_BASE;
use tempfile::TempDir;
use workspace_core::RunId;
use workspace_core::boundary::{
    CommandSpec, EnvironmentBoundary, FilesystemRecord, IdentityBoundary, OriginRecord, RunContext,
    SealPlan, SourceRecord,
};
use workspace_core::contract::{Contract, Materialization, SourceSection, TaskShape};

/// Removes a test's parent cgroups when dropped.
pub struct ParentGuard(pub String);

impl Drop for ParentGuard {
    fn drop(&mut self) {
        if let Ok(layout) = CgroupLayout::detect()
            && let Err(e) = remove_parent(&layout, &self.0)
        {
            eprintln!("removing the test parent cgroup {} failed: {e}", self.0);
        }
    }
}

/// One run's workspace, context and seal plan.
pub struct Run {
    /// Keeps the workspace alive.
    pub base: TempDir,
    /// The run.
    pub run: RunContext,
    /// What `seal` applies.
    pub plan: SealPlan,
}

/// A run `run_id` over a fresh workspace (a `TempDir` with `hello.txt`, owned by the
/// host id the run's uid 1000 maps to; no git repository needed), with a narrow-fix
/// contract changed by `edit`.
pub async fn standalone_run(run_id: &str, edit: impl FnOnce(&mut Contract)) -> Run {
    let base = tempfile::tempdir().unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let workspace = base.path().join("workspace");
    std::fs::create_dir(&workspace).unwrap();
    std::fs::write(workspace.join("hello.txt"), "hello from the workspace\n").unwrap();
    let host_id = DEFAULT_HOST_ID_BASE + 1000;
    for path in [workspace.clone(), workspace.join("hello.txt")] {
        chown(&path, Some(host_id), Some(host_id)).unwrap();
    }
    let mut contract = Contract::preset(
        TaskShape::NarrowFix,
        "namespace process tests",
        SourceSection::new(workspace.to_string_lossy(), "HEAD"),
    );
    edit(&mut contract);
    let run = RunContext {
        run_id: RunId::new(run_id).unwrap(),
        contract: Arc::new(contract),
        run_dir: base.path().join("run"),
        runtime_dir: base.path().join("runtime"),
    };
    let source = SourceRecord {
        repository: workspace.to_string_lossy().into_owned(),
        remote_urls: Vec::new(),
        commit: "a".repeat(40),
        tree: "b".repeat(40),
        origin: OriginRecord::Fresh,
        materialization: Materialization::Standalone,
        workspace,
        layers: None,
        submodules: Vec::new(),
        inputs: Vec::new(),
        initial_diff: String::new(),
        pinned: Vec::new(),
        objects: None,
    };
    let environment = NamespaceEnvironment::with_host_vars(Default::default())
        .prepare(&run)
        .await
        .unwrap();
    let identity = NamespaceIdentity::new().prepare(&run).await.unwrap();
    let plan = SealPlan {
        source,
        filesystem: FilesystemRecord::default(),
        environment,
        identity,
        templates: Vec::new(),
        held_open: Vec::new(),
    };
    Run { base, run, plan }
}

/// A command in the workspace root.
pub fn command(argv: &[&str], timeout_ms: Option<u64>) -> CommandSpec {
    CommandSpec {
        timeout_ms,
        ..CommandSpec::new(argv.iter().map(|s| s.to_string()).collect())
    }
}
