//! The CLI tests' world: the `agent-workspace` binary run as a user would run it,
//! on a [`Fixture`] (repository, runtime dir, evidence dir, cgroup parent) with a
//! state home of its own.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use agent_workspace::namespace::cgroup::{CgroupLayout, remove_parent};

use super::{Fixture, list_tree};

/// One test's own runtime dir, evidence dir, state home, cgroup parent and a git
/// repository with one commit. Dropping it fails the test (unless it is failing
/// already) when the cgroup parent cannot be removed.
pub struct CliFixture {
    fixture: Fixture,
}

impl CliFixture {
    /// A fresh fixture for test `test`.
    pub fn new(test: &str) -> Self {
        Self {
            fixture: Fixture::new(&format!("cli-{test}")),
        }
    }

    /// The fixture's directory, every other one's parent (0755: the run's mapped
    /// uid must traverse to its checkout under the runtime dir).
    pub fn path(&self) -> &Path {
        self.fixture.base.path()
    }

    /// The source repository.
    pub fn repo(&self) -> PathBuf {
        self.fixture.repo.clone()
    }

    /// `AGENT_WORKSPACE_RUNTIME_DIR`.
    pub fn runtime(&self) -> PathBuf {
        self.fixture.runtime.clone()
    }

    /// Where [`Self::run`] puts evidence.
    pub fn evidence(&self) -> PathBuf {
        self.fixture.evidence.clone()
    }

    /// `XDG_STATE_HOME`: where evidence would go without `--evidence`.
    pub fn state_home(&self) -> PathBuf {
        self.path().join("state")
    }

    /// `agent-workspace` in the fixture's directory, with its runtime dir, cgroup
    /// parent and state home.
    pub fn command(&self) -> Command {
        let mut command = Command::new(env!("CARGO_BIN_EXE_agent-workspace"));
        command
            .current_dir(self.path())
            .env("AGENT_WORKSPACE_RUNTIME_DIR", self.runtime())
            .env("AGENT_WORKSPACE_CGROUP_PARENT", &self.fixture.cgroup_parent)
            .env("XDG_STATE_HOME", self.state_home());
        command
    }

    /// `agent-workspace ARGS`, run to its end.
    pub fn agent_workspace(&self, args: &[&str]) -> Output {
        self.command()
            .args(args)
            .output()
            .expect("run agent-workspace")
    }

    /// `run --repo <repo> --evidence <evidence> ARGS`.
    pub fn run(&self, args: &[&str]) -> Output {
        let repo = self.repo();
        let evidence = self.evidence();
        let mut all = vec![
            "run",
            "--repo",
            repo.to_str().unwrap(),
            "--evidence",
            evidence.to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        self.agent_workspace(&all)
    }

    /// `create --repo <repo>` (with `--contract contract` when given), which must
    /// succeed; the run's id.
    pub fn create(&self, contract: Option<&Path>) -> String {
        let repo = self.repo();
        let mut args = vec!["create", "--repo", repo.to_str().unwrap()];
        if let Some(contract) = contract {
            args.extend(["--contract", contract.to_str().unwrap()]);
        }
        let out = self.agent_workspace(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    }

    /// `create --repo <repo> EXTRA` (a backend, a contract), which must
    /// succeed; the run's id.
    pub fn create_with(&self, extra: &[&str]) -> String {
        let repo = self.repo();
        let mut args = vec!["create", "--repo", repo.to_str().unwrap()];
        args.extend_from_slice(extra);
        let out = self.agent_workspace(&args);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        text(&out.stdout).trim().to_owned()
    }

    /// Asserts that `verify` accepts the bundle in `bundle`; returns its stdout.
    pub fn assert_verifies(&self, bundle: &Path) -> String {
        let verified = self.agent_workspace(&["verify", bundle.to_str().unwrap()]);
        let stdout = text(&verified.stdout);
        assert_eq!(verified.status.code(), Some(0), "{stdout}");
        stdout
    }

    /// Asserts that no run left anything: no journal, no checkout, no evidence.
    pub fn assert_nothing_left(&self) {
        for dir in [self.runtime(), self.evidence(), self.state_home()] {
            let left = list_tree(&dir);
            assert!(
                left.is_empty(),
                "left behind in {}: {left:?}",
                dir.display()
            );
        }
    }
}

impl Drop for CliFixture {
    fn drop(&mut self) {
        let parent = &self.fixture.cgroup_parent;
        if std::thread::panicking() {
            super::end_processes_under(parent);
        }
        let removed = CgroupLayout::detect()
            .map_err(|e| e.to_string())
            .and_then(|layout| remove_parent(&layout, parent).map_err(|e| e.to_string()));
        if let Err(e) = removed
            && !std::thread::panicking()
        {
            panic!("cannot remove cgroup parent {parent}: {e}");
        }
    }
}

/// `bytes` as text, invalid UTF-8 replaced.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
