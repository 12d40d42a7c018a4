//! Path strings that try to leave the workspace before anything is looked up.

use super::{Fixture, LIB, SECRET, TestResult, refused};
use crate::filesystem::Refusal;

#[test]
fn dotdot_traversal_read() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("src/lib.rs")?, LIB);
    for attack in [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        "src/../src/lib.rs",
    ] {
        assert_eq!(
            refused(fx.grants.read(attack)),
            Refusal::ParentComponent,
            "{attack}"
        );
    }
    assert_eq!(refused(fx.grants.list("..")), Refusal::ParentComponent);
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn dotdot_traversal_write() -> TestResult {
    let fx = Fixture::new()?;
    fx.grants.write("src/new.rs", b"new")?;
    assert_eq!(std::fs::read(fx.ws.join("src/new.rs"))?, b"new");
    for attack in [
        "../outside/secret.txt",
        "src/../../outside/secret.txt",
        "../outside/new.txt",
    ] {
        assert_eq!(
            refused(fx.grants.write(attack, b"owned")),
            Refusal::ParentComponent
        );
        assert_eq!(
            refused(fx.grants.create_new(attack, b"owned")),
            Refusal::ParentComponent
        );
        assert_eq!(
            refused(fx.grants.remove_file(attack)),
            Refusal::ParentComponent
        );
    }
    assert_eq!(
        refused(fx.grants.create_dir_all("../outside/d")),
        Refusal::ParentComponent
    );
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn absolute_path_read() -> TestResult {
    let fx = Fixture::new()?;
    assert_eq!(fx.grants.read("./src/lib.rs")?, LIB);
    let sentinel = fx.sentinel.to_string_lossy().into_owned();
    assert_eq!(std::fs::read(&sentinel)?, SECRET);
    for attack in ["/etc/passwd", sentinel.as_str()] {
        assert_eq!(
            refused(fx.grants.read(attack)),
            Refusal::Absolute,
            "{attack}"
        );
        assert_eq!(
            refused(fx.grants.write(attack, b"owned")),
            Refusal::Absolute
        );
        assert_eq!(refused(fx.grants.metadata(attack)), Refusal::Absolute);
    }
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn proc_self_root_alias() -> TestResult {
    let fx = Fixture::new()?;
    let via_proc = format!("/proc/self/root{}", fx.sentinel.display());
    assert_eq!(
        std::fs::read(&via_proc)?,
        SECRET,
        "the alias works outside the grants"
    );
    fx.plant_symlink("src", "srclink")?;
    assert_eq!(fx.grants.read("srclink/lib.rs")?, LIB);
    assert_eq!(
        refused(fx.grants.read("/proc/self/root/etc/passwd")),
        Refusal::Absolute
    );
    assert_eq!(refused(fx.grants.read(&via_proc)), Refusal::Absolute);
    fx.plant_symlink("/proc/self/root", "proc_root")?;
    let through_link = format!("proc_root{}", fx.sentinel.display());
    assert_eq!(refused(fx.grants.read(&through_link)), Refusal::EscapesRoot);
    assert_eq!(
        refused(fx.grants.write(&through_link, b"owned")),
        Refusal::EscapesRoot
    );
    fx.assert_outside_unchanged();
    Ok(())
}

#[test]
fn nul_byte_in_name() -> TestResult {
    let fx = Fixture::new()?;
    fx.grants.create_new("src/plain.rs", b"x")?;
    assert_eq!(refused(fx.grants.read("src/lib.rs\0")), Refusal::NulByte);
    assert_eq!(refused(fx.grants.write("src/a\0b", b"x")), Refusal::NulByte);
    assert_eq!(
        refused(fx.grants.symlink("lib.rs\0", "src/l")),
        Refusal::NulByte
    );
    assert_eq!(refused(fx.grants.read("")), Refusal::Empty);
    assert!(!fx.exists("src/a"));
    fx.assert_outside_unchanged();
    Ok(())
}
