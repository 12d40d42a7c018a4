//! Reading a real overlayfs upper directory. The overlay is mounted by a child in a
//! private mount namespace (`unshare --mount`), so the host's mount table is never
//! touched, and it disappears with the child.

use std::path::Path;
use std::process::Command;

use tempfile::TempDir;

use crate::layered::upper::{UpperEntry, walk_upper};

/// Mounts an overlay of `lower` + `upper` in a private mount namespace and runs
/// `script` inside the merged view.
pub(crate) fn in_overlay(lower: &Path, upper: &Path, work: &Path, merged: &Path, script: &str) {
    let options = format!(
        "lowerdir={},upperdir={},workdir={},redirect_dir=nofollow,metacopy=off",
        lower.display(),
        upper.display(),
        work.display()
    );
    let status = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-euc"])
        .arg(format!(
            "mount -t overlay overlay -o {options} {merged} && cd {merged} && {script}",
            merged = merged.display()
        ))
        .status()
        .expect("run unshare (util-linux) to mount an overlay in a private mount namespace");
    assert!(status.success(), "overlay script failed: {status}");
}

fn write(path: &Path, text: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

#[test]
fn the_upper_directory_lists_exactly_what_the_run_changed() {
    let dir = TempDir::new().unwrap();
    let [lower, upper, work, merged] = ["lower", "upper", "work", "merged"].map(|d| {
        let path = dir.path().join(d);
        std::fs::create_dir(&path).unwrap();
        path
    });
    for file in [
        "a.txt",
        "b.txt",
        "dir/c.txt",
        "dir/d.txt",
        "e/f.txt",
        "untouched/g.txt",
    ] {
        write(&lower.join(file), file);
    }
    in_overlay(
        &lower,
        &upper,
        &work,
        &merged,
        "echo new > n.txt; echo more >> a.txt; rm b.txt; rm -r dir; mkdir dir; echo x > dir/x.txt; \
         ln -s a.txt link; chmod +x e/f.txt; mkdir -p .git && echo ref > .git/HEAD",
    );
    let entries = walk_upper(&upper).unwrap();
    let file = |path: &str, executable| UpperEntry::File {
        path: path.into(),
        executable,
    };
    assert_eq!(
        entries,
        [
            file("a.txt", false),
            UpperEntry::Whiteout {
                path: "b.txt".into()
            },
            UpperEntry::OpaqueDir { path: "dir".into() },
            file("dir/x.txt", false),
            file("e/f.txt", true),
            UpperEntry::Symlink {
                path: "link".into()
            },
            file("n.txt", false),
        ]
    );
    // The lower layer is untouched by the run.
    assert_eq!(
        std::fs::read_to_string(lower.join("a.txt")).unwrap(),
        "a.txt"
    );
    assert!(lower.join("b.txt").exists());
}

#[test]
fn an_untouched_overlay_has_no_changes() {
    let dir = TempDir::new().unwrap();
    let [lower, upper, work, merged] = ["lower", "upper", "work", "merged"].map(|d| {
        let path = dir.path().join(d);
        std::fs::create_dir(&path).unwrap();
        path
    });
    write(&lower.join("src/lib.rs"), "fn main() {}");
    in_overlay(
        &lower,
        &upper,
        &work,
        &merged,
        "cat src/lib.rs > /dev/null; ls -la > /dev/null",
    );
    assert_eq!(walk_upper(&upper).unwrap(), []);
}

#[test]
fn names_that_are_not_utf8_and_nested_repositories_are_listed_as_such() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;

    use workspace_core::boundary::{ChangeKind, NotInPatch};

    use crate::changes::Uncarried;

    let dir = TempDir::new().unwrap();
    let [lower, upper, work, merged] = ["lower", "upper", "work", "merged"].map(|d| {
        let path = dir.path().join(d);
        std::fs::create_dir(&path).unwrap();
        path
    });
    std::fs::write(lower.join(OsStr::from_bytes(b"old-\xfe")), "x").unwrap();
    // A whiteout of a base name that is not UTF-8, a new file and a fifo with
    // such names, a nested repository; the checkout's own `.git` is not listed.
    in_overlay(
        &lower,
        &upper,
        &work,
        &merged,
        "rm \"$(printf 'old-\\376')\"; echo x > \"$(printf 'new-\\377')\"; \
         mkfifo \"$(printf 'pipe-\\375')\"; mkdir -p sub/.git .git; echo c > sub/.git/config",
    );
    let uncarried = |path: &str, kind, reason| {
        UpperEntry::Uncarried(Uncarried {
            path: path.into(),
            kind,
            reason,
        })
    };
    assert_eq!(
        walk_upper(&upper).unwrap(),
        [
            uncarried("new-\\xff", ChangeKind::Added, NotInPatch::NotUtf8),
            uncarried("old-\\xfe", ChangeKind::Deleted, NotInPatch::NotUtf8),
            uncarried("sub/.git", ChangeKind::Added, NotInPatch::NestedRepository),
        ]
    );
}
