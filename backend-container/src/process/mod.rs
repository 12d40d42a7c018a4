//! [`ContainerProcess`]: the Process boundary through an OCI runtime, one live
//! container per workspace.
//!
//! * **seal**: the checkout handed over to the run's host ids, the core mount
//!   plan built and written as a bundle ([`crate::bundle`]), the container
//!   created and started with a small reaper as its pid 1 (its own user,
//!   mount, pid, network, UTS, IPC and cgroup namespaces; the run's limits on
//!   its cgroup), then the set-id check (`set_id_check`: `fchmodat2` with a
//!   set-id mode and `openat2` tried in the container, which the runtime's
//!   filter must refuse, or the seal fails naming the runtime) and the
//!   boundary probe (`probe`): a shell in the
//!   container observed from the host and held to core's
//!   [`observation`](workspace_core::observation) standard. With
//!   `environment.assurance = "required"` a mismatch fails closed (the
//!   container is removed).
//! * **spawn**: `exec --detach` into a cgroup of the command's own
//!   (`cmd-<n>`), its streams this side's pipes, its status through a pipe of
//!   its own (`exec`); what a command leaves in the background runs on in
//!   the container. A timeout or a kill ends the command's cgroup, not the
//!   container.
//! * **detach / attach**: the container does not need its runner; a later
//!   runner finds it by id in this backend's state directory. **suspend**
//!   pauses it (the cgroup freezer), attaching resumes it.
//! * **teardown**: every process killed, the command cgroups and the container
//!   deleted, then proof: no runtime state, no cgroup directory, no process.
//!
//! Not kept (refused before anything is created, naming the field): preview
//! ports without a forwarder (`process.ports`), terminals (`tty`), layered
//! checkouts, and a read-write host mount whose directory the container's
//! host uid does not own (`refusals`).

mod boundary;
mod cgroups;
mod exec;
mod migration_lock;
mod output;
mod pipe_read;
pub mod preview;
mod probe;
mod runtime_child;
mod seal;
mod set_id_check;

use std::collections::HashMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use workspace_core::RunId;
use workspace_core::boundary::{LeakReport, OutputKeepers, RunDisks};
use workspace_core::mount_plan::{HostLayout, probe_host_layout};

use crate::error::ContainerError;
use crate::image::ImageStore;
use crate::runtime::Runtime;
use cgroups::ContainerCgroups;
use seal::Live;

/// The host id the container's root maps to (id `n` of the run maps to base +
/// `n`), unless `AGENT_WORKSPACE_HOST_ID_BASE` says otherwise.
pub use workspace_core::subordinate::DEFAULT_HOST_ID_BASE;
/// How long the boundary probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// How long a network connection into a run may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long the processes of a killed container may take to go.
const TEARDOWN_WAIT: Duration = Duration::from_secs(5);

/// How the container backend runs.
#[derive(Clone, Debug)]
pub struct ContainerOptions {
    /// The OCI runtime, with this backend's state directory.
    pub runtime: Runtime,
    /// The cgroup directory (relative, e.g. `agent-workspace`) the containers'
    /// cgroups are made in, in every hierarchy.
    pub cgroup_parent: String,
    /// The host id the container's root maps to (see [`DEFAULT_HOST_ID_BASE`]).
    pub host_id_base: u32,
    /// The host's base system and `/etc` files passed through.
    pub host: HostLayout,
    /// How long the boundary probe may take.
    pub probe_timeout: Duration,
    /// Where images are unpacked, once per host.
    pub images: ImageStore,
    /// The program that forwards preview ports ([`preview`]); `None` refuses
    /// `process.ports` (nothing would publish them).
    pub preview_forwarder: Option<std::path::PathBuf>,
    /// What makes a run's capped disk (`environment.limits.disk`) under its
    /// directory, which the container's checkout and templates then live on;
    /// `None` refuses the cap.
    pub disks: Option<Arc<dyn RunDisks>>,
    /// What keeps the commands' output ([`OutputKeepers`]): each command's
    /// stdout and stderr are pipes a keeper copies into the runner's files,
    /// in the container's `output` cgroup, so that nothing a process does to
    /// its descriptor after a write takes the write back. `None`: the command
    /// writes to the files itself (and may truncate or overwrite them).
    pub output_keepers: Option<Arc<dyn OutputKeepers>>,
}

impl ContainerOptions {
    /// Options for `runtime` with `cgroup_parent`, [`DEFAULT_HOST_ID_BASE`],
    /// this host's layout, [`PROBE_TIMEOUT`] and the image cache `images`
    /// beside the runtime's state directory.
    ///
    /// # Ambient authority
    /// Looks at the host's root directory.
    pub fn probe(
        runtime: Runtime,
        cgroup_parent: impl Into<String>,
    ) -> Result<Self, ContainerError> {
        // Beside the runtime's state: `<runtime dir>/images`.
        let images = runtime.root().with_file_name("images");
        let host = probe_host_layout().map_err(|e| ContainerError::Lost {
            what: format!("looking at the host's base system: {e}"),
        })?;
        // The runtime maps the container's ids to host ids of their own, and
        // hands the checkout over to them: root's work.
        if !nix::unistd::geteuid().is_root() {
            return Err(ContainerError::Unsupported {
                setting: "the container backend for an ordinary user (the runtime maps containers to host ids of their own and hands them the checkout, which needs root); use the namespace backend".into(),
            });
        }
        let host_id_base = workspace_core::subordinate::host_id_base();
        if let Some(claimed) = workspace_core::subordinate::claimed_ranges(host_id_base).pop() {
            return Err(ContainerError::HostIdsClaimed {
                base: host_id_base,
                claimed,
            });
        }
        Ok(Self {
            runtime,
            cgroup_parent: cgroup_parent.into(),
            host_id_base,
            host,
            probe_timeout: PROBE_TIMEOUT,
            images: ImageStore::new(images),
            preview_forwarder: None,
            disks: None,
            output_keepers: None,
        })
    }
}

pub use seal::reachable_by;

/// Whether the run whose private directory is `run_dir` was sealed by this
/// backend (its bundle's state is there): a later process drives it with this
/// backend again.
pub fn sealed_in(run_dir: &Path) -> bool {
    seal::state_file(run_dir).is_file()
}

/// The runtime program that made the container of the run whose private
/// directory is `run_dir` (`None` if it recorded none): a later process drives
/// it with that runtime again.
pub fn sealed_runtime(run_dir: &Path) -> Option<std::path::PathBuf> {
    seal::sealed_runtime(run_dir)
}

/// The Process boundary of the container backend (see the [module docs](self)).
#[derive(Debug)]
pub struct ContainerProcess {
    options: Arc<ContainerOptions>,
    runs: Mutex<HashMap<RunId, Arc<Live>>>,
}

impl ContainerProcess {
    /// A boundary driving containers with `options`.
    pub fn new(options: ContainerOptions) -> Self {
        Self {
            options: Arc::new(options),
            runs: Mutex::new(HashMap::new()),
        }
    }

    fn runs(&self) -> MutexGuard<'_, HashMap<RunId, Arc<Live>>> {
        self.runs.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn live(&self, run: &RunId) -> Result<Arc<Live>, ContainerError> {
        self.runs()
            .get(run)
            .cloned()
            .ok_or_else(|| ContainerError::NotSealed {
                run_id: run.clone(),
            })
    }
}

/// Runs `work` on a blocking thread.
async fn blocking<T: Send + 'static>(
    step: &'static str,
    work: impl FnOnce() -> Result<T, ContainerError> + Send + 'static,
) -> Result<T, ContainerError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|_| ContainerError::ThreadPanicked { step })?
}

/// Kills, deletes and removes everything of container `id` (blocking); what
/// is left afterwards.
fn remove(
    options: &ContainerOptions,
    id: &str,
    cgroups_path: &str,
    bundle: &Path,
) -> Result<LeakReport, ContainerError> {
    let runtime = &options.runtime;
    let cgroups = ContainerCgroups::of(cgroups_path);
    // What ran besides the container's own pid 1 and its reaper's sleep:
    // commands, services and what they left behind.
    let stopped = cgroups
        .children()
        .iter()
        .filter(|name| *name != preview::PREVIEW_CGROUP && *name != output::OUTPUT_CGROUP)
        .map(|name| cgroups.child(name).pids().len())
        .sum::<usize>();
    let state = runtime.state(id)?;
    if let Some(status) = &state {
        if status.paused {
            runtime.resume(id)?;
        }
        // The commands' processes first, so that their output keepers copy
        // what the pipes still hold before the rest is killed.
        output::settle(&cgroups, options.output_keepers.as_deref());
        // Already stopped (its pid 1 ended) is fine: delete follows.
        let _ = runtime.kill_all(id, "KILL");
        let deadline = Instant::now() + TEARDOWN_WAIT;
        while !cgroups.pids().is_empty() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
        // Deleted once the runtime sees it stopped: a forced delete of a
        // container it still sees running signals it and looks again every
        // 100 ms, until the host's init has reaped its pid 1.
        while Instant::now() < deadline
            && runtime
                .state(id)?
                .is_some_and(|s| s.state.status() != &oci_spec::runtime::ContainerState::Stopped)
        {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let mut errors = cgroups.remove_children();
    if state.is_some()
        && let Err(e) = runtime.delete(id)
    {
        errors.push(e);
    }
    for error in &errors {
        tracing::warn!(container = id, error = %error, "removing the container");
    }
    let processes = cgroups.pids();
    let left = cgroups.existing();
    if runtime.state(id)?.is_some() {
        return Err(ContainerError::Lost {
            what: format!(
                "container {id} is still known to {} after delete",
                runtime.name()
            ),
        });
    }
    let mut mounts = Vec::new();
    if !seal::release_root(bundle) {
        mounts.push(bundle.join(crate::bundle::ROOTFS_DIR));
    } else if bundle.exists() {
        std::fs::remove_dir_all(bundle)
            .map_err(ContainerError::io("removing the bundle", bundle))?;
    }
    Ok(LeakReport {
        processes,
        mounts,
        cgroups: left,
        stopped: u32::try_from(stopped).unwrap_or(u32::MAX),
    })
}
