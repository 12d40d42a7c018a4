//! An overlay's lower layer seen through an idmapped mount, prepared by the parent.
//!
//! # Why
//!
//! A layered checkout's lower layer is backend-worktree's cached base tree: made
//! by the runner (host root), shared by every run of the commit, and never to be
//! written. The run's user namespace maps one id, `uid` → `host_uid`; host root is
//! not mapped there. overlayfs checks permissions against, and copies up with, the
//! owner of the lower file, so over the plain lower every tracked file would be
//! `nobody`'s and read-only. Changing the owner of the cache would change a tree
//! shared with other runs (and other identities).
//!
//! Instead the parent makes a *private, detached* copy of the lower's mount with an
//! id mapping attached (`open_tree(OPEN_TREE_CLONE)` + `mount_setattr` with
//! `MOUNT_ATTR_IDMAP`, kernel ≥ 5.12; overlayfs accepts idmapped layers since 5.19):
//! through it the lower root's owner (host root for the cache) appears as
//! `host_uid`/`host_gid`, so in the run the tree is the run's own and copy-up works.
//! Nothing on disk changes: the mapping is a property of that one mount, which
//! exists only in the child's mount namespace (the child attaches it in its
//! scratch root right before the overlay step, see `mounts.rs`, and the scratch
//! root is detached after `pivot_root`). The mount is also read-only,
//! `nosuid` and `nodev`, and not recursive (a mount below the lower is not part of
//! it). overlayfs writes only to the upper layer; the lower is never written.
//!
//! Only the owner of the lower's root is mapped. A file inside with another owner
//! stays unmapped (`nobody`) and read-only to the run. When the lower's root is
//! owned by `host_uid`/`host_gid` already, no idmapped mount is made.
//!
//! # The mapping namespace
//!
//! `MOUNT_ATTR_IDMAP` takes a user namespace whose map is the mapping: on-disk id
//! `owner` → host id `host_uid` needs a namespace with `"<owner> <host_uid> 1"`. The
//! run's own namespace maps `uid` → `host_uid` instead, which is not it (and does
//! not exist before the clone). So [`idmapped_lower`] clones a helper process into a
//! new user namespace (a fork-style raw `clone`, like the run's child; the helper
//! only closes its descriptors and sleeps in `ppoll` with every signal blocked),
//! writes its maps, opens `/proc/<pid>/ns/user`, then kills and reaps it. The
//! namespace lives on as long as an idmapped mount refers to it, and this
//! process keeps it for the next mount of the same mapping.
//!
//! # Ambient authority
//!
//! Creating an idmapped mount of a host file system needs `CAP_SYS_ADMIN` in the
//! host's user namespace (the runner is host root), and the file system must
//! support idmapped mounts (ext4, xfs, btrfs; tmpfs since 6.3). Otherwise the
//! spawn fails with [`SpawnError::IdmappedLower`] naming the step.

use std::ffi::CString;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Mutex;

use nix::errno::Errno;
use nix::libc;

use super::error::SpawnError;
use super::idmap;
use crate::sys::{fd, mount, process, signal};

/// A read-write host mount of directory `source` for the child: `None` when
/// `source` is owned by `host` already (a plain bind does), else its writable
/// idmapped mount, pushed to `trees`; its slot there.
pub(crate) fn prepare_writable(
    source: &Path,
    (dev, ino): (u64, u64),
    host: (u32, u32),
    trees: &mut Vec<OwnedFd>,
) -> Result<Option<usize>, SpawnError> {
    let Some(fd) = idmapped_lower(source, (dev, ino), host, false)? else {
        return Ok(None);
    };
    trees.push(fd);
    Ok(Some(trees.len() - 1))
}

/// The overlay step's lower layer for the child: `None` when `lower` is owned by
/// `host` already, else its idmapped mount ([`idmapped_lower`]), pushed to
/// `lowers`; its slot there.
pub(crate) fn prepare(
    lower: &Path,
    (dev, ino): (u64, u64),
    host: (u32, u32),
    lowers: &mut Vec<OwnedFd>,
) -> Result<Option<usize>, SpawnError> {
    let Some(fd) = idmapped_lower(lower, (dev, ino), host, true)? else {
        return Ok(None);
    };
    lowers.push(fd);
    Ok(Some(lowers.len() - 1))
}

/// A detached mount of `lower` in which its root's owner appears as
/// `host_uid`/`host_gid`, or `None` when the root is theirs already; read-only
/// when `read_only` (an overlay's lower), else writable (a read-write host
/// mount: what the run writes there is the directory owner's on disk).
///
/// `expected` is the `(dev, ino)` of `lower` inspected before (no symlink on its
/// path): the mount made must be of that directory, else `EXDEV`.
///
/// # Ambient authority
/// `lower` is a host path; needs `CAP_SYS_ADMIN` on the host (see the module docs).
pub(crate) fn idmapped_lower(
    lower: &Path,
    expected: (u64, u64),
    (host_uid, host_gid): (u32, u32),
    read_only: bool,
) -> Result<Option<OwnedFd>, SpawnError> {
    let fail = |step: &'static str| {
        move |source: Errno| SpawnError::IdmappedLower {
            step,
            path: lower.to_path_buf(),
            source,
        }
    };
    // A lower layer that is the run's own already needs no mount at all, and an
    // ordinary user (whose runs map to its own ids) could not make one: look
    // before `open_tree`, which needs `CAP_SYS_ADMIN`.
    let before = nix::sys::stat::stat(lower).map_err(fail("inspecting the lower layer"))?;
    if (before.st_dev, before.st_ino) == expected
        && (before.st_uid, before.st_gid) == (host_uid, host_gid)
    {
        return Ok(None);
    }
    let path = CString::new(lower.as_os_str().as_bytes())
        .map_err(|_| fail("naming the lower layer")(Errno::EINVAL))?;
    let tree = mount::clone_tree(&path)
        .map_err(|errno| fail("open_tree of the lower layer")(Errno::from_raw(errno)))?;
    let stat = nix::sys::stat::fstat(&tree).map_err(fail("inspecting the lower layer"))?;
    if (stat.st_dev, stat.st_ino) != expected {
        return Err(fail("checking the lower layer is the directory inspected")(
            Errno::EXDEV,
        ));
    }
    if (stat.st_uid, stat.st_gid) == (host_uid, host_gid) {
        return Ok(None);
    }
    let userns = mapping_namespace((stat.st_uid, host_uid), (stat.st_gid, host_gid))?;
    let set = libc::MOUNT_ATTR_IDMAP
        | if read_only {
            libc::MOUNT_ATTR_RDONLY
        } else {
            0
        }
        | libc::MOUNT_ATTR_NOSUID
        | libc::MOUNT_ATTR_NODEV;
    // `tree` is detached: only its own mount is changed.
    mount::set_attributes(tree.as_fd(), set, 0, Some(userns.as_fd()), false).map_err(|errno| {
        fail("mount_setattr(MOUNT_ATTR_IDMAP) on the lower layer")(Errno::from_raw(errno))
    })?;
    Ok(Some(tree))
}

/// The user namespaces made for idmapped mounts, by mapping. A namespace's map
/// never changes once written, so one serves every idmapped mount of its
/// mapping for the life of this process: making one costs a clone, two map
/// writes and a kill, about a millisecond of every sandbox's start. Held here,
/// a namespace has no process in it and nothing but the mounts made with it
/// refers to it; the descriptors are close-on-exec, and every sandbox child
/// closes what it does not keep.
static MAPPING_NAMESPACES: Mutex<Vec<(Mapping, OwnedFd)>> = Mutex::new(Vec::new());

/// `(on-disk uid, host uid), (on-disk gid, host gid)`.
type Mapping = ((u32, u32), (u32, u32));

/// A user namespace mapping exactly `uid.0` → `uid.1` and `gid.0` → `gid.1`:
/// a duplicate of the one this process made before for that mapping, else a
/// new one ([`new_mapping_namespace`]).
fn mapping_namespace(uid: (u32, u32), gid: (u32, u32)) -> Result<OwnedFd, SpawnError> {
    let duplicate = |ns: &OwnedFd| {
        ns.try_clone().map_err(|e| SpawnError::IdmappedLower {
            step: "duplicating the mapping namespace",
            path: "-".into(),
            source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
        })
    };
    // A panic while the list was held left it whole: every entry is pushed complete.
    let mut made = MAPPING_NAMESPACES
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, ns)) = made.iter().find(|(mapping, _)| *mapping == (uid, gid)) {
        return duplicate(ns);
    }
    let ns = new_mapping_namespace(uid, gid)?;
    let mine = duplicate(&ns)?;
    made.push(((uid, gid), ns));
    Ok(mine)
}

/// A new user namespace mapping exactly `uid.0` → `uid.1` and `gid.0` → `gid.1`.
fn new_mapping_namespace(uid: (u32, u32), gid: (u32, u32)) -> Result<OwnedFd, SpawnError> {
    let helper = Helper::start()?;
    let dir = std::path::PathBuf::from(format!("/proc/{}", helper.0));
    idmap::write(&dir.join("uid_map"), &format!("{} {} 1\n", uid.0, uid.1))?;
    // The runner holds CAP_SETGID on the host (it must, to create idmapped mounts
    // at all): a gid map needs no `setgroups` deny then. The helper never runs
    // anything, so its groups do not matter.
    idmap::write(&dir.join("gid_map"), &format!("{} {} 1\n", gid.0, gid.1))?;
    let ns = dir.join("ns/user");
    let fd = nix::fcntl::open(
        &ns,
        nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .map_err(|source| SpawnError::IdmappedLower {
        step: "opening the mapping namespace",
        path: ns,
        source,
    })?;
    drop(helper);
    Ok(fd)
}

/// A process in a new user namespace that does nothing; killed and reaped on drop.
struct Helper(libc::pid_t);

impl Helper {
    fn start() -> Result<Self, SpawnError> {
        let parent = std::process::id() as libc::pid_t;
        // The helper performs only raw system calls (no allocation, no locks,
        // nothing that can panic) and never returns from `helper_child`; every
        // signal stays blocked in it, so no handler of the runner runs there.
        let pid = crate::sys::fork_like(libc::CLONE_NEWUSER, None, &parent, helper_child).map_err(
            |errno| SpawnError::IdmappedLower {
                step: "cloning the mapping namespace's helper",
                path: "-".into(),
                source: Errno::from_raw(errno),
            },
        )?;
        Ok(Self(pid))
    }
}

impl Drop for Helper {
    fn drop(&mut self) {
        // Our unreaped child: its pid cannot be reused before the wait.
        let _ = signal::kill(self.0, libc::SIGKILL);
        while process::wait_for_child(self.0, libc::__WALL) == Err(libc::EINTR) {}
    }
}

/// The helper: closes every descriptor it inherited (a copy of the runner's table
/// could keep a lock or a pipe end alive), dies with its parent, and sleeps until
/// it is killed (every signal is blocked; `SIGKILL` cannot be). `parent` is the
/// runner's pid: if it is no longer the parent, the runner died before the
/// death signal was armed, and the helper ends at once.
fn helper_child(parent: &libc::pid_t, _: crate::sys::Birth) -> ! {
    let parent = *parent;
    // Failures do not matter here: a failed close leaves descriptors open
    // until SIGKILL.
    let _ = fd::close_from(0, 0);
    process::die_with_parent();
    if process::parent_pid() != parent {
        process::exit(0);
    }
    process::wait_until_killed()
}
