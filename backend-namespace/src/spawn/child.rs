//! The `clone` and everything the cloned child does until it forks the command.
//!
//! # Why a fork-style raw `clone`
//!
//! The parent calls `syscall(SYS_clone, flags | SIGCHLD, NULL, ...)`: with a NULL
//! stack the child continues on a copy-on-write copy of the caller's stack, exactly
//! like `fork`, so there is no separate stack to size or keep alive and the code
//! after the call is ordinary Rust that reads the [`Prepared`] data in place. glibc's
//! `fork()` is avoided on purpose: it runs `atfork` handlers and takes the malloc
//! locks, which another thread of a multi-threaded runtime may hold at that moment
//! and which would then stay locked forever in the child. For the same reason the
//! child uses raw `syscall`s for `setresuid`/`setresgid`/`setgroups` (glibc's
//! wrappers would try to broadcast the change to threads that exist only in the
//! parent) and never allocates.
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
use std::ptr;

use nix::errno::Errno as NixErrno;
use nix::libc;

use super::error::{ChildStage, Report, SpawnError, op};
use super::prepared::Prepared;
use super::protocol::{FD_CGROUP, FD_ERROR, FD_GO, GO_CLEAR_GROUPS};
use super::raw::{self, Birth, Errno, Fd};
use super::{Pid1, init, mounts};

/// `CAP_LAST_CAP` is below this on every kernel so far; the loop stops at `EINVAL`.
const CAP_PROBE_LIMIT: c_int = 64;

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
    raw::fork_like(namespaces, into_cgroup, prepared, entry).map_err(|errno| SpawnError::Clone {
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
    let _ = raw::write_all(error_fd, &report.encode());
    // SAFETY: `_exit` ends the process without running the parent's atexit
    // handlers or destructors.
    unsafe { libc::_exit(127) }
}

/// Drops to `_exit(127)` when dropped: while unwinding out of [`run`] in the child
/// (a panic in the setup code), so the child never continues in the parent's frames.
/// On the normal paths it is never dropped, as every one ends in `execve`/`_exit`.
struct ExitOnUnwind;

impl Drop for ExitOnUnwind {
    fn drop(&mut self) {
        // SAFETY: `_exit` is async-signal-safe; it ends the cloned process without
        // running destructors or atexit handlers that belong to the parent.
        unsafe { libc::_exit(127) }
    }
}

/// Blanks this process's copy of the runner's command line and renames it, so the
/// run's pid 1 shows neither the runner's arguments (`/proc/1/cmdline` is readable
/// by anyone in the run) nor its thread name.
pub(super) fn forget_runner_command_line(prepared: &Prepared) {
    if let Some((start, end)) = prepared.arg_area {
        for address in start..end {
            // SAFETY: `start..end` is the argument area of the process this one was
            // cloned from (read from /proc/self/stat before the clone); after the
            // clone it is this process's private, writable copy (the initial stack),
            // which nothing here reads again. Volatile, so the writes are not elided.
            unsafe { std::ptr::write_volatile(address as *mut u8, 0) };
        }
    }
    // SAFETY: PR_SET_NAME with a NUL-terminated static name renames this thread.
    unsafe { libc::prctl(libc::PR_SET_NAME, c"agent-init".as_ptr(), 0, 0, 0) };
}

/// `prctl(PR_SET_DUMPABLE, 0)`. A change of the effective or fs ids resets the
/// flag to `fs.suid_dumpable`, which may be 1, so the child calls this again right
/// before it forks the command. The command's `execve` makes the command itself
/// dumpable again as usual; pid 1 stays non-dumpable.
pub(super) fn stay_undumpable() {
    // SAFETY: prctl with integer arguments; it cannot fail for these values.
    unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0 as libc::c_ulong, 0, 0, 0) };
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
    // SAFETY: umask only changes this process's creation mask.
    unsafe { libc::umask(0o022) };
    let cgroups = keep_descriptors(p, error_fd).map_err(fail(ChildStage::Descriptors, op::CALL))?;
    *error_fd = FD_ERROR;

    let go = raw::read_byte(FD_GO).map_err(fail(ChildStage::Go, op::READ))?;
    let Some(go) = go else {
        // The parent gave up before writing the maps: nothing to report to.
        // SAFETY: see `run`.
        unsafe { libc::_exit(127) }
    };
    // SAFETY: FD_GO is ours and no longer needed.
    unsafe { libc::close(FD_GO) };
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
            raw::write_all(fd, b"0").map_err(fail(ChildStage::Cgroup, op::WRITE))?;
        }
        // SAFETY: the cgroup file descriptor is ours and no longer needed.
        unsafe { libc::close(fd) };
    }
    Ok((go, cgroups))
}

fn setup(p: &Prepared, birth: Birth, error_fd: &mut c_int) -> Result<Infallible, Report> {
    let (go, _cgroups) = begin(p, birth, error_fd)?;
    // SAFETY: unshare of the cgroup namespace affects this process only.
    raw::check(unsafe { libc::unshare(libc::CLONE_NEWCGROUP) })
        .map_err(fail(ChildStage::CgroupNamespace, op::CALL))?;
    if go == GO_CLEAR_GROUPS {
        // SAFETY: raw setgroups(0, NULL): no glibc thread broadcast.
        raw::check_long(unsafe {
            libc::syscall(libc::SYS_setgroups, 0usize, ptr::null::<libc::gid_t>())
        })
        .map_err(fail(ChildStage::Groups, op::CALL))?;
    }

    mounts::open_sources(&p.steps, &p.source_fds, &p.source_how)?;
    // Files the plan creates in the new tmpfs mounts must be owned by an id mapped
    // in this namespace (else EOVERFLOW): create them as the run's ids. Only the
    // fs ids change; the capabilities stay until `drop_privileges`.
    // SAFETY: raw setfsgid/setfsuid: no glibc thread broadcast in the child.
    unsafe {
        libc::syscall(libc::SYS_setfsgid, p.gid);
        libc::syscall(libc::SYS_setfsuid, p.uid);
    }
    build_root(p)?;

    // SAFETY: the prepared hostname outlives the call; length checked before clone.
    raw::check(unsafe { libc::sethostname(p.hostname.as_ptr().cast(), p.hostname.len()) })
        .map_err(fail(ChildStage::Hostname, op::CALL))?;
    loopback_up().map_err(fail(ChildStage::Loopback, op::CALL))?;

    drop_privileges(p)?;
    // setresuid/setresgid/setfsuid reset the flag to fs.suid_dumpable.
    stay_undumpable();
    // SAFETY: a NUL-terminated path prepared before clone.
    raw::check(unsafe { libc::chdir(p.cwd.as_ptr()) })
        .map_err(fail(ChildStage::Chdir, op::CALL))?;
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
        // SAFETY: raw prlimit64 on this process (pid 0) with a valid `struct
        // rlimit64` prepared before clone and a null old-limit pointer.
        raw::check_long(unsafe {
            libc::syscall(
                libc::SYS_prlimit64,
                0 as libc::pid_t,
                *resource as libc::c_uint,
                std::ptr::from_ref(limit),
                ptr::null_mut::<libc::c_void>(),
            )
        })
        .map_err(fail(ChildStage::Rlimits, op::CALL))?;
    }
    Ok(())
}

/// Resets every catchable signal to its default disposition.
pub(super) fn reset_signals() {
    // SAFETY: `sigaction` is plain data; zeroed means SIG_DFL, empty mask, no flags.
    let default: libc::sigaction = unsafe { std::mem::zeroed() };
    for signal in 1..=64 {
        if signal == libc::SIGKILL || signal == libc::SIGSTOP {
            continue;
        }
        // SAFETY: a valid sigaction; errors (reserved signals) are ignored.
        unsafe { libc::sigaction(signal, &default, ptr::null_mut()) };
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
        // SAFETY: duplicating an open descriptor.
        moved.set(raw::check(unsafe {
            libc::fcntl(*fd, libc::F_DUPFD_CLOEXEC, base)
        })?);
        if i == FD_ERROR as usize {
            *error_fd = moved.get();
        }
    }
    for (i, moved) in p.moved.iter().enumerate() {
        let flags = if i < 3 { 0 } else { libc::O_CLOEXEC };
        // SAFETY: `moved` is open and differs from the target (it is above `count`).
        raw::check(unsafe { libc::dup3(moved.get(), i as c_int, flags) })?;
    }
    // SAFETY: closes descriptors this process owns; nothing below `count` is touched.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, count as u32, u32::MAX, 0u32) };
    if closed < 0 {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: valid out-pointer.
        raw::check(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) })?;
        let end = (limit.rlim_cur.min(1 << 20) as c_int).max(base + count as c_int);
        for fd in count as c_int..end {
            // SAFETY: closing a descriptor number; EBADF is ignored.
            unsafe { libc::close(fd) };
        }
    }
    Ok(p.child_fds.cgroup_files.len() as c_int)
}

/// Builds the new root and pivots into it (stage 6 in the module docs).
fn build_root(p: &Prepared) -> Result<(), Report> {
    let private = fail(ChildStage::MountPrivate, op::MOUNT);
    // SAFETY: literal paths; null source/type/data are allowed for a propagation change.
    raw::check(unsafe {
        libc::mount(
            ptr::null(),
            c"/".as_ptr(),
            ptr::null(),
            libc::MS_REC | libc::MS_PRIVATE,
            ptr::null(),
        )
    })
    .map_err(private)?;

    let scratch = fail(ChildStage::ScratchRoot, op::CALL);
    // SAFETY: literal NUL-terminated strings. The tmpfs over /tmp exists only in
    // this (private) mount namespace.
    unsafe {
        raw::check(libc::mount(
            c"tmpfs".as_ptr(),
            c"/tmp".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            c"size=64k,mode=0700".as_ptr().cast(),
        ))
        .map_err(&scratch)?;
        raw::check(libc::mkdir(c"/tmp/newroot".as_ptr(), 0o755)).map_err(&scratch)?;
        raw::check(libc::mkdir(c"/tmp/oldroot".as_ptr(), 0o755)).map_err(&scratch)?;
        raw::check_long(libc::syscall(
            libc::SYS_pivot_root,
            c"/tmp".as_ptr(),
            c"/tmp/oldroot".as_ptr(),
        ))
        .map_err(&scratch)?;
        raw::check(libc::chdir(c"/".as_ptr())).map_err(&scratch)?;
    }

    let new_root = fail(ChildStage::NewRoot, op::CALL);
    // SAFETY: literal paths and the data string prepared before clone.
    raw::check(unsafe {
        libc::mount(
            c"tmpfs".as_ptr(),
            c"/newroot".as_ptr(),
            c"tmpfs".as_ptr(),
            libc::MS_NOSUID | libc::MS_NODEV,
            p.root_data.as_ptr().cast(),
        )
    })
    .map_err(&new_root)?;
    let root = open_dir(c"/newroot").map_err(&new_root)?;

    let fds = mounts::StepFds {
        slots: &p.source_fds,
        lowers: FD_CGROUP + p.child_fds.cgroup_files.len() as c_int,
        how: &p.source_how,
    };
    mounts::apply(&p.steps, root.raw(), &fds)?;

    let top = open_dir(c"/newroot").map_err(fail(ChildStage::RootReadOnly, op::REOPEN))?;
    mounts::set_flags(&top, 0x1, 0, false).map_err(|(op, errno)| Report {
        stage: ChildStage::RootReadOnly as u32,
        index: 0,
        op,
        errno,
    })?;
    drop(top);

    let pivot = fail(ChildStage::PivotRoot, op::CALL);
    // SAFETY: `root.raw()` is an open directory; literal paths. After
    // pivot_root(".", ".") the old root is stacked on "." and detached at once.
    unsafe {
        raw::check(libc::fchdir(root.raw())).map_err(&pivot)?;
        raw::check_long(libc::syscall(
            libc::SYS_pivot_root,
            c".".as_ptr(),
            c".".as_ptr(),
        ))
        .map_err(&pivot)?;
        raw::check(libc::umount2(c".".as_ptr(), libc::MNT_DETACH)).map_err(&pivot)?;
        raw::check(libc::chdir(c"/".as_ptr())).map_err(&pivot)?;
    }
    Ok(())
}

fn open_dir(path: &std::ffi::CStr) -> Result<Fd, Errno> {
    // SAFETY: a NUL-terminated path.
    Fd::from_new(unsafe {
        libc::open(
            path.as_ptr(),
            libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
        )
    })
}

/// `ip link set lo up` with two ioctls (no netlink needed).
fn loopback_up() -> Result<(), Errno> {
    // SAFETY: socket(2) with constant arguments.
    let socket = Fd::from_new(unsafe {
        libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0)
    })?;
    // SAFETY: `ifreq` is plain data; all-zero is valid.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    request.ifr_name[0] = b'l' as libc::c_char;
    request.ifr_name[1] = b'o' as libc::c_char;
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS take a `struct ifreq *`; `request` is valid.
    unsafe {
        raw::check(libc::ioctl(socket.raw(), libc::SIOCGIFFLAGS, &mut request))?;
        request.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        raw::check(libc::ioctl(socket.raw(), libc::SIOCSIFFLAGS, &request))?;
    }
    Ok(())
}

/// `struct __user_cap_header_struct`.
#[repr(C)]
struct CapHeader {
    version: u32,
    pid: c_int,
}

/// `struct __user_cap_data_struct`.
#[repr(C)]
#[derive(Clone, Copy)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Drops every privilege: bounding set, ids, capability sets, ambient, and sets
/// `no_new_privs`. The bounding set goes first (it needs `CAP_SETPCAP`); the uid
/// change does not clear capabilities by itself here (no uid maps to 0 in the
/// namespace), so `capset` empties them explicitly.
pub(super) fn drop_privileges(p: &Prepared) -> Result<(), Report> {
    for cap in 0..CAP_PROBE_LIMIT {
        // SAFETY: prctl with integer arguments.
        let ret = unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) };
        if ret < 0 {
            if raw::errno() == libc::EINVAL {
                break;
            }
            return Err(fail(ChildStage::BoundingSet, op::CALL)(raw::errno()));
        }
    }
    // SAFETY: raw setresgid/setresuid: no glibc thread broadcast in the child.
    raw::check_long(unsafe { libc::syscall(libc::SYS_setresgid, p.gid, p.gid, p.gid) })
        .map_err(fail(ChildStage::SetGid, op::CALL))?;
    // SAFETY: as above.
    raw::check_long(unsafe { libc::syscall(libc::SYS_setresuid, p.uid, p.uid, p.uid) })
        .map_err(fail(ChildStage::SetUid, op::CALL))?;
    let header = CapHeader {
        version: 0x2008_0522, // _LINUX_CAPABILITY_VERSION_3
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    let caps = fail(ChildStage::Capabilities, op::CALL);
    // SAFETY: a v3 header and two data structs, as capset(2) expects.
    raw::check_long(unsafe { libc::syscall(libc::SYS_capset, &raw const header, data.as_ptr()) })
        .map_err(&caps)?;
    // SAFETY: prctl with integer arguments; EINVAL (no ambient support) is fine.
    let ret = unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    };
    if ret < 0 && raw::errno() != libc::EINVAL {
        return Err(caps(raw::errno()));
    }
    // SAFETY: prctl with integer arguments.
    raw::check(unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1 as libc::c_ulong, 0, 0, 0) })
        .map_err(fail(ChildStage::NoNewPrivs, op::CALL))?;
    Ok(())
}
