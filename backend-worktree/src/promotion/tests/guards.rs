//! What an export leaves out and a review branch refuses: paths git would refuse
//! to write (or that would act on a reviewer's checkout) are listed, never carried
//! and never promoted; changes outside the declared outputs without an approval
//! of the patch, and content beyond the memory caps, are refused.

use std::error::Error as _;
use std::fs;
use std::path::Path;

use workspace_core::RunId;
use workspace_core::boundary::{
    ApprovalRecord, ChangeKind, ChangedPath, NotInPatch, PatchExport, PromotionRecord,
    PromotionRequest,
};
use workspace_core::contract::Approval;
use workspace_core::digest::sha256_hex;

use super::review::contract;
use crate::changes::tests::fixture::{Fixture, git};
use crate::changes::{ChangeOptions, ChangesError, ContentLimits, MAX_CONTENT_BYTES, read_current};
use crate::layered::diff::{LayeredDiffError, export_layered_patch, export_layered_patch_within};
use crate::promotion::patch::export_patch_within;
use crate::promotion::review::{ReviewTarget, create_review_branch_within};
use crate::promotion::{PromotionError, create_review_branch, export_patch};

/// A plant: the path it puts in a workspace, and how.
enum Plant {
    File(&'static str),
    Link(&'static str),
}

impl Plant {
    fn path(&self) -> &'static str {
        match self {
            Plant::File(path) | Plant::Link(path) => path,
        }
    }

    fn put(&self, root: &Path) {
        let path = root.join(self.path());
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        match self {
            Plant::File(_) => fs::write(&path, b"#!/bin/sh\ntouch /tmp/pwned\n").unwrap(),
            Plant::Link(_) => std::os::unix::fs::symlink("/etc/passwd", &path).unwrap(),
        }
    }
}

const PLANTS: &[Plant] = &[
    Plant::File(".GIT/hooks/post-checkout"),
    Plant::File(".GIT/config"),
    Plant::File("x/.GiT/config"),
    Plant::File(".git /config"),
    Plant::File(".git./config"),
    Plant::File("git~1/config"),
    Plant::File(".g\u{200c}it/config"),
    Plant::File("sub/.Git/hooks/pre-commit"),
    Plant::Link(".gitmodules"),
    Plant::Link(".gitattributes"),
    Plant::Link(".gitignore"),
];

fn refused_path(err: &PromotionError) -> Option<&str> {
    match err {
        PromotionError::Changes {
            source: ChangesError::RefusedPath { path, .. },
            ..
        } => Some(path),
        _ => None,
    }
}

fn run() -> RunId {
    RunId::new("run-guards").unwrap()
}

fn review(
    fx: &Fixture,
    export: &PatchExport,
    outputs: &[String],
    approvals: Vec<ApprovalRecord>,
    limits: ContentLimits,
) -> Result<PromotionRecord, PromotionError> {
    let request = PromotionRequest {
        patch_sha256: export.patch_sha256.clone(),
        checks: vec![],
        approvals,
    };
    let target = ReviewTarget {
        source_repo: &fx.source,
        run_id: &run(),
        base_commit: &fx.base,
        workspace: &fx.workspace,
    };
    create_review_branch_within(
        &target,
        export,
        outputs,
        &request,
        &contract(&[], Approval::DangerNone),
        limits,
    )
}

/// An export as a caller could hand it in: listing `path` as added.
fn listing(path: &str) -> PatchExport {
    PatchExport {
        patch: Vec::new(),
        patch_sha256: sha256_hex(b""),
        changes: vec![ChangedPath {
            path: path.into(),
            change: ChangeKind::Added,
            in_scope: true,
            ignored: false,
            not_in_patch: None,
        }],
    }
}

fn no_review_ref(fx: &Fixture) {
    assert_eq!(git(&fx.source, &["for-each-ref", "refs/heads/review"]), "");
}

/// The change `export` lists at `path`, which must say the patch does not carry it
/// because git refuses it.
fn refused_by_git<'a>(export: &'a PatchExport, path: &str) -> &'a ChangedPath {
    let found = export
        .changes
        .iter()
        .find(|c| c.path == path)
        .unwrap_or_else(|| panic!("{path} not listed: {:?}", export.changes));
    assert!(
        matches!(&found.not_in_patch, Some(NotInPatch::RefusedByGit { rule }) if !rule.is_empty()),
        "{found:?}"
    );
    found
}

#[test]
fn promotion_lists_paths_git_refuses_leaves_them_out_of_patch_and_layered_patch_and_refuses_review()
{
    for plant in PLANTS {
        let fx = Fixture::new();
        plant.put(&fx.workspace);
        // The positive control: an ordinary change beside it is carried.
        fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    2\n}\n");

        let export = export_patch(
            &fx.source,
            &fx.base,
            &fx.workspace,
            &[".".into()],
            &ChangeOptions::default(),
        )
        .unwrap();
        refused_by_git(&export, plant.path());
        let patch = String::from_utf8_lossy(&export.patch);
        assert!(patch.contains("b/src/lib.rs"), "{patch}");
        assert!(!patch.contains(plant.path()), "{patch}");
        assert_eq!(
            fx.apply_to_fresh_clone(&export.patch),
            fx.workspace_tree(&[plant.path()])
        );

        let upper = fx.dir.path().join("upper");
        fs::create_dir(&upper).unwrap();
        plant.put(&upper);
        let layered = export_layered_patch(
            &fx.source,
            &fx.base,
            &upper,
            &[".".into()],
            &ChangeOptions::default(),
        )
        .unwrap();
        refused_by_git(&layered, plant.path());
        assert!(
            layered.patch.is_empty(),
            "{}",
            String::from_utf8_lossy(&layered.patch)
        );

        // The export as it is: promotion names what the patch leaves out.
        let err = review(
            &fx,
            &export,
            &[".".into()],
            vec![],
            ContentLimits::default(),
        )
        .unwrap_err();
        assert!(
            matches!(&err, PromotionError::NotInPatch { paths } if paths == &[plant.path()]),
            "{err:?}"
        );
        // An export handed in that lists the path as carried: refused all the same.
        let err = review(
            &fx,
            &listing(plant.path()),
            &[".".into()],
            vec![],
            ContentLimits::default(),
        )
        .unwrap_err();
        assert_eq!(refused_path(&err), Some(plant.path()), "{err:?}");
        assert!(err.source().is_some(), "{err}");
        no_review_ref(&fx);
    }
}

#[test]
fn promotion_splits_a_rename_onto_a_refused_path_and_carries_its_deletion() {
    let fx = Fixture::new();
    fx.rename("docs/old-name.md", ".GIT/old-name.md");
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    let refused = refused_by_git(&export, ".GIT/old-name.md");
    assert_eq!(refused.change, ChangeKind::Added);
    let deleted = export
        .changes
        .iter()
        .find(|c| c.path == "docs/old-name.md")
        .unwrap();
    assert_eq!(
        (&deleted.change, &deleted.not_in_patch),
        (&ChangeKind::Deleted, &None)
    );
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&[".GIT"])
    );
}

#[test]
fn promotion_plain_git_files_are_still_exported() {
    let fx = Fixture::new();
    fx.write(".gitattributes", b"*.bin binary\n");
    fx.write(".gitignore", b"target/\n");
    fx.write(".github/workflows/ci.yml", b"on: push\n");
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(export.changes.len(), 3);
    assert_eq!(
        fx.apply_to_fresh_clone(&export.patch),
        fx.workspace_tree(&[])
    );
}

fn approval(digest: &str) -> ApprovalRecord {
    ApprovalRecord {
        approver: "reviewer@example.com".into(),
        patch_sha256: digest.into(),
        at_unix_ms: 1,
        recorded_by: None,
    }
}

#[test]
fn promotion_review_refuses_out_of_scope_changes_without_an_approval_of_the_patch() {
    let fx = Fixture::new();
    fx.write("src/lib.rs", b"pub fn one() -> u32 {\n    5\n}\n");
    fx.write("README.md", b"out of scope\n");
    fx.rename("docs/old-name.md", "src/moved-in.md");
    let outputs = ["src".to_owned()];
    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &outputs,
        &ChangeOptions::default(),
    )
    .unwrap();
    let digest = export.patch_sha256.clone();
    let out = vec!["README.md".to_owned(), "docs/old-name.md".to_owned()];

    let promote = |approvals| {
        create_review_branch(
            &fx.source,
            &run(),
            &fx.base,
            &fx.workspace,
            &export,
            &outputs,
            &PromotionRequest {
                patch_sha256: digest.clone(),
                checks: vec![],
                approvals,
            },
            &contract(&[], Approval::DangerNone),
        )
    };
    let err = promote(vec![]).unwrap_err();
    assert!(
        matches!(&err, PromotionError::OutOfScope { paths, approval, .. }
            if paths == &out && matches!(**approval, PromotionError::ApprovalMissing { .. })),
        "{err:?}"
    );
    no_review_ref(&fx);

    let other = "3".repeat(64);
    let err = promote(vec![approval(&other)]).unwrap_err();
    assert!(
        matches!(&err, PromotionError::OutOfScope { paths, approval, .. }
            if paths == &out && matches!(&**approval, PromotionError::StaleApproval { approved, .. } if approved == &other)),
        "{err:?}"
    );
    no_review_ref(&fx);

    let record = promote(vec![approval(&digest)]).unwrap();
    assert_eq!(
        record.review_ref.as_deref(),
        Some("refs/heads/review/run-guards")
    );
    // Everything in scope needs no approval.
    let everything = review(
        &fx,
        &export,
        &[".".into()],
        vec![],
        ContentLimits::default(),
    );
    assert_eq!(everything.unwrap(), record);
}

/// A sparse file of `size` bytes: created at once, using no disk.
fn sparse(path: &Path, size: u64) {
    fs::File::create(path).unwrap().set_len(size).unwrap();
}

fn too_large(err: &ChangesError, expected: &str, expected_size: u64, expected_limit: u64) -> bool {
    matches!(err, ChangesError::TooLarge { path, size, limit }
        if path == expected && *size == expected_size && *limit == expected_limit)
}

/// 300 MiB, beyond [`MAX_CONTENT_BYTES`].
const HUGE: u64 = 300 << 20;

#[test]
fn promotion_refuses_a_sparse_file_beyond_the_per_file_cap_before_reading_it() {
    let fx = Fixture::new();
    sparse(&fx.ws("huge.bin"), HUGE);
    // Refused from its metadata: nothing of it is read.
    let err = read_current(&fx.workspace, "huge.bin").unwrap_err();
    assert!(
        too_large(&err, "huge.bin", HUGE, MAX_CONTENT_BYTES),
        "{err:?}"
    );
    // A review of it (listed as added) is refused, and writes no ref.
    let err = review(
        &fx,
        &listing("huge.bin"),
        &[".".into()],
        vec![],
        ContentLimits::default(),
    )
    .unwrap_err();
    assert!(
        matches!(&err, PromotionError::Changes { source, .. } if too_large(source, "huge.bin", HUGE, MAX_CONTENT_BYTES)),
        "{err:?}"
    );
    no_review_ref(&fx);
}

#[test]
fn promotion_exports_refuse_a_file_beyond_the_per_file_cap() {
    // The walk hashes every file (a 300 MiB one takes a minute in a debug build),
    // so the exports are shown with a smaller cap on a smaller sparse file.
    let limits = ContentLimits {
        per_file: 1 << 20,
        total: 1 << 30,
    };
    let size = 3 << 20;
    let fx = Fixture::new();
    sparse(&fx.ws("huge.bin"), size);
    let err = export_patch_within(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
        limits,
    )
    .unwrap_err();
    assert!(
        matches!(&err, PromotionError::Changes { source, .. } if too_large(source, "huge.bin", size, 1 << 20)),
        "{err:?}"
    );

    let upper = fx.dir.path().join("upper");
    fs::create_dir(&upper).unwrap();
    sparse(&upper.join("huge.bin"), size);
    let err = export_layered_patch_within(
        &fx.source,
        &fx.base,
        &upper,
        &[".".into()],
        &ChangeOptions::default(),
        limits,
    )
    .unwrap_err();
    assert!(
        matches!(&err, LayeredDiffError::Patch(PromotionError::Changes { source, .. }) if too_large(source, "huge.bin", size, 1 << 20)),
        "{err:?}"
    );
}

#[test]
fn promotion_refuses_changes_beyond_the_total_cap() {
    let fx = Fixture::new();
    fx.write("a.txt", &[b'a'; 800]);
    fx.write("b.txt", &[b'b'; 800]);
    let limits = ContentLimits {
        per_file: 1000,
        total: 1500,
    };
    let over_total = |err: &ChangesError| matches!(err, ChangesError::TotalTooLarge { path, total: 1600, limit: 1500 } if path == "b.txt");
    let err = export_patch_within(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
        limits,
    )
    .unwrap_err();
    assert!(
        matches!(&err, PromotionError::Changes { source, .. } if over_total(source)),
        "{err:?}"
    );

    let upper = fx.dir.path().join("upper");
    fs::create_dir(&upper).unwrap();
    fs::write(upper.join("a.txt"), [b'a'; 800]).unwrap();
    fs::write(upper.join("b.txt"), [b'b'; 800]).unwrap();
    let err = export_layered_patch_within(
        &fx.source,
        &fx.base,
        &upper,
        &[".".into()],
        &ChangeOptions::default(),
        limits,
    )
    .unwrap_err();
    assert!(
        matches!(&err, LayeredDiffError::Patch(PromotionError::Changes { source, .. }) if over_total(source)),
        "{err:?}"
    );

    let export = export_patch(
        &fx.source,
        &fx.base,
        &fx.workspace,
        &[".".into()],
        &ChangeOptions::default(),
    )
    .unwrap();
    let err = review(&fx, &export, &[".".into()], vec![], limits).unwrap_err();
    assert!(
        matches!(&err, PromotionError::Changes { source, .. } if over_total(source)),
        "{err:?}"
    );
    no_review_ref(&fx);
    // Within the default caps the same export is promoted.
    review(
        &fx,
        &export,
        &[".".into()],
        vec![],
        ContentLimits::default(),
    )
    .unwrap();
}
