//! What `seal` does on blocking threads: the run's cgroups, the mount plan, the
//! sandbox's pid 1, the probe inside.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{Ipv4Addr, TcpListener};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use nix::libc;
use workspace_core::boundary::{
    ObservedBoundary, PreviewEndpoint, ResolvedLimits, RunContext, SealPlan,
};
use workspace_core::mount_plan::{MountPlan, PlanInputs};

use super::error::ProcessError;
use super::handover::{HandoverOutcome, hand_over};
use super::observe::{self, Expected};
use super::{ProcessOptions, state, workspace};
use crate::cgroup::{CgroupLayout, RunCgroup};
use crate::spawn::{
    JoinRequest, Pid1, Published, ResourceLimits, Sandbox, SpawnError, SpawnRequest, SpawnedChild,
    join, spawn,
};

/// What every command of a sealed run starts from.
pub(crate) struct RunSpec {
    /// Where commands start: the workspace root inside.
    pub(crate) workdir: String,
    /// The run's private directory on the host (command output files).
    pub(crate) run_dir: PathBuf,
    /// The plan's variables and the injected credentials (values never printed).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    /// `environment.limits.wall_time` in milliseconds.
    pub(crate) wall_time_ms: Option<u64>,
    /// The rlimits every command starts with.
    pub(crate) rlimits: ResourceLimits,
    /// The number of the next command's cgroup (`cmd-<n>`).
    pub(crate) next_command: AtomicU32,
}

impl fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSpec")
            .field("workdir", &self.workdir)
            .field(
                "env_names",
                &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("uid", &self.uid)
            .finish_non_exhaustive()
    }
}

impl RunSpec {
    /// The spec of `plan`'s commands for `identity`.
    fn new(run: &RunContext, plan: &SealPlan, workdir: String) -> Self {
        let mut env: Vec<(String, String)> = plan
            .environment
            .vars
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        for credential in &plan.identity.credentials {
            env.retain(|(k, _)| *k != credential.name);
            env.push((
                credential.name.clone(),
                credential.expose_value().to_owned(),
            ));
        }
        Self {
            workdir,
            run_dir: run.run_dir.clone(),
            env,
            uid: plan.identity.uid,
            gid: plan.identity.gid,
            wall_time_ms: plan.environment.limits.wall_time_ms,
            rlimits: rlimits(&plan.environment.limits),
            next_command: AtomicU32::new(1),
        }
    }

    /// A request for `argv` in this run joining `cgroup`, cwd and stdio left to
    /// the caller.
    pub(crate) fn request(&self, argv: Vec<String>, cgroup: &RunCgroup) -> JoinRequest {
        let mut request = JoinRequest::new(argv, self.workdir.clone());
        request.env = self.env.clone();
        request.uid = self.uid;
        request.gid = self.gid;
        request.cgroup_procs = cgroup
            .paths()
            .into_iter()
            .map(|p| p.join("cgroup.procs"))
            .collect();
        request.rlimits = self.rlimits;
        request
    }
}

/// A sealed run: its live sandbox, what its commands start from, its cgroups.
#[derive(Debug)]
pub(crate) struct Sealed {
    pub(crate) spec: Arc<RunSpec>,
    pub(crate) cgroup: Arc<RunCgroup>,
    pub(crate) layout: CgroupLayout,
    pub(crate) sandbox: Arc<Sandbox>,
    /// The sandbox's pid 1 when this instance started it (reaped at teardown).
    pub(crate) holder: Option<SpawnedChild>,
    /// Each directory handed over to the run's identity, with what was done.
    pub(crate) handover: Vec<(PathBuf, HandoverOutcome)>,
    /// The digest of the mount plan applied (for the evidence).
    pub(crate) mount_plan_sha256: String,
    /// The published ports' host ends, as bound.
    pub(crate) previews: Vec<PreviewEndpoint>,
}

/// The host ids of the run's identity.
fn host_ids(plan: &SealPlan, options: &ProcessOptions) -> Result<(u32, u32), ProcessError> {
    let host_id = |id: u32| {
        options
            .host_id_base
            .checked_add(id)
            .ok_or_else(|| ProcessError::Plan {
                problems: format!("host id base {} + id {id} overflows", options.host_id_base),
            })
    };
    Ok((host_id(plan.identity.uid)?, host_id(plan.identity.gid)?))
}

/// Creates the run's cgroups, builds its plan and starts its sandbox (blocking).
pub(crate) fn prepare(
    run: &RunContext,
    plan: &SealPlan,
    options: &ProcessOptions,
) -> Result<Sealed, ProcessError> {
    let identity = &plan.identity;
    let (host_uid, host_gid) = host_ids(plan, options)?;

    // What the run may write becomes the run's own (see `handover.rs`): the whole
    // checkout, or a layered checkout's upper and work directories only. The lower
    // layer is shared by every run of the commit and stays exactly as it is: each
    // command's spawn shows it through an idmapped mount in which its owner is the
    // run's (`spawn/idmapped.rs`), so tracked files can be copied up.
    let writable: Vec<&Path> = match &plan.source.layers {
        Some(layers) => vec![layers.upper.as_path(), layers.work.as_path()],
        None => vec![plan.source.workspace.as_path()],
    };
    let mut handover = Vec::with_capacity(writable.len());
    for dir in writable {
        let outcome = hand_over(dir, host_uid, host_gid)?;
        tracing::info!(run_id = %run.run_id, dir = %dir.display(), changed = outcome.changed,
            other_mounts = outcome.other_mounts.len(), hard_links = outcome.hard_links.len(),
            "workspace handed over to the run's identity");
        handover.push((dir.to_path_buf(), outcome));
    }

    let (trees, checkout): (Vec<&Path>, &Path) = match &plan.source.layers {
        Some(layers) => (
            vec![layers.lower.as_path(), layers.upper.as_path()],
            layers.upper.as_path(),
        ),
        None => (
            vec![plan.source.workspace.as_path()],
            plan.source.workspace.as_path(),
        ),
    };
    let excluded = workspace::excluded_paths(&trees, &run.contract.filesystem.excluded)?;
    let source_objects = workspace::source_objects(checkout);
    let mount_plan = MountPlan::build(&PlanInputs {
        contract: &run.contract,
        run_id: &run.run_id,
        source: &plan.source,
        source_objects: source_objects.as_deref(),
        identity,
        host: &options.host,
        excluded: &excluded,
        // Every run gets a devpts instance of its own, so a command may ask for a
        // terminal (`tty = true`) and a run may open terminals of its own.
        pty: true,
    })
    .map_err(|problems| ProcessError::Plan {
        problems: problems.to_string(),
    })?;

    let layout = CgroupLayout::detect().map_err(|source| ProcessError::Cgroup {
        step: "detecting the cgroup layout",
        source,
    })?;
    let cgroup = RunCgroup::create(
        &layout,
        &options.cgroup_parent,
        &run.run_id,
        &plan.environment.limits,
    )
    .map_err(|source| ProcessError::Cgroup {
        step: "creating the run's cgroups",
        source,
    })?;
    let spec = RunSpec::new(run, plan, mount_plan.workdir.clone());
    let mount_plan_sha256 =
        workspace_core::digest::sha256_hex(&serde_json::to_vec(&mount_plan).unwrap_or_default());
    let init = cgroup
        .create_child(INIT_CGROUP)
        .map_err(|source| ProcessError::Cgroup {
            step: "creating the cgroup of the sandbox's pid 1",
            source,
        })?;
    let mut request = SpawnRequest::new(mount_plan, Vec::new());
    request.pid1 = Pid1::HoldSandbox;
    request.cwd = "/".into();
    request.uid = identity.uid;
    request.gid = identity.gid;
    request.host_uid = host_uid;
    request.host_gid = host_gid;
    request.rlimits = spec.rlimits;
    request.cgroup_procs = init
        .paths()
        .into_iter()
        .map(|p| p.join("cgroup.procs"))
        .collect();
    let previews = publish(&run.contract.process.ports, &mut request)?;
    let holder = spawn(&request).map_err(|source| ProcessError::Spawn {
        step: "starting the sandbox",
        source,
    })?;
    let sandbox = Sandbox::of(&holder).map_err(|source| ProcessError::Spawn {
        step: "opening the sandbox",
        source,
    })?;
    state::write(
        &run.run_dir,
        &state::SandboxState {
            pid: holder.pid(),
            workdir: spec.workdir.clone(),
            mount_plan_sha256: mount_plan_sha256.clone(),
            previews: previews.clone(),
        },
    )?;
    tracing::info!(run_id = %run.run_id, pid = holder.pid(), "sandbox started");
    Ok(Sealed {
        spec: Arc::new(spec),
        cgroup: Arc::new(cgroup),
        layout,
        sandbox: Arc::new(sandbox),
        holder: Some(holder),
        handover,
        mount_plan_sha256,
        previews,
    })
}

/// Binds a listener on the host's loopback for each port of `ports` (the kernel
/// picks a free port, which stays the run's while the socket is bound: no other
/// process can take it) and hands them to the sandbox's pid 1 to forward.
fn publish(
    ports: &[u16],
    request: &mut SpawnRequest,
) -> Result<Vec<PreviewEndpoint>, ProcessError> {
    let mut previews = Vec::with_capacity(ports.len());
    for &port in ports {
        let io = |source| ProcessError::Connect { port, source };
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(io)?;
        listener.set_nonblocking(true).map_err(io)?;
        // Read back from the socket: the address it is bound to.
        let host = listener.local_addr().map_err(io)?;
        previews.push(PreviewEndpoint { port, host });
        request.publish.push(Published {
            listener: listener.into(),
            port,
        });
    }
    Ok(previews)
}

/// The name of the cgroup the sandbox's pid 1 lives in, below the run's.
pub(crate) const INIT_CGROUP: &str = "init";

/// Takes over the live sandbox of a run sealed by another instance (blocking);
/// `Ok(Err(reason))` when nothing of it runs any more.
pub(crate) fn adopt(
    run: &RunContext,
    plan: &SealPlan,
    options: &ProcessOptions,
) -> Result<Result<Sealed, String>, ProcessError> {
    let Some(saved) = state::read(&run.run_dir)? else {
        return Ok(Err("no sandbox was recorded for the run".into()));
    };
    let sandbox = match Sandbox::open(saved.pid) {
        Ok(sandbox) => sandbox,
        Err(e) => {
            return Ok(Err(format!(
                "the sandbox's pid 1 (pid {}) is gone: {e}",
                saved.pid
            )));
        }
    };
    // The pidfd names one process for good; it is this run's pid 1 if it lives in
    // the run's init cgroup (a pid reused by another process would not).
    let suffix = format!(
        "/{}/{}/{INIT_CGROUP}",
        options.cgroup_parent.trim_matches('/'),
        run.run_id
    );
    let cgroups =
        std::fs::read_to_string(format!("/proc/{}/cgroup", saved.pid)).unwrap_or_default();
    if !cgroups.lines().any(|line| line.ends_with(&suffix)) || !sandbox.is_alive() {
        return Ok(Err(format!(
            "pid {} is no longer the run's sandbox",
            saved.pid
        )));
    }
    let layout = CgroupLayout::detect().map_err(|source| ProcessError::Cgroup {
        step: "detecting the cgroup layout",
        source,
    })?;
    let Some(cgroup) =
        RunCgroup::adopt(&layout, &options.cgroup_parent, &run.run_id).map_err(|source| {
            ProcessError::Cgroup {
                step: "finding the run's cgroups",
                source,
            }
        })?
    else {
        return Ok(Err("the run's cgroups are gone".into()));
    };
    let spec = RunSpec::new(run, plan, saved.workdir);
    let next = cgroup
        .children()
        .unwrap_or_default()
        .iter()
        .filter_map(|name| name.strip_prefix("cmd-")?.parse::<u32>().ok())
        .max()
        .unwrap_or(0);
    spec.next_command.store(next + 1, Ordering::Relaxed);
    Ok(Ok(Sealed {
        spec: Arc::new(spec),
        cgroup: Arc::new(cgroup),
        layout,
        sandbox: Arc::new(sandbox),
        holder: None,
        handover: Vec::new(),
        mount_plan_sha256: saved.mount_plan_sha256,
        previews: saved.previews,
    }))
}

/// The rlimit baseline of a run's commands: `RLIMIT_NOFILE` = `limits.open_files`,
/// `RLIMIT_CORE` = 0, and `RLIMIT_FSIZE` = `limits.disk_bytes`.
///
/// The file-size cap is the disk cap on purpose: no single file can be larger than
/// the whole disk budget, and this is the part of `limits.disk` a process limit can
/// enforce (the total over many files needs a quota, which this backend does not
/// set). Without `limits.disk` the size stays as the runner has it (unlimited in
/// practice).
pub(crate) fn rlimits(limits: &ResolvedLimits) -> ResourceLimits {
    ResourceLimits {
        open_files: limits.open_files.map(u64::from),
        core_bytes: Some(0),
        file_size_bytes: limits.disk_bytes,
    }
}

/// What the probe must observe in `plan`'s run.
pub(crate) fn expected(run: &RunContext, plan: &SealPlan) -> Expected {
    let mut env_names: BTreeSet<String> = plan.environment.vars.keys().cloned().collect();
    env_names.extend(plan.identity.credentials.iter().map(|c| c.name.clone()));
    Expected {
        uid: plan.identity.uid,
        gid: plan.identity.gid,
        hostname: run.run_id.to_string(),
        env_names,
        toolchain: run.contract.environment.runtime.toolchain.clone(),
    }
}

/// Runs the probe ([`observe::probe_script`]) in the run and compares what it saw (blocking). The
/// probe's setup, output and exit together get `timeout` (the options'
/// [`PROBE_TIMEOUT`](super::PROBE_TIMEOUT) by default); after that it is killed
/// and the seal fails with [`ProcessError::ProbeTimeout`].
pub(crate) fn probe(
    sealed: &Sealed,
    expected: &Expected,
    timeout: Duration,
) -> Result<ObservedBoundary, ProcessError> {
    let deadline = Instant::now() + timeout;
    let after_ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
    let (read, write) = pipe("the probe's stdout pipe")?;
    let script = observe::probe_script(expected.toolchain.as_deref());
    let cgroup = sealed
        .cgroup
        .create_child("probe")
        .map_err(|source| ProcessError::Cgroup {
            step: "creating the probe's cgroup",
            source,
        })?;
    let mut request = sealed
        .spec
        .request(vec!["/bin/sh".into(), "-c".into(), script], &cgroup);
    request.stdout = Some(write);
    request.setup_timeout = timeout;
    let child = join(&sealed.sandbox, &request);
    drop(request);
    let mut child: SpawnedChild = child.map_err(|source| match source {
        SpawnError::SetupTimeout { .. } => ProcessError::ProbeTimeout { after_ms },
        source => ProcessError::Spawn {
            step: "starting the boundary probe",
            source,
        },
    })?;
    let output = match read_until(read, deadline) {
        Ok(Some(output)) => output,
        Ok(None) => return Err(kill_probe(child, after_ms)),
        Err(source) => {
            let _ = child.kill();
            return Err(ProcessError::Pipe {
                step: "reading the probe's output",
                source,
            });
        }
    };
    if !wait_pidfd(child.pidfd(), deadline) {
        return Err(kill_probe(child, after_ms));
    }
    let status = child.wait().map_err(|source| ProcessError::Spawn {
        step: "waiting for the boundary probe",
        source,
    })?;
    let mut observed = observe::observe(&output, expected);
    observed.facts.insert(
        "probe_status".into(),
        serde_json::json!(format!("{status:?}")),
    );
    // What was applied, as one digest a reviewer can compare across runs.
    observed.facts.insert(
        "mount_plan_sha256".into(),
        serde_json::json!(sealed.mount_plan_sha256),
    );
    Ok(observed)
}

/// Kills the probe's pid namespace and reaps it; the timeout error.
fn kill_probe(mut child: SpawnedChild, after_ms: u64) -> ProcessError {
    tracing::warn!(
        pid = child.pid(),
        after_ms,
        "the boundary probe timed out; killing it"
    );
    if let Err(e) = child.kill() {
        tracing::warn!(error = %e, "killing the boundary probe failed");
    }
    if let Err(e) = child.wait() {
        tracing::warn!(error = %e, "reaping the boundary probe failed");
    }
    ProcessError::ProbeTimeout { after_ms }
}

/// Everything `read` gives until EOF (at most 1 MiB kept), or `None` when
/// `deadline` passes first.
fn read_until(read: OwnedFd, deadline: Instant) -> std::io::Result<Option<String>> {
    let mut output = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        if !poll_in(read.as_fd(), deadline)? {
            return Ok(None);
        }
        match nix::unistd::read(read.as_fd(), &mut buf) {
            Ok(0) => break,
            Ok(n) => {
                let keep = n.min((1usize << 20).saturating_sub(output.len()));
                output.extend_from_slice(&buf[..keep]);
            }
            Err(nix::errno::Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(Some(String::from_utf8_lossy(&output).into_owned()))
}

/// Whether the pidfd says the process ended before `deadline`.
fn wait_pidfd(pidfd: BorrowedFd<'_>, deadline: Instant) -> bool {
    poll_in(pidfd, deadline).unwrap_or(false)
}

/// Waits until `fd` is readable (or hung up); `false` when `deadline` passed.
fn poll_in(fd: BorrowedFd<'_>, deadline: Instant) -> std::io::Result<bool> {
    use std::os::fd::AsRawFd;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let ms = libc::c_int::try_from(left.as_millis().max(1)).unwrap_or(libc::c_int::MAX);
        let mut pollfd = libc::pollfd {
            fd: fd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd struct for a descriptor borrowed for the call.
        let ready = unsafe { libc::poll(&mut pollfd, 1, ms) };
        if ready > 0 {
            return Ok(true);
        }
        if ready < 0 {
            let error = std::io::Error::last_os_error();
            if error.kind() != std::io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe(step: &'static str) -> Result<(OwnedFd, OwnedFd), ProcessError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| ProcessError::Pipe {
        step,
        source: errno.into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pipe_that_never_ends_times_out() {
        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"partial").unwrap_or_else(|e| panic!("{e}"));
        let started = Instant::now();
        let got = read_until(read, started + Duration::from_millis(200))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got, None, "a writer still open: no EOF, so a timeout");
        assert!(started.elapsed() >= Duration::from_millis(200));
        assert!(started.elapsed() < Duration::from_secs(5));
        drop(write);

        let (read, write) = pipe("a test pipe").unwrap_or_else(|e| panic!("{e}"));
        nix::unistd::write(&write, b"all of it").unwrap_or_else(|e| panic!("{e}"));
        drop(write);
        let got = read_until(read, Instant::now() + Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(got.as_deref(), Some("all of it"));
    }

    #[test]
    fn the_file_size_cap_is_the_disk_cap_and_core_dumps_are_off() {
        let limits = ResolvedLimits {
            open_files: Some(256),
            disk_bytes: Some(1 << 30),
            ..ResolvedLimits::default()
        };
        assert_eq!(
            rlimits(&limits),
            ResourceLimits {
                open_files: Some(256),
                core_bytes: Some(0),
                file_size_bytes: Some(1 << 30),
            }
        );
        assert_eq!(
            rlimits(&ResolvedLimits::default()),
            ResourceLimits::default()
        );
    }
}
