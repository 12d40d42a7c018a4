//! Names a patch cannot carry (not UTF-8) and nested repositories: listed in the
//! export with why, left out of the patch (which still applies), never promoted;
//! the same from a checkout and from an overlay's upper directory.

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use workspace_core::boundary::{ChangeKind, NotInPatch, PatchExport};

use crate::changes::ChangeOptions;
use crate::changes::tests::fixture::{Fixture, git};
use crate::layered::diff::export_layered_patch;
use crate::promotion::{PromotionError, export_patch, require_complete};

/// Puts the plants in `root`: a file and a directory whose names are not UTF-8,
/// and a nested repository.
fn plant(root: &Path) {
    fs::write(
        root.join(OsStr::from_bytes(b"bad-\xff.rs")),
        b"fn hidden() {}\n",
    )
    .unwrap();
    let dir = root.join(OsStr::from_bytes(b"dir-\xfe"));
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("inside.txt"), b"inside\n").unwrap();
    fs::create_dir_all(root.join("vendor/lib/.git")).unwrap();
    fs::write(root.join("vendor/lib/.git/config"), b"[core]\n").unwrap();
    fs::write(root.join("vendor/lib/code.rs"), b"fn lib() {}\n").unwrap();
}

fn assert_listed(export: &PatchExport) {
    let listed: Vec<(&str, &ChangeKind, Option<&NotInPatch>)> = export
        .changes
        .iter()
        .map(|c| (c.path.as_str(), &c.change, c.not_in_patch.as_ref()))
        .collect();
    for (path, reason) in [
        ("bad-\\xff.rs", NotInPatch::NotUtf8),
        ("dir-\\xfe", NotInPatch::NotUtf8),
        ("vendor/lib/.git", NotInPatch::NestedRepository),
    ] {
        assert!(
            listed.contains(&(path, &ChangeKind::Added, Some(&reason))),
            "{path} not listed as {reason:?}: {listed:?}"
        );
    }
    // The nested repository's own files around it are ordinary changes.
    assert!(
        listed.contains(&("vendor/lib/code.rs", &ChangeKind::Added, None)),
        "{listed:?}"
    );
    let patch = String::from_utf8_lossy(&export.patch);
    assert!(
        !patch.contains("bad-") && !patch.contains("dir-") && !patch.contains(".git/"),
        "{patch}"
    );
    assert!(
        matches!(require_complete(export), Err(PromotionError::NotInPatch { paths }) if paths.len() == 3)
    );
}

#[test]
fn promotion_lists_names_that_are_not_utf8_and_nested_repositories_from_a_checkout() {
    let fx = Fixture::new();
    plant(&fx.workspace);
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    3\n}\n");
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_listed(&export);
    // What is carried applies: the workspace without what is not.
    let applied = fx.apply_to_fresh_clone(&export.patch);
    let name = |bytes: &[u8]| OsStr::from_bytes(bytes).to_owned();
    fs::remove_file(fx.workspace.join(name(b"bad-\xff.rs"))).unwrap();
    fs::remove_dir_all(fx.workspace.join(name(b"dir-\xfe"))).unwrap();
    fs::remove_dir_all(fx.workspace.join("vendor/lib/.git")).unwrap();
    assert_eq!(applied, fx.workspace_tree(&[]));
}

#[test]
fn promotion_lists_names_that_are_not_utf8_and_nested_repositories_from_an_upper_directory() {
    let fx = Fixture::new();
    let upper = fx.dir.path().join("upper");
    fs::create_dir(&upper).unwrap();
    plant(&upper);
    let export = export_layered_patch(
        &fx.source,
        &fx.base,
        &upper,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_listed(&export);
    // The standalone export of the same files lists the same.
    let checkout = export_patch(
        &fx.source,
        &fx.base,
        &{
            plant(&fx.workspace);
            fx.workspace.clone()
        },
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(export.changes, checkout.changes);
    assert_eq!(export.patch, checkout.patch);
    assert_eq!(git(&fx.source, &["status", "--porcelain"]), "");
}
