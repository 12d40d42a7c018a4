//! Handing the writable workspace over to the run's identity.
//!
//! # Why
//!
//! The source boundary (backend-worktree) makes the checkout as the runner, i.e.
//! host root. Inside the run the command is uid `n` of a user namespace that maps
//! exactly one id, `n` → `base + n` as root (see `host_ids.rs`); host root is not mapped there, so
//! every file of the checkout shows up as `nobody` and the run cannot write its own
//! workspace (nor git's index, nor `.git/objects`). `seal` therefore changes the
//! owner of what the run may write to the mapped host ids, once, before any command
//! runs: the whole checkout for a standalone or linked one, the upper and work
//! directories for a layered one. The lower layer is shared by every run of the
//! commit and is never handed over: the run sees it through an idmapped mount
//! that shows its owner as the run's mapped id (see `spawn/idmapped.rs`).
//!
//! # How (what an agent could have planted is never trusted)
//!
//! * `lchown` semantics: a symbolic link gets a new owner itself
//!   (`fchownat(AT_SYMLINK_NOFOLLOW)`), what it points to is never looked at;
//! * every directory is opened relative to its parent's descriptor with
//!   `O_NOFOLLOW | O_DIRECTORY` and checked to be the `(dev, ino)` just inspected,
//!   so a directory swapped for a link between the two steps is refused, and no
//!   path string longer than one name is ever resolved: trees deeper than
//!   `PATH_MAX` are handed over like any other;
//! * at most [`MAX_OPEN_DIRS`] directory descriptors are held; an ancestor whose
//!   descriptor was closed is reopened through `..` of its child and must again be
//!   the `(dev, ino)` recorded on the way down (else [`ProcessError::Handover`] with
//!   `ESTALE`: the tree was moved while it was walked);
//! * nothing on another file system (another mount: `st_dev` differs from the
//!   root's) is changed or descended into; such paths are listed in the
//!   [`HandoverOutcome`];
//! * a non-directory with more than one hard link is left alone and listed: its
//!   other name may be outside the workspace, and giving the run a host file that
//!   way would be an escape. A checkout never makes hard links.
//!
//! The kernel clears set-user-id and set-group-id bits on a change of owner, so no
//! privileged executable is created by the handover.

use std::ffi::{OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat};
use nix::unistd::{Gid, Uid, fchown, fchownat};

use super::error::ProcessError;

/// How many directory descriptors the walk holds at most (the deepest ones).
pub const MAX_OPEN_DIRS: usize = 32;

/// What a handover did and what it left alone on purpose.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct HandoverOutcome {
    /// Entries whose owner was changed.
    pub changed: u64,
    /// Entries already owned by the target ids.
    pub unchanged: u64,
    /// Root-relative paths on another file system (mount points), not changed and
    /// not descended into.
    pub other_mounts: Vec<PathBuf>,
    /// Root-relative paths of non-directories with several hard links, not changed.
    pub hard_links: Vec<PathBuf>,
}

/// One directory on the way down.
struct Level {
    /// Its descriptor, unless it was closed to stay under [`MAX_OPEN_DIRS`].
    fd: Option<OwnedFd>,
    /// `(dev, ino)` when it was opened.
    id: (u64, u64),
    /// Its entries still to do.
    names: Vec<OsString>,
    /// Its root-relative path.
    path: PathBuf,
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

/// Changes the owner of `root` and everything under it to `uid`:`gid` (host ids).
///
/// `seal` calls it so the run's identity can write its workspace: a checkout made
/// by the runner is host root's, which the run's user namespace does not map.
/// Nothing planted in the tree is trusted: symbolic links get a new owner
/// themselves and are never followed (`fchownat(AT_SYMLINK_NOFOLLOW)`); every
/// directory is opened relative to its parent's descriptor with `O_NOFOLLOW` and
/// checked to be the `(dev, ino)` inspected, so trees deeper than `PATH_MAX` work
/// and a swapped directory is refused (`ESTALE`); at most [`MAX_OPEN_DIRS`]
/// descriptors are held (an ancestor is reopened through `..` and checked again);
/// other mounts are neither changed nor entered, and non-directories with several
/// hard links are left alone: both are listed in the [`HandoverOutcome`].
/// Idempotent. The kernel clears set-user-id and set-group-id bits on the change.
///
/// # Ambient authority
/// `root` is a host path (the checkout the source boundary made); its last
/// component must not be a symlink. Needs `CAP_CHOWN` on the host.
pub fn hand_over(root: &Path, uid: u32, gid: u32) -> Result<HandoverOutcome, ProcessError> {
    let (uid, gid) = (Uid::from_raw(uid), Gid::from_raw(gid));
    let fail = |step: &'static str, path: &Path| {
        let path = root.join(path);
        move |source: Errno| ProcessError::Handover {
            step,
            path,
            source: source.into(),
        }
    };
    let root_fd = nix::fcntl::open(root, DIR_FLAGS, Mode::empty())
        .map_err(fail("opening the workspace root", Path::new("")))?;
    let root_stat =
        fstat(&root_fd).map_err(fail("inspecting the workspace root", Path::new("")))?;
    let dev = root_stat.st_dev;
    let mut outcome = HandoverOutcome::default();
    chown_dir(&root_fd, &root_stat, uid, gid, &mut outcome).map_err(fail(
        "changing the owner of the workspace root",
        Path::new(""),
    ))?;
    let mut stack = vec![Level {
        names: list(&root_fd).map_err(fail("listing a directory", Path::new("")))?,
        fd: Some(root_fd),
        id: (root_stat.st_dev, root_stat.st_ino),
        path: PathBuf::new(),
    }];
    while let Some(top) = stack.last_mut() {
        let Some(name) = top.names.pop() else {
            ascend(&mut stack)
                .map_err(|(path, e)| fail("reopening a parent directory through `..`", &path)(e))?;
            continue;
        };
        let path = top.path.join(&name);
        let Some(dir) = top.fd.as_ref() else {
            // The top of the stack always holds its descriptor.
            return Err(fail("walking the workspace", &path)(Errno::EBADF));
        };
        let stat = match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(Errno::ENOENT) => continue,
            Err(e) => return Err(fail("inspecting a workspace path", &path)(e)),
        };
        if stat.st_dev != dev {
            outcome.other_mounts.push(path);
            continue;
        }
        let kind = SFlag::from_bits_truncate(stat.st_mode) & SFlag::S_IFMT;
        if kind != SFlag::S_IFDIR {
            if stat.st_nlink > 1 {
                outcome.hard_links.push(path);
            } else if stat.st_uid == uid.as_raw() && stat.st_gid == gid.as_raw() {
                outcome.unchanged += 1;
            } else {
                fchownat(
                    dir,
                    name.as_os_str(),
                    Some(uid),
                    Some(gid),
                    AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(fail("changing the owner of a workspace path", &path))?;
                outcome.changed += 1;
            }
            continue;
        }
        let child = nix::fcntl::openat(dir, name.as_os_str(), DIR_FLAGS, Mode::empty())
            .map_err(fail("opening a workspace directory", &path))?;
        let opened = fstat(&child).map_err(fail("inspecting a workspace directory", &path))?;
        if (opened.st_dev, opened.st_ino) != (stat.st_dev, stat.st_ino) {
            return Err(fail(
                "opening a workspace directory (it was replaced)",
                &path,
            )(Errno::ESTALE));
        }
        chown_dir(&child, &opened, uid, gid, &mut outcome)
            .map_err(fail("changing the owner of a workspace directory", &path))?;
        let names = list(&child).map_err(fail("listing a directory", &path))?;
        stack.push(Level {
            fd: Some(child),
            id: (opened.st_dev, opened.st_ino),
            names,
            path,
        });
        if stack.len() > MAX_OPEN_DIRS {
            let index = stack.len() - 1 - MAX_OPEN_DIRS;
            stack[index].fd = None;
        }
    }
    Ok(outcome)
}

/// Pops the finished top level and, if the new top's descriptor was closed,
/// reopens it through `..` of the popped one, checking its `(dev, ino)`.
fn ascend(stack: &mut Vec<Level>) -> Result<(), (PathBuf, Errno)> {
    let Some(done) = stack.pop() else {
        return Ok(());
    };
    let Some(parent) = stack.last_mut() else {
        return Ok(());
    };
    if parent.fd.is_some() {
        return Ok(());
    }
    let path = parent.path.clone();
    let child = done.fd.ok_or((path.clone(), Errno::EBADF))?;
    let fd = nix::fcntl::openat(&child, "..", DIR_FLAGS, Mode::empty())
        .map_err(|e| (path.clone(), e))?;
    let stat = fstat(&fd).map_err(|e| (path.clone(), e))?;
    if (stat.st_dev, stat.st_ino) != parent.id {
        return Err((path, Errno::ESTALE));
    }
    parent.fd = Some(fd);
    Ok(())
}

fn chown_dir(
    fd: &OwnedFd,
    stat: &FileStat,
    uid: Uid,
    gid: Gid,
    outcome: &mut HandoverOutcome,
) -> Result<(), Errno> {
    if stat.st_uid == uid.as_raw() && stat.st_gid == gid.as_raw() {
        outcome.unchanged += 1;
        return Ok(());
    }
    fchown(fd, Some(uid), Some(gid))?;
    outcome.changed += 1;
    Ok(())
}

/// The names in the directory open as `fd` (without `.` and `..`).
fn list(fd: &OwnedFd) -> Result<Vec<OsString>, Errno> {
    let mut dir = nix::dir::Dir::openat(fd, ".", DIR_FLAGS, Mode::empty())?;
    let mut names = Vec::new();
    for entry in dir.iter() {
        let entry = entry?;
        let name = OsStr::from_bytes(entry.file_name().to_bytes());
        if name != "." && name != ".." {
            names.push(name.to_owned());
        }
    }
    Ok(names)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::MetadataExt;

    use super::*;

    fn ok<T, E: std::fmt::Display>(r: Result<T, E>) -> T {
        r.unwrap_or_else(|e| panic!("{e}"))
    }

    fn owner(path: &Path) -> (u32, u32) {
        let meta = ok(std::fs::symlink_metadata(path));
        (meta.uid(), meta.gid())
    }

    /// Runs as root (as every test of this crate): changing owners needs it.
    #[test]
    fn a_deep_tree_is_handed_over_without_following_links_or_hard_links() {
        let tmp = ok(tempfile::tempdir());
        let root = tmp.path().join("workspace");
        let outside = tmp.path().join("outside");
        ok(std::fs::write(&outside, "host"));
        // 3,000 levels of "dd/": 9,000 bytes, far beyond PATH_MAX (4,096), built
        // with relative steps so no single path is ever too long.
        ok(std::fs::create_dir(&root));
        let mut dir = ok(nix::fcntl::open(&root, DIR_FLAGS, Mode::empty()));
        for _ in 0..3_000 {
            ok(nix::sys::stat::mkdirat(
                &dir,
                "dd",
                Mode::from_bits_truncate(0o755),
            ));
            dir = ok(nix::fcntl::openat(&dir, "dd", DIR_FLAGS, Mode::empty()));
        }
        let deepest = ok(nix::fcntl::openat(
            &dir,
            "leaf",
            OFlag::O_CREAT | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        ));
        drop(deepest);
        ok(std::os::unix::fs::symlink(&outside, root.join("link")));
        ok(std::fs::hard_link(&outside, root.join("hard")));
        std::fs::write(root.join("file"), "x").unwrap_or_else(|e| panic!("{e}"));

        let outcome = ok(hand_over(&root, 101_000, 101_001));
        assert_eq!(owner(&outside), (0, 0), "the link target is unchanged");
        assert_eq!(owner(&root.join("link")), (101_000, 101_001));
        assert_eq!(owner(&root.join("file")), (101_000, 101_001));
        assert_eq!(
            owner(&root.join("hard")),
            (0, 0),
            "a hard link is left alone"
        );
        assert_eq!(outcome.hard_links, vec![PathBuf::from("hard")]);
        // root + 3,000 dirs + leaf + link + file
        assert_eq!(outcome.changed, 3_004);
        let leaf = ok(nix::sys::stat::fstatat(
            &dir,
            "leaf",
            AtFlags::AT_SYMLINK_NOFOLLOW,
        ));
        assert_eq!((leaf.st_uid, leaf.st_gid), (101_000, 101_001));

        let again = ok(hand_over(&root, 101_000, 101_001));
        assert_eq!((again.changed, again.unchanged), (0, 3_004), "idempotent");
        // Let TempDir remove the deep tree: give it back to root first is not
        // needed (root removes anything), but the depth is: remove bottom-up.
        drop(dir);
        ok(std::process::Command::new("rm")
            .arg("-rf")
            .arg(&root)
            .status());
    }

    #[test]
    fn a_symlinked_root_is_refused() {
        let tmp = ok(tempfile::tempdir());
        let real = tmp.path().join("real");
        ok(std::fs::create_dir(&real));
        let link = tmp.path().join("link");
        ok(std::os::unix::fs::symlink(&real, &link));
        let err = hand_over(&link, 101_000, 101_000).unwrap_err();
        assert!(matches!(err, ProcessError::Handover { .. }), "{err}");
        assert_eq!(owner(&real), (0, 0));
    }

    #[test]
    fn another_mount_inside_is_not_crossed() {
        let tmp = ok(tempfile::tempdir());
        let root = tmp.path().join("workspace");
        let mnt = root.join("mnt");
        ok(std::fs::create_dir_all(&mnt));
        ok(nix::mount::mount(
            Some("tmpfs"),
            &mnt,
            Some("tmpfs"),
            nix::mount::MsFlags::empty(),
            Some("size=64k,mode=0755"),
        ));
        let result =
            std::fs::write(mnt.join("inner"), "x").map(|()| hand_over(&root, 101_000, 101_000));
        let inner = std::fs::symlink_metadata(mnt.join("inner")).map(|m| m.uid());
        ok(nix::mount::umount2(&mnt, nix::mount::MntFlags::MNT_DETACH));
        let outcome = ok(ok(result));
        assert_eq!(outcome.other_mounts, vec![PathBuf::from("mnt")]);
        assert_eq!(ok(inner), 0, "a file on the other mount keeps its owner");
        assert_eq!(owner(&root), (101_000, 101_000));
    }
}
