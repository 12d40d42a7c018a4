//! The layered diff reads only what a change touches, names what it could not read,
//! and walks the upper directory by handle, one component at a time. The upper
//! directories here are plain directories shaped like an overlay's: no mount needed.

use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use cap_std::ambient_authority;
use cap_std::fs::Dir;
use tempfile::TempDir;

use super::equivalence::{git, git_output, source_repo, write};
use crate::changes::{ChangeOptions, ChangesError};
use crate::layered::diff::{LayeredDiffError, export_layered_patch};
use crate::layered::upper::{UpperEntry, walk_upper};

/// [`source_repo`] plus `src/deep/inner.rs`, whose tree object is then removed from
/// the object database: only a diff that traverses `src` (or looks below
/// `src/deep`) needs it.
fn repo_missing_a_subtree(dir: &Path) -> (std::path::PathBuf, String, String) {
    let repo = source_repo(dir);
    write(&repo.join("src/deep/inner.rs"), "inner\n");
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "deep"]);
    let commit = git_output(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let deep = git_output(&repo, &["rev-parse", "HEAD:src/deep"])
        .trim()
        .to_owned();
    let object = repo.join(".git/objects").join(&deep[..2]).join(&deep[2..]);
    std::fs::remove_file(object).unwrap();
    (repo, commit, deep)
}

fn upper_with(dir: &Path, files: &[(&str, &str)]) -> std::path::PathBuf {
    let upper = dir.join("upper");
    std::fs::create_dir(&upper).unwrap();
    for (path, text) in files {
        write(&upper.join(path), text);
    }
    upper
}

#[test]
fn layered_diff_of_a_file_does_not_traverse_its_parent_directories() {
    let dir = TempDir::new().unwrap();
    let (repo, commit, _) = repo_missing_a_subtree(dir.path());
    let upper = upper_with(dir.path(), &[("src/lib.rs", "pub fn f() {}\nchanged\n")]);
    let export = export_layered_patch(
        &repo,
        &commit,
        &upper,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    let paths: Vec<&str> = export.changes.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(paths, ["src/lib.rs"]);
}

#[test]
fn layered_diff_errors_name_the_base_path() {
    let dir = TempDir::new().unwrap();
    let (repo, commit, _) = repo_missing_a_subtree(dir.path());
    // A file replacing the directory: its subtree must be traversed.
    let upper = upper_with(dir.path(), &[("src/deep", "now a file\n")]);
    let err =
        export_layered_patch(&repo, &commit, &upper, &[], &ChangeOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LayeredDiffError::ReadBasePath { operation: "traverse", path, .. } if path == "src/deep"),
        "{err:?}"
    );
    assert!(err.to_string().contains("src/deep"), "{err}");
    std::fs::remove_dir_all(&upper).unwrap();
    // A file below it: looking it up needs the missing tree.
    let upper = upper_with(dir.path(), &[("src/deep/inner.rs", "changed\n")]);
    let err =
        export_layered_patch(&repo, &commit, &upper, &[], &ChangeOptions::default()).unwrap_err();
    assert!(
        matches!(&err, LayeredDiffError::ReadBasePath { operation: "look up", path, .. } if path == "src/deep/inner.rs"),
        "{err:?}"
    );
}

#[test]
fn layered_diff_refuses_a_non_utf8_base_path_as_the_standalone_one_does() {
    let dir = TempDir::new().unwrap();
    let repo = source_repo(dir.path());
    std::fs::create_dir(repo.join("weird")).unwrap();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff.txt");
    std::fs::write(repo.join("weird").join(name), "x\n").unwrap();
    git(&repo, &["add", "-A"]);
    git(&repo, &["commit", "-q", "-m", "weird"]);
    let commit = git_output(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let upper = upper_with(dir.path(), &[("weird", "now a file\n")]);
    let err =
        export_layered_patch(&repo, &commit, &upper, &[], &ChangeOptions::default()).unwrap_err();
    assert!(
        matches!(
            &err,
            LayeredDiffError::Changes {
                source: ChangesError::NonUtf8Path { path },
                ..
            } if path.as_os_str().as_bytes() == b"weird/bad-\xff.txt"
        ),
        "{err:?}"
    );
}

#[test]
fn layered_upper_walk_reads_a_tree_deeper_than_path_max() {
    let dir = TempDir::new().unwrap();
    let repo = source_repo(dir.path());
    let commit = git_output(&repo, &["rev-parse", "HEAD"]).trim().to_owned();
    let upper = dir.path().join("upper");
    std::fs::create_dir(&upper).unwrap();
    let name = "twenty-characters-xx";
    assert_eq!(name.len(), 20);
    let mut at = Dir::open_ambient_dir(&upper, ambient_authority()).unwrap();
    for _ in 0..300 {
        at.create_dir(name).unwrap();
        at = at.open_dir(name).unwrap();
    }
    at.write("deep.txt", "deep\n").unwrap();
    let expected = format!("{}/deep.txt", vec![name; 300].join("/"));
    assert!(expected.len() > 4096);

    let entries = walk_upper(&upper).unwrap();
    assert_eq!(
        entries,
        [UpperEntry::File {
            path: expected.clone(),
            executable: false
        }]
    );
    let export = export_layered_patch(
        &repo,
        &commit,
        &upper,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(export.changes.len(), 1);
    assert_eq!(export.changes[0].path, expected);
    assert!(String::from_utf8_lossy(&export.patch).contains("+deep\n"));
}
