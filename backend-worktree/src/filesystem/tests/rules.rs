//! The contract's rules: protected and excluded paths, read-only paths, renames
//! and listings.

use std::fs;

use workspace_core::contract::FilesystemSection;

use super::{Fixture, LIB, TestResult, refused};
use crate::filesystem::{DirEntryInfo, EntryKind, GrantError, Operation, Refusal};

fn protected(r: Refusal) -> bool {
    matches!(r, Refusal::Protected { .. })
}

#[test]
fn write_git_metadata() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read(".git/HEAD")?, b"ref: refs/heads/main\n");
    fx.grants.write("src/x.rs", b"x")?;

    assert!(protected(refused(
        fx.grants.write(".git/config", b"[core]\nhooksPath=/tmp\n")
    )));
    assert!(protected(refused(
        fx.grants.write(".git/hooks/post-checkout", b"#!/bin/sh\n")
    )));
    assert!(protected(refused(
        fx.grants
            .create_new(".git/hooks/post-checkout", b"#!/bin/sh\n")
    )));
    assert!(protected(refused(fx.grants.write(".git/HEAD", b"x"))));
    assert!(protected(refused(fx.grants.remove_file(".git/HEAD"))));
    assert!(protected(refused(
        fx.grants.symlink("../../src/x.rs", ".git/hooks/post-merge")
    )));
    assert!(protected(refused(
        fx.grants.rename("src/x.rs", ".git/hooks/post-checkout")
    )));
    assert!(!fx.exists(".git/hooks/post-checkout"));
    assert!(!fx.exists(".git/hooks/post-merge"));
    assert_eq!(fs::read(fx.ws.join(".git/config"))?, b"[core]\n");
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn read_env_and_git_config() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("sub/readme.md")?, b"# sub\n");
    for attack in [
        ".env",
        "sub/.env.local",
        ".git/config",
        ".git/hooks/pre-commit",
    ] {
        assert!(protected(refused(fx.grants.read(attack))), "{attack}");
        assert!(protected(refused(fx.grants.metadata(attack))), "{attack}");
    }
    assert!(protected(refused(fx.grants.list(".git/hooks"))));
    for attack in ["secrets/key.txt", "sub/cert.pem", "secrets"] {
        assert!(
            matches!(refused(fx.grants.read(attack)), Refusal::Excluded { .. }),
            "{attack}"
        );
    }
    match fx.grants.read(".env") {
        Err(GrantError::Refused { op, path, reason }) => {
            assert_eq!((op, path.as_str()), (Operation::Read, ".env"));
            assert!(reason.to_string().contains("**/.env"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn write_read_only_and_via_symlink() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("vendor/dep.rs")?, b"// vendored\n");
    fx.grants.write("src/y.rs", b"y")?;
    fx.grants.write("out/report.txt", b"done")?;

    let read_only = |r: Refusal| matches!(r, Refusal::ReadOnly { .. });
    assert!(read_only(refused(fx.grants.write("vendor/x", b"x"))));
    assert!(read_only(refused(fx.grants.write("vendor/dep.rs", b"x"))));
    assert!(read_only(refused(fx.grants.create_dir_all("vendor/d"))));
    assert!(read_only(refused(fx.grants.remove_file("vendor/dep.rs"))));
    fx.plant_symlink("../vendor", "src/vend")?;
    assert!(read_only(refused(fx.grants.write("src/vend/x", b"x"))));
    assert!(read_only(refused(fx.grants.write("src/vend/dep.rs", b"x"))));
    fx.plant_symlink("../vendor/dep.rs", "src/dep_link")?;
    assert!(read_only(refused(fx.grants.write("src/dep_link", b"x"))));
    assert!(!fx.exists("vendor/x"));
    assert_eq!(fs::read(fx.ws.join("vendor/dep.rs"))?, b"// vendored\n");

    // Under no writable path at all.
    let narrow = FilesystemSection {
        writable: vec!["src".into(), "a/b".into()],
        ..FilesystemSection::default()
    };
    let fx = Fixture::with_section(narrow)?;
    fx.grants.write("src/z.rs", b"z")?;
    let not_writable = |r: Refusal| matches!(r, Refusal::NotWritable { .. });
    assert!(not_writable(refused(
        fx.grants.write("sub/readme.md", b"x")
    )));
    assert!(
        not_writable(refused(fx.grants.create_dir_all("a/b/c"))),
        "would create `a`"
    );
    assert!(!fx.exists("a"));
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn rename_onto_read_only_or_excluded() -> TestResult {
    let fx = Fixture::new()?;
    fx.grants.write("src/a.rs", b"a")?;
    fx.grants.rename("src/a.rs", "src/b.rs")?;
    assert_eq!(fs::read(fx.ws.join("src/b.rs"))?, b"a");

    assert!(matches!(
        refused(fx.grants.rename("src/lib.rs", "vendor/lib.rs")),
        Refusal::ReadOnly { .. }
    ));
    assert!(matches!(
        refused(fx.grants.rename("src/lib.rs", "secrets/lib.rs")),
        Refusal::Excluded { .. }
    ));
    assert!(protected(refused(fx.grants.rename("src/lib.rs", ".env"))));
    assert!(matches!(
        refused(fx.grants.rename("vendor/dep.rs", "src/dep.rs")),
        Refusal::ReadOnly { .. }
    ));
    // A directory holding a protected entry would carry it out from under its rule.
    fs::create_dir_all(fx.ws.join("pkg/secrets"))?;
    let outside_rule = FilesystemSection {
        excluded: vec!["pkg/secrets".into()],
        ..super::section()
    };
    let grants = crate::filesystem::PathGrants::new(&fx.ws, &outside_rule)?;
    assert!(matches!(
        refused(grants.rename("pkg", "pkg2")),
        Refusal::ContainsProtected { .. }
    ));
    assert!(matches!(
        refused(fx.grants.rename("sub", "sub2")),
        Refusal::ContainsProtected { .. }
    ));
    assert_eq!(fs::read(fx.ws.join("src/lib.rs"))?, LIB);
    assert!(fx.exists("pkg/secrets") && fx.exists("sub/.env.local"));
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn rename_from_outside() -> TestResult {
    let fx = Fixture::new()?;
    fx.grants.rename("src/main.rs", "src/main2.rs")?;
    assert!(fx.exists("src/main2.rs"));

    let stolen = "src/stolen.txt";
    let attack = fx.grants.rename("../outside/secret.txt", stolen);
    assert_eq!(refused(attack), Refusal::ParentComponent);
    assert_eq!(
        refused(fx.grants.rename("src/lib.rs", "../outside/lib.rs")),
        Refusal::ParentComponent
    );
    fx.plant_symlink("../outside", "out_link")?;
    assert_eq!(
        refused(fx.grants.rename("out_link/secret.txt", stolen)),
        Refusal::EscapesRoot
    );
    assert_eq!(
        refused(fx.grants.rename("src/lib.rs", "out_link/lib.rs")),
        Refusal::EscapesRoot
    );
    assert!(!fx.exists(stolen));
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn list_hides_excluded_and_shows_symlinks() -> TestResult {
    let fx = Fixture::new()?;
    let src = fx.grants.list("src")?;
    assert!(src.contains(&DirEntryInfo {
        name: "lib.rs".into(),
        kind: EntryKind::File
    }));

    fx.plant_symlink("../outside", "out_link")?;
    fx.plant_symlink("src", "srclink")?;
    let names = |entries: &[DirEntryInfo]| -> Vec<String> {
        entries.iter().map(|e| e.name.clone()).collect()
    };
    let root = fx.grants.list(".")?;
    assert_eq!(
        names(&root),
        [".git", "out", "out_link", "src", "srclink", "sub", "vendor"],
        "no .env, no secrets"
    );
    for link in ["out_link", "srclink"] {
        let entry = root.iter().find(|e| e.name == link);
        assert_eq!(
            entry.map(|e| e.kind),
            Some(EntryKind::Symlink),
            "{link} is not followed"
        );
    }
    assert_eq!(names(&fx.grants.list(".git")?), ["HEAD"]);
    assert_eq!(names(&fx.grants.list("sub")?), ["readme.md"]);
    assert_eq!(names(&fx.grants.list("srclink")?), names(&src));
    fx.assert_outside_unchanged();
    Ok(())
}
