//! A stored archive that was altered is refused before anything is written.

use std::fs;

use super::fixture::{Fixture, agent_edits};
use crate::changes::ChangeOptions;
use crate::snapshot::{RestoreOptions, SnapshotError, capture, restore, restore_opts};

#[test]
fn snapshot_flipped_byte_is_refused_before_anything_is_written() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    agent_edits(&ws);
    let snapshot = capture(
        &fx.repo,
        &fx.commit,
        &ws,
        &fx.store,
        &ChangeOptions::default(),
    )
    .unwrap();
    let original = fs::read(&snapshot.path).unwrap();
    let dest = fx.path("dest");
    let len = original.len();
    // A header, the manifest, a file's content, the middle, the end padding.
    for at in [0, 148, 600, len / 3, len / 2, len - 1] {
        let mut tampered = original.clone();
        tampered[at] ^= 0x01;
        fs::write(&snapshot.path, &tampered).unwrap();
        let err = restore(&fx.repo, &fx.store, &snapshot.digest, &dest).unwrap_err();
        match &err {
            SnapshotError::DigestMismatch {
                path,
                expected,
                actual,
            } => {
                assert_eq!(path, &snapshot.path);
                assert_eq!(expected, &snapshot.digest);
                assert_ne!(actual, &snapshot.digest);
            }
            other => panic!("byte {at}: expected DigestMismatch, got {other}"),
        }
        assert!(!dest.exists(), "byte {at}: something was written at dest");
    }
    // Truncated too.
    fs::write(&snapshot.path, &original[..len - 512]).unwrap();
    let err = restore(&fx.repo, &fx.store, &snapshot.digest, &dest).unwrap_err();
    assert!(matches!(err, SnapshotError::DigestMismatch { .. }), "{err}");
    assert!(!dest.exists());

    // Positive control: the untouched archive restores.
    fs::write(&snapshot.path, &original).unwrap();
    restore(&fx.repo, &fx.store, &snapshot.digest, &dest).unwrap();
    assert_eq!(fx.changes(&dest), fx.changes(&ws));
}

#[test]
fn snapshot_refuses_digests_that_are_not_a_sha256_and_missing_archives() {
    let fx = Fixture::new();
    let dest = fx.path("dest");
    for digest in [
        "../../etc/passwd",
        "abc",
        &"g".repeat(64),
        &format!("{}/x", "a".repeat(62)),
    ] {
        let err = restore(&fx.repo, &fx.store, digest, &dest).unwrap_err();
        assert!(
            matches!(err, SnapshotError::InvalidDigest { .. }),
            "{digest}: {err}"
        );
    }
    let err = restore(&fx.repo, &fx.store, &"a".repeat(64), &dest).unwrap_err();
    assert!(matches!(err, SnapshotError::Io { .. }), "{err}");
    assert!(!dest.exists());
}

#[test]
fn snapshot_refuses_another_base_commit_than_expected() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    agent_edits(&ws);
    let snapshot = capture(
        &fx.repo,
        &fx.commit,
        &ws,
        &fx.store,
        &ChangeOptions::default(),
    )
    .unwrap();
    let dest = fx.path("dest");
    let other = "0".repeat(40);
    let err = restore_opts(
        &fx.repo,
        &fx.store,
        &snapshot.digest,
        &dest,
        &RestoreOptions::expecting_base(&other),
    )
    .unwrap_err();
    assert!(
        matches!(err, SnapshotError::BaseCommitMismatch { .. }),
        "{err}"
    );
    assert!(!dest.exists());
    // Upper-case digests name the same archive.
    let upper = snapshot.digest.to_ascii_uppercase();
    let options = RestoreOptions::expecting_base(&fx.commit);
    restore_opts(&fx.repo, &fx.store, &upper, &dest, &options).unwrap();
}
