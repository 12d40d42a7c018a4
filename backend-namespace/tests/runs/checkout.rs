//! Real checkouts for the `NamespaceProcess` tests that use backend-worktree
//! (`handover.rs`, `layered.rs`): a git repository made with the git CLI in a
//! test directory outside `/tmp`, and the helpers both files use on the runs.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use backend_namespace::process::{DEFAULT_HOST_ID_BASE, NamespaceProcess};
use tempfile::TempDir;
use tokio::io::AsyncReadExt;
use workspace_core::boundary::{ProcessBoundary, RunContext};
use workspace_core::evidence::ExitStatusRecord;

use super::command;

/// The host id an unprivileged run's uid/gid 1000 map to.
pub const RUN_HOST_ID: u32 = DEFAULT_HOST_ID_BASE + 1000;

/// `git args` in `dir`, with a fixed author and no system or user configuration.
pub fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .args(["-c", "user.name=t", "-c", "user.email=t@example.invalid"])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("HOME", dir)
        .status()
        .unwrap();
    assert!(status.success(), "git {args:?}");
}

/// A repository with `README.md`, `src/lib.txt` and an executable `bin/hello.sh`,
/// one commit, made with the git CLI under `base/source`.
pub fn make_repo(base: &Path) -> PathBuf {
    let repo = base.join("source");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    std::fs::write(repo.join("README.md"), "readme\n").unwrap();
    std::fs::create_dir(repo.join("src")).unwrap();
    std::fs::write(repo.join("src/lib.txt"), "lib\n").unwrap();
    std::fs::create_dir(repo.join("bin")).unwrap();
    std::fs::write(
        repo.join("bin/hello.sh"),
        "#!/bin/sh\necho hello from bin\n",
    )
    .unwrap();
    std::fs::set_permissions(
        repo.join("bin/hello.sh"),
        std::fs::Permissions::from_mode(0o755),
    )
    .unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    repo
}

/// A test directory (mode 0755) holding a fresh [`make_repo`] repository; returns
/// it and the repository's path.
///
/// Not under `/tmp`: the run gets a private `/tmp`, which would hide the source's
/// object store (bound at its host path for the checkout's alternates).
pub fn base_with_repo() -> (TempDir, PathBuf) {
    let base = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::set_permissions(base.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let repo = make_repo(base.path());
    (base, repo)
}

/// Runs `script` with `/bin/sh -c` in the sealed `run`; (exit, stdout, stderr).
pub async fn sh(
    process: &NamespaceProcess,
    run: &RunContext,
    script: &str,
) -> (ExitStatusRecord, String, String) {
    let mut exec = process
        .spawn(run, &command(&["/bin/sh", "-c", script], Some(60_000)))
        .await
        .unwrap();
    drop(exec.take_stdin());
    let (mut out, mut err) = (String::new(), String::new());
    let mut stdout = exec.take_stdout().unwrap();
    let mut stderr = exec.take_stderr().unwrap();
    let (a, b) = tokio::join!(
        stdout.read_to_string(&mut out),
        stderr.read_to_string(&mut err)
    );
    a.unwrap();
    b.unwrap();
    (exec.wait().await.unwrap().status, out, err)
}

/// The owner of `path` (not following a final symlink).
pub fn owner(path: &Path) -> (u32, u32) {
    let meta = std::fs::symlink_metadata(path).unwrap();
    (meta.uid(), meta.gid())
}

/// Tears `run` down and asserts nothing was left.
pub async fn teardown_is_clean(process: &NamespaceProcess, run: &RunContext) {
    let report = process.teardown(run).await.unwrap();
    assert!(report.is_clean(), "{report:?}");
}
