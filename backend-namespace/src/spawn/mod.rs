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
//! # fn plan() -> workspace_core::mount_plan::MountPlan { unimplemented!() }
//! use backend_namespace::spawn::{SpawnRequest, spawn};
//! let mut request = SpawnRequest::new(plan(), vec!["/bin/sh".into(), "-c".into(), "id -u".into()]);
//! request.uid = 1000;
//! request.gid = 1000;
//! request.host_uid = 100_000;
//! request.host_gid = 100_000;
//! let mut child = spawn(&request)?;
//! let status = child.wait()?; // blocking: use spawn_blocking from async code
//! # Ok::<(), backend_namespace::spawn::SpawnError>(())
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
//! # Hooks for the other modules
//!
//! * [`SpawnRequest::seccomp`]: a [`SeccompFilter`] whose program is copied before
//!   clone and installed in the command right before `execve` (after the mount plan
//!   and `no_new_privs`);
//! * [`SpawnRequest::cgroup_procs`]: `cgroup.procs` files (one per hierarchy) opened
//!   before clone; the child writes `0` to each before anything else, then enters a
//!   new cgroup namespace rooted there.
//!
//! # Limits of this version
//!
//! * `argv[0]` must be an absolute path inside the run (no `PATH` search);
//! * waiting is blocking ([`SpawnedChild::wait`]) or polled
//!   ([`SpawnedChild::try_wait`], [`SpawnedChild::pidfd`]);
//! * no `PR_SET_PDEATHSIG`: it fires when the *thread* that cloned exits, and tokio's
//!   blocking threads come and go; a runner that dies leaves the run to the
//!   journal's recovery, which kills it by pid namespace;
//! * the parent waits for the child's setup without a timeout;
//! * no PTY, no rlimits (`open_files`), no network other than `lo`;
//! * the overlay step (layered checkouts) and the cgroup hook are implemented but
//!   not yet covered by a test here;
//! * what the plan creates in the new tmpfs mounts (mount points, `/etc` files) is
//!   owned by the run's uid (the only id mapped); the root tmpfs is read-only.

mod child;
pub mod error;
mod handle;
mod idmap;
mod init;
mod mounts;
mod prepared;
mod raw;

use std::os::fd::{AsFd, FromRawFd, OwnedFd};
use std::path::PathBuf;

use nix::errno::Errno;
use nix::libc;
use workspace_core::mount_plan::MountPlan;

use crate::seccomp::SeccompFilter;

pub use error::{ChildStage, SpawnError};
pub use handle::{ChildKiller, SpawnedChild};

use error::Report;
use prepared::{ParentFds, Prepared};

/// What to run, as whom, on which file system.
#[derive(Debug)]
pub struct SpawnRequest {
    /// The file system of the run, applied on a fresh tmpfs root.
    pub plan: MountPlan,
    /// The program (an absolute path inside the run) and its arguments.
    pub argv: Vec<String>,
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
    /// A seccomp filter installed right before `execve`.
    pub seccomp: Option<SeccompFilter>,
    /// `cgroup.procs` files the run joins before anything else (at most 16).
    pub cgroup_procs: Vec<PathBuf>,
}

impl SpawnRequest {
    /// A request running `argv` in `plan` as uid/gid 65534 mapped to host
    /// 165534 (change the ids before spawning), starting in the plan's workdir,
    /// with an empty environment and `/dev/null` for stdio.
    pub fn new(plan: MountPlan, argv: Vec<String>) -> Self {
        Self {
            cwd: plan.workdir.clone(),
            plan,
            argv,
            env: Vec::new(),
            uid: 65534,
            gid: 65534,
            host_uid: 165_534,
            host_gid: 165_534,
            danger_map_root_to_host_root: false,
            stdin: None,
            stdout: None,
            stderr: None,
            seccomp: None,
            cgroup_procs: Vec::new(),
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
/// `/proc/<pid>/{uid_map,gid_map,setgroups}` and joins the given cgroups.
pub fn spawn(request: &SpawnRequest) -> Result<SpawnedChild, SpawnError> {
    let prepared = Prepared::new(request)?;
    let pid = child::clone_child(&prepared)?;
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

    // SAFETY: pidfd_open on our own unreaped child.
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0u32) };
    if pidfd < 0 {
        return Err(SpawnError::Prepare {
            step: "pidfd_open of the namespace init",
            path: format!("/proc/{pid}").into(),
            source: Errno::last(),
        });
    }
    // SAFETY: pidfd_open returned a new descriptor that nothing else owns.
    let pidfd = unsafe { OwnedFd::from_raw_fd(pidfd as i32) };

    let go = idmap::write_maps(
        pid,
        (request.uid, request.gid),
        (request.host_uid, request.host_gid),
    )?;
    nix::unistd::write(&go_write, &[go]).map_err(|source| SpawnError::Handshake {
        step: "writing the go byte",
        source,
    })?;
    drop(go_write);

    let mut buf = [0u8; Report::LEN];
    let mut got = 0;
    while got < buf.len() {
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
        0 => {
            std::mem::forget(reaper);
            tracing::debug!(pid, "spawned a namespaced command");
            Ok(SpawnedChild::new(pid, pidfd, status_read))
        }
        Report::LEN => {
            drop(reaper);
            Err(Report::decode(&buf).into_error(|i| {
                steps
                    .get(i)
                    .map(|s| s.target.to_string_lossy().into_owned())
            }))
        }
        _ => Err(SpawnError::Handshake {
            step: "reading a truncated error report",
            source: Errno::EPROTO,
        }),
    }
}

/// Kills and reaps the child if the parent's side of the start fails.
struct Reaper {
    pid: i32,
}

impl Drop for Reaper {
    fn drop(&mut self) {
        // SAFETY: `pid` is our child and not yet reaped (only this guard reaps it
        // on this path), so it cannot have been recycled.
        unsafe {
            libc::kill(self.pid, libc::SIGKILL);
            let mut status = 0;
            while libc::waitpid(self.pid, &mut status, 0) < 0 && Errno::last() == Errno::EINTR {}
        }
    }
}
