//! Applying the [`MountPlan`](workspace_core::mount_plan::MountPlan) in the child.
//!
//! Runs after `clone`, in the new user and mount namespaces, while the child still
//! holds every capability of its user namespace: only raw system calls on data
//! prepared in [`Prepared`](super::prepared::Prepared).
//!
//! Every target is resolved beneath the new root one component at a time with
//! `O_NOFOLLOW` (see [`sys::walk_parent`]); the mount is then made on
//! `/oldroot/proc/self/fd/N` of that descriptor, so a symlink planted in a bound
//! tree can never redirect a mount. Bind sources are opened first (see
//! [`open_sources`]) and named the same way.
//! Flags are set afterwards on the new mount with `mount_setattr(2)` (which only
//! adds or clears the flags named, so flags the kernel locked on host mounts are
//! kept). Without `mount_setattr` (kernels before 5.12) a step that sets flags on
//! the top mount only falls back to a bind remount that preserves the current
//! flags; a step that needs its flags on every submount (recursive binds) fails
//! with `ENOSYS` at `op::SET_FLAGS`, naming the step, since a remount cannot
//! reach the submounts.

use std::cell::Cell;
use std::ffi::{CStr, c_int, c_ulong};
use std::os::fd::AsFd;

use nix::libc;

use super::error::{ChildStage, Report, op};
use super::prepared::{HostSource, LowerLayer, PreparedStep, ScratchLayers, StepKind};
use crate::sys::{self, Errno, Fd, OpenHow, StackPath, mount};

const MOUNT_ATTR_RDONLY: u64 = 0x1;
const MOUNT_ATTR_NOSUID: u64 = 0x2;
const MOUNT_ATTR_NODEV: u64 = 0x4;
const MOUNT_ATTR_NOEXEC: u64 = 0x8;

/// A failed operation within a step.
type StepResult = Result<(), (u32, Errno)>;

/// Attaches the detached mount `tree` (a descriptor `keep_descriptors` moved to
/// its fixed number) on the open directory `at`, then closes `tree`.
fn move_tree(tree: c_int, at: &sys::Fd) -> Result<(), Errno> {
    // The detached mount's descriptor is closed once it is attached.
    mount::move_mount(Fd::from_new(tree)?, at)
}

/// Opens every bind source (`O_PATH`) into its slot. Called in the child before its
/// fs ids change, so host directories only root may search can still be bound; the
/// descriptors then live in the child's own mount namespace (a descriptor opened by
/// the parent would name the host's mounts, which `mount` refuses to bind).
///
/// Each source is resolved with `how` (`openat2` with `RESOLVE_NO_SYMLINKS`, see
/// [`sys::open_no_symlinks`]): a symlink planted anywhere on the path since the
/// parent checked it is `ELOOP`, never followed with the host root's fs ids. The
/// opened file must then be the one the parent inspected (`dev`, `ino`), else the
/// step fails with `EXDEV` at `op::VERIFY_SOURCE` (the path was swapped between
/// the check and the open).
pub(crate) fn open_sources(
    steps: &[PreparedStep],
    slots: &[Cell<c_int>],
    how: &OpenHow,
) -> Result<(), Report> {
    for (index, step) in steps.iter().enumerate() {
        let report = |(op, errno)| Report {
            stage: ChildStage::MountStep as u32,
            index: index as u32,
            op,
            errno,
        };
        match &step.kind {
            StepKind::Bind {
                source,
                slot,
                dev,
                ino,
                ..
            } => open_source(source, (*dev, *ino), *slot, slots, how).map_err(report)?,
            StepKind::Overlay { lower, rw, .. } => {
                if let LowerLayer::Host(lower) = lower {
                    open_host_source(lower, slots, how).map_err(report)?;
                }
                open_host_source(rw, slots, how).map_err(report)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn open_host_source(source: &HostSource, slots: &[Cell<c_int>], how: &OpenHow) -> StepResult {
    open_source(
        &source.source,
        (source.dev, source.ino),
        source.slot,
        slots,
        how,
    )
}

/// Opens `source` (no symlink on its path) into `slots[slot]`, checked to be
/// the file `expected` inspected before clone.
fn open_source(
    source: &CStr,
    expected: (u64, u64),
    slot: usize,
    slots: &[Cell<c_int>],
    how: &OpenHow,
) -> StepResult {
    let fd = sys::open_no_symlinks(source, how).map_err(|e| (op::OPEN_SOURCE, e))?;
    let found = sys::dev_ino(&fd).map_err(|e| (op::VERIFY_SOURCE, e))?;
    if found != expected {
        return Err((op::VERIFY_SOURCE, libc::EXDEV));
    }
    if let Some(cell) = slots.get(slot) {
        cell.set(fd.into_raw());
    }
    Ok(())
}

/// The descriptor [`open_sources`] put in `slot` (a slot it did not fill is
/// `EBADF`, never "fd -1", which `proc_fd` refuses too).
fn opened(slots: &[Cell<c_int>], slot: usize) -> Result<c_int, (u32, Errno)> {
    slots
        .get(slot)
        .map(Cell::get)
        .filter(|fd| *fd >= 0)
        .ok_or((op::OPEN_SOURCE, libc::EBADF))
}

/// Binds the opened host directory in `slot` on the new directory `at` (not
/// recursively: a mount below a layer is not part of it), then closes it.
fn bind_opened(slots: &[Cell<c_int>], slot: usize, at: &CStr) -> StepResult {
    let fd = opened(slots, slot)?;
    let source = StackPath::proc_fd(fd).map_err(|e| (op::OPEN_SOURCE, e))?;
    let at = mount::open_dir(at).map_err(|e| (op::CREATE, e))?;
    mount_on(&at, Some(source.as_c_str()), None, libc::MS_BIND, None)?;
    sys::close(fd);
    Ok(())
}

/// Puts an overlay's layers in the scratch root (`layers`), where its option
/// string names them: the lower layer (its idmapped mount, or a bind of the
/// host directory) and a bind of the directory holding upper and work.
fn place_layers(
    layers: &ScratchLayers,
    lower: &LowerLayer,
    rw: &HostSource,
    fds: &StepFds<'_>,
) -> StepResult {
    for dir in [&layers.dir, &layers.lower, &layers.rw] {
        mount::mkdir(dir, 0o700).map_err(|e| (op::CREATE, e))?;
    }
    match lower {
        LowerLayer::Idmapped { slot } => {
            let at = mount::open_dir(&layers.lower).map_err(|e| (op::CREATE, e))?;
            move_tree(fds.lowers + *slot as c_int, &at).map_err(|e| (op::ATTACH_LOWER, e))?;
        }
        LowerLayer::Host(source) => bind_opened(fds.slots, source.slot, &layers.lower)?,
    }
    bind_opened(fds.slots, rw.slot, &layers.rw)
}

/// Where the child finds what the steps need besides their own data.
pub(crate) struct StepFds<'a> {
    /// The bind sources' descriptors ([`open_sources`]).
    pub slots: &'a [Cell<c_int>],
    /// The descriptor number of the first idmapped lower layer (the others follow).
    pub lowers: c_int,
}

/// Applies every step beneath `root` (an `O_PATH` descriptor of the new root).
pub(crate) fn apply(steps: &[PreparedStep], root: c_int, fds: &StepFds<'_>) -> Result<(), Report> {
    for (index, step) in steps.iter().enumerate() {
        apply_step(root, step, fds).map_err(|(op, errno)| Report {
            stage: ChildStage::MountStep as u32,
            index: index as u32,
            op,
            errno,
        })?;
    }
    Ok(())
}

fn apply_step(root: c_int, step: &PreparedStep, fds: &StepFds<'_>) -> StepResult {
    let slots = fds.slots;
    let target = step.target.as_c_str();
    match &step.kind {
        StepKind::Bind {
            slot,
            dir,
            read_only,
            device,
            ..
        } => {
            let at = if *dir {
                sys::create_dir(root, target)
            } else {
                sys::create_file(root, target)
            }
            .map_err(|e| (op::CREATE, e))?;
            let source_fd = opened(slots, *slot)?;
            let source = StackPath::proc_fd(source_fd).map_err(|e| (op::OPEN_SOURCE, e))?;
            mount_on(
                &at,
                Some(source.as_c_str()),
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
            // The source descriptor is this step's and no longer needed.
            sys::close(source_fd);
            drop(at);
            let mut set = if *device {
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC
            } else {
                MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
            };
            if *read_only {
                set |= MOUNT_ATTR_RDONLY;
            }
            let top = sys::open_existing(root, target).map_err(|e| (op::REOPEN, e))?;
            set_flags(&top, set, 0, true)
        }
        StepKind::IdmappedBind { slot } => {
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            move_tree(fds.lowers + *slot as c_int, &at).map_err(|e| (op::ATTACH_IDMAPPED, e))
        }
        StepKind::Overlay {
            data,
            lower,
            rw,
            layers,
        } => {
            place_layers(layers, lower, rw, fds)?;
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            mount_on(
                &at,
                Some(c"overlay"),
                Some(c"overlay"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(data),
            )
        }
        StepKind::Rebind { read_only } => {
            let at = match sys::open_existing(root, target) {
                Err(libc::ENOENT) if step.optional => return Ok(()),
                other => other.map_err(|e| (op::RESOLVE, e))?,
            };
            let here = StackPath::proc_fd(at.raw()).map_err(|e| (op::RESOLVE, e))?;
            mount_on(
                &at,
                Some(here.as_c_str()),
                None,
                libc::MS_BIND | libc::MS_REC,
                None,
            )?;
            drop(at);
            let top = sys::open_existing(root, target).map_err(|e| (op::REOPEN, e))?;
            let base = MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
            if *read_only {
                // Read-only reaches every mount below: the safe direction.
                set_flags(&top, base | MOUNT_ATTR_RDONLY, 0, true)
            } else {
                set_flags(&top, base, MOUNT_ATTR_RDONLY, false)
            }
        }
        StepKind::RemountReadOnly => {
            let top = sys::open_existing(root, target).map_err(|e| (op::RESOLVE, e))?;
            set_flags(&top, MOUNT_ATTR_RDONLY, 0, false)
        }
        StepKind::Tmpfs { data } => {
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            mount_on(
                &at,
                Some(c"tmpfs"),
                Some(c"tmpfs"),
                libc::MS_NOSUID | libc::MS_NODEV,
                Some(data),
            )
        }
        StepKind::Proc => {
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            mount_on(
                &at,
                Some(c"proc"),
                Some(c"proc"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
                None,
            )
        }
        StepKind::Sysfs => {
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            mount_on(
                &at,
                Some(c"sysfs"),
                Some(c"sysfs"),
                libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC | libc::MS_RDONLY,
                None,
            )
        }
        StepKind::Devpts => {
            let at = sys::create_dir(root, target).map_err(|e| (op::CREATE, e))?;
            mount_on(
                &at,
                Some(c"devpts"),
                Some(c"devpts"),
                libc::MS_NOSUID | libc::MS_NOEXEC,
                Some(c"newinstance,ptmxmode=0666,mode=0620"),
            )
        }
        StepKind::Mask { file } => mask(root, target, *file),
        StepKind::Symlink { to } => {
            let (parent, name) =
                sys::walk_parent(root, target, true).map_err(|e| (op::CREATE, e))?;
            sys::symlink_at(to, &parent, &name).map_err(|e| (op::SYMLINK, e))
        }
        StepKind::File { contents, mode } => {
            let (parent, name) =
                sys::walk_parent(root, target, true).map_err(|e| (op::CREATE, e))?;
            let fd =
                sys::create_file_with_mode(&parent, &name, *mode).map_err(|e| (op::CREATE, e))?;
            sys::write_all(fd.raw(), contents).map_err(|e| (op::WRITE, e))
        }
    }
}

/// Hides `target`: `/dev/null` over a file, an empty read-only tmpfs over a
/// directory. A target that does not exist has nothing to hide and is skipped
/// (e.g. `/proc/sched_debug` on kernels that moved it to debugfs).
fn mask(root: c_int, target: &CStr, file: bool) -> StepResult {
    let at = match sys::open_existing(root, target) {
        Err(libc::ENOENT) => return Ok(()),
        other => other.map_err(|e| (op::RESOLVE, e))?,
    };
    let hidden = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV | MOUNT_ATTR_NOEXEC;
    if file {
        mount_on(&at, Some(c"/oldroot/dev/null"), None, libc::MS_BIND, None)?;
        drop(at);
        let top = sys::open_existing(root, target).map_err(|e| (op::REOPEN, e))?;
        set_flags(&top, hidden, 0, false)
    } else {
        mount_on(
            &at,
            Some(c"tmpfs"),
            Some(c"tmpfs"),
            libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC,
            Some(c"size=4k,nr_inodes=1,mode=0555"),
        )
    }
}

/// `mount(source, /oldroot/proc/self/fd/N, fstype, flags, data)` on the resolved
/// target `at`.
fn mount_on(
    at: &Fd,
    source: Option<&CStr>,
    fstype: Option<&CStr>,
    flags: c_ulong,
    data: Option<&CStr>,
) -> StepResult {
    let target = StackPath::proc_fd(at.raw()).map_err(|e| (op::MOUNT, e))?;
    mount::mount(source, target.as_c_str(), fstype, flags, data).map_err(|e| (op::MOUNT, e))
}

/// Sets and clears mount attributes on the mount whose root `top` is.
pub(crate) fn set_flags(top: &Fd, set: u64, clear: u64, recursive: bool) -> StepResult {
    let result = mount::set_attributes(top.as_fd(), set, clear, None, recursive);
    match after_setattr(result, recursive) {
        AfterSetattr::Done => Ok(()),
        AfterSetattr::RemountTop => remount(top, set, clear),
        AfterSetattr::Fail(e) => Err((op::SET_FLAGS, e)),
    }
}

/// What to do after `mount_setattr(2)` returned `result`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AfterSetattr {
    /// The flags are set.
    Done,
    /// Fall back to a bind remount of the top mount.
    RemountTop,
    /// Fail the step with this `errno`.
    Fail(Errno),
}

/// The fallback decision. A remount can only change the *top* mount, so it stands
/// in for `mount_setattr` (kernels before 5.12 answer `ENOSYS`) only when the step
/// asked for the top mount alone. A recursive request (read-only, nosuid, nodev
/// on a bind of `/sys`, a system directory, a host tree with submounts) fails with
/// `ENOSYS` instead: silently applying it to the top mount would leave writable,
/// suid or device submounts under a "read-only" bind.
fn after_setattr(result: Result<(), Errno>, recursive: bool) -> AfterSetattr {
    match result {
        Ok(()) => AfterSetattr::Done,
        Err(libc::ENOSYS) if !recursive => AfterSetattr::RemountTop,
        Err(e) => AfterSetattr::Fail(e),
    }
}

/// Fallback for kernels before 5.12: a bind remount of this mount only, keeping the
/// flags it has (the kernel refuses to clear flags it locked).
fn remount(top: &Fd, set: u64, clear: u64) -> StepResult {
    let current = mount::mount_flags(top).map_err(|e| (op::SET_FLAGS, e))?;
    let keep = libc::MS_NOSUID
        | libc::MS_NODEV
        | libc::MS_NOEXEC
        | libc::MS_NOATIME
        | libc::MS_NODIRATIME
        | libc::MS_RELATIME
        | libc::MS_RDONLY;
    // ST_* values equal the MS_* ones for these flags.
    let mut flags = current & keep;
    for (attr, ms) in [
        (MOUNT_ATTR_RDONLY, libc::MS_RDONLY),
        (MOUNT_ATTR_NOSUID, libc::MS_NOSUID),
        (MOUNT_ATTR_NODEV, libc::MS_NODEV),
        (MOUNT_ATTR_NOEXEC, libc::MS_NOEXEC),
    ] {
        if set & attr != 0 {
            flags |= ms;
        }
        if clear & attr != 0 {
            flags &= !ms;
        }
    }
    let target = StackPath::proc_fd(top.raw()).map_err(|e| (op::SET_FLAGS, e))?;
    mount::mount(
        None,
        target.as_c_str(),
        None,
        libc::MS_REMOUNT | libc::MS_BIND | flags,
        None,
    )
    .map_err(|e| (op::SET_FLAGS, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_mount_setattr_only_top_mount_requests_fall_back() {
        assert_eq!(after_setattr(Ok(()), true), AfterSetattr::Done);
        assert_eq!(after_setattr(Ok(()), false), AfterSetattr::Done);
        assert_eq!(
            after_setattr(Err(libc::ENOSYS), false),
            AfterSetattr::RemountTop
        );
        // A recursive request must not silently shrink to the top mount.
        assert_eq!(
            after_setattr(Err(libc::ENOSYS), true),
            AfterSetattr::Fail(libc::ENOSYS)
        );
        assert_eq!(
            after_setattr(Err(libc::EPERM), false),
            AfterSetattr::Fail(libc::EPERM)
        );
    }
}
