//! What `seal` does on blocking threads: the run's cgroups, the mount plan, the
//! sandbox's pid 1, the probe inside.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use workspace_core::boundary::{PreviewEndpoint, RunContext, SealPlan};
use workspace_core::contract::{Contract, NetworkMode};
use workspace_core::mount_plan::{
    MountPlan, PlanInputs, excluded_paths_kept, excluded_paths_layered,
};

use super::egress::{self, EgressProxy};
use super::error::ProcessError;
use super::handover::{HandoverOutcome, hand_over};
use super::probe_shell::{ProbeEnds, ProbeShell};
use super::spec::RunSpec;
use super::{ProcessOptions, state};
use crate::cgroup::{CgroupLayout, RunCgroup};
use crate::spawn::{Pid1, Published, Sandbox, SpawnRequest, SpawnedChild, spawn};
use workspace_core::observation::Expected;

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
    /// The applied plan's mount points, with whether each is read-only (what
    /// the probe reads back).
    pub(crate) mount_points: Vec<workspace_core::mount_plan::MountPoint>,
    /// Each host mount's path as the contract named it and as it was bound.
    pub(crate) host_mounts: Vec<ResolvedHostMount>,
    /// The egress proxy this instance started (an allowlisted run).
    pub(crate) egress: Option<EgressProxy>,
}

/// A host mount's source, resolved once before the plan is built: a grant
/// through a symbolic link (a rustup toolchain, a `current` release link) binds
/// what the link named at seal time, and the evidence shows both paths.
#[derive(Clone, Debug, serde::Serialize)]
pub(crate) struct ResolvedHostMount {
    /// Where it appears inside.
    pub(crate) target: String,
    /// The host path as the contract named it.
    pub(crate) host: PathBuf,
    /// The path bound (no symbolic link on it).
    pub(crate) resolved: PathBuf,
}

/// The contract the plan is built from, its host mounts' sources resolved;
/// and what each was resolved to.
fn resolve_host_mounts(
    contract: &Contract,
) -> Result<(Contract, Vec<ResolvedHostMount>), ProcessError> {
    let mut resolved_contract = contract.clone();
    let mut resolved = Vec::with_capacity(contract.filesystem.host_mounts.len());
    for mount in &mut resolved_contract.filesystem.host_mounts {
        let host = PathBuf::from(&mount.host);
        let path = std::fs::canonicalize(&host).map_err(|source| ProcessError::Io {
            step: "resolving a host mount's source",
            path: host.clone(),
            source,
        })?;
        mount.host = path.to_string_lossy().into_owned();
        resolved.push(ResolvedHostMount {
            target: mount.target.clone(),
            host,
            resolved: path,
        });
    }
    Ok((resolved_contract, resolved))
}

/// The host ids of the run's identity.
pub(crate) fn host_ids(
    plan: &SealPlan,
    options: &ProcessOptions,
) -> Result<(u32, u32), ProcessError> {
    options.host_ids.of(plan.identity.uid, plan.identity.gid)
}

/// Creates the run's cgroups, builds its plan and starts its sandbox (blocking).
pub(crate) fn prepare(
    run: &RunContext,
    plan: &SealPlan,
    options: &ProcessOptions,
) -> Result<(Sealed, Option<ProbeShell>), ProcessError> {
    let identity = &plan.identity;
    let (host_uid, host_gid) = host_ids(plan, options)?;

    // What the run may write becomes the run's own (see `handover.rs`): the whole
    // checkout, or a layered checkout's upper and work directories only. The lower
    // layer is shared by every run of the commit and stays exactly as it is: each
    // command's spawn shows it through an idmapped mount in which its owner is the
    // run's (`spawn/idmapped.rs`), so tracked files can be copied up.
    // The same for each service template's layer of the run's own (the
    // template itself is shared and shown through an idmapped mount when it is
    // not the run's already).
    let mut writable: Vec<&Path> = match &plan.source.layers {
        Some(layers) => vec![layers.upper.as_path(), layers.work.as_path()],
        None => vec![plan.source.workspace.as_path()],
    };
    for layer in &plan.templates {
        writable.extend([layer.upper.as_path(), layer.work.as_path()]);
    }
    // An ordinary user's runs are that user on the host: what they may write
    // is the caller's own already, and there is nothing to hand over.
    if needs_door(options) {
        writable.clear();
    }
    let mut handover = Vec::with_capacity(writable.len());
    for dir in writable {
        let outcome = hand_over(dir, host_uid, host_gid)?;
        tracing::info!(run_id = %run.run_id, dir = %dir.display(), changed = outcome.changed,
            other_mounts = outcome.other_mounts.len(), hard_links = outcome.hard_links.len(),
            "workspace handed over to the run's identity");
        handover.push((dir.to_path_buf(), outcome));
    }

    let patterns = &run.contract.filesystem.excluded;
    let excluded = match &plan.source.layers {
        Some(layers) => excluded_paths_layered(&layers.lower, &layers.upper, patterns)?,
        // A copy the run writes in place: what its first seal excluded stays
        // excluded wherever the run moved it.
        None => excluded_paths_kept(&run.run_dir, &plan.source.workspace, patterns)?,
    };
    // What the Source boundary recorded, never the checkout's own `alternates`
    // (the agent may have pointed it at any host directory).
    let source_objects = plan.source.objects.clone().filter(|dir| dir.is_dir());
    let (contract, host_mounts) = resolve_host_mounts(&run.contract)?;
    let mount_plan = MountPlan::build(&PlanInputs {
        contract: &contract,
        run_id: &run.run_id,
        source: &plan.source,
        source_objects: source_objects.as_deref(),
        identity,
        host: &options.host,
        excluded: &excluded,
        // Every run gets a devpts instance of its own, so a command may ask for a
        // terminal (`tty = true`) and a run may open terminals of its own.
        pty: true,
        templates: &plan.templates,
    })
    .map_err(|problems| ProcessError::Plan { problems })?;

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
    let mount_points = mount_plan.mount_points();
    let mount_plan_sha256 =
        workspace_core::digest::sha256_hex(&serde_json::to_vec(&mount_plan).unwrap_or_default());
    let init = cgroup
        .create_child(INIT_CGROUP)
        .map_err(|source| ProcessError::Cgroup {
            step: "creating the cgroup of the sandbox's pid 1",
            source,
        })?;
    // Pid 1's first process: the door a runner that may not enter pid 1 (an
    // ordinary user: see `Sandbox`) enters through; otherwise the boundary
    // probe's shell, which then needs no entry of its own.
    let door = needs_door(options);
    let mut request = SpawnRequest::new(mount_plan, Vec::new());
    request.pid1 = Pid1::HoldSandbox;
    let probe_ends = if door {
        request.argv = DOOR.map(String::from).to_vec();
        request.env = vec![("PATH".into(), DOOR_PATH.into())];
        None
    } else {
        Some(ProbeEnds::attach(&mut request, &spec)?)
    };
    // The probe's shell starts where commands do (a toolchain manager picks
    // its version by the directory); a door anywhere.
    request.cwd = match probe_ends {
        Some(_) => spec.workdir.clone(),
        None => "/".into(),
    };
    request.uid = identity.uid;
    request.gid = identity.gid;
    request.host_uid = host_uid;
    request.host_gid = host_gid;
    request.rlimits = spec.rlimits;
    request.cgroups = init.paths().into_iter().map(PathBuf::from).collect();
    let previews = publish(&run.contract.process.ports, &mut request)?;
    if door {
        // A runner that enters through the door cannot make a socket in the
        // sandbox's network namespace: pid 1 makes it for it.
        request.broker = Some(super::broker::listen(&run.run_dir)?);
    }
    for held in &plan.held_open {
        request
            .hold_open
            .push(held.try_clone().map_err(|source| ProcessError::Pipe {
                step: "duplicating a descriptor the sandbox holds open",
                source,
            })?);
    }
    let holder = spawn(&request).map_err(|source| {
        // The broker's socket has no pid 1 to answer it.
        let _ = super::broker::remove(&run.run_dir);
        ProcessError::Spawn {
            step: "starting the sandbox",
            source,
        }
    })?;
    // The pipes' ends pid 1 and its first process hold.
    drop(request);
    // The first process has exec'd by now (the spawn returned once pid 1 and
    // it closed the error pipe): pid 1's cgroup holds the two of them.
    let first = init
        .pids()
        .unwrap_or_default()
        .into_iter()
        .find(|pid| *pid != holder.pid());
    let (door, probe_shell) = match probe_ends {
        None => match first {
            Some(pid) => (Some(pid), None),
            None => {
                return Err(ProcessError::Lost {
                    what: "the sandbox's door is not in its pid 1's cgroup",
                });
            }
        },
        Some(ends) => (None, Some(ends.started(first, init, holder.pid())?)),
    };
    let sandbox = Sandbox::of(&holder, door).map_err(|source| ProcessError::Spawn {
        step: "opening the sandbox",
        source,
    })?;
    let egress = match (plan.environment.network, &options.egress_proxy) {
        (NetworkMode::Allowlist, Some(program)) => Some(EgressProxy::start(&egress::Start {
            program,
            run,
            sandbox_pid: sandbox.entry_pid(),
            cgroup: &cgroup,
            layout: &layout,
            cgroup_parent: &options.cgroup_parent,
            host_ids: (host_uid, host_gid),
        })?),
        (NetworkMode::Allowlist, None) => return Err(ProcessError::NoEgressProxy),
        (NetworkMode::Deny | NetworkMode::Loopback, _) => None,
    };
    state::write(
        &run.run_dir,
        &state::SandboxState {
            pid: holder.pid(),
            door,
            workdir: spec.workdir.clone(),
            mount_plan_sha256: mount_plan_sha256.clone(),
            previews: previews.clone(),
            boot_id: state::boot_id(),
            cgroup_parent: Some(options.cgroup_parent.clone()),
        },
    )?;
    tracing::info!(run_id = %run.run_id, pid = holder.pid(), "sandbox started");
    let sealed = Sealed {
        spec: Arc::new(spec),
        cgroup: Arc::new(cgroup),
        layout,
        sandbox: Arc::new(sandbox),
        holder: Some(holder),
        handover,
        mount_plan_sha256,
        previews,
        mount_points,
        host_mounts,
        egress,
    };
    Ok((sealed, probe_shell))
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

/// The prefix of the cgroups of processes the runner gave no number (services,
/// background commands): `bg-1`, `bg-2`, ... beside the commands' `cmd-N`.
pub(crate) const BACKGROUND_CGROUP_PREFIX: &str = "bg-";

/// The door a sandbox is entered through by a runner that may not enter its
/// pid 1 (see [`Sandbox`]): a program of the base system that blocks, found
/// in [`DOOR_PATH`].
const DOOR: [&str; 2] = ["sleep", "infinity"];

/// Where the door's program is looked for inside.
const DOOR_PATH: &str = "/usr/bin:/bin";

/// Whether this runner enters its sandboxes through a door: an ordinary
/// user's runs map to the caller's own ids ([`HostIds::Caller`]), and such a
/// runner has no `CAP_SYS_PTRACE` to enter a non-dumpable pid 1.
pub(crate) fn needs_door(options: &ProcessOptions) -> bool {
    matches!(options.host_ids, super::HostIds::Caller { .. })
}

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
    // Only two ids read tell a restart; one that cannot be read now is not one.
    if let (Some(then), Some(now)) = (&saved.boot_id, state::boot_id())
        && *then != now
    {
        return Ok(Err(
            "the host restarted since the sandbox started: what the run \
             wrote before an unclean restart may be missing from its checkout, whose \
             layer is mounted without syncs"
                .into(),
        ));
    }
    let sandbox = match Sandbox::open(saved.pid, None) {
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
    // Where the sealing process made the run's cgroups, whatever this
    // process's own default is: judged by another parent, a live sandbox
    // would be taken for gone (and left running, sealed a second time).
    let parent = saved.cgroup_parent_or(&options.cgroup_parent).to_owned();
    let suffix = format!("/{}/{}/{INIT_CGROUP}", parent.trim_matches('/'), run.run_id);
    let cgroups =
        std::fs::read_to_string(format!("/proc/{}/cgroup", saved.pid)).unwrap_or_default();
    if !cgroups.lines().any(|line| line.ends_with(&suffix)) || !sandbox.is_alive() {
        return Ok(Err(format!(
            "pid {} is no longer the run's sandbox",
            saved.pid
        )));
    }
    // The sandbox lives: a door that is gone (a process of the run ended it)
    // locks it, and that is an error, not a sandbox to start again. The door
    // is pid 1's child in pid 1's own cgroup: an orphan of a command that took
    // its pid would be pid 1's child too, but in the command's cgroup.
    let sandbox = match saved.door {
        None => sandbox,
        Some(door) => {
            let entering = |source| ProcessError::Spawn {
                step: "entering the sandbox through its door",
                source,
            };
            let entered = sandbox.through_door(door).map_err(entering)?;
            let cgroups =
                std::fs::read_to_string(format!("/proc/{door}/cgroup")).unwrap_or_default();
            if !cgroups.lines().any(|line| line.ends_with(&suffix)) {
                return Err(entering(crate::spawn::SpawnError::DoorGone {
                    door: door as i32,
                    pid1: saved.pid as i32,
                }));
            }
            entered
        }
    };
    let layout = CgroupLayout::detect().map_err(|source| ProcessError::Cgroup {
        step: "detecting the cgroup layout",
        source,
    })?;
    let Some(cgroup) =
        RunCgroup::adopt(&layout, &parent, &run.run_id).map_err(|source| ProcessError::Cgroup {
            step: "finding the run's cgroups",
            source,
        })?
    else {
        return Ok(Err("the run's cgroups are gone".into()));
    };
    let spec = RunSpec::new(run, plan, saved.workdir);
    let next = cgroup
        .children()
        .unwrap_or_default()
        .iter()
        .filter_map(|name| {
            name.strip_prefix(BACKGROUND_CGROUP_PREFIX)?
                .parse::<u32>()
                .ok()
        })
        .max()
        .unwrap_or(0);
    spec.next_background.store(next + 1, Ordering::Relaxed);
    Ok(Ok(Sealed {
        spec: Arc::new(spec),
        cgroup: Arc::new(cgroup),
        layout,
        sandbox: Arc::new(sandbox),
        holder: None,
        handover: Vec::new(),
        mount_plan_sha256: saved.mount_plan_sha256,
        previews: saved.previews,
        mount_points: Vec::new(),
        host_mounts: Vec::new(),
        egress: None,
    }))
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
        // Known once the plan is built (`prepare`).
        mount_points: Vec::new(),
        host_ids: None,
        root_host_id: None,
    }
}
