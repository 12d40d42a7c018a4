//! Tampering with a sealed bundle: each kind is detected, and nothing outside the
//! bundle is read.

use std::fs;

use super::full_bundle;
use crate::evidence::*;

#[test]
fn a_flipped_byte_is_reported_as_changed() {
    let (_root, dir, manifest) = full_bundle();
    let path = dir.join("commands/0001/stdout");
    let mut bytes = fs::read(&path).unwrap();
    bytes[3] ^= 0x01;
    fs::write(&path, &bytes).unwrap();

    let report = verify(&dir).unwrap();
    assert_eq!(
        report.problems,
        [Tamper::Changed {
            path: "commands/0001/stdout".into(),
            expected: manifest.files["commands/0001/stdout"].sha256.clone(),
            actual: manifest::hash_reader(&bytes[..], &path).unwrap().sha256,
        }]
    );
    assert!(!report.is_intact());
    assert!(
        report.problems[0]
            .to_string()
            .contains("commands/0001/stdout")
    );
}

#[test]
fn a_removed_file_is_reported_as_missing() {
    let (_root, dir, _) = full_bundle();
    fs::remove_file(dir.join("checks.json")).unwrap();

    let report = verify(&dir).unwrap();
    assert_eq!(
        report.problems,
        [Tamper::Missing {
            path: "checks.json".into()
        }]
    );
    assert_eq!(report.files_checked, 20);
}

#[test]
fn an_added_file_is_reported_as_extra() {
    let (_root, dir, _) = full_bundle();
    fs::write(dir.join("notes.txt"), b"trust me").unwrap();

    let report = verify(&dir).unwrap();
    assert_eq!(
        report.problems,
        [Tamper::Extra {
            path: "notes.txt".into()
        }]
    );
}

#[cfg(unix)]
#[test]
fn a_planted_symlink_is_reported_and_not_followed() {
    let (root, dir, _) = full_bundle();
    let outside = root.path().join("outside-secret");
    let secret = b"outside content the bundle must not vouch for";
    fs::write(&outside, secret).unwrap();
    let secret_digest = manifest::hash_reader(&secret[..], &outside).unwrap().sha256;
    // One link replaces a listed file, one is new.
    fs::remove_file(dir.join("checks.json")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("checks.json")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("commands/link")).unwrap();

    let report = verify(&dir).unwrap();
    assert_eq!(
        report.problems,
        [
            Tamper::NotRegular {
                path: "checks.json".into()
            },
            Tamper::NotRegular {
                path: "commands/link".into()
            },
        ]
    );
    assert_eq!(report.files_checked, 20);
    let text = format!("{report:?}");
    assert!(!text.contains(&secret_digest));
    assert!(!text.contains("outside content"));
}

#[cfg(unix)]
#[test]
fn a_symlinked_directory_is_not_descended() {
    let (root, dir, _) = full_bundle();
    // Replace commands/0002 by a link to a copy outside: same bytes, but outside.
    let outside = root.path().join("outside-dir");
    fs::create_dir(&outside).unwrap();
    for name in [COMMAND_FILE, STDOUT_FILE, STDERR_FILE] {
        fs::copy(dir.join("commands/0002").join(name), outside.join(name)).unwrap();
    }
    fs::remove_dir_all(dir.join("commands/0002")).unwrap();
    std::os::unix::fs::symlink(&outside, dir.join("commands/0002")).unwrap();

    let report = verify(&dir).unwrap();
    let kinds: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    assert_eq!(report.problems.len(), 4, "{kinds:?}");
    assert_eq!(
        report.problems[0],
        Tamper::NotRegular {
            path: "commands/0002".into()
        }
    );
    assert!(
        report.problems[1..]
            .iter()
            .all(|p| matches!(p, Tamper::Missing { .. }))
    );
}

#[test]
fn a_manifest_reaching_outside_is_reported_as_bad_path() {
    let (root, dir, mut manifest) = full_bundle();
    fs::write(root.path().join("outside"), b"outside").unwrap();
    let entry = manifest.files["checks.json"].clone();
    for bad in [
        "../outside",
        "/etc/passwd",
        "commands/../../outside",
        "a//b",
        "./x",
    ] {
        manifest.files.insert(bad.into(), entry.clone());
    }
    fs::write(
        dir.join(MANIFEST_FILE),
        serde_json::to_vec(&manifest).unwrap(),
    )
    .unwrap();

    let report = verify(&dir).unwrap();
    assert_eq!(report.problems.len(), 5, "{:?}", report.problems);
    assert!(
        report
            .problems
            .iter()
            .all(|p| matches!(p, Tamper::BadPath { .. }))
    );
    assert!(report.problems.iter().any(|p| p.path() == "../outside"));
    assert_eq!(report.files_checked, 21);
}

#[test]
fn an_invalid_or_missing_manifest_is_an_error_naming_it() {
    let (_root, dir, _) = full_bundle();
    fs::write(dir.join(MANIFEST_FILE), b"{ not json").unwrap();
    let err = verify(&dir).unwrap_err();
    assert!(
        matches!(&err, EvidenceError::Manifest { path, .. } if path.ends_with(MANIFEST_FILE)),
        "{err:?}"
    );

    fs::remove_file(dir.join(MANIFEST_FILE)).unwrap();
    let err = verify(&dir).unwrap_err();
    assert!(
        matches!(&err, EvidenceError::Read { path, .. } if path.ends_with(MANIFEST_FILE)),
        "{err:?}"
    );
}
