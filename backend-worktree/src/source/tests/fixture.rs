//! Fixture repositories built with the git CLI (tests only), isolated from the host's
//! git configuration.

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use workspace_core::digest::sha256_hex;

/// Runs git in `dir` with no global or system configuration; panics on failure.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = git_output(dir, args);
    assert!(
        out.status.success(),
        "git {args:?} in {} failed: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Runs git and returns its raw output, success or not.
pub fn git_output(dir: &Path, args: &[&str]) -> std::process::Output {
    Command::new("git")
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env_remove("GIT_DIR")
        .env_remove("GIT_WORK_TREE")
        .env_remove("GIT_INDEX_FILE")
        .env_remove("GIT_OBJECT_DIRECTORY")
        .env_remove("GIT_ALTERNATE_OBJECT_DIRECTORIES")
        .args([
            "-c",
            "user.name=Fixture",
            "-c",
            "user.email=fixture@example.invalid",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "protocol.file.allow=always",
            "-c",
            "commit.gpgsign=false",
            "-c",
            "tag.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// A fixture repository in a temporary directory.
pub struct Repo {
    /// Keeps the directory alive.
    pub tmp: TempDir,
    /// The repository's work tree (its `.git` inside).
    pub path: PathBuf,
}

impl Repo {
    /// An empty repository.
    pub fn init() -> Self {
        let tmp = TempDir::new().unwrap();
        let path = tmp.path().join("source");
        fs::create_dir(&path).unwrap();
        git(&path, &["init", "-q"]);
        Self { tmp, path }
    }

    /// A repository with two commits: files, a nested file, an executable, a symlink,
    /// an annotated tag `v1` on the first commit and a branch `main` at the second.
    pub fn standard() -> Self {
        let repo = Self::init();
        repo.write("a.txt", "alpha\n");
        repo.write("dir/b.txt", "beta\n");
        repo.write("dir/deeper/c.txt", "gamma\n");
        repo.write("run.sh", "#!/bin/sh\necho hi\n");
        set_mode(&repo.path.join("run.sh"), 0o755);
        std::os::unix::fs::symlink("a.txt", repo.path.join("link")).unwrap();
        repo.write(".env.example", "KEY=value\n");
        repo.commit("first");
        git(&repo.path, &["tag", "-a", "v1", "-m", "version one"]);
        repo.write("a.txt", "alpha two\n");
        repo.commit("second");
        repo
    }

    /// Writes `rel` (creating parents).
    pub fn write(&self, rel: &str, content: &str) {
        let path = self.path.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, content).unwrap();
    }

    /// Adds everything and commits; returns the commit id.
    pub fn commit(&self, message: &str) -> String {
        git(&self.path, &["add", "-A"]);
        git(&self.path, &["commit", "-q", "-m", message]);
        self.rev("HEAD")
    }

    /// `git rev-parse rev`.
    pub fn rev(&self, rev: &str) -> String {
        git(&self.path, &["rev-parse", rev]).trim().to_owned()
    }

    /// A destination path (not created) inside the fixture's temporary directory.
    pub fn dest(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }
}

/// Sets the permission bits of `path`.
pub fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

/// The sha256 of every file (and symlink target) under `dir`, by relative path.
pub fn digest_tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap() {
            let entry = entry.unwrap();
            let ty = entry.file_type().unwrap();
            let path = entry.path();
            let rel = path.strip_prefix(dir).unwrap().to_owned();
            if ty.is_dir() {
                out.insert(rel, "dir".to_owned());
                stack.push(path);
            } else if ty.is_symlink() {
                let target = fs::read_link(&path).unwrap();
                out.insert(rel, format!("link:{}", target.display()));
            } else {
                let data = fs::read(&path).unwrap();
                out.insert(rel, sha256_hex(&data));
            }
        }
    }
    out
}
