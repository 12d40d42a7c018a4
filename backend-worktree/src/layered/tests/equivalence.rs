//! A layered run and a standalone checkout with the same changes give the same
//! patch and the same `changes.json`; provisioning a layered run writes no file of
//! the repository.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

use super::upper::in_overlay;
use crate::changes::ChangeOptions;
use crate::layered::cache::TreeCache;
use crate::layered::diff::export_layered_patch;
use crate::layered::provision::provision_layered;
use crate::promotion::export_patch;
use crate::source::provision_standalone;

pub(crate) fn git(dir: &Path, args: &[&str]) {
    let status = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(["-c", "user.name=t", "-c", "user.email=t@localhost"])
        .args(args)
        .status()
        .expect("run git (install git)");
    assert!(status.success(), "git {args:?}");
}

/// `git` output as text, for assertions.
pub(crate) fn git_output(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .args(args)
        .output()
        .expect("run git (install git)");
    assert!(out.status.success(), "git {args:?}");
    String::from_utf8(out.stdout).unwrap()
}

pub(crate) fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// A repository with files in directories, an executable, a symlink, a file to rename.
pub(crate) fn source_repo(dir: &Path) -> std::path::PathBuf {
    let repo = dir.join("source");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &["init", "-q", "-b", "main"]);
    write(&repo.join("README.md"), "readme\n");
    write(&repo.join("src/lib.rs"), "pub fn f() {}\n");
    write(&repo.join("src/util.rs"), "pub fn g() {}\n");
    write(&repo.join("docs/guide.md"), "guide\nline 2\n");
    write(&repo.join("old/a.txt"), "a\n");
    write(&repo.join("old/b.txt"), "b\n");
    write(&repo.join("run.sh"), "#!/bin/sh\necho run\n");
    std::os::unix::fs::symlink("src/lib.rs", repo.join("lib-link")).unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "base"]);
    repo
}

/// [`source_repo`] with one more commit holding the shapes the layered walk must
/// treat as the standalone one does: directories and files to swap, a directory to
/// remove and recreate, one to replace by a symlink, and a gitlink (`sub`).
fn swap_repo(dir: &Path) -> std::path::PathBuf {
    let repo = source_repo(dir);
    write(&repo.join("dirfile/a.txt"), "dirfile a\n");
    write(&repo.join("dirfile/deep/b.txt"), "dirfile b\n");
    write(&repo.join("filedir"), "a file\n");
    write(&repo.join("opaque/x.txt"), "opaque x\n");
    write(&repo.join("opaque/y.txt"), "opaque y\n");
    write(&repo.join("opaque/inner/z.txt"), "opaque z\n");
    write(&repo.join("linkdir/l.txt"), "linkdir l\n");
    git(&repo, &["add", "-A"]);
    let gitlink = git_output(&repo, &["rev-parse", "HEAD"]);
    git(
        &repo,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{},sub", gitlink.trim()),
        ],
    );
    git(&repo, &["commit", "-q", "-m", "swaps"]);
    repo
}

const AGENT: &str = "echo changed >> src/lib.rs; rm README.md; mkdir -p new/dir; echo hi > new/dir/file.txt; \
     chmod +x src/util.rs; ln -s src/util.rs util-link; rm lib-link; mv docs/guide.md docs/guide2.md; \
     mv old old2; printf 'bin\\000ary' > data.bin; mkdir target; echo built > target/out; \
     rm -r dirfile; echo 'now a file' > dirfile; \
     rm filedir; mkdir filedir; echo inside > filedir/inside.txt; \
     rm -r opaque; mkdir -p opaque/inner; echo fresh > opaque/x.txt; echo z2 > opaque/inner/z.txt; \
     rm -r linkdir; ln -s src linkdir; \
     mkdir -p sub; echo in-submodule > sub/file.txt; \
     mkdir -p nested/.git; echo '[core]' > nested/.git/config; echo tracked > nested/file.txt; \
     mkfifo new/pipe; rm src/util.rs; mkfifo src/util.rs";

#[test]
fn layered_and_standalone_give_the_same_patch() {
    let dir = TempDir::new().unwrap();
    let repo = swap_repo(dir.path());
    let cache = TreeCache::open(dir.path().join("cache"), u64::MAX).unwrap();
    let options = ChangeOptions::skipping(["target"]);
    let outputs = ["src".to_owned(), "new".to_owned()];

    let run_dir = dir.path().join("run-layered");
    let layered = provision_layered(&cache, &repo, "main", &run_dir).unwrap();
    in_overlay(
        &layered.lower,
        &layered.upper,
        &layered.work,
        &layered.merged,
        AGENT,
    );
    let commit = layered.commit.to_hex().to_string();
    let from_layers =
        export_layered_patch(&repo, &commit, &layered.upper, &outputs, &options).unwrap();

    let workspace = dir.path().join("run-standalone/checkout");
    provision_standalone(&repo, "main", &workspace).unwrap();
    let status = Command::new("sh")
        .current_dir(&workspace)
        .args(["-euc", AGENT])
        .status()
        .unwrap();
    assert!(status.success());
    let from_checkout = export_patch(&repo, &commit, &workspace, &outputs, &options).unwrap();

    assert!(!from_checkout.changes.is_empty());
    let paths: Vec<&str> = from_checkout
        .changes
        .iter()
        .map(|c| c.path.as_str())
        .collect();
    for expected in [
        "dirfile",
        "dirfile/a.txt",
        "dirfile/deep/b.txt",
        "filedir",
        "filedir/inside.txt",
        "opaque/inner/z.txt",
        "opaque/x.txt",
        "opaque/y.txt",
        "linkdir",
        "linkdir/l.txt",
        "nested/file.txt",
    ] {
        assert!(paths.contains(&expected), "{expected} missing: {paths:?}");
    }
    assert!(
        paths
            .iter()
            .all(|p| !p.starts_with("sub") && (!p.contains(".git") || *p == "nested/.git")),
        "{paths:?}"
    );
    // The nested repository is listed, not carried, and not walked into.
    let nested = from_checkout
        .changes
        .iter()
        .find(|c| c.path == "nested/.git")
        .unwrap();
    assert_eq!(
        nested.not_in_patch,
        Some(workspace_core::boundary::NotInPatch::NestedRepository)
    );
    assert!(!String::from_utf8_lossy(&from_checkout.patch).contains("nested/.git"));
    assert_eq!(
        String::from_utf8_lossy(&from_layers.patch),
        String::from_utf8_lossy(&from_checkout.patch)
    );
    assert_eq!(from_layers.patch_sha256, from_checkout.patch_sha256);
    assert_eq!(from_layers.changes, from_checkout.changes);
    // The lower layer is still the commit, untouched.
    assert_eq!(
        std::fs::read_to_string(layered.lower.join("README.md")).unwrap(),
        "readme\n"
    );
}

#[test]
fn a_second_run_of_the_commit_reuses_the_base_tree_and_writes_only_git_metadata() {
    let dir = TempDir::new().unwrap();
    let repo = source_repo(dir.path());
    let cache = TreeCache::open(dir.path().join("cache"), u64::MAX).unwrap();
    let first = provision_layered(&cache, &repo, "main", &dir.path().join("run-1")).unwrap();
    let second = provision_layered(&cache, &repo, "main", &dir.path().join("run-2")).unwrap();
    assert_eq!(first.lower, second.lower);

    // The run's own directories hold nothing of the repository but `.git`.
    let upper: Vec<_> = std::fs::read_dir(&second.upper)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(upper, [".git"]);
    assert_eq!(std::fs::read_dir(&second.work).unwrap().count(), 0);
    // And git inside the merged view sees a clean checkout of the commit.
    let status_file = dir.path().join("status.txt");
    in_overlay(
        &second.lower,
        &second.upper,
        &second.work,
        &second.merged,
        &format!(
            "GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 git -c safe.directory='*' status --porcelain > {}",
            status_file.display()
        ),
    );
    assert_eq!(std::fs::read_to_string(&status_file).unwrap(), "");
    // An untouched run has an empty patch.
    let commit = second.commit.to_hex().to_string();
    let export = export_layered_patch(
        &repo,
        &commit,
        &second.upper,
        &[],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert!(export.patch.is_empty() && export.changes.is_empty());
}
