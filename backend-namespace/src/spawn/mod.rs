//! Start one command inside a fresh set of namespaces with a mount plan applied.
//!
//! [`spawn`] is safe to call from a multi-threaded (tokio) process: nothing is
//! unshared in the host process. Everything the child needs is prepared first
//! (paths as `CString`s, mount data strings, `argv`/`envp` pointer arrays, pipes,
//! descriptors, the seccomp program); then one fork-style `clone(2)` creates new
//! user, mount, pid, net, uts and ipc namespaces (the cgroup namespace is entered
//! in the child after it joined the run's cgroups), and the child does only
//! async-signal-safe raw system calls on that data until `execve`.
//! Why a raw fork-style clone rather than `nix::sched::clone` with its own stack
//! (no stack to size, no glibc `fork` locks), and the exact order in the child, are
//! documented in `child.rs`; see also [the child](#the-child) below.
//!
//! ```no_run
//! use backend_namespace::spawn::{SpawnRequest, spawn};
//! # fn example(plan: workspace_core::mount_plan::MountPlan) -> Result<(), backend_namespace::spawn::SpawnError> {
//! let mut request = SpawnRequest::new(plan, vec!["/bin/sh".into(), "-c".into(), "id -u".into()]);
//! request.uid = 1000;
//! request.gid = 1000;
//! request.host_uid = 100_000;
//! request.host_gid = 100_000;
//! let mut child = spawn(&request)?;
//! let status = child.wait()?; // blocking: use spawn_blocking from async code
//! # Ok(())
//! # }
//! ```
//!
//! # The handshake
//!
//! * go pipe (parent → child): the child waits for one byte, written after the
//!   parent wrote `uid_map`/`gid_map` (see `idmap.rs`); the byte also says whether
//!   the child may clear its supplementary groups;
//! * error pipe (child → parent, close-on-exec): EOF means `execve` succeeded; 16
//!   bytes are `(stage, step, op, errno)` of the first failure, reported as
//!   [`SpawnError::Child`] naming the stage and, for the mount plan, the step's index
//!   and target;
//! * status pipe (pid 1 → parent): the command's raw wait status, so an exit code
//!   and a killing signal pass through unchanged.
//!
//! # The child
//!
//! The cloned child is pid 1 of the new pid namespace. Right after `clone` it holds
//! every capability *in its new user namespace*, so it applies the whole mount plan
//! first (on a tmpfs root, reached through a scratch tmpfs with the host root at
//! `/oldroot`, then `pivot_root(".", ".")`), sets the hostname, brings up `lo`, and
//! only then drops everything: bounding set, `setresgid`/`setresuid` to the mapped
//! ids, `capset` to empty, ambient cleared, `no_new_privs`. Then it forks the
//! command and stays as a minimal init (`init.rs`): when the command ends, the whole
//! namespace ends. Details: `child.rs`, `mounts.rs`, `init.rs`.
//!
//! # Identity
//!
//! One id maps to one host id (`uid host_uid 1`). Mapping to host root needs uid 0
//! inside *and* [`SpawnRequest::danger_map_root_to_host_root`]. Files the command must
//! write (the workspace) must be owned by `host_uid` on the host.
//!
//! # The lower layer of an overlay
//!
//! A layered checkout's lower layer is shared by every run of a commit and owned
//! by whoever made the cache (host root), which the run does not map. Before the
//! clone the parent makes a detached, read-only, `nosuid`/`nodev` copy of the
//! lower's mount with an id mapping attached (`open_tree` + `mount_setattr` with
//! `MOUNT_ATTR_IDMAP`, the mapping being "lower's owner → `host_uid`/`host_gid`");
//! the child puts it over the lower's path under the old root right before the
//! overlay step. In the run every tracked file is then the run's own and
//! overlayfs copies it up to the upper layer on the first write, while nothing on
//! disk changes. Details and the helper user namespace: `idmapped.rs`.
//!
//! # Hooks for the other modules
//!
//! * [`SpawnRequest::seccomp`]: a [`SeccompFilter`] whose program is copied before
//!   clone and installed in pid 1 right before it forks the command (after the mount
//!   plan and `no_new_privs`); the command inherits it. Without one, [`spawn`] builds
//!   the filter of [`SeccompPolicy::default()`](crate::seccomp::SeccompPolicy::default); only
//!   [`SpawnRequest::danger_no_seccomp`] runs without a filter;
//! * [`SpawnRequest::rlimits`]: `RLIMIT_NOFILE`, `RLIMIT_CORE` and `RLIMIT_FSIZE`,
//!   soft = hard, set by pid 1 with `prlimit64` after the id change and before the
//!   seccomp filter (the command inherits them and cannot raise them);
//! * [`SpawnRequest::cgroups`]: cgroup directories (one per hierarchy) opened
//!   before clone; the clone places the child in the v2 one and the child
//!   writes `0` to each v1 one's `tasks` before anything else, then enters a new
//!   cgroup namespace rooted there.
//!
//! # Limits of this version
//!
//! * `argv[0]` must be an absolute path inside the run (no `PATH` search);
//! * waiting is blocking ([`SpawnedChild::wait`]) or polled
//!   ([`SpawnedChild::try_wait`], [`SpawnedChild::pidfd`]);
//! * no `PR_SET_PDEATHSIG`: it fires when the *thread* that cloned exits, and tokio's
//!   blocking threads come and go; a runner that dies leaves the run to the
//!   journal's recovery, which kills it by pid namespace;
//! * the parent waits for the child's setup at most
//!   [`SpawnRequest::setup_timeout`] (30 s by default), then kills the child and
//!   returns [`SpawnError::SetupTimeout`]; a child that cannot die at once (a
//!   frozen v1 cgroup holds even `SIGKILL` until thawed) is reaped by a detached
//!   thread when it does;
//! * no PTY of its own: a caller passes the slave of a pseudo-terminal it opened as
//!   stdio and sets [`SpawnRequest::controlling_terminal`] (the process boundary
//!   does, for `tty = true`); no network other than `lo`;
//! * the overlay step (layered checkouts) is covered through `NamespaceProcess` in
//!   the root `tests/namespace_layered.rs`; a lower layer not owned by `host_uid`/`host_gid` is shown
//!   through an idmapped mount (see [the lower layer](#the-lower-layer-of-an-overlay)),
//!   which needs kernel ≥ 5.19 and a file system with idmapped mounts;
//! * what the plan creates in the new tmpfs mounts (mount points, `/etc` files) is
//!   owned by the run's uid (the only id mapped); the root tmpfs is read-only.

mod child;
pub mod error;
mod forward;
mod handle;
mod idmap;
mod idmapped;
mod init;
mod join;
mod join_child;
mod mounts;
mod overlay;
mod prepared;
mod protocol;

mod rlimits;

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::libc;
use workspace_core::mount_plan::MountPlan;

use crate::seccomp::SeccompFilter;
use crate::sys;

pub use error::{ChildStage, SpawnError};
pub use handle::{ChildKiller, SpawnedChild};
pub use init::FORWARDED_SIGNALS;
pub use join::{JoinRequest, Sandbox, join};
pub use rlimits::ResourceLimits;

use error::Report;
use prepared::{ParentFds, Prepared};

/// What the new namespaces' pid 1 does once the mount plan is applied and every
/// privilege is dropped.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pid1 {
    /// Fork `argv` and end the namespaces when it ends: one command, one sandbox.
    #[default]
    RunCommand,
    /// Hold the namespaces until killed: a live sandbox that commands enter
    /// with [`join`]. pid 1 leaves the runner's session and reaps whatever is
    /// reparented to it; it outlives the process that spawned it. A non-empty
    /// `argv` is the sandbox's *first process*: a program pid 1 starts once,
    /// right after its setup, with the privileges a command has (ids, no
    /// capability, `no_new_privs`, rlimits, the seccomp filter) and the
    /// request's environment, stdio and working directory, in pid 1's cgroup;
    /// [`spawn`] returns once it was exec'd. It is
    /// either the sandbox's *door* (see [`Sandbox`]), a program that blocks
    /// for the sandbox's life (`sleep infinity`): exec'd, it holds nothing of
    /// the runner's memory, so it may stay dumpable, and a runner without
    /// `CAP_SYS_PTRACE` (an ordinary user), which may not enter pid 1
    /// (non-dumpable, a copy of the runner's memory), enters the sandbox
    /// through it; or a first command with nothing to wait for (the boundary
    /// probe's shell), started without a second entry into the sandbox.
    HoldSandbox,
}

/// What to run, as whom, on which file system.
#[derive(Debug)]
pub struct SpawnRequest {
    /// The file system of the run, applied on a fresh tmpfs root.
    pub plan: MountPlan,
    /// The program (an absolute path inside the run) and its arguments.
    pub argv: Vec<String>,
    /// What pid 1 does: run `argv` ([`Pid1::RunCommand`]) or hold a live sandbox.
    pub pid1: Pid1,
    /// The complete environment: nothing is inherited from the host.
    pub env: Vec<(String, String)>,
    /// uid inside.
    pub uid: u32,
    /// gid inside.
    pub gid: u32,
    /// The host uid `uid` maps to (use an unprivileged id such as 100000+).
    pub host_uid: u32,
    /// The host gid `gid` maps to.
    pub host_gid: u32,
    /// Allow `host_uid`/`host_gid` 0 (host root) when the id inside is 0 too.
    /// Dangerous: a process that escapes the mount namespace is host root.
    pub danger_map_root_to_host_root: bool,
    /// Working directory inside (absolute); [`SpawnRequest::new`] uses the plan's
    /// `workdir`.
    pub cwd: String,
    /// Standard input (duplicated; `None` is `/dev/null`).
    pub stdin: Option<OwnedFd>,
    /// Standard output (duplicated; `None` is `/dev/null`).
    pub stdout: Option<OwnedFd>,
    /// Standard error (duplicated; `None` is `/dev/null`).
    pub stderr: Option<OwnedFd>,
    /// Make standard input the command's controlling terminal: right after its
    /// `setsid`, the command calls `ioctl(0, TIOCSCTTY, 0)`, so `/dev/tty` inside is
    /// that terminal and job control signals come from it. Set it when `stdin` is
    /// the slave of a pseudo-terminal (a failure is [`ChildStage::ControllingTerminal`];
    /// `stdin` that is not a terminal fails with `ENOTTY`).
    pub controlling_terminal: bool,
    /// The seccomp filter of the run, installed in pid 1 right before it forks the
    /// command (which inherits it). `None` (the default) is the filter of
    /// [`SeccompPolicy::default()`](crate::seccomp::SeccompPolicy::default), built by [`spawn`]; set a filter to relax or
    /// change the policy.
    pub seccomp: Option<SeccompFilter>,
    /// Run without any seccomp filter. Dangerous: the run keeps nested user
    /// namespaces, `io_uring`, `bpf`, `keyctl`, `ptrace` and the rest of the table in
    /// [`crate::seccomp`]. Setting it together with [`SpawnRequest::seccomp`] is an
    /// invalid request.
    pub danger_no_seccomp: bool,
    /// The cgroup directories the run joins before anything else: one per
    /// hierarchy, at most 16, at most one of them cgroup v2. The child is
    /// cloned into the v2 one (`clone3` with `CLONE_INTO_CGROUP`) and moves
    /// itself into each v1 one through its `tasks` file; neither waits for the
    /// grace period a `cgroup.procs` write can cost.
    pub cgroups: Vec<PathBuf>,
    /// The resource limits the command starts with (soft = hard); the default
    /// only forbids core dumps.
    pub rlimits: ResourceLimits,
    /// How long [`spawn`] waits for the child's setup (from the clone to a
    /// successful `execve` or the child's failure report) before it kills the
    /// child and returns [`SpawnError::SetupTimeout`]. Must not be zero.
    pub setup_timeout: Duration,
    /// Ports of the sandbox published on the host, with [`Pid1::HoldSandbox`]
    /// only (at most 16): pid 1 keeps each listener and forwards every connection
    /// accepted on it to the port on the sandbox's loopback, for the sandbox's
    /// whole life.
    pub publish: Vec<Published>,
    /// A listening, non-blocking unix `SOCK_SEQPACKET` socket, with
    /// [`Pid1::HoldSandbox`] only: pid 1 answers each connection's port (two
    /// bytes, big-endian) with a TCP socket of the sandbox's network namespace
    /// connecting to that port on its loopback, passed as `SCM_RIGHTS`, for
    /// the sandbox's whole life. For a runner that cannot enter the network
    /// namespace itself.
    pub broker: Option<OwnedFd>,
    /// Descriptors pid 1 keeps open for the sandbox's whole life, with
    /// [`Pid1::HoldSandbox`] only (at most 4): a host lock that must stay held
    /// while the sandbox lives, whichever process drives it (the run's
    /// capacity ticket). Pid 1 is non-dumpable and starts nothing, so nothing
    /// in the sandbox can reach them.
    pub hold_open: Vec<OwnedFd>,
}

/// A listening TCP socket of the host (bound and listening, non-blocking) whose
/// connections the sandbox's pid 1 forwards to `port` on the sandbox's own
/// loopback.
#[derive(Debug)]
pub struct Published {
    /// The listener.
    pub listener: OwnedFd,
    /// The port inside the sandbox.
    pub port: u16,
}

/// The default [`SpawnRequest::setup_timeout`].
pub const DEFAULT_SETUP_TIMEOUT: Duration = Duration::from_secs(30);
/// After a setup timeout: how long to wait for the killed child to end before its
/// reaping is left to a detached thread.
const REAP_WAIT: Duration = Duration::from_secs(1);

impl SpawnRequest {
    /// A request running `argv` in `plan` as uid/gid 65534 mapped to host
    /// 165534 (change the ids before spawning), starting in the plan's workdir,
    /// with an empty environment and `/dev/null` for stdio.
    pub fn new(plan: MountPlan, argv: Vec<String>) -> Self {
        Self {
            cwd: plan.workdir.clone(),
            plan,
            argv,
            pid1: Pid1::RunCommand,
            env: Vec::new(),
            uid: 65534,
            gid: 65534,
            host_uid: 165_534,
            host_gid: 165_534,
            danger_map_root_to_host_root: false,
            stdin: None,
            stdout: None,
            stderr: None,
            controlling_terminal: false,
            seccomp: None,
            danger_no_seccomp: false,
            cgroups: Vec::new(),
            rlimits: ResourceLimits::default(),
            setup_timeout: DEFAULT_SETUP_TIMEOUT,
            publish: Vec::new(),
            broker: None,
            hold_open: Vec::new(),
        }
    }
}

/// Starts `request.argv` in new namespaces with `request.plan` applied.
///
/// Returns once the command has been `exec`'d (or with the child's first failure).
/// Blocking (it waits for the child's setup): from async code call it in
/// `spawn_blocking`. Safe from any thread of a multi-threaded process.
///
/// # Ambient authority
/// Reads the host paths the plan binds, creates namespaces, writes the child's
/// `/proc/<pid>/{uid_map,gid_map,setgroups}` and joins the given cgroups. For an
/// overlay step whose lower layer is not owned by `host_uid`/`host_gid`, makes an
/// idmapped mount of it (needs `CAP_SYS_ADMIN` on the host; a short-lived helper
/// process holds the mapping's user namespace while it is made).
pub fn spawn(request: &SpawnRequest) -> Result<SpawnedChild, SpawnError> {
    if request.setup_timeout.is_zero() {
        return Err(SpawnError::InvalidRequest {
            field: "setup_timeout",
            reason: "is zero".to_owned(),
        });
    }
    let prepared = Prepared::new(request)?;
    let ids = (request.uid, request.gid);
    let host_ids = (request.host_uid, request.host_gid);
    launch(prepared, request.setup_timeout, child::clone_child, |pid| {
        idmap::write_maps(pid, ids, host_ids)
    })
}

/// The parent's side of every start: clone with `clone`, a pidfd of the child,
/// the go byte from `go` (after whatever it writes, e.g. the id maps), then the
/// child's setup within `setup_timeout`.
pub(crate) fn launch(
    prepared: Prepared,
    setup_timeout: Duration,
    clone: fn(&Prepared) -> Result<i32, SpawnError>,
    go: impl FnOnce(i32) -> Result<u8, SpawnError>,
) -> Result<SpawnedChild, SpawnError> {
    let deadline = Instant::now() + setup_timeout;
    let pid = clone(&prepared)?;
    let Prepared {
        child_fds,
        parent_fds,
        steps,
        ..
    } = prepared;
    drop(child_fds);
    let reaper = Reaper { pid };
    let ParentFds {
        go_write,
        error_read,
        status_read,
    } = parent_fds;
    let child_error = |report: Report| {
        report.into_error(|i| {
            steps
                .get(i)
                .map(|s| s.target.to_string_lossy().into_owned())
        })
    };

    let pidfd = match start(pid, go_write, go) {
        Ok(pidfd) => pidfd,
        Err(error) => {
            // The child may have failed (and reported why) before it read the go
            // byte: then the parent's error (EPIPE on the go byte, an id map of a
            // dead process) is only a consequence. Kill and reap it, so every write
            // end it held is closed, and prefer its report.
            drop(reaper);
            return Err(match drain_report(&error_read) {
                Some(report) => child_error(report),
                // Gone before it read the go byte, without a word: killed
                // (born into a cgroup whose limit it exceeded, say).
                None if matches!(
                    error,
                    SpawnError::Handshake {
                        source: Errno::EPIPE,
                        ..
                    }
                ) =>
                {
                    SpawnError::InitEnded { pid }
                }
                None => error,
            });
        }
    };

    let mut buf = [0u8; Report::LEN];
    let mut got = 0;
    let mut watch_init = true;
    while got < buf.len() {
        match wait_readable(&error_read, watch_init.then_some(&pidfd), deadline) {
            Ok(Ready::Pipe) => {}
            // pid 1 ended: its report or EOF follows; keep waiting on the pipe
            // alone (a readable pidfd stays readable).
            Ok(Ready::InitEnded) => {
                watch_init = false;
                continue;
            }
            Ok(Ready::TimedOut) => {
                let after_ms = u64::try_from(setup_timeout.as_millis()).unwrap_or(u64::MAX);
                tracing::warn!(pid, after_ms, "the child's setup timed out; killing it");
                kill_and_reap(&pidfd, reaper);
                return Err(SpawnError::SetupTimeout { after_ms });
            }
            Err(source) => {
                return Err(SpawnError::Handshake {
                    step: "polling the error pipe",
                    source,
                });
            }
        }
        match nix::unistd::read(error_read.as_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::EINTR) => continue,
            Err(source) => {
                return Err(SpawnError::Handshake {
                    step: "reading the error pipe",
                    source,
                });
            }
        }
    }
    match got {
        0 if init_ended_without_status(&pidfd, &status_read) => {
            drop(reaper);
            Err(SpawnError::InitEnded { pid })
        }
        0 => {
            std::mem::forget(reaper);
            tracing::debug!(pid, "spawned a namespaced command");
            Ok(SpawnedChild::new(pid, pidfd, status_read))
        }
        Report::LEN => {
            // The child reported why it failed and is ending by itself: a
            // joining child first reaps the process that failed, which would
            // otherwise be left a zombie for the sandbox's pid 1 (and hold up
            // its end by a second). Killed only if it does not end soon.
            let _ = wait_readable_pidfd(&pidfd, Instant::now() + REPORTED_EXIT_WAIT);
            drop(reaper);
            Err(child_error(Report::decode(&buf)))
        }
        _ => Err(SpawnError::Handshake {
            step: "reading a truncated error report",
            source: Errno::EPROTO,
        }),
    }
}

/// The parent's side after clone: a pidfd of the child, `go` (the id maps), the
/// go byte.
fn start(
    pid: i32,
    go_write: OwnedFd,
    go: impl FnOnce(i32) -> Result<u8, SpawnError>,
) -> Result<OwnedFd, SpawnError> {
    // Our own child, not reaped yet: the pid is still its.
    let pidfd = sys::pidfd::open(pid).map_err(|errno| SpawnError::Prepare {
        step: "pidfd_open of the namespace init",
        path: format!("/proc/{pid}").into(),
        source: Errno::from_raw(errno),
    })?;

    let go = go(pid)?;
    nix::unistd::write(&go_write, &[go]).map_err(|source| SpawnError::Handshake {
        step: "writing the go byte",
        source,
    })?;
    Ok(pidfd)
}

/// The child's failure report, if one is waiting in the error pipe. Never blocks:
/// call it after the child is reaped (another thread's child cloned meanwhile may
/// still hold a copy of the write end for a moment, so EOF is not awaited).
fn drain_report(error_read: &OwnedFd) -> Option<Report> {
    let flags = nix::fcntl::fcntl(error_read, nix::fcntl::FcntlArg::F_GETFL).ok()?;
    let flags = nix::fcntl::OFlag::from_bits_retain(flags) | nix::fcntl::OFlag::O_NONBLOCK;
    nix::fcntl::fcntl(error_read, nix::fcntl::FcntlArg::F_SETFL(flags)).ok()?;
    let mut buf = [0u8; Report::LEN];
    let mut got = 0;
    while got < buf.len() {
        match nix::unistd::read(error_read.as_fd(), &mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(Errno::EINTR) => continue,
            Err(_) => break,
        }
    }
    (got == Report::LEN).then(|| Report::decode(&buf))
}

/// At EOF on the error pipe: whether pid 1 has already ended without a command
/// status. EOF alone means "every writer is gone", which is also what a pid 1
/// killed before it forked the command (OOM in a small memory cgroup, `SIGKILL`)
/// looks like. pid 1 holds the status pipe until it exits and writes the status
/// before, so: pid 1 ended (pidfd readable, or the status pipe hung up) and no
/// status is waiting means the command never ran. (A pid 1 that is still closing
/// its descriptors at this instant is seen as alive; `wait` then reports it.)
fn init_ended_without_status(pidfd: &OwnedFd, status_read: &OwnedFd) -> bool {
    let mut fds = [
        libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
        libc::pollfd {
            fd: status_read.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        },
    ];
    // A zero timeout never blocks.
    if !matches!(sys::fd::poll(&mut fds, 0), Ok(1..)) {
        return false;
    }
    let [init, status] = fds;
    let has_status = status.revents & libc::POLLIN != 0;
    let ended = init.revents & libc::POLLIN != 0 || status.revents & libc::POLLHUP != 0;
    ended && !has_status
}

/// What [`wait_readable`] saw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Ready {
    /// The error pipe has data or is at EOF.
    Pipe,
    /// The pidfd is readable: pid 1 ended.
    InitEnded,
    /// The deadline passed first.
    TimedOut,
}

/// Waits until the error pipe is readable (data or EOF), `pidfd` (if given) says
/// pid 1 ended, or `deadline` passes.
fn wait_readable(
    pipe: &OwnedFd,
    pidfd: Option<&OwnedFd>,
    deadline: Instant,
) -> Result<Ready, Errno> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(Ready::TimedOut);
        }
        let mut fds = [
            libc::pollfd {
                fd: pipe.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                // A negative descriptor is ignored by poll.
                fd: pidfd.map_or(-1, AsRawFd::as_raw_fd),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        match sys::fd::poll(&mut fds, poll_ms(left)) {
            Ok(_) => {}
            Err(libc::EINTR) => continue,
            Err(errno) => return Err(Errno::from_raw(errno)),
        }
        let [pipe, init] = fds;
        if pipe.revents != 0 {
            // POLLIN, POLLHUP (EOF) or POLLERR: the read that follows tells.
            return Ok(Ready::Pipe);
        }
        if init.revents != 0 {
            return Ok(Ready::InitEnded);
        }
    }
}

/// A poll timeout in milliseconds, rounded up (never 0 for a non-zero wait).
fn poll_ms(left: Duration) -> libc::c_int {
    let ms = left.as_millis() + u128::from(!left.subsec_nanos().is_multiple_of(1_000_000));
    libc::c_int::try_from(ms).unwrap_or(libc::c_int::MAX)
}

/// After a setup timeout: SIGKILL the child through its pidfd and reap it. A child
/// that does not end within [`REAP_WAIT`] (a task in a frozen v1 freezer cgroup
/// keeps even `SIGKILL` pending until thawed) is reaped by a detached thread, so
/// the caller gets its error now and no zombie stays behind once it does end.
fn kill_and_reap(pidfd: &OwnedFd, reaper: Reaper) {
    // Already ended is fine: it is reaped below either way.
    let _ = sys::pidfd::send_signal(pidfd, libc::SIGKILL);
    let ended = matches!(
        wait_readable_pidfd(pidfd, Instant::now() + REAP_WAIT),
        Ok(true)
    );
    if ended {
        drop(reaper);
        return;
    }
    let pid = reaper.pid;
    let reaping = std::thread::Builder::new()
        .name(format!("reap-{pid}"))
        .spawn(move || drop(reaper));
    match reaping {
        Ok(_) => tracing::warn!(
            pid,
            "the killed child has not ended yet; reaping it in the background"
        ),
        // No thread: reap here, blocking (the error still reaches the caller).
        Err(e) => tracing::warn!(pid, error = %e, "cannot start a reaper thread"),
    }
}

/// Whether the pidfd became readable (the process ended) before `deadline`.
fn wait_readable_pidfd(pidfd: &OwnedFd, deadline: Instant) -> Result<bool, Errno> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let mut fds = [libc::pollfd {
            fd: pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        return match sys::fd::poll(&mut fds, poll_ms(left)) {
            Ok(ready) => Ok(ready > 0),
            Err(libc::EINTR) if !left.is_zero() => continue,
            Err(errno) => Err(Errno::from_raw(errno)),
        };
    }
}

/// How long a child that reported its failure gets to end by itself.
const REPORTED_EXIT_WAIT: Duration = Duration::from_millis(500);

/// Kills and reaps the child if the parent's side of the start fails.
struct Reaper {
    pid: i32,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // `pid` is our child and not yet reaped (only this guard reaps it on
        // this path), so it cannot have been recycled.
        let _ = sys::signal::kill(self.pid, libc::SIGKILL);
        while sys::process::wait_for_child(self.pid, 0) == Err(libc::EINTR) {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pipe() -> (OwnedFd, OwnedFd) {
        nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn a_report_left_by_a_dead_child_is_drained_without_blocking() {
        let report = Report {
            stage: ChildStage::Descriptors as u32,
            index: 0,
            op: error::op::CALL,
            errno: libc::EMFILE,
        };
        let (read, write) = pipe();
        nix::unistd::write(&write, &report.encode()).unwrap_or_else(|e| panic!("{e}"));
        // A writer still open elsewhere must not make the drain block.
        assert_eq!(drain_report(&read), Some(report));
        assert_eq!(drain_report(&read), None);
        drop(write);
        let (read, write) = pipe();
        nix::unistd::write(&write, &[1, 2, 3]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            drain_report(&read),
            None,
            "a truncated report is not a report"
        );
    }
}
