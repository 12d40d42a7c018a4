//! [`join`]: one more command inside a live sandbox.
//!
//! A sandbox is a pid 1 started with [`Pid1::HoldSandbox`](super::Pid1): it holds
//! the user, mount, pid, network, UTS and IPC namespaces with the mount plan
//! applied until it is killed. [`join`] starts a command in exactly those
//! namespaces, from any thread of a multi-threaded process: a fork-style clone
//! without namespace flags gives a single-threaded child, which joins the command's
//! cgroups, enters every namespace of the sandbox at once with
//! `setns(pidfd, CLONE_NEWUSER | CLONE_NEWNS | ...)` (the user namespace first, so
//! the rest is entered with the capabilities it grants; joining the mount
//! namespace moves the child to the sandbox's root), enters a cgroup namespace of
//! its own rooted at the command's cgroup, drops every privilege as a new sandbox's
//! pid 1 does (supplementary groups, bounding set, ids, capability sets,
//! `no_new_privs`, rlimits, the seccomp filter) and forks the command, which is
//! the first process of this chain inside the sandbox's pid namespace.
//!
//! The joining child stays behind as the command's supervisor, in the host's pid
//! namespace: nothing in the sandbox can see or signal it. It passes on the signals
//! the host sends it ([`FORWARDED_SIGNALS`](super::FORWARDED_SIGNALS)), writes the
//! command's wait status to the status pipe and exits when the command exits. What
//! the command leaves running is reparented to the sandbox's pid 1 and lives on
//! until the sandbox is killed, as with `docker exec`. The returned
//! [`SpawnedChild`] is that supervisor: `wait` returns when the command itself
//! ended; killing it ends only the supervisor and, through the status pipe, the
//! wait (a command's whole tree is killed through its cgroup).

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::path::PathBuf;
use std::time::Duration;

use nix::errno::Errno;
use nix::libc;

use super::error::SpawnError;
use super::prepared::Prepared;
use super::protocol::{GO_CLEAR_GROUPS, GO_GROUPS_DENIED};
use super::{DEFAULT_SETUP_TIMEOUT, ResourceLimits, SpawnedChild, join_child, launch};
use crate::seccomp::SeccompFilter;
use crate::sys::{fd, pidfd};

/// A live sandbox, seen from the host: its pid 1, through a pidfd, and the
/// process its namespaces are entered through.
///
/// That is pid 1 itself when this process may enter it (host root, with
/// `CAP_SYS_PTRACE`). Pid 1 is a copy of the runner's memory and stays
/// non-dumpable, so that nothing in the run can read it; the kernel then lets
/// only `CAP_SYS_PTRACE` in the host's user namespace enter it through a pidfd.
/// A runner without it (an ordinary user) enters through the sandbox's *door*
/// instead: a program pid 1 started right after its setup (see
/// [`Pid1::HoldSandbox`](super::Pid1::HoldSandbox)), with a command's ids,
/// privileges and namespaces, exec'd and therefore dumpable. The door is pid
/// 1's child; a process of the run could end it (its own workspace then takes
/// no more commands) but not stand in for it with other namespaces: nothing in
/// the run may make a namespace.
#[derive(Debug)]
pub struct Sandbox {
    pid: i32,
    pidfd: OwnedFd,
    entry: Option<Door>,
    clear_groups: bool,
}

/// A sandbox's door: its host pid and a pidfd.
#[derive(Debug)]
struct Door {
    pid: i32,
    pidfd: OwnedFd,
}

impl Sandbox {
    /// The sandbox whose pid 1 is `holder` (started with
    /// [`Pid1::HoldSandbox`](super::Pid1)), entered through its door `door`
    /// (a host pid) when it has one.
    pub fn of(holder: &SpawnedChild, door: Option<u32>) -> Result<Self, SpawnError> {
        let pidfd = holder
            .pidfd()
            .try_clone_to_owned()
            .map_err(|e| SpawnError::Prepare {
                step: "duplicating the sandbox's pidfd",
                path: format!("/proc/{}", holder.pid()).into(),
                source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)),
            })?;
        Self::with_pidfd(holder.pid() as i32, pidfd, door)
    }

    /// The sandbox whose pid 1 has host pid `pid`, started by another process,
    /// entered through its door `door` (a host pid) when it has one.
    ///
    /// The pidfds are taken first, so the handle names those processes for
    /// good, even if they end and their pids are reused; the door must be pid
    /// 1's child. The caller checks that pid 1 is the sandbox it expects (its
    /// cgroup, say) *after* this call.
    ///
    /// # Ambient authority
    /// Opens pidfds of host processes and reads their `/proc` entries.
    pub fn open(pid: u32, door: Option<u32>) -> Result<Self, SpawnError> {
        let pid = host_pid(pid)?;
        Self::with_pidfd(
            pid,
            open_pidfd(pid, "pidfd_open of the sandbox's pid 1")?,
            door,
        )
    }

    fn with_pidfd(pid: i32, pidfd: OwnedFd, door: Option<u32>) -> Result<Self, SpawnError> {
        let entry = door.map(|door| Door::open(door, pid)).transpose()?;
        // Host root writes the gid map with `setgroups` left allowed, so a joining
        // child can clear the host groups it inherited (see `idmap.rs`); a runner
        // that enters through a door is unprivileged, and an unprivileged gid map
        // needs `setgroups` denied: nothing to read.
        let clear_groups = match &entry {
            Some(_) => false,
            None => {
                let path = PathBuf::from(format!("/proc/{pid}/setgroups"));
                let setgroups =
                    std::fs::read_to_string(&path).map_err(|e| SpawnError::Prepare {
                        step: "reading the sandbox's setgroups policy",
                        path: path.clone(),
                        source: Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
                    })?;
                setgroups.trim() == "allow"
            }
        };
        let sandbox = Self {
            pid,
            pidfd,
            entry,
            clear_groups,
        };
        if !sandbox.is_alive() {
            return Err(SpawnError::InitEnded { pid });
        }
        Ok(sandbox)
    }

    /// This sandbox, entered through its door `door` (a host pid) from now on:
    /// pid 1's pidfd is the one already taken (and checked by the caller).
    pub fn through_door(self, door: u32) -> Result<Self, SpawnError> {
        let entry = Door::open(door, self.pid)?;
        Ok(Self {
            entry: Some(entry),
            clear_groups: false,
            ..self
        })
    }

    /// The host pid of the sandbox's pid 1.
    pub fn pid(&self) -> u32 {
        self.pid as u32
    }

    /// The pidfd of the sandbox's pid 1.
    pub fn pidfd(&self) -> BorrowedFd<'_> {
        self.pidfd.as_fd()
    }

    /// The host pid of the process the sandbox's namespaces are entered
    /// through: its door, when it has one, else pid 1. Its `/proc` entry
    /// (`root`, `ns`, `net`) is the sandbox's, readable by this process.
    pub fn entry_pid(&self) -> u32 {
        self.entry.as_ref().map_or(self.pid, |door| door.pid) as u32
    }

    /// The pidfd of [`entry_pid`](Self::entry_pid)'s process: what `setns`
    /// takes to enter the sandbox.
    pub fn entry_pidfd(&self) -> BorrowedFd<'_> {
        self.entry
            .as_ref()
            .map_or(self.pidfd.as_fd(), |door| door.pidfd.as_fd())
    }

    /// The sandbox's root directory as its processes see it, mounts and all:
    /// `/proc/<entry>/root` of [`entry_pid`](Self::entry_pid), opened
    /// `O_PATH`, then checked to be still that process's (its pidfd not yet
    /// readable: a pid that ended and was reused meanwhile is never taken).
    /// A path resolved from it with `RESOLVE_IN_ROOT` resolves as inside.
    ///
    /// # Ambient authority
    /// Opens a host `/proc` entry (ptrace access to the entry process).
    pub fn open_root(&self) -> Result<OwnedFd, SpawnError> {
        let path = PathBuf::from(format!("/proc/{}/root", self.entry_pid()));
        let root = nix::fcntl::open(
            &path,
            nix::fcntl::OFlag::O_PATH
                | nix::fcntl::OFlag::O_DIRECTORY
                | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|source| SpawnError::Prepare {
            step: "opening the sandbox's root",
            path: path.clone(),
            source,
        })?;
        let alive = match &self.entry {
            Some(door) => is_running(&door.pidfd),
            None => is_running(&self.pidfd),
        };
        if !alive {
            return Err(match &self.entry {
                Some(door) => SpawnError::DoorGone {
                    door: door.pid,
                    pid1: self.pid,
                },
                None => SpawnError::InitEnded { pid: self.pid },
            });
        }
        Ok(root)
    }

    /// The host pid of the sandbox's door, when it has one.
    pub fn door(&self) -> Option<u32> {
        self.entry.as_ref().map(|door| door.pid as u32)
    }

    /// Whether the sandbox's pid 1 still runs (its pidfd is not readable yet).
    pub fn is_alive(&self) -> bool {
        is_running(&self.pidfd)
    }

    /// `SIGKILL` to the sandbox's pid 1, through its pidfd: the kernel ends every
    /// process of the sandbox's pid namespace with it. Not an error once it ended.
    pub fn kill(&self) -> Result<(), SpawnError> {
        match pidfd::send_signal(&self.pidfd, libc::SIGKILL) {
            Ok(()) | Err(libc::ESRCH) => Ok(()),
            Err(errno) => Err(SpawnError::Wait {
                step: "pidfd_send_signal to the sandbox's pid 1",
                pid: self.pid,
                source: Errno::from_raw(errno),
            }),
        }
    }
}

impl Door {
    /// The door with host pid `door` of the sandbox whose pid 1 is `pid1`:
    /// its pidfd, taken before it is checked to be pid 1's child and still
    /// running, so it names that process for good.
    fn open(door: u32, pid1: i32) -> Result<Self, SpawnError> {
        let pid = host_pid(door)?;
        let pidfd = open_pidfd(pid, "pidfd_open of the sandbox's door")?;
        let path = PathBuf::from(format!("/proc/{pid}/status"));
        let status = std::fs::read_to_string(&path).unwrap_or_default();
        let parent = status
            .lines()
            .find_map(|line| line.strip_prefix("PPid:"))
            .and_then(|ppid| ppid.trim().parse::<i32>().ok());
        if parent != Some(pid1) || !is_running(&pidfd) {
            return Err(SpawnError::DoorGone { door: pid, pid1 });
        }
        Ok(Self { pid, pidfd })
    }
}

/// `pid` as the kernel's type.
fn host_pid(pid: u32) -> Result<i32, SpawnError> {
    i32::try_from(pid).map_err(|_| SpawnError::InvalidRequest {
        field: "pid",
        reason: format!("{pid} is not a pid"),
    })
}

/// A pidfd of host process `pid`.
fn open_pidfd(pid: i32, step: &'static str) -> Result<OwnedFd, SpawnError> {
    pidfd::open(pid).map_err(|errno| SpawnError::Prepare {
        step,
        path: format!("/proc/{pid}").into(),
        source: Errno::from_raw(errno),
    })
}

/// Whether the process of `pidfd` still runs (the pidfd is not readable yet).
fn is_running(pidfd: &OwnedFd) -> bool {
    let mut fds = [libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    // A zero timeout never blocks.
    fd::poll(&mut fds, 0) == Ok(0)
}

/// A command to start inside a live [`Sandbox`].
#[derive(Debug)]
pub struct JoinRequest {
    /// The program and its arguments; a bare name is looked up in `env`'s `PATH`
    /// inside the sandbox.
    pub argv: Vec<String>,
    /// The complete environment: nothing is inherited from the host.
    pub env: Vec<(String, String)>,
    /// uid inside (mapped in the sandbox's user namespace).
    pub uid: u32,
    /// gid inside.
    pub gid: u32,
    /// Working directory inside (absolute).
    pub cwd: String,
    /// Standard input (duplicated; `None` is `/dev/null`).
    pub stdin: Option<OwnedFd>,
    /// Standard output (duplicated; `None` is `/dev/null`).
    pub stdout: Option<OwnedFd>,
    /// Standard error (duplicated; `None` is `/dev/null`).
    pub stderr: Option<OwnedFd>,
    /// Make standard input the command's controlling terminal (as
    /// [`SpawnRequest::controlling_terminal`](super::SpawnRequest::controlling_terminal)).
    pub controlling_terminal: bool,
    /// The seccomp filter; `None` is the default policy's.
    pub seccomp: Option<SeccompFilter>,
    /// Run without any seccomp filter. Dangerous (see
    /// [`SpawnRequest::danger_no_seccomp`](super::SpawnRequest::danger_no_seccomp)).
    pub danger_no_seccomp: bool,
    /// The cgroup directories (one per hierarchy, at most 16: the command's
    /// own) the command joins before it enters the sandbox, as
    /// [`SpawnRequest::cgroups`](super::SpawnRequest::cgroups) does; it then
    /// gets a cgroup namespace rooted there.
    pub cgroups: Vec<PathBuf>,
    /// The resource limits the command starts with (soft = hard).
    pub rlimits: ResourceLimits,
    /// How long [`join`] waits for the child's setup. Must not be zero.
    pub setup_timeout: Duration,
}

impl JoinRequest {
    /// A request running `argv` in `cwd` as uid/gid 65534, with an empty
    /// environment and `/dev/null` for stdio.
    pub fn new(argv: Vec<String>, cwd: impl Into<String>) -> Self {
        Self {
            argv,
            env: Vec::new(),
            uid: 65534,
            gid: 65534,
            cwd: cwd.into(),
            stdin: None,
            stdout: None,
            stderr: None,
            controlling_terminal: false,
            seccomp: None,
            danger_no_seccomp: false,
            cgroups: Vec::new(),
            rlimits: ResourceLimits::default(),
            setup_timeout: DEFAULT_SETUP_TIMEOUT,
        }
    }
}

/// Starts `request.argv` inside `sandbox`: a fork-style clone, `setns` through
/// the sandbox's pidfd, the privilege drop, and a supervisor that outlives only the
/// command (see `join.rs`).
///
/// Returns once the command has been `exec`'d, or with the child's first failure
/// (naming the stage). Blocking: from async code call it in `spawn_blocking`.
/// Safe from any thread of a multi-threaded process.
///
/// # Ambient authority
/// Enters the sandbox's namespaces (the caller needs `CAP_SYS_ADMIN` over the
/// sandbox's user namespace, e.g. host root) and joins the given cgroups.
pub fn join(sandbox: &Sandbox, request: &JoinRequest) -> Result<SpawnedChild, SpawnError> {
    if request.setup_timeout.is_zero() {
        return Err(SpawnError::InvalidRequest {
            field: "setup_timeout",
            reason: "is zero".to_owned(),
        });
    }
    if !sandbox.is_alive() {
        return Err(SpawnError::InitEnded { pid: sandbox.pid });
    }
    let prepared = Prepared::for_join(request, sandbox)?;
    let go = if sandbox.clear_groups {
        GO_CLEAR_GROUPS
    } else {
        GO_GROUPS_DENIED
    };
    launch(
        prepared,
        request.setup_timeout,
        join_child::clone_joining_child,
        |_pid| Ok(go),
    )
}
