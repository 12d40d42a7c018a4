//! Capture then restore gives back the same tree; capture is deterministic; a
//! planted link is captured as a link; a layered run captures like a checkout.

use std::fs;
use std::os::unix::fs::symlink;

use workspace_core::boundary::ChangeKind;

use super::fixture::{Fixture, LONG, agent_edits, contents, write};
use crate::changes::ChangeOptions;
use crate::snapshot::{capture, capture_layered, inspect, restore};

#[test]
fn snapshot_round_trip_restores_every_kind_of_change() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    agent_edits(&ws);
    let original = fx.changes(&ws);
    let kinds: Vec<&ChangeKind> = original.iter().map(|c| &c.kind).collect();
    for kind in [
        ChangeKind::Added,
        ChangeKind::Modified,
        ChangeKind::Deleted,
        ChangeKind::ModeChanged,
    ] {
        assert!(kinds.contains(&&kind), "{kind:?} missing from {kinds:?}");
    }
    assert!(
        kinds
            .iter()
            .any(|k| matches!(k, ChangeKind::Renamed { .. }))
    );
    assert!(original.iter().any(|c| c.is_type_change()));

    let snapshot = capture(
        &fx.repo,
        &fx.commit,
        &ws,
        &fx.store,
        &ChangeOptions::default(),
    )
    .unwrap();
    assert_eq!(
        snapshot.path,
        fx.store.join(format!("{}.tar", snapshot.digest))
    );
    assert_eq!(
        snapshot.entries,
        original.iter().filter(|c| c.new.is_some()).count()
    );
    let manifest = inspect(&fx.store, &snapshot.digest).unwrap();
    assert_eq!(manifest.base_commit, fx.commit);
    assert!(manifest.deleted.contains(&"README.md".to_owned()));
    // Only the archive is left in the store (the temporary file was renamed).
    assert_eq!(fs::read_dir(&fx.store).unwrap().count(), 1);

    let dest = fx.path("restored");
    let report = restore(&fx.repo, &fx.store, &snapshot.digest, &dest).unwrap();
    assert_eq!(report.workspace, dest);
    assert_eq!(report.base_commit, fx.commit);
    assert_eq!(report.entries, snapshot.entries);
    assert!(
        report.name_status.contains("D\tREADME.md\n"),
        "{}",
        report.name_status
    );
    assert!(
        report
            .name_status
            .contains("R100\tdocs/guide.md\tdocs/guide2.md\n")
    );

    let restored = fx.changes(&dest);
    assert_eq!(restored, original);
    assert_eq!(contents(&dest, &restored), contents(&ws, &original));
    assert_eq!(fs::read(dest.join(LONG)).unwrap(), b"a long path\n");
    assert_eq!(
        fs::read_link(dest.join("typed")).unwrap().as_os_str(),
        "src//lib.rs"
    );
    // The restored checkout is a repository at the base commit.
    let head = super::fixture::git(&dest, &["rev-parse", "HEAD"]);
    assert_eq!(head.trim(), fx.commit);
}

#[test]
fn snapshot_capture_is_deterministic() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    agent_edits(&ws);
    let options = ChangeOptions::default();
    let first = capture(&fx.repo, &fx.commit, &ws, &fx.store, &options).unwrap();
    let second = capture(&fx.repo, &fx.commit, &ws, &fx.path("other-store"), &options).unwrap();
    assert_eq!(first.digest, second.digest);
    assert_eq!(
        fs::read(&first.path).unwrap(),
        fs::read(&second.path).unwrap()
    );

    // The same state made again, at another time, in another checkout.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    let again = fx.checkout("ws-again");
    agent_edits(&again);
    let third = capture(&fx.repo, &fx.commit, &again, &fx.store, &options).unwrap();
    assert_eq!(first.digest, third.digest);

    // Any change gives another digest.
    write(&again, "src/lib.rs", b"other\n");
    let fourth = capture(&fx.repo, &fx.commit, &again, &fx.store, &options).unwrap();
    assert_ne!(first.digest, fourth.digest);
}

#[test]
fn snapshot_captures_a_planted_link_to_a_host_secret_as_a_link() {
    let fx = Fixture::new();
    let secret_bytes = b"TOP-SECRET-7f3a9c-do-not-leak";
    let secret = fx.path("host-secret");
    fs::write(&secret, secret_bytes).unwrap();
    let ws = fx.checkout("ws");
    symlink(&secret, ws.join("planted")).unwrap();
    // And a link to a directory outside, with the secret inside.
    symlink(fx.tmp.path(), ws.join("planted-dir")).unwrap();

    let snapshot = capture(
        &fx.repo,
        &fx.commit,
        &ws,
        &fx.store,
        &ChangeOptions::default(),
    )
    .unwrap();
    let archive = fs::read(&snapshot.path).unwrap();
    assert!(
        !archive
            .windows(secret_bytes.len())
            .any(|w| w == secret_bytes),
        "the secret's bytes are in the archive"
    );

    let dest = fx.path("restored");
    restore(&fx.repo, &fx.store, &snapshot.digest, &dest).unwrap();
    assert_eq!(fs::read_link(dest.join("planted")).unwrap(), secret);
    assert!(
        fs::symlink_metadata(dest.join("planted-dir"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn snapshot_of_a_layered_upper_directory_equals_the_checkouts() {
    let fx = Fixture::new();
    let ws = fx.checkout("ws");
    // The same edits, once in a checkout and once as an overlay upper directory
    // (files, a link, a whiteout for a deletion).
    let upper = fx.path("upper");
    for root in [&ws, &upper] {
        write(root, "src/lib.rs", b"layered edit\n");
        write(root, "new/file.txt", b"new\n");
        symlink("src/util.rs", root.join("util-link")).unwrap();
    }
    fs::remove_file(ws.join("README.md")).unwrap();
    rustix::fs::mknodat(
        rustix::fs::CWD,
        upper.join("README.md"),
        rustix::fs::FileType::CharacterDevice,
        rustix::fs::Mode::empty(),
        0,
    )
    .expect("make a whiteout (needs root)");

    let options = ChangeOptions::default();
    let from_ws = capture(&fx.repo, &fx.commit, &ws, &fx.store, &options).unwrap();
    let from_upper = capture_layered(&fx.repo, &fx.commit, &upper, &fx.store, &options).unwrap();
    assert_eq!(from_ws.digest, from_upper.digest);
    assert_eq!(from_upper.entries, 3);
}
