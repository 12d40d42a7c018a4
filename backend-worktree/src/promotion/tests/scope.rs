//! What the export leaves out (generated paths, a planted link's target content)
//! and how `in_scope` follows the declared outputs.

use std::fs;

use workspace_core::boundary::{ChangeKind, ChangedPath};

use crate::changes::tests::fixture::{Fixture, binary};
use crate::changes::{ChangeOptions, workspace_changes};
use crate::promotion::export_patch;

#[test]
fn promotion_generated_paths_are_not_in_the_patch() {
    let fx = Fixture::new();
    fx.write("target/debug/app", &binary(4, 300));
    fx.write("target/debug/app.d", b"deps\n");
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    11\n}\n");
    let options = ChangeOptions::skipping(["target"]);
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &["src".into()],
        &options,
    )
    .unwrap();
    let text = String::from_utf8_lossy(&export.patch);
    assert!(!text.contains("target/"), "{text}");
    assert_eq!(
        export.changes,
        vec![ChangedPath {
            path: "src/lib.rs".into(),
            change: ChangeKind::Modified,
            in_scope: true,
            ignored: false,
            not_in_patch: None,
        }]
    );
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&["target"])
    );
}

#[test]
fn promotion_in_scope_follows_outputs() {
    let fx = Fixture::new();
    fx.write("src/lib.rs", b"changed\n");
    fx.write("srcs/other.rs", b"not under src\n");
    fx.write("README.md", b"out of scope\n");
    fx.rename("docs/old-name.md", "src/moved-in.md");
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &["src".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    let scope: Vec<(&str, bool)> = export
        .changes
        .iter()
        .map(|c| (c.path.as_str(), c.in_scope))
        .collect();
    assert_eq!(
        scope,
        vec![
            ("README.md", false),
            ("src/lib.rs", true),
            // Moved from outside the outputs: the deletion of docs/old-name.md is not.
            ("src/moved-in.md", false),
            ("srcs/other.rs", false),
        ]
    );
    let everything = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert!(everything.changes.iter().all(|c| c.in_scope));
    assert_eq!(everything.patch_sha256, export.patch_sha256);
    let nothing = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert!(nothing.changes.iter().all(|c| !c.in_scope));
}

#[test]
fn promotion_planted_link_to_host_secret_exports_only_the_link() {
    let fx = Fixture::new();
    let secret = fx.dir.path().join("host-secret.txt");
    fs::write(&secret, b"TOP-SECRET-CONTENT-1234\n").unwrap();
    let secret_dir = fx.dir.path().join("host-dir");
    fs::create_dir(&secret_dir).unwrap();
    fs::write(secret_dir.join("id_rsa"), b"TOP-SECRET-KEY-5678\n").unwrap();
    fx.symlink(secret.to_str().unwrap(), "planted");
    fx.symlink(secret_dir.to_str().unwrap(), "planted-dir");
    // An existing link retargeted at the secret, too.
    fx.symlink(secret.to_str().unwrap(), "link");

    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    let text = String::from_utf8_lossy(&export.patch);
    assert!(text.contains("new file mode 120000\n"), "{text}");
    assert!(text.contains(&format!("+{}\n", secret.display())), "{text}");
    let changes_json = serde_json::to_string(&export.changes).unwrap();
    for needle in ["TOP-SECRET-CONTENT-1234", "TOP-SECRET-KEY-5678"] {
        assert!(!text.contains(needle), "secret content in the patch");
        assert!(
            !changes_json.contains(needle),
            "secret content in changes.json"
        );
    }
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
            .all(|c| c.new.is_some_and(|n| n.is_symlink()))
    );
    // And the patch applies: the link arrives as a link.
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&[])
    );
}
