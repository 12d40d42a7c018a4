//! The `clone` and everything the cloned child does until it forks the command.
//!
//! # Why a fork-style raw `clone`
//!
//! The parent calls [`sys::fork_like`]: `clone3` (or `clone`) with a NULL
//! stack, so the child continues on a copy-on-write copy of the caller's stack, exactly
//! like `fork`, so there is no separate stack to size or keep alive and the code
//! after the call is ordinary Rust that reads the [`Prepared`] data in place. glibc's
//! `fork()` is avoided on purpose: it runs `atfork` handlers and takes the malloc
//! locks, which another thread of a multi-threaded runtime may hold at that moment
//! and which would then stay locked forever in the child. For the same reason the
//! child makes only the raw calls of [`crate::sys`] (raw `setresuid`/`setresgid`/
//! `setgroups`: glibc's wrappers would try to broadcast the change to threads
//! that exist only in the parent) and never allocates.
//!
//! # Order in the child
//!
//! 1. reset signal dispositions (all signals stay blocked, as the parent blocked
//!    them around `clone`), `umask(022)`;
//! 2. move the kept descriptors to 0..=2 (stdio), 3 (go), 4 (error), 5 (status),
//!    6.. (cgroup files), then `close_range(n, ~0)`: an inherited descriptor could keep a host `flock` lease
//!    or journal lock held;
//! 3. wait for the parent's "maps written, go" byte;
//! 4. join the run's cgroups (the clone placed it in the v2 one already; write
//!    `0` to each v1 hierarchy's `tasks`), then `unshare(CLONE_NEWCGROUP)` so
//!    the namespace root is the run's cgroup;
//! 5. clear supplementary groups (when the parent left `setgroups` allowed);
//! 6. open every bind source (`O_PATH`, still with the host root's fs ids,
//!    `openat2` refusing any symlink, and checked to be the `(dev, ino)` the
//!    parent inspected);
//!    `setfsgid`/`setfsuid` to the run's ids (files created in the new tmpfs
//!    mounts need an owner mapped in the namespace); mounts private; scratch tmpfs on `/tmp`, first `pivot_root` into it with the
//!    host root at `/oldroot`; the root tmpfs at `/newroot`; the mount plan;
//!    `/newroot` read-only; `pivot_root(".", ".")` and detach the old root;
//! 7. hostname, `lo` up;
//! 8. drop the bounding set, `setresgid`/`setresuid`, empty every capability set,
//!    clear ambient, `no_new_privs`, `chdir(cwd)`;
//! 9. non-dumpable again (the id changes reset it), the resource limits
//!    (`prlimit64`, soft = hard), the seccomp filter (so pid 1
//!    is never a filter-free process next to the command), fork the command;
//!    this process stays as pid 1 ([`super::init`]).
//!
//! Right after step 3 the child makes itself non-dumpable (`PR_SET_DUMPABLE` 0):
//! it is a copy of the runner's memory.

use std::convert::Infallible;
use std::ffi::c_int;
use std::os::fd::AsRawFd;

use nix::errno::Errno as NixErrno;
use nix::libc;

use super::error::{ChildStage, Report, SpawnError, op};
use super::prepared::Prepared;
use super::protocol::{FD_CGROUP, FD_ERROR, FD_GO, GO_CLEAR_GROUPS};
use super::{Pid1, init, mounts};
use crate::sys::{self, Birth, Errno, ids, mount, net, process, signal};

/// The namespaces a new sandbox gets (the cgroup namespace comes later, in the
/// child, once it is in the run's cgroups).
pub(crate) const SANDBOX_NAMESPACES: c_int = libc::CLONE_NEWUSER
    | libc::CLONE_NEWNS
    | libc::CLONE_NEWPID
    | libc::CLONE_NEWNET
    | libc::CLONE_NEWUTS
    | libc::CLONE_NEWIPC;

/// Clones the child into new user, mount, pid, net, uts and ipc namespaces and
/// returns its pid (the namespace's pid 1) in the parent. The child never returns.
pub(crate) fn clone_child(prepared: &Prepared) -> Result<i32, SpawnError> {
    clone_with(prepared, SANDBOX_NAMESPACES, run)
}

/// A fork-style clone with `namespaces` (none for a child that joins a sandbox)
/// whose child runs `entry` on `prepared` and never returns. The parent gets the
/// child's pid.
pub(crate) fn clone_with(
    prepared: &Prepared,
    namespaces: c_int,
    entry: fn(&Prepared, Birth) -> !,
) -> Result<i32, SpawnError> {
    let into_cgroup = prepared.cgroup_v2.as_ref().map(AsRawFd::as_raw_fd);
    // `entry` exits on unwinding too (see `ExitOnUnwind`).
    sys::fork_like(namespaces, into_cgroup, prepared, entry).map_err(|errno| SpawnError::Clone {
        source: NixErrno::from_raw(errno),
    })
}

/// The child: set up, then become pid 1 and fork the command; on failure report
/// `(stage, step, op, errno)` on the error pipe and `_exit(127)`.
fn run(prepared: &Prepared, birth: Birth) -> ! {
    run_setup(prepared, birth, setup)
}

/// Runs `setup` in a cloned child; reports its failure on the error pipe and
/// `_exit(127)`s (a successful setup ends in `execve` or never returns).
pub(super) fn run_setup(
    prepared: &Prepared,
    birth: Birth,
    setup: fn(&Prepared, Birth, &mut c_int) -> Result<Infallible, Report>,
) -> ! {
    // Ends this process if anything below unwinds: a panic must never return into
    // the frames of the thread that called `clone_child` (a copy of the runner).
    let _guard = ExitOnUnwind;
    let mut error_fd = prepared.child_fds.error_write.as_raw_fd();
    let Err(report) = setup(prepared, birth, &mut error_fd);
    let _ = sys::write_all(error_fd, &report.encode());
    process::exit(127)
}

/// Drops to `_exit(127)` when dropped: while unwinding out of [`run`] in the child
/// (a panic in the setup code), so the child never continues in the parent's frames.
/// On the normal paths it is never dropped, as every one ends in `execve`/`_exit`.
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        process::exit(127)
    }
}

/// Blanks this process's copy of the runner's command line and renames it, so the
/// run's pid 1 shows neither the runner's arguments (`/proc/1/cmdline` is readable
/// by anyone in the run) nor its thread name.
pub(super) fn forget_runner_command_line(prepared: &Prepared) {
    if let Some(area) = &prepared.arg_area {
        area.blank();
    }
    ids::set_thread_name(c"agent-init");
}

/// `prctl(PR_SET_DUMPABLE, 0)`. A change of the effective or fs ids resets the
/// flag to `fs.suid_dumpable`, which may be 1, so the child calls this again right
/// before it forks the command. The command's `execve` makes the command itself
/// dumpable again as usual; pid 1 stays non-dumpable.
pub(super) fn stay_undumpable() {
    ids::set_undumpable();
}

pub(super) fn fail(stage: ChildStage, op: u32) -> impl Fn(Errno) -> Report {
    move |errno| Report {
        stage: stage as u32,
        index: 0,
        op,
        errno,
    }
}

/// What every cloned child does first, before anything of the run exists:
/// signals reset, `umask`, the kept descriptors moved and every other one closed,
/// the go byte read, non-dumpable, the runner's command line blanked, the run's
/// cgroups joined (still in the host's view of them) where `birth` did not
/// place it already. Returns the go byte and how many cgroup files were kept
/// (the descriptors after them follow).
pub(super) fn begin(
    p: &Prepared,
    birth: Birth,
    error_fd: &mut c_int,
) -> Result<(u8, c_int), Report> {
    reset_signals();
    process::set_umask(0o022);
    let cgroups = keep_descriptors(p, error_fd).map_err(fail(ChildStage::Descriptors, op::CALL))?;
    *error_fd = FD_ERROR;

    let go = sys::read_byte(FD_GO).map_err(fail(ChildStage::Go, op::READ))?;
    let Some(go) = go else {
        // The parent gave up before writing the maps: nothing to report to.
        process::exit(127)
    };
    sys::close(FD_GO);
    // pid 1 is a copy of the runner's memory (its environment, buffers, whatever
    // secrets the runner holds). Non-dumpable, its /proc/1/{mem,environ,..} belong
    // to root of the runner's user namespace and need CAP_SYS_PTRACE there, which
    // nothing in the run has: the command cannot read or write pid 1's memory nor
    // take its descriptors (pidfd_getfd). Not earlier than here: the parent has to
    // open /proc/<pid>/uid_map first, which a non-dumpable process's owner change
    // would deny to an unprivileged runner. Until the go byte nothing of the run
    // exists that could look at this process. Repeated after the id changes.
    stay_undumpable();
    forget_runner_command_line(p);

    // The v2 `cgroup.procs` comes last; a child born in that cgroup skips it
    // (writing it again would take the lock `CLONE_INTO_CGROUP` avoided).
    let joined = cgroups - c_int::from(birth == Birth::InCgroup);
    for fd in FD_CGROUP..FD_CGROUP + cgroups {
        if fd < FD_CGROUP + joined {
            sys::write_all(fd, b"0").map_err(fail(ChildStage::Cgroup, op::WRITE))?;
        }
        sys::close(fd);
    }
    Ok((go, cgroups))
}

fn setup(p: &Prepared, birth: Birth, error_fd: &mut c_int) -> Result<Infallible, Report> {
    let (go, _cgroups) = begin(p, birth, error_fd)?;
    process::unshare(libc::CLONE_NEWCGROUP).map_err(fail(ChildStage::CgroupNamespace, op::CALL))?;
    if go == GO_CLEAR_GROUPS {
        ids::clear_groups().map_err(fail(ChildStage::Groups, op::CALL))?;
    }

    mounts::open_sources(&p.steps, &p.source_fds, &p.source_how)?;
    // Files the plan creates in the new tmpfs mounts must be owned by an id mapped
    // in this namespace (else EOVERFLOW): create them as the run's ids. Only the
    // fs ids change; the capabilities stay until `drop_privileges`.
    ids::set_fs_ids(p.uid, p.gid);
    build_root(p)?;

    // The length was checked before the clone.
    process::set_hostname(&p.hostname).map_err(fail(ChildStage::Hostname, op::CALL))?;
    net::loopback_up().map_err(fail(ChildStage::Loopback, op::CALL))?;

    drop_privileges(p)?;
    // setresuid/setresgid/setfsuid reset the flag to fs.suid_dumpable.
    stay_undumpable();
    mount::chdir(&p.cwd).map_err(fail(ChildStage::Chdir, op::CALL))?;
    set_rlimits(p)?;
    init::install_seccomp(p)?;
    match p.pid1 {
        Pid1::RunCommand => init::fork_command(p, init::Supervisor::NamespaceInit),
        Pid1::HoldSandbox => init::hold(p),
    }
}

/// Sets the prepared resource limits on this process (pid 1; the command inherits
/// them). A limit above the inherited hard limit fails with `EPERM`: raising it
/// would need `CAP_SYS_RESOURCE` in the host's user namespace.
pub(super) fn set_rlimits(p: &Prepared) -> Result<(), Report> {
    for (resource, limit) in &p.rlimits {
        process::set_rlimit(*resource, limit.cur, limit.max)
            .map_err(fail(ChildStage::Rlimits, op::CALL))?;
    }
    Ok(())
}

/// Resets every catchable signal to its default disposition.
pub(super) fn reset_signals() {
    for number in 1..=64 {
        if number == libc::SIGKILL || number == libc::SIGSTOP {
            continue;
        }
        // Reserved signals refuse; they have no handler to reset.
        let _ = signal::set_default(number);
    }
}

/// Moves the kept descriptors to `0..kept.len()` in the prepared order and closes
/// every other one. Returns how many cgroup files were kept.
///
/// `error_fd` follows the error pipe: once the high copy exists it points there,
/// because the `dup3` into `0..n` may reuse the original number for another pipe,
/// and a failure report must reach the parent, not the command's stdio or the go
/// pipe.
pub(super) fn keep_descriptors(p: &Prepared, error_fd: &mut c_int) -> Result<c_int, Errno> {
    let count = p.kept.len();
    let base = p
        .kept
        .iter()
        .copied()
        .max()
        .unwrap_or(0)
        .max(count as c_int)
        + 1;
    // First copy everything above every source and target, so no dup3 below can
    // clobber a descriptor that still has to be moved. `moved` was allocated before
    // clone; this process writes its own copy-on-write copy of it.
    for (i, (fd, moved)) in p.kept.iter().zip(&p.moved).enumerate() {
        moved.set(sys::fd::dup_from(*fd, base)?);
        if i == FD_ERROR as usize {
            *error_fd = moved.get();
        }
    }
    for (i, moved) in p.moved.iter().enumerate() {
        let flags = if i < 3 { 0 } else { libc::O_CLOEXEC };
        // `moved` is open and differs from the target (it is above `count`).
        sys::fd::dup_onto(moved.get(), i as c_int, flags)?;
    }
    // Nothing below `count` is touched.
    sys::fd::close_from(count as c_int, base + count as c_int)?;
    Ok(p.child_fds.cgroup_files.len() as c_int)
}

/// Builds the new root and pivots into it (stage 6 in the module docs).
fn build_root(p: &Prepared) -> Result<(), Report> {
    mount::make_all_private().map_err(fail(ChildStage::MountPrivate, op::MOUNT))?;

    let scratch = fail(ChildStage::ScratchRoot, op::CALL);
    // The tmpfs over /tmp exists only in this (private) mount namespace.
    mount::mount(
        Some(c"tmpfs"),
        c"/tmp",
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(c"size=64k,mode=0700"),
    )
    .map_err(&scratch)?;
    mount::mkdir(c"/tmp/newroot", 0o755).map_err(&scratch)?;
    mount::mkdir(c"/tmp/oldroot", 0o755).map_err(&scratch)?;
    mount::pivot_root(c"/tmp", c"/tmp/oldroot").map_err(&scratch)?;
    mount::chdir(c"/").map_err(&scratch)?;

    let new_root = fail(ChildStage::NewRoot, op::CALL);
    mount::mount(
        Some(c"tmpfs"),
        c"/newroot",
        Some(c"tmpfs"),
        libc::MS_NOSUID | libc::MS_NODEV,
        Some(&p.root_data),
    )
    .map_err(&new_root)?;
    let root = mount::open_dir(c"/newroot").map_err(&new_root)?;

    let fds = mounts::StepFds {
        slots: &p.source_fds,
        lowers: FD_CGROUP + p.child_fds.cgroup_files.len() as c_int,
    };
    mounts::apply(&p.steps, root.raw(), &fds)?;

    let top = mount::open_dir(c"/newroot").map_err(fail(ChildStage::RootReadOnly, op::REOPEN))?;
    mounts::set_flags(&top, 0x1, 0, false).map_err(|(op, errno)| Report {
        stage: ChildStage::RootReadOnly as u32,
        index: 0,
        op,
        errno,
    })?;
    drop(top);

    let pivot = fail(ChildStage::PivotRoot, op::CALL);
    // After pivot_root(".", ".") the old root is stacked on "." and detached at once.
    mount::fchdir(&root).map_err(&pivot)?;
    mount::pivot_root(c".", c".").map_err(&pivot)?;
    mount::detach(c".").map_err(&pivot)?;
    mount::chdir(c"/").map_err(&pivot)?;
    Ok(())
}

/// Drops every privilege: bounding set, ids, capability sets, ambient, and sets
/// `no_new_privs`. The bounding set goes first (it needs `CAP_SETPCAP`); the uid
/// change does not clear capabilities by itself here (no uid maps to 0 in the
/// namespace), so `capset` empties them explicitly.
pub(super) fn drop_privileges(p: &Prepared) -> Result<(), Report> {
    ids::drop_bounding_set().map_err(fail(ChildStage::BoundingSet, op::CALL))?;
    ids::set_gid(p.gid).map_err(fail(ChildStage::SetGid, op::CALL))?;
    ids::set_uid(p.uid).map_err(fail(ChildStage::SetUid, op::CALL))?;
    let caps = fail(ChildStage::Capabilities, op::CALL);
    ids::clear_capabilities().map_err(&caps)?;
    ids::clear_ambient().map_err(&caps)?;
    ids::set_no_new_privs().map_err(fail(ChildStage::NoNewPrivs, op::CALL))?;
    Ok(())
}
