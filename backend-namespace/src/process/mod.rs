//! [`NamespaceProcess`]: the Process boundary of the namespace backend.
//!
//! It applies the filesystem record, the environment plan and the identity plan
//! of a run together, with [`crate::spawn`] and [`crate::cgroup`]:
//!
//! * **seal**: hands what the run may write over to the run's identity
//!   ([`hand_over`]: the whole checkout of a standalone or linked source, the upper
//!   and work directories of a layered one, owned by the run's host ids ([`HostIds`]),
//!   without following links or crossing mounts; a layered checkout's shared lower
//!   layer is never changed: each command sees it through an idmapped mount in
//!   which its owner is the run's, see [`crate::spawn`]); creates the run's cgroups under
//!   [`ProcessOptions::cgroup_parent`] with the plan's limits; finds the workspace paths `filesystem.excluded` (and
//!   [`PROTECTED_EXCLUSIONS`](workspace_core::mount_plan::PROTECTED_EXCLUSIONS)) match, walking the checkout (the lower and upper
//!   layers of a layered one) without following links; reads the source object
//!   store from the checkout's `.git/objects/info/alternates` (the upper layer's
//!   for a layered checkout) as plain data; builds the [`MountPlan`]; then runs a
//!   probe inside (one shell of the sandbox, observed from the host: `probe.rs`)
//!   and compares what it saw with the
//!   plan, within [`ProcessOptions::probe_timeout`] ([`PROBE_TIMEOUT`]; a hung
//!   probe is killed and the seal fails with [`ProcessError::ProbeTimeout`]). With
//!   `environment.assurance = required` any mismatch fails the seal (and removes
//!   the cgroups); `best-effort` records them. The observation's `handover` fact
//!   lists what the handover changed and left alone.
//!   The seal then starts the run's **live sandbox**: a pid 1 in new user, mount,
//!   pid, network, UTS and IPC namespaces with the mount plan applied, every
//!   privilege dropped, in the run's `init` cgroup, that holds the namespaces
//!   until teardown ([`crate::spawn::Pid1::HoldSandbox`]); the probe joins it.
//!   Where it is (pid 1's host pid, checked against the run's cgroup before it is
//!   trusted) is recorded in `<run dir>/sandbox.json`.
//! * **spawn**: each command joins the sandbox ([`crate::spawn::join`]): the same
//!   namespaces, file system, network and processes as every other command of the
//!   run, in a cgroup of its own below the run's (`cmd-<n>`, so its timeout, kill
//!   and memory-limit cause cover its tree only), with the run's environment plus
//!   the injected credentials, the identity's uid/gid (mapped to
//!   its [`HostIds`] on the host) and the rlimit baseline (soft = hard):
//!   `RLIMIT_NOFILE` = `limits.open_files`, `RLIMIT_CORE` = 0, `RLIMIT_FSIZE` =
//!   `limits.disk` (each file at most the disk cap; unlimited without one). Its
//!   stdin is a pipe; its stdout and stderr are pipes too, which an output
//!   keeper of the run (a host process in the run's `output` cgroup, out of the
//!   sandbox's reach: `keeper.rs`) copies into files of the run (`output.rs`),
//!   followed as tokio streams until the command itself ends, so what it leaves
//!   running in the background can go on writing after the command and its runner
//!   are gone, and nothing it does to its descriptors afterwards (`ftruncate`,
//!   `lseek`, `pwrite`) takes back what it wrote. A bare program name is looked up in the run's `PATH` inside the
//!   run, as `execvp` does; one with a `/` is relative to `cwd`. `cwd` is relative
//!   to the workspace root, without `..`.
//! * **detach / attach**: `detach` lets the sandbox outlive this instance (and
//!   the process it lives in); `attach`, in any process, finds it again from its
//!   record and cgroups, or reports it lost (the host rebooted, pid 1 was killed).
//! * **terminal** (`CommandSpec::tty = true`): the command's stdin, stdout and
//!   stderr are the slave of a pseudo-terminal allocated by the runner before the
//!   clone ([`PTY_WINDOW_SIZE`], 80x24), and the command makes it its controlling
//!   terminal after `setsid`, so `/dev/tty` inside is that terminal. The
//!   execution's stdout reads the master and its stdin writes to it; **stderr is
//!   merged**: everything the command writes arrives on stdout, and the stderr
//!   stream is empty (it ends at once). The line discipline is in between: output
//!   lines end in `\r\n`, input is echoed to stdout, and closing stdin does *not*
//!   end the command's input (send `^D`, `0x04`, at the start of a line). When
//!   the command's tree has ended, the master's `EIO` is the end of the stdout
//!   stream, not an error. Every run has a devpts instance of its own at
//!   `/dev/pts` (`newinstance`, `ptmxmode=0666`, `/dev/ptmx` a link into it); the
//!   command's pair is opened there (through the sandbox's pid 1's root), so
//!   `tty` names `/dev/pts/N` inside, and `TERM=xterm` is set unless declared.
//!   No host terminal is visible there.
//! * **wait** returns when the command itself ended and honours the smaller of
//!   `timeout_ms` and the run's wall-time limit: the command's cgroup (its whole
//!   tree, background processes included) is killed and the record says
//!   [`KillCause::Timeout`]. When the command's memory cgroup counted an OOM kill,
//!   it says [`KillCause::MemoryLimit`] (even if the process the kernel chose was
//!   not the command itself).
//! * **teardown**: kills everything in the run's cgroups (the sandbox's pid 1 and
//!   everything any command left running), removes them and the run's output files
//!   and sandbox record, forgets the run; the [`LeakReport`](workspace_core::boundary::LeakReport) lists pids still in the cgroups and cgroup directories
//!   still present. A run this instance did not seal (crash recovery: the runner
//!   that sealed it died) is torn down the same way: its cgroups are found by the
//!   names `seal` gives them (`<mount>/<cgroup_parent>/<run id>` in every
//!   hierarchy, [`RunCgroup::adopt`]), everything in them is killed, and they are
//!   removed. No cgroup left is a clean report. Idempotent.
//!
//! * **suspend** freezes the run's cgroup in place and lets go (as detach);
//!   **attach** thaws it. **terminate** asks every process of the run but pid 1
//!   to stop (`SIGTERM`, a grace period, then kill), for a run that drains.
//!   **connect** opens a TCP connection to a port on the run's own loopback from
//!   a thread that enters its network namespace alone (`in_sandbox.rs`).
//! * **preview ports**: each port of `process.ports` is published on a free port
//!   of the host's loopback, bound before the sandbox's clone and forwarded by
//!   its pid 1 for the sandbox's life (`spawn::forward`); `observed.json` has
//!   the addresses.
//!
//! Not yet: resizing a command's terminal (the window
//! stays [`PTY_WINDOW_SIZE`]), a disk quota on the workspace itself (`limits.disk` caps only the size of each
//! file a process writes, through `RLIMIT_FSIZE`).
//!
//! [`MountPlan`]: workspace_core::mount_plan::MountPlan
//! [`KillCause::Timeout`]: workspace_core::boundary::KillCause::Timeout
//! [`KillCause::MemoryLimit`]: workspace_core::boundary::KillCause::MemoryLimit

mod boundary;
mod broker;
mod command;
mod egress;
mod error;
mod execution;
mod handover;
mod host_ids;
mod in_sandbox;
mod keeper;
mod network;
mod output;
mod probe;
mod probe_shell;
mod pty;
mod seal;
mod spec;
mod state;
mod terminate;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use workspace_core::RunId;
use workspace_core::mount_plan::HostLayout;

pub use error::ProcessError;
pub use execution::NamespaceExecution;
pub use handover::{HandoverOutcome, MAX_OPEN_DIRS, hand_over};
pub use host_ids::{DEFAULT_HOST_ID_BASE, HostIds};
pub use keeper::ForkedOutputKeepers;
pub use pty::PTY_WINDOW_SIZE;
pub use workspace_core::mount_plan::{ETC_PATHS, SYSTEM_PATHS, probe_host_layout};

use crate::cgroup::RunCgroup;
use crate::spawn::Sandbox;
use seal::Sealed;
use spec::RunSpec;

/// How long the boundary probe of `seal` may take, from its clone to its exit.
///
/// The probe is a short shell script; a probe that has not finished by then is
/// hung (a frozen cgroup, a stuck mount, a blocked pipe) and would otherwise hold
/// the seal forever. It is killed and the seal fails with
/// [`ProcessError::ProbeTimeout`] (and removes the run's cgroups).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`ProcessBoundary::connect`](workspace_core::boundary::ProcessBoundary::connect) waits for a port inside to accept.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a [`NamespaceProcess`] sets runs up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOptions {
    /// The cgroup directory (relative, e.g. `agent-workspace`) the runs' cgroups
    /// are made in, in every hierarchy.
    pub cgroup_parent: String,
    /// Which host ids the run's ids map to ([`HostIds::for_this_process`] by
    /// default: an offset range as root, the caller's own ids otherwise).
    pub host_ids: HostIds,
    /// The host's base system and `/etc` files passed through.
    pub host: HostLayout,
    /// How long the boundary probe of `seal` may take ([`PROBE_TIMEOUT`] by default).
    pub probe_timeout: Duration,
    /// The egress proxy program (`agent-workspace`, run as `PROGRAM
    /// egress-proxy CONFIG`): with one, a contract may allow a list of
    /// destinations (`environment.network.mode = "allowlist"`); without, such
    /// a contract is refused.
    pub egress_proxy: Option<std::path::PathBuf>,
}

impl ProcessOptions {
    /// Options with `cgroup_parent`, [`HostIds::for_this_process`], this host's
    /// layout ([`probe_host_layout`]) and [`PROBE_TIMEOUT`].
    ///
    /// # Ambient authority
    /// Looks at the host's root directory.
    pub fn probe(cgroup_parent: impl Into<String>) -> Result<Self, ProcessError> {
        let host_ids = HostIds::for_this_process();
        if let HostIds::Offset { base } = host_ids
            && let Some(claimed) = workspace_core::subordinate::claimed_ranges(base).pop()
        {
            return Err(ProcessError::HostIdsClaimed { base, claimed });
        }
        Ok(Self {
            cgroup_parent: cgroup_parent.into(),
            host_ids,
            host: probe_host_layout()?,
            probe_timeout: PROBE_TIMEOUT,
            egress_proxy: None,
        })
    }
}

/// The Process boundary of the namespace backend (see the [module docs](self)).
#[derive(Debug)]
pub struct NamespaceProcess {
    options: Arc<ProcessOptions>,
    runs: Mutex<HashMap<RunId, Sealed>>,
}

impl NamespaceProcess {
    /// A boundary setting runs up with `options`.
    pub fn new(options: ProcessOptions) -> Self {
        Self {
            options: Arc::new(options),
            runs: Mutex::new(HashMap::new()),
        }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<RunId, Sealed>> {
        self.runs
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn live(&self, run_id: &RunId) -> Result<Live, ProcessError> {
        self.runs()
            .get(run_id)
            .map(|sealed| Live {
                spec: Arc::clone(&sealed.spec),
                cgroup: Arc::clone(&sealed.cgroup),
                sandbox: Arc::clone(&sealed.sandbox),
            })
            .ok_or_else(|| ProcessError::NotSealed {
                run_id: run_id.clone(),
            })
    }
}

/// What a command of a sealed run joins.
struct Live {
    spec: Arc<RunSpec>,
    cgroup: Arc<RunCgroup>,
    sandbox: Arc<Sandbox>,
}

async fn blocking<T: Send + 'static>(
    step: &'static str,
    f: impl FnOnce() -> Result<T, ProcessError> + Send + 'static,
) -> Result<T, ProcessError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|source| ProcessError::Task { step, source })?
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe(
    step: &'static str,
) -> Result<(std::os::fd::OwnedFd, std::os::fd::OwnedFd), ProcessError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| ProcessError::Pipe {
        step,
        source: errno.into(),
    })
}
