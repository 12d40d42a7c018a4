//! Releasing checkouts: never through a link, never into another mount.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use tempfile::TempDir;

use crate::source::SourceError;
use crate::source::layered::release_layers;
use crate::source::release::remove_tree;

/// Set (to the fixture directory) only in the child process that runs
/// [`remove_tree_mount_child`] inside its own mount namespace.
const CHILD_ENV: &str = "AGENT_WORKSPACE_TEST_MOUNT_CHILD_DIR";

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

fn refused_at(err: &SourceError) -> &Path {
    match err {
        SourceError::RemoveRefused { path, .. } => path,
        other => panic!("expected RemoveRefused, got {other:?}"),
    }
}

#[test]
fn source_remove_tree_refuses_to_cross_mounts() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path();
    // A checkout with a tmpfs mounted inside, one with a directory of the same file
    // system bind-mounted inside (same device number, another mount), one mounted
    // over as a whole, and a layered run with its merged directory still mounted.
    write(&dir.join("tmpfs/checkout/a.txt"), "a\n");
    fs::create_dir_all(dir.join("tmpfs/checkout/mnt")).unwrap();
    write(&dir.join("bind/checkout/sub/b.txt"), "b\n");
    fs::create_dir_all(dir.join("bind/checkout/bound")).unwrap();
    fs::create_dir_all(dir.join("root/checkout")).unwrap();
    write(&dir.join("host/precious"), "precious\n");
    write(&dir.join("layered/upper/changed.txt"), "changed\n");
    fs::create_dir_all(dir.join("layered/work/work")).unwrap();
    fs::create_dir_all(dir.join("layered/merged")).unwrap();

    let exe = std::env::current_exe().unwrap();
    let test = format!(
        "{}::remove_tree_mount_child",
        module_path!().split_once("::").unwrap().1
    );
    let script = r#"
        d="$1"; shift
        mount -t tmpfs tmpfs "$d/tmpfs/checkout/mnt"
        echo keep > "$d/tmpfs/checkout/mnt/keep"
        mount --bind "$d/host" "$d/bind/checkout/bound"
        mount -t tmpfs tmpfs "$d/root/checkout"
        echo keep > "$d/root/checkout/keep"
        mount -t tmpfs tmpfs "$d/layered/merged"
        echo keep > "$d/layered/merged/keep"
        exec "$@"
    "#;
    let out = Command::new("unshare")
        .args([
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-euc",
            script,
            "sh",
        ])
        .arg(dir)
        .arg(&exe)
        .args([
            test.as_str(),
            "--ignored",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    // The bind-mounted host directory is intact on the host.
    assert_eq!(
        fs::read_to_string(dir.join("host/precious")).unwrap(),
        "precious\n"
    );
}

/// The body of [`source_remove_tree_refuses_to_cross_mounts`], run in a child with
/// its own mount namespace.
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn remove_tree_mount_child() {
    let Some(dir) = std::env::var_os(CHILD_ENV).map(PathBuf::from) else {
        panic!("runs only in the child of source_remove_tree_refuses_to_cross_mounts");
    };
    let err = remove_tree(&dir.join("tmpfs/checkout")).unwrap_err();
    assert_eq!(refused_at(&err), dir.join("tmpfs/checkout/mnt"));
    assert_eq!(
        fs::read_to_string(dir.join("tmpfs/checkout/mnt/keep")).unwrap(),
        "keep\n"
    );

    let err = remove_tree(&dir.join("bind/checkout")).unwrap_err();
    assert_eq!(refused_at(&err), dir.join("bind/checkout/bound"));
    assert_eq!(
        fs::read_to_string(dir.join("bind/checkout/bound/precious")).unwrap(),
        "precious\n"
    );

    let err = remove_tree(&dir.join("root/checkout")).unwrap_err();
    assert_eq!(refused_at(&err), dir.join("root/checkout"));
    assert!(dir.join("root/checkout/keep").exists());

    // Merged still mounted: nothing of the run is removed.
    let err = release_layers(&dir.join("layered")).unwrap_err();
    assert_eq!(refused_at(&err), dir.join("layered/merged"));
    assert!(dir.join("layered/merged/keep").exists());
    assert!(dir.join("layered/upper/changed.txt").exists());
    assert!(dir.join("layered/work/work").is_dir());
}

#[test]
fn source_release_layers_refuses_a_non_empty_merged_and_removes_nothing() {
    let tmp = TempDir::new().unwrap();
    let run_dir = tmp.path();
    write(&run_dir.join("upper/changed.txt"), "changed\n");
    fs::create_dir_all(run_dir.join("work/work")).unwrap();
    write(&run_dir.join("merged/left-over"), "x\n");

    let err = release_layers(run_dir).unwrap_err();
    assert_eq!(refused_at(&err), run_dir.join("merged"));
    assert!(run_dir.join("merged/left-over").exists());
    assert!(run_dir.join("upper/changed.txt").exists());
    assert!(run_dir.join("work/work").is_dir());

    // Once empty (unmounted), everything goes, merged first.
    fs::remove_file(run_dir.join("merged/left-over")).unwrap();
    release_layers(run_dir).unwrap();
    for name in ["merged", "upper", "work"] {
        assert!(!run_dir.join(name).exists(), "{name}");
    }
    // Released twice: nothing left to do.
    release_layers(run_dir).unwrap();
}

#[test]
fn source_remove_tree_unlinks_links_as_links() {
    let tmp = TempDir::new().unwrap();
    let host = tmp.path().join("host");
    write(&host.join("precious"), "precious\n");
    let checkout = tmp.path().join("checkout");
    write(&checkout.join("deep/a/b/c.txt"), "c\n");
    std::os::unix::fs::symlink(&host, checkout.join("dir-link")).unwrap();
    std::os::unix::fs::symlink(host.join("precious"), checkout.join("deep/file-link")).unwrap();
    // Unreadable directories are still removed (the overlay's work/work is mode 000).
    fs::create_dir(checkout.join("locked")).unwrap();
    super::fixture::set_mode(&checkout.join("locked"), 0o000);

    remove_tree(&checkout).unwrap();
    assert!(!checkout.exists());
    assert_eq!(
        fs::read_to_string(host.join("precious")).unwrap(),
        "precious\n"
    );

    // A root that is a link: only the link goes.
    let link = tmp.path().join("link");
    std::os::unix::fs::symlink(&host, &link).unwrap();
    remove_tree(&link).unwrap();
    assert!(fs::symlink_metadata(&link).is_err());
    assert!(host.join("precious").exists());
    // Missing: fine.
    remove_tree(&link).unwrap();
}

/// Set only in the child that runs [`ordinary_user_child`] as `nobody`.
const ORDINARY_CHILD_ENV: &str = "AGENT_WORKSPACE_TEST_RELEASE_ORDINARY_CHILD";

/// An ordinary user (no `CAP_DAC_OVERRIDE`) removes directories of its own it
/// may not read (overlayfs makes `work/work` mode 0), and a link to a
/// directory of mode 0 is removed as a link: the directory it names keeps its
/// mode and its file.
#[test]
fn an_ordinary_user_removes_its_own_directories_of_mode_0() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .arg(&exe)
        .args([
            "source::tests::release_tests::ordinary_user_child",
            "--ignored",
            "--exact",
            "--nocapture",
        ])
        .env(ORDINARY_CHILD_ENV, "1")
        .output()
        .unwrap_or_else(|e| {
            panic!("{e}: this test needs setpriv (Debian package util-linux) and root")
        });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The body of [`an_ordinary_user_removes_its_own_directories_of_mode_0`].
#[test]
#[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
fn ordinary_user_child() {
    use std::os::unix::fs::PermissionsExt;
    assert!(
        std::env::var_os(ORDINARY_CHILD_ENV).is_some(),
        "runs only in the child of an_ordinary_user_removes_its_own_directories_of_mode_0"
    );
    assert!(!rustix::process::geteuid().is_root(), "not root");
    let tmp = TempDir::new().unwrap();
    let kept = tmp.path().join("kept");
    write(&kept.join("file"), "kept\n");
    super::fixture::set_mode(&kept, 0o000);
    let checkout = tmp.path().join("checkout");
    write(&checkout.join("work/work/inside"), "x\n");
    for dir in ["work/work", "work"] {
        super::fixture::set_mode(&checkout.join(dir), 0o000);
    }
    std::os::unix::fs::symlink(&kept, checkout.join("link")).unwrap();
    assert_eq!(
        fs::read_dir(checkout.join("work")).unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied,
        "mode 0 keeps this user out"
    );

    remove_tree(&checkout).unwrap();

    assert!(!checkout.exists());
    let mode = fs::symlink_metadata(&kept).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0, "the linked directory keeps its mode");
    super::fixture::set_mode(&kept, 0o700);
    assert_eq!(fs::read_to_string(kept.join("file")).unwrap(), "kept\n");
}
