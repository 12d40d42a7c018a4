//! A source repository, an agent's edits of every kind, and comparisons of trees.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::changes::{Change, ChangeOptions, workspace_changes};
use crate::source::provision_standalone;

/// Runs git in `dir` isolated from the host's configuration; returns stdout.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args(args)
        .output()
        .expect("run git (install git)");
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Writes `rel` under `root`, creating parents.
pub fn write(root: &Path, rel: &str, content: &[u8]) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

/// A long path (over the 100 bytes of a tar header's name field).
pub const LONG: &str = "deep/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa/bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb/cccccccccccccccccccccccccccccccccccccccc/file.txt";

/// A temporary directory with a source repository of one commit.
pub struct Fixture {
    /// Keeps everything alive.
    pub tmp: TempDir,
    /// The source repository.
    pub repo: PathBuf,
    /// Its only commit (full id).
    pub commit: String,
    /// The snapshot store.
    pub store: PathBuf,
}

impl Fixture {
    /// Files in directories, an executable, symlinks (one to a directory), a
    /// binary, a directory to be replaced by a file.
    pub fn new() -> Self {
        let tmp = TempDir::new().unwrap();
        let repo = tmp.path().join("source");
        fs::create_dir(&repo).unwrap();
        git(&repo, &["init", "-q", "-b", "main"]);
        write(&repo, "README.md", b"readme\n");
        write(&repo, "src/lib.rs", b"pub fn f() {}\n");
        write(&repo, "src/util.rs", b"pub fn g() {}\n");
        write(&repo, "docs/guide.md", b"guide\nline 2\n");
        write(&repo, "old/a.txt", b"a\n");
        write(&repo, "old/b.txt", b"b\n");
        write(&repo, "typed", b"becomes a link\n");
        write(&repo, "run.sh", b"#!/bin/sh\necho run\n");
        fs::set_permissions(repo.join("run.sh"), fs::Permissions::from_mode(0o755)).unwrap();
        symlink("src/lib.rs", repo.join("lib-link")).unwrap();
        symlink("README.md", repo.join("retarget-link")).unwrap();
        symlink("src", repo.join("dirlink")).unwrap();
        // Points next to a checkout in the temporary directory: `<tmp>/host`.
        symlink("../host", repo.join("host-link")).unwrap();
        git(&repo, &["add", "-A"]);
        git(&repo, &["commit", "-q", "-m", "base"]);
        let commit = git(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
        let store = tmp.path().join("store");
        Self {
            tmp,
            repo,
            commit,
            store,
        }
    }

    /// A path (not created) in the temporary directory.
    pub fn path(&self, name: &str) -> PathBuf {
        self.tmp.path().join(name)
    }

    /// A fresh standalone checkout of the commit at `name`.
    pub fn checkout(&self, name: &str) -> PathBuf {
        let ws = self.path(name);
        provision_standalone(&self.repo, &self.commit, &ws).unwrap();
        ws
    }

    /// The changes of `ws` against the commit.
    pub fn changes(&self, ws: &Path) -> Vec<Change> {
        workspace_changes(&self.repo, &self.commit, ws, &ChangeOptions::default()).unwrap()
    }
}

/// Edits of every kind an agent makes.
pub fn agent_edits(ws: &Path) {
    let mut lib = fs::read(ws.join("src/lib.rs")).unwrap();
    lib.extend_from_slice(b"pub fn changed() {}\n");
    fs::write(ws.join("src/lib.rs"), lib).unwrap();
    fs::remove_file(ws.join("README.md")).unwrap();
    write(ws, "new/dir/file.txt", b"untracked in a new directory\n");
    write(
        ws,
        "名前 with spaces/naïve file ü.txt",
        "non-ASCII ✓\n".as_bytes(),
    );
    write(ws, LONG, b"a long path\n");
    fs::set_permissions(ws.join("src/util.rs"), fs::Permissions::from_mode(0o755)).unwrap();
    fs::rename(ws.join("docs/guide.md"), ws.join("docs/guide2.md")).unwrap();
    symlink("src/util.rs", ws.join("util-link")).unwrap();
    fs::remove_file(ws.join("retarget-link")).unwrap();
    symlink("src/lib.rs", ws.join("retarget-link")).unwrap();
    fs::remove_file(ws.join("typed")).unwrap();
    symlink("src//lib.rs", ws.join("typed")).unwrap();
    let long_target = format!("{}/../{}", "x".repeat(120), LONG);
    symlink(long_target, ws.join("long-link")).unwrap();
    let mut binary = b"bin\0ary\xff\xfe".to_vec();
    binary.extend((0..=255u8).cycle().take(3000));
    write(ws, "data.bin", &binary);
    fs::remove_dir_all(ws.join("old")).unwrap();
    write(ws, "old", b"a file where a directory was\n");
    write(ws, "empty.txt", b"");
}

/// Every path of `changes` that exists in `ws`: a file's mode bit and bytes, or a
/// symlink's target text.
pub fn contents(ws: &Path, changes: &[Change]) -> BTreeMap<String, (String, Vec<u8>)> {
    let mut out = BTreeMap::new();
    for change in changes.iter().filter(|c| c.new.is_some()) {
        let path = ws.join(&change.path);
        let meta = fs::symlink_metadata(&path).unwrap();
        let value = if meta.file_type().is_symlink() {
            let target = fs::read_link(&path).unwrap();
            (
                "link".to_owned(),
                target.into_os_string().into_encoded_bytes(),
            )
        } else {
            let exec = meta.permissions().mode() & 0o111 != 0;
            (format!("file exec={exec}"), fs::read(&path).unwrap())
        };
        out.insert(change.path.clone(), value);
    }
    out
}
