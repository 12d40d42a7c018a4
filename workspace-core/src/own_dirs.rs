//! Directories of this process's own that it may not read, made its owner's
//! again without following a link, so that they can be inspected and removed.
//!
//! Overlayfs makes a layer's `work/work` (and a volatile mount's marker
//! directories) mode 0, and a command may `chmod 000` a directory of its own.
//! Root reads past that; an ordinary user has no `CAP_DAC_OVERRIDE`, so a
//! runner of one gives such a directory its owner's permission first. The
//! change goes through an `O_PATH` handle on the directory that was found
//! (which needs no permission on it, and is never a link): a link swapped in
//! for it since is neither changed nor opened. A handle opened `O_PATH` takes
//! no `fchmod`, so the mode is changed through its `/proc/self/fd` link, which
//! names the inode itself.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{OFlag, openat};
use nix::sys::stat::{FchmodatFlags, Mode, fchmod, fchmodat, fstat};

/// Every permission of the owner.
const OWNERS: u32 = 0o700;

/// Opens the directory `name` below `parent` for reading, never through a
/// link (one is `ELOOP` or `ENOTDIR`); one this process may not read is
/// first given its owner's read, write and search permission (see the module
/// docs). `None` when there is none.
pub fn open_dir(parent: impl AsFd, name: &OsStr) -> io::Result<Option<OwnedFd>> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let opened = match openat(parent.as_fd(), name, flags, Mode::empty()) {
        Err(Errno::EACCES) => make_owners(parent.as_fd(), name),
        other => other.map_err(io::Error::from),
    };
    match opened {
        Ok(fd) => Ok(Some(fd)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Gives the directory `name` below `parent` its owner's permission through
/// an `O_PATH` handle on it, then opens it for reading through that handle.
fn make_owners(parent: impl AsFd, name: &OsStr) -> io::Result<OwnedFd> {
    let handle = openat(
        parent.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let mode = Mode::from_bits_truncate(fstat(&handle)?.st_mode) | Mode::S_IRWXU;
    let by_handle = format!("/proc/self/fd/{}", handle.as_raw_fd());
    fchmodat(
        nix::fcntl::AT_FDCWD,
        by_handle.as_str(),
        mode,
        FchmodatFlags::FollowSymlink,
    )
    .map_err(|errno| match errno {
        Errno::ENOENT => io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "{}: changing a directory's mode without following a link needs /proc mounted",
                Path::new(name).display()
            ),
        ),
        other => other.into(),
    })?;
    openat(
        &handle,
        ".",
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(io::Error::from)
}

/// Removes the directory tree `path` (links as links, as
/// [`std::fs::remove_dir_all`] does). A directory in it that this process
/// may not read or change is made its owner's first, through handles opened
/// relative to their parents (never a path that could be swapped).
pub fn remove_tree(path: &Path) -> io::Result<()> {
    match std::fs::remove_dir_all(path) {
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
            let parent = path.parent().unwrap_or(Path::new("/"));
            let name = path.file_name().ok_or_else(|| {
                io::Error::new(io::ErrorKind::InvalidInput, "no directory to remove")
            })?;
            let parent = std::fs::File::open(parent)?;
            if let Some(root) = open_dir(&parent, name)? {
                make_removable(root)?;
            }
            std::fs::remove_dir_all(path)
        }
        other => other,
    }
}

/// Gives `dir` and every directory below it its owner's permission.
fn make_removable(dir: OwnedFd) -> io::Result<()> {
    let mode = fstat(&dir)?.st_mode;
    if mode & OWNERS != OWNERS {
        fchmod(&dir, Mode::from_bits_truncate(mode) | Mode::S_IRWXU)?;
    }
    let mut entries = nix::dir::Dir::from_fd(dir)?;
    let mut below = Vec::new();
    for entry in entries.iter() {
        let entry = entry?;
        let name = entry.file_name().to_bytes();
        if name == b"." || name == b".." {
            continue;
        }
        // The entry's own type: a link to a directory is not one (an
        // unknown type is left to the open, which refuses a link).
        if matches!(entry.file_type(), Some(nix::dir::Type::Directory) | None) {
            below.push(std::ffi::OsString::from(
                <OsStr as std::os::unix::ffi::OsStrExt>::from_bytes(name),
            ));
        }
    }
    for name in below {
        let opened = match open_dir(&entries, &name) {
            // A file of unknown type, not a directory.
            Err(e) if e.raw_os_error() == Some(Errno::ENOTDIR as i32) => continue,
            other => other?,
        };
        if let Some(sub) = opened {
            make_removable(sub)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// Set only in the child that runs [`ordinary_user_child`] as `nobody`.
    const CHILD_ENV: &str = "AGENT_WORKSPACE_TEST_OWN_DIRS_CHILD";

    /// A run's layer as an ordinary user's runner leaves it: the overlay's
    /// work directory of mode 0, one of mode 0500 (readable, not writable),
    /// and a link to a directory of mode 0 that is not the run's.
    #[test]
    fn an_ordinary_user_removes_a_tree_with_directories_it_may_not_read() {
        use std::os::unix::process::CommandExt;
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "own_dirs::tests::ordinary_user_child",
                "--ignored",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD_ENV, "1")
            .uid(65534)
            .gid(65534)
            .output()
            .expect("re-executing the test binary as nobody (the test runs as root)");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "child failed: {}\n{stdout}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// The body of [`an_ordinary_user_removes_a_tree_with_directories_it_may_not_read`].
    #[test]
    #[ignore = "the body of a re-executed child: run (with --ignored) by the test that spawns it"]
    fn ordinary_user_child() {
        let mode = |path: &Path, mode| {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        assert!(
            std::env::var_os(CHILD_ENV).is_some(),
            "runs only re-executed"
        );
        let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
        assert_ne!(uid.unwrap(), 0, "not root");
        let tmp = tempfile::tempdir().unwrap();
        let kept = tmp.path().join("kept");
        std::fs::create_dir(&kept).unwrap();
        std::fs::write(kept.join("file"), "kept\n").unwrap();
        mode(&kept, 0o000);
        let layer = tmp.path().join("templates");
        std::fs::create_dir_all(layer.join("db/work/work/inner")).unwrap();
        std::fs::write(layer.join("db/work/work/inner/file"), "x").unwrap();
        std::fs::create_dir_all(layer.join("db/upper/read-only")).unwrap();
        std::fs::write(layer.join("db/upper/read-only/file"), "x").unwrap();
        std::os::unix::fs::symlink(&kept, layer.join("db/link")).unwrap();
        for dir in ["db/work/work/inner", "db/work/work"] {
            mode(&layer.join(dir), 0o000);
        }
        mode(&layer.join("db/upper/read-only"), 0o500);
        assert_eq!(
            std::fs::remove_dir_all(&layer).unwrap_err().kind(),
            io::ErrorKind::PermissionDenied,
            "the modes keep this user out of a plain removal"
        );

        remove_tree(&layer).unwrap();

        assert!(!layer.exists());
        let kept_mode = std::fs::symlink_metadata(&kept)
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(kept_mode & 0o777, 0, "the linked directory keeps its mode");
        mode(&kept, 0o700);
        assert_eq!(
            std::fs::read_to_string(kept.join("file")).unwrap(),
            "kept\n"
        );
    }

    #[test]
    fn a_link_where_a_directory_was_is_neither_changed_nor_opened() {
        let tmp = tempfile::tempdir().unwrap();
        let target = tmp.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::fs::set_permissions(&target, std::fs::Permissions::from_mode(0o500)).unwrap();
        std::os::unix::fs::symlink(&target, tmp.path().join("link")).unwrap();
        let parent = std::fs::File::open(tmp.path()).unwrap();
        let is_a_link = |e: &io::Error| matches!(e.raw_os_error(), Some(n) if n == Errno::ELOOP as i32 || n == Errno::ENOTDIR as i32);
        let refused = open_dir(&parent, OsStr::new("link")).unwrap_err();
        assert!(is_a_link(&refused), "{refused}");
        // The O_PATH handle the mode would be changed through refuses it too.
        let refused = make_owners(&parent, OsStr::new("link")).unwrap_err();
        assert!(is_a_link(&refused), "{refused}");
        let mode = std::fs::metadata(&target).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o500, "the link's target keeps its mode");
        assert!(open_dir(&parent, OsStr::new("missing")).unwrap().is_none());
    }
}
