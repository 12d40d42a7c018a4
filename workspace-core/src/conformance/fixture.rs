//! One case's fixture: a scratch directory, a real git repository of two
//! commits, and a runner over a fresh stack.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::MakeStack;
use crate::capacity::{Capacity, Resources};
use crate::contract::{Assurance, Contract, SourceSection, TaskShape};
use crate::runner::{Runner, RunnerConfig};

/// The file whose content tells the two commits apart.
pub(super) const PINNED_FILE: &str = "pinned.txt";

/// A case's fixture; [`remove`](Self::remove) ends it.
pub(super) struct Fixture {
    scratch: tempfile::TempDir,
    /// The source repository.
    pub repo: PathBuf,
    /// Its first commit (`pinned.txt` = `first`).
    pub first: String,
    /// Its second commit, `HEAD` (`pinned.txt` = `second`).
    pub second: String,
    /// A runner over the stack under test.
    pub runner: Runner,
    /// A token unique to this fixture, for names on the host.
    pub token: String,
}

impl Fixture {
    /// A fresh fixture for case `name`.
    pub(super) async fn new(name: &str, make_stack: &MakeStack) -> Result<Self, String> {
        let scratch = tempfile::Builder::new()
            .prefix(&format!("aw-conformance-{name}-"))
            .tempdir()
            .map_err(|e| format!("a scratch directory: {e}"))?;
        // The run's mapped ids must reach its checkout under the runtime dir.
        std::fs::set_permissions(scratch.path(), std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("opening the scratch directory: {e}"))?;
        let repo = scratch.path().join("repo");
        let first = commit(&repo, "first", true).await?;
        let second = commit(&repo, "second", false).await?;
        let stack = make_stack(&scratch.path().join("stack"))
            .map_err(|e| format!("the stack under test: {e}"))?;
        let config = RunnerConfig::new(
            scratch.path().join("runtime"),
            scratch.path().join("evidence"),
        );
        let capacity = Capacity::new(Resources {
            cpu_millis: 1 << 20,
            memory_bytes: 1 << 45,
            disk_bytes: 1 << 50,
            slots: 64,
        });
        let token = scratch
            .path()
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        Ok(Self {
            repo,
            first,
            second,
            runner: Runner::new(stack, config, Arc::new(capacity)),
            token,
            scratch,
        })
    }

    /// The scratch directory (the host's, outside every grant).
    pub(super) fn scratch(&self) -> &Path {
        self.scratch.path()
    }

    /// The narrow-fix preset at `revision`; best effort, so a probe mismatch is
    /// recorded and the case itself judges what the run could do.
    pub(super) fn contract(&self, revision: &str) -> Contract {
        let source = SourceSection::new(self.repo.to_string_lossy(), revision);
        let mut contract = Contract::preset(TaskShape::NarrowFix, "conformance", source);
        contract.environment.assurance = Assurance::BestEffort;
        contract
    }

    /// A host file outside every grant, `outside/NAME`, holding a value unique
    /// to this fixture (which a breach would show or change); its path and
    /// content.
    pub(super) fn host_file(&self, name: &str) -> Result<(PathBuf, String), String> {
        let outside = self.scratch().join("outside");
        std::fs::create_dir_all(&outside).map_err(|e| format!("{}: {e}", outside.display()))?;
        let path = outside.join(name);
        let content = format!("host-{name}-{}", self.token);
        // A twin made the same way (`NAME.made`), whose owner and mode the
        // file must still have afterwards.
        for file in [path.clone(), path.with_extension("made")] {
            std::fs::write(&file, &content).map_err(|e| format!("{}: {e}", file.display()))?;
        }
        Ok((path, content))
    }

    /// Commits a symbolic link `name` -> `target` on top of `HEAD`; the
    /// commit's id.
    pub(super) async fn commit_symlink(&self, name: &str, target: &Path) -> Result<String, String> {
        std::os::unix::fs::symlink(target, self.repo.join(name))
            .map_err(|e| format!("planting the link {name}: {e}"))?;
        commit_paths(&self.repo, &[name], name).await
    }

    /// Ends the fixture: its scratch directory goes.
    pub(super) fn remove(self) {
        let _ = self.scratch.close();
    }
}

/// Commits `pinned.txt` = `content` in `repo` (made first when `init`); the
/// commit's id.
async fn commit(repo: &Path, content: &str, init: bool) -> Result<String, String> {
    if init {
        git(
            repo.parent().unwrap_or(repo),
            &["init", "-q", &repo.to_string_lossy()],
        )
        .await?;
    }
    tokio::fs::write(repo.join(PINNED_FILE), format!("{content}\n"))
        .await
        .map_err(|e| format!("writing {PINNED_FILE}: {e}"))?;
    commit_paths(repo, &[PINNED_FILE], content).await
}

/// Commits `paths` of `repo` with `message`; the commit's id.
async fn commit_paths(repo: &Path, paths: &[&str], message: &str) -> Result<String, String> {
    let mut add = vec!["add", "--"];
    add.extend_from_slice(paths);
    git(repo, &add).await?;
    git(
        repo,
        &[
            "-c",
            "user.name=conformance",
            "-c",
            "user.email=conformance@invalid",
            "commit",
            "-q",
            "-m",
            message,
        ],
    )
    .await?;
    Ok(git(repo, &["rev-parse", "HEAD"]).await?.trim().to_owned())
}

/// Runs `git ARGS` in `dir`; its stdout, or why it failed.
pub(super) async fn git(dir: &Path, args: &[&str]) -> Result<String, String> {
    let out = tokio::process::Command::new("git")
        .args(args)
        .current_dir(dir)
        .output()
        .await
        .map_err(|e| format!("git: {e} (the kit needs git: Debian package git)"))?;
    if !out.status.success() {
        return Err(format!(
            "git {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}
