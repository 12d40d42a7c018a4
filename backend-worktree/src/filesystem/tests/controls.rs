//! Positive controls: what the grants allow works, and errors that are not
//! refusals stay I/O errors.

use std::fs;
use std::io::ErrorKind;

use super::{Fixture, LIB, TestResult};
use crate::filesystem::{EntryKind, GrantError, GrantOptions, PathGrants, Refusal};

#[test]
fn allowed_accesses_work() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read_to_string("src/lib.rs")?, "pub fn lib() {}\n");
    fx.grants.write("src/lib.rs", b"pub fn edited() {}\n")?;
    assert_eq!(fx.grants.read("src/lib.rs")?, b"pub fn edited() {}\n");
    fx.grants.write("src/lib.rs", b"short")?;
    assert_eq!(
        fs::read(fx.ws.join("src/lib.rs"))?,
        b"short",
        "write truncates"
    );

    fx.grants.create_dir_all("src/nested/deeper")?;
    fx.grants.create_new("src/nested/deeper/new.rs", LIB)?;
    fx.grants.symlink("../../lib.rs", "src/nested/deeper/up")?;
    assert_eq!(fx.grants.read("src/nested/deeper/up")?, b"short");
    fx.grants.remove_file("src/nested/deeper/up")?;
    assert!(
        fx.ws.join("src/lib.rs").is_file(),
        "removing a link keeps its target"
    );
    fx.grants.remove_file("src/nested/deeper/new.rs")?;
    fx.grants.remove_dir("src/nested/deeper")?;
    assert!(!fx.exists("src/nested/deeper"));

    let listing = fx.grants.list("src")?;
    let kinds: Vec<_> = listing.iter().map(|e| (e.name.as_str(), e.kind)).collect();
    assert_eq!(
        kinds,
        [
            ("lib.rs", EntryKind::File),
            ("main.rs", EntryKind::File),
            ("nested", EntryKind::Dir)
        ]
    );
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn metadata_reports_links_and_grants() -> TestResult {
    let fx = Fixture::new()?;
    fx.plant_symlink("lib.rs", "src/alias")?;
    let link = fx.grants.metadata("src/alias")?;
    assert_eq!(
        (link.kind, link.len, link.readonly),
        (EntryKind::Symlink, 6, false)
    );
    let lib = fx.grants.metadata("src/lib.rs")?;
    assert_eq!(
        (lib.kind, lib.len, lib.readonly),
        (EntryKind::File, LIB.len() as u64, false)
    );
    assert!(fx.grants.metadata("vendor/dep.rs")?.readonly);
    assert!(fx.grants.metadata(".git/HEAD")?.readonly);
    assert_eq!(fx.grants.metadata(".")?.kind, EntryKind::Dir);
    Ok(())
}

fn io_kind<T>(result: Result<T, GrantError>) -> Option<ErrorKind> {
    match result {
        Err(GrantError::Io { source, .. }) => Some(source.kind()),
        _ => None,
    }
}

#[test]
fn plain_errors_stay_io_errors() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(
        io_kind(fx.grants.read("src/missing.rs")),
        Some(ErrorKind::NotFound)
    );
    assert_eq!(
        io_kind(fx.grants.create_new("src/lib.rs", b"x")),
        Some(ErrorKind::AlreadyExists)
    );
    assert_eq!(
        io_kind(fx.grants.write("src/no/dir.rs", b"x")),
        Some(ErrorKind::NotFound)
    );
    assert!(fx.grants.read_to_string("src/lib.rs").is_ok());
    fx.grants.write("src/bin.dat", &[0xff, 0xfe])?;
    assert!(matches!(
        fx.grants.read_to_string("src/bin.dat"),
        Err(GrantError::NotUtf8 { .. })
    ));
    assert_eq!(fs::read(fx.ws.join("src/lib.rs"))?, LIB);
    Ok(())
}

#[test]
fn root_and_options_are_guarded() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(
        super::refused(fx.grants.remove_dir(".")),
        Refusal::WorkspaceRoot
    );
    assert_eq!(
        super::refused(fx.grants.rename(".", "x")),
        Refusal::WorkspaceRoot
    );
    let grants = PathGrants::new_opts(
        &fx.ws,
        &super::section(),
        GrantOptions::protected(["src/main.rs"]),
    )?;
    assert_eq!(grants.read("src/lib.rs")?, LIB);
    assert!(matches!(
        super::refused(grants.read("src/main.rs")),
        Refusal::Protected { .. }
    ));
    let bad = PathGrants::new_opts(&fx.ws, &super::section(), GrantOptions::protected(["/etc"]));
    assert!(matches!(
        bad,
        Err(GrantError::InvalidGrant {
            reason: Refusal::Absolute,
            ..
        })
    ));
    let missing = PathGrants::new(&fx.ws.join("nope"), &super::section());
    assert!(matches!(missing, Err(GrantError::OpenRoot { .. })));
    Ok(())
}
