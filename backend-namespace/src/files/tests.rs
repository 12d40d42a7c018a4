//! The operations on a plain directory standing in for a sandbox's root, on
//! a thread acting as an unprivileged user (these tests run as root). The
//! live sandbox's own cases (its `/proc`, its mounts) are the runner's
//! `tests/runner_files.rs`.

use std::fs;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::Path;

use nix::fcntl::OFlag;
use workspace_core::boundary::{FileError, FileKind, WriteOptions};

use super::ops;
use crate::sys::thread_creds;

/// An unprivileged id no file of the host belongs to.
const USER: u32 = 4_242_001;

/// A root directory of `USER`'s, made readable to it.
fn root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
    nix::unistd::chown(dir.path(), Some(USER.into()), Some(USER.into())).unwrap();
    dir
}

/// Runs `work` on `dir` as a root, on a thread acting as `USER`.
fn as_user<T: Send + 'static>(dir: &Path, work: impl FnOnce(&OwnedFd) -> T + Send + 'static) -> T {
    let root = nix::fcntl::open(
        dir,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .unwrap();
    std::thread::spawn(move || {
        thread_creds::act_as(USER, USER).unwrap();
        work(&root)
    })
    .join()
    .unwrap()
}

fn read(root: &OwnedFd, path: &str) -> Result<Vec<u8>, FileError> {
    use std::io::Read;
    let (_, mut file) = ops::open_read(root, path, 0)?;
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes).unwrap();
    Ok(bytes)
}

#[test]
fn links_resolve_inside_the_root_never_out_of_it() {
    let outside = tempfile::tempdir().unwrap();
    let secret = outside.path().join("secret");
    fs::write(&secret, "host secret").unwrap();
    fs::set_permissions(outside.path(), fs::Permissions::from_mode(0o755)).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o644)).unwrap();
    let dir = root();
    fs::write(dir.path().join("inside"), "inside").unwrap();
    symlink(&secret, dir.path().join("abs")).unwrap();
    symlink(
        "../../../../../../../..".to_owned() + secret.to_str().unwrap(),
        dir.path().join("rel"),
    )
    .unwrap();
    symlink("/inside", dir.path().join("good")).unwrap();
    let secret_text = secret.to_str().unwrap().to_owned();
    let (abs, rel, dotdot, absolute, good) = as_user(dir.path(), move |root| {
        (
            read(root, "/abs"),
            read(root, "/rel"),
            read(root, &format!("/../../../..{secret_text}")),
            read(root, &secret_text),
            read(root, "/good"),
        )
    });
    // The host file is readable by the user: only the resolution keeps it out.
    for refused in [abs, rel, dotdot, absolute] {
        assert!(
            matches!(refused, Err(FileError::NotFound { .. })),
            "{refused:?}"
        );
    }
    assert_eq!(good.unwrap(), b"inside");
}

#[test]
fn a_fifo_or_a_device_is_refused_unopened_and_a_directory_is_named() {
    let dir = root();
    nix::unistd::mkfifo(
        &dir.path().join("fifo"),
        nix::sys::stat::Mode::from_bits_truncate(0o666),
    )
    .unwrap();
    fs::create_dir(dir.path().join("sub")).unwrap();
    let (fifo, sub, stat) = as_user(dir.path(), |root| {
        (
            read(root, "/fifo"),
            read(root, "/sub"),
            ops::stat(root, "/fifo"),
        )
    });
    assert!(
        matches!(
            fifo,
            Err(FileError::NotRegularFile {
                kind: FileKind::Fifo,
                ..
            })
        ),
        "{fifo:?}"
    );
    assert!(
        matches!(sub, Err(FileError::IsADirectory { .. })),
        "{sub:?}"
    );
    assert_eq!(stat.unwrap().kind, FileKind::Fifo);
    // Writing over one is refused too, and nothing blocks.
    let written = as_user(dir.path(), |root| {
        ops::open_write(root, "/fifo", &WriteOptions::default()).map(|_| ())
    });
    assert!(
        matches!(written, Err(FileError::NotRegularFile { .. })),
        "{written:?}"
    );
}

#[test]
fn permissions_are_the_users_and_not_the_runners() {
    let dir = root();
    let closed = dir.path().join("closed");
    fs::write(&closed, "mode 000").unwrap();
    nix::unistd::chown(&closed, Some(USER.into()), Some(USER.into())).unwrap();
    fs::set_permissions(&closed, fs::Permissions::from_mode(0o000)).unwrap();
    let roots = dir.path().join("roots");
    fs::write(&roots, "root's").unwrap();
    fs::set_permissions(&roots, fs::Permissions::from_mode(0o644)).unwrap();
    let (closed_read, roots_write, roots_read) = as_user(dir.path(), |root| {
        (
            read(root, "/closed"),
            ops::open_write(root, "/roots", &WriteOptions::default()).map(|_| ()),
            read(root, "/roots"),
        )
    });
    assert!(
        matches!(closed_read, Err(FileError::PermissionDenied { .. })),
        "{closed_read:?}"
    );
    assert!(
        matches!(roots_write, Err(FileError::PermissionDenied { .. })),
        "{roots_write:?}"
    );
    assert_eq!(roots_read.unwrap(), b"root's");
    assert_eq!(fs::read_to_string(&roots).unwrap(), "root's", "not emptied");
    // The control: the runner itself (root) would have read it.
    assert_eq!(fs::read_to_string(&closed).unwrap(), "mode 000");
}

#[test]
fn files_are_written_listed_renamed_and_removed_as_the_user_without_following_links() {
    use std::io::Write;
    use std::os::unix::fs::MetadataExt;
    let dir = root();
    let keep = tempfile::tempdir().unwrap();
    fs::write(keep.path().join("kept"), "kept").unwrap();
    symlink(keep.path(), dir.path().join("out")).unwrap();
    let made = as_user(dir.path(), |root| {
        let (created, mut file) = ops::open_write(
            root,
            "/a/b/new.txt",
            &WriteOptions::default().with_parents().with_mode(0o600),
        )?;
        file.write_all(b"new").unwrap();
        ops::mkdir(root, "/a/c/d", true)?;
        ops::mkdir(root, "/a/c/d", true)?;
        let again = ops::mkdir(root, "/a/c/d", false);
        let listed = ops::list(root, "/", 3, 100)?;
        ops::rename(root, "/a/b/new.txt", "/a/c/moved.txt")?;
        let moved = read(root, "/a/c/moved.txt")?;
        let not_empty = ops::remove(root, "/a", false);
        let removed = ops::remove(root, "/a", true)?;
        let link_removed = ops::remove(root, "/out", true)?;
        let root_removed = ops::remove(root, "/", true);
        Ok::<_, FileError>((
            created,
            again,
            listed,
            moved,
            not_empty,
            removed,
            link_removed,
            root_removed,
        ))
    })
    .unwrap();
    let (created, again, listed, moved, not_empty, removed, link_removed, root_removed) = made;
    assert!(created);
    assert!(
        matches!(again, Err(FileError::AlreadyExists { .. })),
        "{again:?}"
    );
    let paths: Vec<(&str, FileKind)> = listed.iter().map(|i| (i.path.as_str(), i.kind)).collect();
    assert_eq!(
        paths,
        [
            ("/a", FileKind::Directory),
            ("/a/b", FileKind::Directory),
            ("/a/b/new.txt", FileKind::File),
            ("/a/c", FileKind::Directory),
            ("/a/c/d", FileKind::Directory),
            ("/out", FileKind::Symlink),
        ]
    );
    let new = listed.iter().find(|i| i.path == "/a/b/new.txt").unwrap();
    assert_eq!((new.size, new.mode), (3, 0o600));
    assert_eq!(
        listed
            .iter()
            .find(|i| i.path == "/out")
            .unwrap()
            .link_target
            .as_deref(),
        keep.path().to_str()
    );
    assert_eq!(moved, b"new");
    assert!(
        matches!(not_empty, Err(FileError::NotEmpty { .. })),
        "{not_empty:?}"
    );
    assert_eq!(removed, 5);
    assert_eq!(link_removed, 1);
    assert!(
        matches!(root_removed, Err(FileError::InvalidPath { .. })),
        "{root_removed:?}"
    );
    // The link's target was not followed; what was made was the user's.
    assert_eq!(
        fs::read_to_string(keep.path().join("kept")).unwrap(),
        "kept"
    );
    assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    let probe = dir.path().join("probe");
    as_user(dir.path(), |root| {
        ops::open_write(root, "/probe", &WriteOptions::default()).map(drop)
    })
    .unwrap();
    assert_eq!(fs::metadata(&probe).unwrap().uid(), USER);
}

#[test]
fn a_write_that_may_not_overwrite_or_change_a_mode_leaves_the_file_as_it_was() {
    let dir = root();
    let file = dir.path().join("f");
    fs::write(&file, "before").unwrap();
    fs::set_permissions(&file, fs::Permissions::from_mode(0o666)).unwrap();
    let (kept, chmod) = as_user(dir.path(), |root| {
        (
            ops::open_write(root, "/f", &WriteOptions::default().without_overwrite()).map(drop),
            // Not the user's file: its mode cannot be changed, nor is it emptied.
            ops::open_write(root, "/f", &WriteOptions::default().with_mode(0o600)).map(drop),
        )
    });
    assert!(
        matches!(kept, Err(FileError::AlreadyExists { .. })),
        "{kept:?}"
    );
    assert!(
        matches!(chmod, Err(FileError::PermissionDenied { .. })),
        "{chmod:?}"
    );
    assert_eq!(fs::read_to_string(&file).unwrap(), "before");
}
