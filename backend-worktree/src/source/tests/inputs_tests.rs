//! Untracked inputs: copied with their digest; symlinked sources refused.

use std::fs;

use sha2::{Digest, Sha256};
use workspace_core::contract::UntrackedInput;

use super::fixture::Repo;
use crate::source::{SourceError, copy_inputs, provision_standalone};
use workspace_core::digest::to_hex as hex;

fn input(from: &str, to: &str, from_host: bool) -> UntrackedInput {
    UntrackedInput {
        from: from.to_owned(),
        to: to.to_owned(),
        from_host,
    }
}

#[test]
fn source_env_example_is_copied_with_its_digest() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    provision_standalone(&repo.path, "main", &ws).unwrap();
    let host_file = repo.dest("fixture.json");
    fs::write(&host_file, "{\"k\":1}\n").unwrap();

    let records = copy_inputs(
        &ws,
        &[
            input(".env.example", ".env", false),
            input(host_file.to_str().unwrap(), "fixtures/data.json", true),
        ],
    )
    .unwrap();
    assert_eq!(fs::read_to_string(ws.join(".env")).unwrap(), "KEY=value\n");
    assert_eq!(records[0].from, ".env.example");
    assert_eq!(records[0].to, ".env");
    assert_eq!(records[0].sha256, hex(&Sha256::digest(b"KEY=value\n")));
    assert_eq!(
        fs::read_to_string(ws.join("fixtures/data.json")).unwrap(),
        "{\"k\":1}\n"
    );
    assert_eq!(records[1].sha256, hex(&Sha256::digest(b"{\"k\":1}\n")));
}

#[test]
fn source_symlinked_inputs_are_refused() {
    let repo = Repo::standard();
    let ws = repo.dest("ws");
    provision_standalone(&repo.path, "main", &ws).unwrap();

    // `link` is a symlink committed in the repository.
    let err = copy_inputs(&ws, &[input("link", ".env", false)]).unwrap_err();
    assert!(matches!(err, SourceError::InputRefused { .. }), "{err:?}");
    assert!(!ws.join(".env").exists());

    // A host path that is a symlink.
    let target = repo.dest("secret");
    fs::write(&target, "s3cret\n").unwrap();
    let host_link = repo.dest("host-link");
    std::os::unix::fs::symlink(&target, &host_link).unwrap();
    let err = copy_inputs(&ws, &[input(host_link.to_str().unwrap(), "x", true)]).unwrap_err();
    assert!(matches!(err, SourceError::InputRefused { .. }), "{err:?}");

    // A destination through a symlink, or inside .git, or escaping.
    std::os::unix::fs::symlink(repo.dest("outside"), ws.join("out")).unwrap();
    fs::create_dir(repo.dest("outside")).unwrap();
    let err = copy_inputs(&ws, &[input(".env.example", "out/.env", false)]).unwrap_err();
    assert!(matches!(err, SourceError::PathEscape { .. }), "{err:?}");
    assert!(!repo.dest("outside/.env").exists());
    let err = copy_inputs(
        &ws,
        &[input(".env.example", ".git/hooks/pre-commit", false)],
    )
    .unwrap_err();
    assert!(matches!(err, SourceError::InputRefused { .. }), "{err:?}");
    let err = copy_inputs(&ws, &[input(".env.example", "../escape", false)]).unwrap_err();
    assert!(matches!(err, SourceError::InputRefused { .. }), "{err:?}");
}
