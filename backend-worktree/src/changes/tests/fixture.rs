//! Git repositories for tests, built with the git CLI (tests only). Host git
//! configuration never matters: no global or system config is read and the
//! identity is given on the command line.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

/// Runs git in `dir` and returns its trimmed stdout; panics when it fails.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// Runs git in `dir` and returns its output, whatever its status.
pub(crate) fn git_output(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .args([
            "-c",
            "user.name=fixture",
            "-c",
            "user.email=fixture@localhost",
        ])
        .args(["-c", "init.defaultBranch=main"])
        .args(args)
        .output()
        .unwrap()
}

/// The twenty lines of `README.md` in the base commit.
pub(crate) fn readme() -> String {
    (1..=20).map(|i| format!("line {i}\n")).collect()
}

/// A source repository with one base commit and a workspace cloned from it.
pub(crate) struct Fixture {
    /// Holds everything; removed on drop.
    pub dir: TempDir,
    /// The source repository.
    pub source: PathBuf,
    /// The agent's workspace: a `git clone --shared` of the source at the base.
    pub workspace: PathBuf,
    /// The base commit id.
    pub base: String,
}

impl Fixture {
    /// The standard base: text, a file without trailing newline, executables,
    /// binaries, symlinks, names with spaces and non-ASCII characters.
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        fs::create_dir(&source).unwrap();
        git(&source, &["init", "-q"]);
        let w = |rel: &str, content: &[u8]| write(&source, rel, content);
        w("README.md", readme().as_bytes());
        w("src/lib.rs", b"pub fn one() -> u32 {\n    1\n}\n");
        w("notes.txt", b"first\nno newline at end");
        w("run.sh", b"#!/bin/sh\necho run\n");
        w("tool.sh", b"#!/bin/sh\necho tool\n");
        set_executable(&source.join("run.sh"), false);
        set_executable(&source.join("tool.sh"), true);
        w("docs/old-name.md", b"moved content\nsecond line\n");
        w("doc/remove-me.txt", b"remove me\n");
        w("data.bin", &binary(1, 3000));
        w("gone.bin", &binary(2, 500));
        w("becomes-link.txt", b"file content\n");
        w("with space.txt", b"spaced\n");
        w("café/naïve file.txt", b"unicode\n");
        symlink("README.md", source.join("link")).unwrap();
        symlink("nowhere", source.join("dead-link")).unwrap();
        git(&source, &["add", "-A"]);
        git(&source, &["commit", "-q", "-m", "base"]);
        let base = git(&source, &["rev-parse", "HEAD"]);
        let workspace = dir.path().join("workspace");
        git(
            dir.path(),
            &[
                "clone",
                "-q",
                "--shared",
                source.to_str().unwrap(),
                "workspace",
            ],
        );
        Self {
            dir,
            source,
            workspace,
            base,
        }
    }

    /// The host path of `rel` in the workspace.
    pub(crate) fn ws(&self, rel: &str) -> PathBuf {
        self.workspace.join(rel)
    }

    /// Writes `content` to `rel` in the workspace, creating parent directories.
    pub(crate) fn write(&self, rel: &str, content: &[u8]) {
        write(&self.workspace, rel, content);
    }

    /// Removes the file or link `rel` from the workspace.
    pub(crate) fn remove(&self, rel: &str) {
        fs::remove_file(self.ws(rel)).unwrap();
    }

    /// Makes `rel` a symlink to `target`, replacing what was there.
    pub(crate) fn symlink(&self, target: &str, rel: &str) {
        let path = self.ws(rel);
        if path.symlink_metadata().is_ok() {
            fs::remove_file(&path).unwrap();
        }
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        symlink(target, path).unwrap();
    }

    /// Sets or clears the executable bits of `rel`.
    pub(crate) fn chmod(&self, rel: &str, executable: bool) {
        set_executable(&self.ws(rel), executable);
    }

    /// Moves `from` to `to` in the workspace.
    pub(crate) fn rename(&self, from: &str, to: &str) {
        let to = self.ws(to);
        if let Some(parent) = to.parent() {
            fs::create_dir_all(parent).unwrap();
        }
        fs::rename(self.ws(from), to).unwrap();
    }

    /// The tree id git computes for the workspace's files (a copy of them, links as
    /// links, without `.git` and without the paths in `leave_out`).
    pub(crate) fn workspace_tree(&self, leave_out: &[&str]) -> String {
        let copy = self.dir.path().join(format!("copy-{}", unique()));
        fs::create_dir(&copy).unwrap();
        let status = Command::new("cp")
            .args(["-a", "--no-dereference"])
            .arg(self.workspace.join("."))
            .arg(&copy)
            .status()
            .unwrap();
        assert!(status.success());
        fs::remove_dir_all(copy.join(".git")).unwrap();
        for rel in leave_out {
            let path = copy.join(rel);
            if path.is_dir() && !path.is_symlink() {
                fs::remove_dir_all(path).unwrap();
            } else {
                let _ = fs::remove_file(path);
            }
        }
        git(&copy, &["init", "-q"]);
        git(&copy, &["add", "-A", "--force"]);
        git(&copy, &["write-tree"])
    }

    /// Applies `patch` with `git apply` (after `git apply --check`) to a fresh clone
    /// of the source at the base commit and returns the resulting tree id.
    pub(crate) fn apply_to_fresh_clone(&self, patch: &[u8]) -> String {
        let name = format!("fresh-{}", unique());
        let fresh = self.dir.path().join(&name);
        git(
            self.dir.path(),
            &["clone", "-q", self.source.to_str().unwrap(), &name],
        );
        git(&fresh, &["checkout", "-q", "--detach", &self.base]);
        let patch_file = self.dir.path().join(format!("{name}.patch"));
        fs::write(&patch_file, patch).unwrap();
        let patch_arg = patch_file.to_str().unwrap();
        git(&fresh, &["apply", "--check", patch_arg]);
        git(&fresh, &["apply", patch_arg]);
        git(&fresh, &["add", "-A", "--force"]);
        git(&fresh, &["write-tree"])
    }
}

/// Writes `content` to `root/rel`, creating parent directories.
pub(crate) fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    if let Some(parent) = path.parent() {
        fs::create_dir_all(parent).unwrap();
    }
    fs::write(path, content).unwrap();
}

/// Sets or clears all executable bits of `path`.
pub(crate) fn set_executable(path: &Path, executable: bool) {
    let mut perms = fs::metadata(path).unwrap().permissions();
    let mode = perms.mode();
    perms.set_mode(if executable {
        mode | 0o111
    } else {
        mode & !0o111
    });
    fs::set_permissions(path, perms).unwrap();
}

/// `len` bytes of binary content (with NUL bytes) derived from `seed`.
pub(crate) fn binary(seed: u8, len: usize) -> Vec<u8> {
    let mut state = u32::from(seed).wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..len)
        .map(|i| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            if i % 7 == 0 { 0 } else { (state >> 8) as u8 }
        })
        .collect()
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
