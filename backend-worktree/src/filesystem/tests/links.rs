//! Symlinks and hard links planted in the workspace, or created through the grants.

use std::fs;

use super::{Fixture, LIB, TestResult, refused};
use crate::filesystem::{EntryKind, Refusal};

#[test]
fn planted_symlink_to_outside_file() -> TestResult {
    let fx = Fixture::new()?;
    fx.plant_symlink("lib.rs", "src/ok")?;
    assert_eq!(fx.grants.read("src/ok")?, LIB);
    fx.grants.write("src/ok", b"through an in-root link")?;
    assert_eq!(
        fs::read(fx.ws.join("src/lib.rs"))?,
        b"through an in-root link"
    );

    fx.plant_symlink("../../outside/secret.txt", "src/leak")?;
    fx.plant_symlink(&fx.sentinel, "src/leak_abs")?;
    for attack in ["src/leak", "src/leak_abs"] {
        assert_eq!(
            refused(fx.grants.read(attack)),
            Refusal::EscapesRoot,
            "{attack}"
        );
        assert_eq!(
            refused(fx.grants.write(attack, b"owned")),
            Refusal::EscapesRoot
        );
        // The link itself is reported, never followed.
        assert_eq!(fx.grants.metadata(attack)?.kind, EntryKind::Symlink);
    }
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn planted_symlink_dir_to_outside() -> TestResult {
    let fx = Fixture::new()?;
    fx.plant_symlink("src", "srclink")?;
    assert_eq!(fx.grants.read("srclink/lib.rs")?, LIB);
    fx.grants.create_new("srclink/new.rs", b"x")?;
    assert!(fx.ws.join("src/new.rs").is_file());

    fx.plant_symlink("../outside", "out_link")?;
    let attack = "out_link/secret.txt";
    assert_eq!(refused(fx.grants.read(attack)), Refusal::EscapesRoot);
    assert_eq!(
        refused(fx.grants.write(attack, b"owned")),
        Refusal::EscapesRoot
    );
    assert_eq!(
        refused(fx.grants.create_new("out_link/new.txt", b"x")),
        Refusal::EscapesRoot
    );
    assert_eq!(refused(fx.grants.remove_file(attack)), Refusal::EscapesRoot);
    assert_eq!(refused(fx.grants.list("out_link")), Refusal::EscapesRoot);
    assert_eq!(
        refused(fx.grants.create_dir_all("out_link/d")),
        Refusal::EscapesRoot
    );
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn create_escaping_symlink() -> TestResult {
    let fx = Fixture::new()?;
    fx.grants.symlink("lib.rs", "src/alias")?;
    assert_eq!(
        fs::read_link(fx.ws.join("src/alias"))?,
        std::path::Path::new("lib.rs")
    );
    assert_eq!(fx.grants.read("src/alias")?, LIB);
    fx.grants.symlink("../src/lib.rs", "sub/alias")?;
    assert_eq!(fx.grants.read("sub/alias")?, LIB);

    let sentinel = fx.sentinel.to_string_lossy().into_owned();
    let cases = [
        (sentinel.as_str(), Refusal::Absolute),
        ("/proc/self/root", Refusal::Absolute),
        ("../../outside/secret.txt", Refusal::EscapesRoot),
        ("../../../outside/secret.txt", Refusal::EscapesRoot),
        ("../src/../../outside", Refusal::EscapesRoot),
    ];
    for (target, expected) in cases {
        assert_eq!(
            refused(fx.grants.symlink(target, "src/evil")),
            expected,
            "{target}"
        );
        assert!(!fx.exists("src/evil"), "no link was created for {target}");
    }
    // Also refused: links into what may not be read.
    assert!(matches!(
        refused(fx.grants.symlink("../.env", "src/evil")),
        Refusal::Protected { .. }
    ));
    assert!(matches!(
        refused(fx.grants.symlink("../secrets/key.txt", "src/evil")),
        Refusal::Excluded { .. }
    ));
    assert!(!fx.exists("src/evil"));
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn planted_hard_link_to_outside() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("src/lib.rs")?, LIB);
    fx.grants.write("src/lib.rs", b"edited")?;

    fs::hard_link(&fx.sentinel, fx.ws.join("src/hl.txt"))?;
    let hard_linked = |r: Refusal| matches!(r, Refusal::HardLinked { links: 2, .. });
    assert!(hard_linked(refused(fx.grants.read("src/hl.txt"))));
    assert!(hard_linked(refused(
        fx.grants.write("src/hl.txt", b"owned")
    )));
    fx.plant_symlink("hl.txt", "src/to_hl")?;
    assert!(hard_linked(refused(fx.grants.read("src/to_hl"))));
    fx.assert_outside_unchanged();
    // Dropping the planted name is harmless and allowed.
    fx.grants.remove_file("src/hl.txt")?;
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn symlink_to_env_inside() -> TestResult {
    let fx = Fixture::new()?;
    fx.plant_symlink("lib.rs", "src/fine")?;
    assert_eq!(fx.grants.read("src/fine")?, LIB);

    fx.plant_symlink("../.env", "src/config")?;
    fx.plant_symlink("../.git", "src/gitdir")?;
    fx.plant_symlink("../sub/.env.local", "src/local")?;
    for attack in [
        "src/config",
        "src/gitdir/config",
        "src/gitdir/hooks/pre-commit",
        "src/local",
    ] {
        assert!(
            matches!(refused(fx.grants.read(attack)), Refusal::Protected { .. }),
            "{attack}"
        );
    }
    assert!(matches!(
        refused(fx.grants.write("src/gitdir/HEAD", b"x")),
        Refusal::Protected { .. }
    ));
    assert_eq!(fs::read(fx.ws.join(".env"))?, b"TOKEN=1\n");
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn symlink_loop() -> TestResult {
    let fx = Fixture::new()?;
    fx.plant_symlink("lib.rs", "src/l1")?;
    fx.plant_symlink("l1", "src/l2")?;
    fx.plant_symlink("l2", "src/l3")?;
    assert_eq!(fx.grants.read("src/l3")?, LIB);

    fx.plant_symlink("b", "src/a")?;
    fx.plant_symlink("a", "src/b")?;
    assert_eq!(refused(fx.grants.read("src/a")), Refusal::TooManyLinks);
    assert_eq!(
        refused(fx.grants.write("src/a", b"x")),
        Refusal::TooManyLinks
    );
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn fifo_and_excluded_via_link() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("sub/readme.md")?, b"# sub\n");

    let status = std::process::Command::new("mkfifo")
        .arg(fx.ws.join("src/pipe"))
        .status()?;
    assert!(status.success(), "mkfifo is needed for this test");
    assert!(matches!(
        refused(fx.grants.read("src/pipe")),
        Refusal::NotRegularFile {
            kind: EntryKind::Other,
            ..
        }
    ));
    fx.plant_symlink("../secrets/key.txt", "src/key")?;
    fx.plant_symlink("../sub/cert.pem", "src/cert")?;
    for attack in ["src/key", "src/cert"] {
        assert!(
            matches!(refused(fx.grants.read(attack)), Refusal::Excluded { .. }),
            "{attack}"
        );
    }
    // A link chain may not pass through an excluded name on its way elsewhere.
    fx.plant_symlink("../secrets/../src/lib.rs", "src/detour")?;
    assert!(matches!(
        refused(fx.grants.read("src/detour")),
        Refusal::Excluded { .. }
    ));
    fx.assert_outside_unchanged();
    Ok(())
}
