//! [`NamespaceProcess`]: the Process boundary of the namespace backend.
//!
//! It applies the filesystem record, the environment plan and the identity plan
//! of a run together, with [`crate::spawn`] and [`crate::cgroup`]:
//!
//! * **seal**: hands what the run may write over to the run's identity
//!   ([`hand_over`]: the whole checkout of a standalone or linked source, the upper
//!   and work directories of a layered one, owned by `host_id_base + uid/gid`,
//!   without following links or crossing mounts; a layered checkout's shared lower
//!   layer is never changed: each command sees it through an idmapped mount in
//!   which its owner is the run's, see [`crate::spawn`]); creates the run's cgroups under
//!   [`ProcessOptions::cgroup_parent`] with the plan's limits; finds the workspace paths `filesystem.excluded` (and
//!   [`PROTECTED_EXCLUSIONS`]) match, walking the checkout (the lower and upper
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
//!   `host_id_base + id` on the host) and the rlimit baseline (soft = hard):
//!   `RLIMIT_NOFILE` = `limits.open_files`, `RLIMIT_CORE` = 0, `RLIMIT_FSIZE` =
//!   `limits.disk` (each file at most the disk cap; unlimited without one). Its
//!   stdin is a pipe; its stdout and stderr are files of the run (`output.rs`),
//!   followed as tokio streams until the command itself ends, so what it leaves
//!   running in the background can go on writing after the command and its runner
//!   are gone. A bare program name is looked up in the run's `PATH` inside the
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
//!   and sandbox record, forgets the run; the [`LeakReport`] lists pids still in the cgroups and cgroup directories
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

mod egress;
mod error;
mod execution;
mod handover;
mod in_sandbox;
mod network;
mod output;
mod probe;
mod pty;
mod seal;
mod state;
mod terminate;

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_trait::async_trait;
use workspace_core::RunId;
use workspace_core::boundary::{
    Attachment, BoundaryError, CommandSpec, Execution, InputStream, LeakReport, ObservedBoundary,
    OutputStream, ProcessBoundary, ProcessCapabilities, RunContext, SealPlan, Suspension,
    TerminateReport,
};
use workspace_core::contract::{Assurance, IsolationLevel};
use workspace_core::mount_plan::HostLayout;

pub use error::ProcessError;
pub use execution::NamespaceExecution;
pub use handover::{HandoverOutcome, MAX_OPEN_DIRS, hand_over};
pub use pty::PTY_WINDOW_SIZE;
pub use workspace_core::mount_plan::{ETC_PATHS, SYSTEM_PATHS, probe_host_layout};

use crate::cgroup::{CgroupLayout, RunCgroup, leaked_paths};
use crate::spawn::Sandbox;
use execution::{EventCounter, Parts};
use output::OutputFiles;
use pty::{Pty, PtyReader, PtyWriter};
use seal::{RunSpec, Sealed};

/// The host id that id 0 inside a run maps to; id `n` maps to base + `n`.
pub const DEFAULT_HOST_ID_BASE: u32 = 100_000;

/// How long the boundary probe of `seal` may take, from its clone to its exit.
///
/// The probe is a short shell script; a probe that has not finished by then is
/// hung (a frozen cgroup, a stuck mount, a blocked pipe) and would otherwise hold
/// the seal forever. It is killed and the seal fails with
/// [`ProcessError::ProbeTimeout`] (and removes the run's cgroups).
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(30);

/// How long [`ProcessBoundary::connect`] waits for a port inside to accept.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How a [`NamespaceProcess`] sets runs up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProcessOptions {
    /// The cgroup directory (relative, e.g. `agent-workspace`) the runs' cgroups
    /// are made in, in every hierarchy.
    pub cgroup_parent: String,
    /// The host id that id 0 inside maps to (id `n` maps to base + `n`).
    pub host_id_base: u32,
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
    /// Options with `cgroup_parent`, [`DEFAULT_HOST_ID_BASE`], this host's
    /// layout ([`probe_host_layout`]) and [`PROBE_TIMEOUT`].
    ///
    /// # Ambient authority
    /// Looks at the host's root directory.
    pub fn probe(cgroup_parent: impl Into<String>) -> Result<Self, ProcessError> {
        Ok(Self {
            cgroup_parent: cgroup_parent.into(),
            host_id_base: DEFAULT_HOST_ID_BASE,
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

#[async_trait]
impl ProcessBoundary for NamespaceProcess {
    fn capabilities(&self) -> ProcessCapabilities {
        ProcessCapabilities {
            isolation: vec![IsolationLevel::Task],
            private_network: true,
            service_templates: true,
            // Pid 1 keeps the capacity ticket's lock open (`SealPlan::held_open`).
            holds_capacity: true,
            output_files: true,
            // Pid 1 forwards each published port's host listener into the run.
            preview_ports: true,
            images: false,
        }
    }

    fn name(&self) -> &'static str {
        "backend-namespace process"
    }

    async fn seal(
        &self,
        run: &RunContext,
        plan: &SealPlan,
    ) -> Result<ObservedBoundary, BoundaryError> {
        const OP: &str = "seal";
        if self.runs().contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        tracing::info!(run_id = %run.run_id, "sealing the run");
        let expected = seal::expected(run, plan);
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let result = blocking("sealing the run", move || {
            let sealed = seal::prepare(&run_c, &plan_c, &options)?;
            let expected = workspace_core::observation::Expected {
                mount_points: sealed.mount_points.clone(),
                host_ids: seal::host_ids(&plan_c, &options).ok(),
                ..expected
            };
            match probe::probe(&sealed, &expected, options.probe_timeout) {
                Ok(observed) => Ok((sealed, observed)),
                Err(e) => {
                    stop(sealed, &run_c.run_dir);
                    Err(e)
                }
            }
        })
        .await;
        let (sealed, mut observed) = result.map_err(|e| e.into_boundary(OP))?;
        observed.previews = sealed.previews.clone();
        let network = network::observe(&sealed, plan.environment.network)
            .await
            .map_err(|e| e.into_boundary(OP))?;
        if let Some(mismatch) = network.mismatch() {
            observed.mismatches.push(mismatch);
        }
        observed
            .facts
            .insert("network".into(), serde_json::json!(network));
        // The limits as the kernel enforces them, read back from the cgroup files.
        let applied = sealed.cgroup.applied();
        match applied.read_back() {
            Ok(read) => {
                observed.mismatches.extend(applied.differences(&read));
                observed
                    .facts
                    .insert("limits".into(), serde_json::json!(read));
            }
            Err(e) => observed
                .mismatches
                .push(format!("the run's limits could not be read back: {e}")),
        }
        if !sealed.host_mounts.is_empty() {
            observed
                .facts
                .insert("host_mounts".into(), serde_json::json!(sealed.host_mounts));
        }
        observed.facts.insert(
            "handover".into(),
            serde_json::json!(
                sealed
                    .handover
                    .iter()
                    .map(|(dir, outcome)| serde_json::json!({
                        "dir": dir,
                        "outcome": outcome,
                    }))
                    .collect::<Vec<_>>()
            ),
        );
        if !observed.mismatches.is_empty() {
            if run.contract.environment.assurance == Assurance::Required {
                tracing::warn!(run_id = %run.run_id, mismatches = ?observed.mismatches,
                    "the boundary probe failed; sealing fails closed");
                let run_dir = run.run_dir.clone();
                let _ = blocking("stopping the sandbox of a failed seal", move || {
                    stop(sealed, &run_dir);
                    Ok(())
                })
                .await;
                return Err(ProcessError::Mismatch {
                    mismatches: observed.mismatches,
                }
                .into_boundary(OP));
            }
            tracing::warn!(run_id = %run.run_id, mismatches = ?observed.mismatches,
                "the boundary probe found mismatches (best effort: recorded)");
        }
        let mut runs = self.runs();
        if runs.contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        runs.insert(run.run_id.clone(), sealed);
        tracing::info!(run_id = %run.run_id, "run sealed");
        Ok(observed)
    }

    async fn spawn(
        &self,
        run: &RunContext,
        command: &CommandSpec,
    ) -> Result<Box<dyn Execution>, BoundaryError> {
        const OP: &str = "spawn command";
        spawn_command(self.live(&run.run_id), run, command)
            .await
            .map_err(|e| e.into_boundary(OP))
    }

    fn usage(&self, run: &RunContext) -> workspace_core::evidence::ResourceUsage {
        // The run's own cgroup: its counters are hierarchical, so they hold
        // every command's, service's and background process's.
        self.runs()
            .get(&run.run_id)
            .map(|sealed| sealed.cgroup.usage())
            .unwrap_or_default()
    }

    async fn teardown(&self, run: &RunContext) -> Result<LeakReport, BoundaryError> {
        const OP: &str = "teardown";
        let sealed = self.runs().remove(&run.run_id);
        let run_id = run.run_id.clone();
        let run_dir = run.run_dir.clone();
        let parent = self.options.cgroup_parent.clone();
        let report = blocking("tearing the run down", move || {
            let (layout, cgroup, holder, egress) = match sealed {
                Some(Sealed {
                    cgroup,
                    layout,
                    holder,
                    egress,
                    ..
                }) => (layout, Some(cgroup), holder, egress),
                None => {
                    // Not sealed or attached by this instance (e.g. recovery after
                    // the runner died): find the run's cgroups by the names `seal`
                    // gives them.
                    let layout =
                        CgroupLayout::detect().map_err(|source| ProcessError::Cgroup {
                            step: "detecting the cgroup layout",
                            source,
                        })?;
                    let cgroup = RunCgroup::adopt(&layout, &parent, &run_id).map_err(|source| {
                        ProcessError::Cgroup {
                            step: "finding the cgroups of a run this instance did not seal",
                            source,
                        }
                    })?;
                    if cgroup.is_some() {
                        tracing::info!(run_id = %run_id,
                            "tearing down cgroups left by another instance");
                    }
                    (layout, cgroup.map(Arc::new), None, None)
                }
            };
            let mut processes = Vec::new();
            let mut stopped = 0;
            if let Some(cgroup) = cgroup {
                // What still runs besides the sandbox's pid 1 and the egress
                // proxy (each in a cgroup of its own).
                let own: Vec<u32> = [seal::INIT_CGROUP, egress::EGRESS_CGROUP]
                    .into_iter()
                    .filter_map(|name| cgroup.child(name))
                    .flat_map(|child| child.pids_in_one_hierarchy().unwrap_or_default())
                    .collect();
                stopped = cgroup
                    .pids_in_one_hierarchy()
                    .unwrap_or_default()
                    .iter()
                    .filter(|pid| !own.contains(pid))
                    .count();
                // Its pid 1 first, when this instance holds it: the kernel kills
                // everything in its pid namespace with it, and its reaping is the
                // moment they are all gone (no polling the cgroups meanwhile). A
                // frozen v1 group would keep even a killed pid 1: thaw it first.
                if let Some(mut holder) = holder {
                    if let Err(e) = cgroup.thaw() {
                        tracing::warn!(run_id = %run_id, error = %e, "thawing the run's processes failed");
                    }
                    let reaped = holder.kill().and_then(|()| holder.wait());
                    if let Err(e) = reaped {
                        tracing::warn!(run_id = %run_id, error = %e, "ending the sandbox's pid 1 failed");
                    }
                }
                // Then the whole cgroup: helpers joining it, and everything when
                // another instance sealed the run.
                if let Err(e) = cgroup.kill_all() {
                    tracing::warn!(run_id = %run_id, error = %e, "killing the run's processes failed");
                }
                if let Some(egress) = egress {
                    egress.reap();
                }
                processes = cgroup.pids().unwrap_or_default();
                if let Err(e) = cgroup.remove() {
                    tracing::warn!(run_id = %run_id, error = %e, "removing the run's cgroups failed");
                }
            }
            state::remove(&run_dir)?;
            output::remove(&run_dir)?;
            egress::remove_files(&run_dir);
            let cgroups = leaked_paths(&layout, &parent, &run_id).map_err(|source| {
                ProcessError::Cgroup {
                    step: "looking for the run's cgroups",
                    source,
                }
            })?;
            Ok(LeakReport {
                processes,
                mounts: Vec::new(),
                cgroups,
                stopped: u32::try_from(stopped).unwrap_or(u32::MAX),
            })
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tracing::info!(run_id = %run.run_id, clean = report.is_clean(), "run torn down");
        Ok(report)
    }

    async fn terminate(
        &self,
        run: &RunContext,
        grace: Duration,
    ) -> Result<TerminateReport, BoundaryError> {
        const OP: &str = "terminate";
        let live = self.live(&run.run_id).map_err(|e| e.into_boundary(OP))?;
        let report = blocking("stopping the run's processes", move || {
            terminate::terminate(&live.cgroup, grace)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        tracing::info!(run_id = %run.run_id, signalled = report.signalled, killed = report.killed,
            "the run's processes were asked to stop");
        Ok(report)
    }

    async fn connect(
        &self,
        run: &RunContext,
        port: u16,
    ) -> Result<tokio::net::TcpStream, BoundaryError> {
        const OP: &str = "connect";
        let live = self.live(&run.run_id).map_err(|e| e.into_boundary(OP))?;
        let stream = blocking("connecting into the sandbox", move || {
            in_sandbox::connect(&live.sandbox, port, CONNECT_TIMEOUT)
        })
        .await
        .and_then(|stream| {
            stream
                .set_nonblocking(true)
                .map_err(|source| ProcessError::Connect { port, source })?;
            tokio::net::TcpStream::from_std(stream)
                .map_err(|source| ProcessError::Connect { port, source })
        })
        .map_err(|e| e.into_boundary(OP))?;
        Ok(stream)
    }

    async fn detach(&self, run: &RunContext) -> Result<(), BoundaryError> {
        let Some(sealed) = self.runs().remove(&run.run_id) else {
            return Err(ProcessError::NotSealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary("detach"));
        };
        // Nothing is stopped: the sandbox and its cgroups outlive this handle, and
        // `attach` finds them again from the run's sandbox record.
        sealed.cgroup.release();
        if let Some(holder) = sealed.holder {
            holder.release();
        }
        tracing::info!(run_id = %run.run_id, "run detached; its sandbox stays live");
        Ok(())
    }

    async fn suspend(&self, run: &RunContext) -> Result<Suspension, BoundaryError> {
        const OP: &str = "suspend";
        let Some(sealed) = self.runs().remove(&run.run_id) else {
            return Err(ProcessError::NotSealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        };
        let cgroup = Arc::clone(&sealed.cgroup);
        let frozen = blocking("freezing the run's processes", move || {
            cgroup.freeze().map_err(|source| ProcessError::Cgroup {
                step: "freezing the run's processes",
                source,
            })?;
            Ok(cgroup.pids().unwrap_or_default())
        })
        .await;
        let processes = match frozen {
            Ok(processes) => processes,
            Err(e) => {
                // Not frozen: the run stays sealed here, for the runner to end.
                self.runs().insert(run.run_id.clone(), sealed);
                return Err(e.into_boundary(OP));
            }
        };
        // Frozen in place: let go as detach does; attach thaws them.
        sealed.cgroup.release();
        if let Some(holder) = sealed.holder {
            holder.release();
        }
        tracing::info!(run_id = %run.run_id, processes = processes.len(), "run frozen");
        Ok(Suspension::Frozen { processes })
    }

    async fn attach(&self, run: &RunContext, plan: &SealPlan) -> Result<Attachment, BoundaryError> {
        const OP: &str = "attach";
        if self.runs().contains_key(&run.run_id) {
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        let (run_c, plan_c, options) = (run.clone(), plan.clone(), Arc::clone(&self.options));
        let adopted = blocking("attaching the run's sandbox", move || {
            seal::adopt(&run_c, &plan_c, &options)
        })
        .await
        .map_err(|e| e.into_boundary(OP))?;
        let sealed = match adopted {
            Ok(sealed) => sealed,
            Err(reason) => {
                tracing::warn!(run_id = %run.run_id, %reason, "the run's sandbox is lost");
                return Ok(Attachment::Lost { reason });
            }
        };
        // A suspended run's processes are frozen: they go on from where they were.
        let cgroup = Arc::clone(&sealed.cgroup);
        let thawed = blocking("thawing the run's processes", move || {
            cgroup.thaw().map_err(|source| ProcessError::Cgroup {
                step: "thawing the run's processes",
                source,
            })
        })
        .await;
        if let Err(e) = thawed {
            sealed.cgroup.release();
            return Err(e.into_boundary(OP));
        }
        let processes = sealed.cgroup.pids().unwrap_or_default();
        tracing::info!(run_id = %run.run_id, pid = sealed.sandbox.pid(),
            processes = processes.len(), "run attached to its live sandbox");
        let mut runs = self.runs();
        if runs.contains_key(&run.run_id) {
            sealed.cgroup.release();
            return Err(ProcessError::AlreadySealed {
                run_id: run.run_id.clone(),
            }
            .into_boundary(OP));
        }
        runs.insert(run.run_id.clone(), sealed);
        Ok(Attachment::Live { processes })
    }
}

/// Kills a sandbox that failed its seal and removes its cgroups and record.
fn stop(sealed: Sealed, run_dir: &std::path::Path) {
    if let Err(e) = sealed.cgroup.remove() {
        tracing::warn!(error = %e, "removing the cgroups of a failed seal failed");
    }
    if let Some(mut holder) = sealed.holder {
        let _ = holder.wait();
    }
    if let Err(e) = state::remove(run_dir).and_then(|()| output::remove(run_dir)) {
        tracing::warn!(error = %e, "removing the sandbox record of a failed seal failed");
    }
}

async fn spawn_command(
    live: Result<Live, ProcessError>,
    run: &RunContext,
    command: &CommandSpec,
) -> Result<Box<dyn Execution>, ProcessError> {
    let Live {
        spec,
        cgroup,
        sandbox,
    } = live?;
    command.argv.first().ok_or(ProcessError::EmptyArgv)?;
    let cwd = workdir(&spec.workdir, &command.cwd)?;
    let name = format!(
        "cmd-{}",
        spec.next_command
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    );
    if command.tty && command.output.is_some() {
        return Err(ProcessError::TtyWithOutputFiles);
    }
    let (tree, files) = {
        let (spec, name, tty) = (Arc::clone(&spec), name.clone(), command.tty);
        let output = command.output.clone();
        blocking("preparing the command", move || {
            let tree = cgroup
                .create_child(&name)
                .map_err(|source| ProcessError::Cgroup {
                    step: "creating the command's cgroup",
                    source,
                })?;
            let files = match (tty, output) {
                (true, _) => None,
                (false, Some(output)) => {
                    Some(OutputFiles::create_at(&output.stdout, &output.stderr)?)
                }
                (false, None) => Some(OutputFiles::create(&spec.run_dir, &name)?),
            };
            Ok((tree, files))
        })
        .await?
    };
    let mut request = spec.request(command.argv.clone(), &tree);
    request.cwd = cwd;
    let (streams, followed) = match files {
        None => {
            let pty = Pty::open(sandbox.pid())?;
            let slave = |what| {
                pty.slave
                    .try_clone()
                    .map_err(|source| ProcessError::Pty { step: what, source })
            };
            request.stdin = Some(slave("duplicating the slave for stdin")?);
            request.stdout = Some(slave("duplicating the slave for stdout")?);
            request.stderr = Some(pty.slave);
            request.controlling_terminal = true;
            // What a terminal program asks first (as `docker run -t` sets it),
            // unless the contract declares it.
            if !request.env.iter().any(|(name, _)| name == "TERM") {
                request.env.push(("TERM".into(), "xterm".into()));
            }
            (Streams::Pty(pty.master), None)
        }
        Some(OutputFiles { stdout, stderr }) => {
            let (stdin_read, stdin_write) = seal::pipe("the command's stdin pipe")?;
            request.stdin = Some(stdin_read);
            request.stdout = Some(stdout.0);
            request.stderr = Some(stderr.0);
            (Streams::Stdin(stdin_write), Some((stdout.1, stderr.1)))
        }
    };
    let oom = tree.oom_file().map(EventCounter::oom_kills);
    let forks = tree.pids_events_file().map(EventCounter::forks_refused);
    let program = command.argv.first().cloned().unwrap_or_default();
    let child = blocking("starting the command", move || {
        let child = crate::spawn::join(&sandbox, &request);
        // The parent's copies of the child's ends (the stdin pipe, the pty's slave).
        drop(request);
        child.map_err(|source| ProcessError::not_run(program, source))
    })
    .await?;
    let terminal = streams.hold_terminal()?;
    let (stdin, stdout, stderr) = match followed {
        // Files the runner chose are the output: nothing follows them unless
        // it asks.
        Some(_) if command.output.as_ref().is_some_and(|output| !output.follow) => {
            streams.register()?
        }
        Some((stdout, stderr)) => {
            let ended = |what| {
                child
                    .pidfd()
                    .try_clone_to_owned()
                    .map_err(|source| ProcessError::Pipe { step: what, source })
            };
            let stdout = output::follow(stdout, ended("duplicating the pidfd for stdout")?)?;
            let stderr = output::follow(stderr, ended("duplicating the pidfd for stderr")?)?;
            let (stdin, _, _) = streams.register()?;
            (stdin, stdout, stderr)
        }
        None => streams.register()?,
    };
    let timeout = match (command.timeout_ms, spec.wall_time_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    tracing::info!(run_id = %run.run_id, argv = ?command.argv, tty = command.tty,
        pid = child.pid(), cgroup = %name, "command started");
    Ok(Box::new(NamespaceExecution::new(Parts {
        run_id: run.run_id.clone(),
        child,
        tree: Arc::new(tree),
        stdin,
        stdout,
        stderr,
        timeout: timeout.map(Duration::from_millis),
        oom,
        forks,
        terminal,
    })))
}

/// The parent's ends of a command's stdio, before they are registered with tokio.
enum Streams {
    /// The stdin pipe (stdout and stderr are files, followed by `output.rs`).
    Stdin(OwnedFd),
    /// The master of the command's pseudo-terminal: stdout reads it, stdin
    /// writes it, stderr is empty (the command's stderr is the same terminal).
    Pty(OwnedFd),
}

impl Streams {
    /// A descriptor of the terminal's master that the execution keeps until the
    /// command is reaped (`None` without a terminal). The output stream's own
    /// ends at `EIO`, as soon as the command closes its side, which may be
    /// before it exits; and closing the last master hangs the terminal up,
    /// which sends `SIGHUP` to the command's session.
    fn hold_terminal(&self) -> Result<Option<OwnedFd>, ProcessError> {
        match self {
            Self::Stdin(_) => Ok(None),
            Self::Pty(master) => master
                .try_clone()
                .map(Some)
                .map_err(|source| ProcessError::Pty {
                    step: "duplicating the master to hold it",
                    source,
                }),
        }
    }

    fn register(self) -> Result<(InputStream, OutputStream, OutputStream), ProcessError> {
        let pipe_err = |step| move |source| ProcessError::Pipe { step, source };
        match self {
            Self::Stdin(stdin) => {
                let stdin = tokio::net::unix::pipe::Sender::from_owned_fd(stdin)
                    .map_err(pipe_err("registering the command's stdin"))?;
                Ok((
                    Box::pin(stdin),
                    Box::pin(tokio::io::empty()),
                    Box::pin(tokio::io::empty()),
                ))
            }
            Self::Pty(master) => {
                let pty_err = |step| move |source| ProcessError::Pty { step, source };
                let input = master
                    .try_clone()
                    .map_err(pty_err("duplicating the master for stdin"))?;
                let stdin =
                    PtyWriter::new(input).map_err(pty_err("registering the master for stdin"))?;
                let stdout =
                    PtyReader::new(master).map_err(pty_err("registering the master for stdout"))?;
                Ok((
                    Box::pin(stdin),
                    Box::pin(stdout),
                    Box::pin(tokio::io::empty()),
                ))
            }
        }
    }
}

/// `root` joined with the workspace-relative `cwd` (`"."` is the root).
fn workdir(root: &str, cwd: &str) -> Result<String, ProcessError> {
    let bad = || ProcessError::BadCwd {
        cwd: cwd.to_owned(),
    };
    if cwd.starts_with('/') {
        return Err(bad());
    }
    let mut path = root.trim_end_matches('/').to_owned();
    for part in cwd.split('/').filter(|p| !p.is_empty() && *p != ".") {
        if part == ".." || part.contains('\0') {
            return Err(bad());
        }
        path.push('/');
        path.push_str(part);
    }
    if path.is_empty() {
        path.push('/');
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cwd_stays_under_the_root() {
        let ok = |cwd| workdir("/workspace", cwd).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok("."), "/workspace");
        assert_eq!(ok(""), "/workspace");
        assert_eq!(ok("./src//lib/"), "/workspace/src/lib");
        assert!(workdir("/workspace", "../etc").is_err());
        assert!(workdir("/workspace", "a/../../b").is_err());
        assert!(workdir("/workspace", "/etc").is_err());
    }
}
