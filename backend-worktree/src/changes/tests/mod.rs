//! Tests of the workspace walk and comparison against real git repositories.

pub(crate) mod fixture;

use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::process::Command;

use workspace_core::boundary::ChangeKind;

use self::fixture::{Fixture, binary, git};
use super::{
    ChangeOptions, ChangesError, MODE_EXECUTABLE, MODE_FILE, MODE_SYMLINK, workspace_changes,
};

fn kinds(fx: &Fixture, options: &ChangeOptions) -> Vec<(String, ChangeKind)> {
    workspace_changes(&fx.source, &fx.base, &fx.workspace, options)
        .unwrap()
        .into_iter()
        .map(|c| (c.path, c.kind))
        .collect()
}

#[test]
fn changes_fresh_checkout_has_no_changes() {
    let fx = Fixture::new();
    fs::create_dir_all(fx.ws("empty/dir")).unwrap();
    assert_eq!(kinds(&fx, &ChangeOptions::default()), vec![]);
}

#[test]
fn changes_reports_every_kind() {
    let fx = Fixture::new();
    fx.write("added.txt", b"new\n");
    fx.remove("doc/remove-me.txt");
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    2\n}\n");
    fx.chmod("run.sh", true);
    fx.rename("docs/old-name.md", "docs/new name.md");
    fx.symlink("src/lib.rs", "becomes-link.txt");
    let changes = workspace_changes(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &ChangeOptions::default(),
    )
    .unwrap();
    let got: Vec<(&str, &ChangeKind)> =
        changes.iter().map(|c| (c.path.as_str(), &c.kind)).collect();
    assert_eq!(
        got,
        vec![
            ("added.txt", &ChangeKind::Added),
            ("becomes-link.txt", &ChangeKind::Modified),
            ("doc/remove-me.txt", &ChangeKind::Deleted),
            (
                "docs/new name.md",
                &ChangeKind::Renamed {
                    from: "docs/old-name.md".into()
                }
            ),
            ("run.sh", &ChangeKind::ModeChanged),
            ("src/lib.rs", &ChangeKind::Modified),
        ]
    );
    let typed = &changes[1];
    assert!(typed.is_type_change());
    assert_eq!(typed.old.unwrap().mode, MODE_FILE);
    assert_eq!(typed.new.unwrap().mode, MODE_SYMLINK);
    assert_eq!(changes[4].new.unwrap().mode, MODE_EXECUTABLE);
    // Blob ids agree with git's.
    let expected = git(
        &fx.workspace,
        &["hash-object", "--no-filters", "src/lib.rs"],
    );
    assert_eq!(changes[5].new.unwrap().id.to_string(), expected);
}

#[test]
fn changes_symlink_to_host_secret_is_recorded_as_a_link() {
    let fx = Fixture::new();
    let secret = fx.dir.path().join("host-secret");
    fs::write(&secret, b"TOP-SECRET-CONTENT\n").unwrap();
    let secret_dir = fx.dir.path().join("host-dir");
    fs::create_dir(&secret_dir).unwrap();
    fs::write(secret_dir.join("key"), b"KEY").unwrap();
    fx.symlink(secret.to_str().unwrap(), "planted");
    fx.symlink(secret_dir.to_str().unwrap(), "planted-dir");
    let changes = workspace_changes(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(changes.len(), 2);
    let link_blob = |target: &std::path::Path| {
        gix::objs::compute_hash(
            gix::hash::Kind::Sha1,
            gix::objs::Kind::Blob,
            target.as_os_str().as_bytes(),
        )
        .unwrap()
    };
    assert_eq!(changes[0].path, "planted");
    assert_eq!(changes[0].new.unwrap().mode, MODE_SYMLINK);
    assert_eq!(changes[0].new.unwrap().id, link_blob(&secret));
    assert_eq!(changes[1].path, "planted-dir");
    assert_eq!(changes[1].new.unwrap().id, link_blob(&secret_dir));
}

#[test]
fn changes_skip_leaves_generated_paths_out_on_both_sides() {
    let fx = Fixture::new();
    fx.write("target/debug/app", &binary(3, 100));
    fx.write("src/gen.o", b"object");
    fx.remove("doc/remove-me.txt");
    let options = ChangeOptions::skipping(["target", "**/*.o", "doc/"]);
    assert_eq!(kinds(&fx, &options), vec![]);
}

#[test]
fn changes_names_with_spaces_and_unicode() {
    let fx = Fixture::new();
    fx.write("café/naïve file.txt", b"changed\n");
    fx.write("new dir/ü \"q\" \\ b.txt", b"x\n");
    assert_eq!(
        kinds(&fx, &ChangeOptions::default()),
        vec![
            ("café/naïve file.txt".into(), ChangeKind::Modified),
            ("new dir/ü \"q\" \\ b.txt".into(), ChangeKind::Added),
        ]
    );
}

#[test]
fn changes_leave_special_files_out_like_git() {
    let fx = Fixture::new();
    let status = Command::new("mkfifo").arg(fx.ws("pipe")).status().unwrap();
    assert!(
        status.success(),
        "mkfifo (coreutils) is needed for this test"
    );
    let _socket = std::os::unix::net::UnixListener::bind(fx.ws("db.sock")).unwrap();
    let changes = workspace_changes(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &ChangeOptions::default(),
    )
    .unwrap();
    assert!(
        changes
            .iter()
            .all(|c| c.path != "pipe" && c.path != "db.sock"),
        "{changes:?}"
    );
}

#[test]
fn changes_refuses_a_non_utf8_name() {
    let fx = Fixture::new();
    let name = std::ffi::OsStr::from_bytes(b"bad-\xff");
    fs::write(fx.workspace.join(name), b"x").unwrap();
    let err = workspace_changes(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &ChangeOptions::default(),
    )
    .unwrap_err();
    assert!(matches!(err, ChangesError::NonUtf8Path { .. }), "{err}");
}

#[test]
fn changes_leave_gitlinks_unchanged() {
    let fx = Fixture::new();
    let commit = fx.base.clone();
    git(
        &fx.source,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{commit},sub"),
        ],
    );
    git(&fx.source, &["commit", "-q", "-m", "submodule"]);
    let base = git(&fx.source, &["rev-parse", "HEAD"]);
    fs::create_dir_all(fx.ws("sub")).unwrap();
    fs::write(fx.ws("sub/inside"), b"x").unwrap();
    let changes =
        workspace_changes(&fx.source, &base, &fx.workspace, &ChangeOptions::default()).unwrap();
    assert!(changes.is_empty(), "{changes:?}");
}

#[test]
fn changes_rejects_a_bad_commit_id() {
    let fx = Fixture::new();
    let err = workspace_changes(&fx.source, "HEAD", &fx.workspace, &ChangeOptions::default())
        .unwrap_err();
    assert!(matches!(err, ChangesError::InvalidCommitId { .. }), "{err}");
}
