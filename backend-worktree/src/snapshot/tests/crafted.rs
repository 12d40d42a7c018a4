//! Archives crafted by hand (named by their real digest, so the digest check
//! passes) are refused before anything is written, and nothing lands outside the
//! destination.

use std::fs;
use std::path::{Path, PathBuf};

use workspace_core::digest::sha256_hex;

use super::fixture::Fixture;
use crate::snapshot::{
    EntryKind, MANIFEST_VERSION, Manifest, ManifestEntry, SnapshotError, restore,
};

/// One tar entry of a crafted archive: its tar path, content, and whether it is a
/// symlink (content = target).
struct Raw<'a>(&'a str, &'a [u8], bool);

fn entry(path: &str, content: &[u8]) -> ManifestEntry {
    let blob =
        gix::objs::compute_hash(gix::hash::Kind::Sha1, gix::objs::Kind::Blob, content).unwrap();
    ManifestEntry {
        path: path.into(),
        kind: EntryKind::Added,
        from: None,
        mode: "100644".into(),
        blob: blob.to_string(),
        sha256: sha256_hex(content),
        size: content.len() as u64,
    }
}

fn manifest(fx: &Fixture, entries: Vec<ManifestEntry>, deleted: Vec<String>) -> Manifest {
    let tree = super::fixture::git(&fx.repo, &["rev-parse", "HEAD^{tree}"]);
    Manifest {
        version: MANIFEST_VERSION,
        base_commit: fx.commit.clone(),
        base_tree: tree.trim().to_owned(),
        skip: Vec::new(),
        entries,
        deleted,
    }
}

/// Writes a tar of `manifest` (serialized as given) and `raw` into the store under
/// its real sha256; returns the digest.
fn craft(store: &Path, manifest: &Manifest, raw: &[Raw<'_>]) -> String {
    let json = serde_json::to_vec(manifest).unwrap();
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.set_size(json.len() as u64);
    header.set_mode(0o644);
    builder
        .append_data(&mut header, "snapshot.json", json.as_slice())
        .unwrap();
    for Raw(path, content, link) in raw {
        let mut header = tar::Header::new_gnu();
        header.set_mode(0o644);
        if *link {
            header.set_entry_type(tar::EntryType::Symlink);
            header.set_size(0);
            builder
                .append_link(&mut header, path, std::str::from_utf8(content).unwrap())
                .unwrap();
        } else {
            header.set_size(content.len() as u64);
            builder.append_data(&mut header, path, *content).unwrap();
        }
    }
    let bytes = builder.into_inner().unwrap();
    let digest = sha256_hex(&bytes);
    fs::create_dir_all(store).unwrap();
    fs::write(store.join(format!("{digest}.tar")), bytes).unwrap();
    digest
}

/// Restores `digest` into `<tmp>/dest` and checks nothing was left there or next
/// to it (the sentinel is unchanged, no `escape` file appeared).
fn refused(fx: &Fixture, digest: &str) -> SnapshotError {
    let sentinel = fx.path("sentinel");
    fs::write(&sentinel, "unchanged").unwrap();
    let host = fx.path("host");
    fs::create_dir_all(&host).unwrap();
    let dest: PathBuf = fx.path("dest");
    let err = restore(&fx.repo, &fx.store, digest, &dest).unwrap_err();
    assert!(!dest.exists(), "{err}: dest was left behind");
    assert_eq!(fs::read_to_string(&sentinel).unwrap(), "unchanged");
    assert!(!fx.path("escape").exists());
    assert_eq!(
        fs::read_dir(&host).unwrap().count(),
        0,
        "{err}: wrote outside dest"
    );
    err
}

#[test]
fn snapshot_refuses_unsafe_manifest_paths() {
    let fx = Fixture::new();
    for path in [
        "../escape",
        "a/../../escape",
        ".git/config",
        "sub/.git/hooks/pre-commit",
        "/tmp/escape",
        "a//b",
        "./a",
        "nul\0byte",
        "",
    ] {
        let m = manifest(&fx, vec![entry(path, b"x")], Vec::new());
        let digest = craft(&fx.store, &m, &[Raw("tree/escape", b"x", false)]);
        let err = refused(&fx, &digest);
        assert!(
            matches!(err, SnapshotError::UnsafeEntry { .. }),
            "{path:?}: {err}"
        );
    }
    // In the deleted list and as a rename source too.
    let m = manifest(&fx, Vec::new(), vec!["../escape".into()]);
    let err = refused(&fx, &craft(&fx.store, &m, &[]));
    assert!(matches!(err, SnapshotError::UnsafeEntry { .. }), "{err}");
    let mut renamed = entry("b.txt", b"x");
    renamed.kind = EntryKind::Renamed;
    renamed.from = Some(".git/config".into());
    let m = manifest(&fx, vec![renamed], Vec::new());
    let err = refused(
        &fx,
        &craft(&fx.store, &m, &[Raw("tree/b.txt", b"x", false)]),
    );
    assert!(matches!(err, SnapshotError::UnsafeEntry { .. }), "{err}");
    // Duplicates.
    let m = manifest(
        &fx,
        vec![entry("a.txt", b"x"), entry("a.txt", b"x")],
        Vec::new(),
    );
    let raw = [
        Raw("tree/a.txt", b"x", false),
        Raw("tree/a.txt", b"x", false),
    ];
    let err = refused(&fx, &craft(&fx.store, &m, &raw));
    assert!(matches!(err, SnapshotError::UnsafeEntry { .. }), "{err}");
}

#[test]
fn snapshot_refuses_tar_entries_that_differ_from_the_manifest() {
    let fx = Fixture::new();
    let listed = || manifest(&fx, vec![entry("a.txt", b"x")], Vec::new());
    let cases: Vec<(&str, Vec<Raw<'_>>)> = vec![
        ("another path", vec![Raw("tree/b.txt", b"x", false)]),
        ("no prefix", vec![Raw("a.txt", b"x", false)]),
        ("other content", vec![Raw("tree/a.txt", b"y", false)]),
        ("a symlink", vec![Raw("tree/a.txt", b"x", true)]),
        ("missing", vec![]),
        (
            "extra",
            vec![
                Raw("tree/a.txt", b"x", false),
                Raw("tree/escape", b"x", false),
            ],
        ),
    ];
    for (case, raw) in cases {
        let err = refused(&fx, &craft(&fx.store, &listed(), &raw));
        assert!(
            matches!(err, SnapshotError::ArchiveMismatch { .. }),
            "{case}: {err}"
        );
    }
    // Positive control: the well-formed archive restores.
    let digest = craft(&fx.store, &listed(), &[Raw("tree/a.txt", b"x", false)]);
    let dest = fx.path("ok");
    restore(&fx.repo, &fx.store, &digest, &dest).unwrap();
    assert_eq!(fs::read(dest.join("a.txt")).unwrap(), b"x");
}

#[test]
fn snapshot_refuses_to_write_through_a_symlinked_parent() {
    let fx = Fixture::new();
    // `host-link` is a committed link to `<tmp>/host`, next to the destination.
    for path in ["host-link/escape", "dirlink/evil.txt"] {
        let m = manifest(&fx, vec![entry(path, b"x")], Vec::new());
        let name = format!("tree/{path}");
        let err = refused(&fx, &craft(&fx.store, &m, &[Raw(&name, b"x", false)]));
        assert!(matches!(err, SnapshotError::Apply { .. }), "{path}: {err}");
    }
    // Deleting through a link is refused the same way.
    let m = manifest(&fx, Vec::new(), vec!["host-link/escape".into()]);
    fs::create_dir_all(fx.path("host")).unwrap();
    let err = refused(&fx, &craft(&fx.store, &m, &[]));
    assert!(matches!(err, SnapshotError::Apply { .. }), "{err}");
}

#[test]
fn snapshot_refuses_an_unknown_manifest_version() {
    let fx = Fixture::new();
    let mut m = manifest(&fx, Vec::new(), Vec::new());
    m.version = 2;
    let err = refused(&fx, &craft(&fx.store, &m, &[]));
    assert!(
        matches!(err, SnapshotError::UnsupportedVersion { version: 2, .. }),
        "{err}"
    );
}
