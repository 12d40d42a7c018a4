//! What `seal` does on blocking threads: the run's cgroups, the mount plan, the
//! probe inside.

use std::collections::BTreeSet;
use std::fmt;
use std::io::Read;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use workspace_core::boundary::{ObservedBoundary, RunContext, SealPlan};
use workspace_core::mount_plan::{MountPlan, PlanInputs};

use super::error::ProcessError;
use super::observe::{self, Expected, PROBE_SCRIPT};
use super::{ProcessOptions, workspace};
use crate::cgroup::{CgroupLayout, Hierarchy, RunCgroup};
use crate::spawn::{SpawnRequest, SpawnedChild, spawn};

/// What every command of a sealed run starts from.
pub(crate) struct RunSpec {
    pub(crate) plan: MountPlan,
    /// The plan's variables and the injected credentials (values never printed).
    pub(crate) env: Vec<(String, String)>,
    pub(crate) uid: u32,
    pub(crate) gid: u32,
    pub(crate) host_uid: u32,
    pub(crate) host_gid: u32,
    pub(crate) cgroup_procs: Vec<PathBuf>,
    /// The run's OOM-kill counter file, when it has a memory cgroup.
    pub(crate) oom_file: Option<PathBuf>,
    /// `environment.limits.wall_time` in milliseconds.
    pub(crate) wall_time_ms: Option<u64>,
}

impl fmt::Debug for RunSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RunSpec")
            .field("hostname", &self.plan.hostname)
            .field(
                "env_names",
                &self.env.iter().map(|(k, _)| k).collect::<Vec<_>>(),
            )
            .field("uid", &self.uid)
            .field("host_uid", &self.host_uid)
            .field("cgroup_procs", &self.cgroup_procs)
            .finish_non_exhaustive()
    }
}

impl RunSpec {
    /// A request for `argv` in this run, cwd and stdio left to the caller.
    pub(crate) fn request(&self, argv: Vec<String>) -> SpawnRequest {
        let mut request = SpawnRequest::new(self.plan.clone(), argv);
        request.env = self.env.clone();
        request.uid = self.uid;
        request.gid = self.gid;
        request.host_uid = self.host_uid;
        request.host_gid = self.host_gid;
        request.cgroup_procs = self.cgroup_procs.clone();
        request
    }
}

/// A sealed run: what its commands start from, and its cgroups.
#[derive(Debug)]
pub(crate) struct Sealed {
    pub(crate) spec: Arc<RunSpec>,
    pub(crate) cgroup: RunCgroup,
    pub(crate) layout: CgroupLayout,
}

/// Creates the run's cgroups and builds its plan (blocking).
pub(crate) fn prepare(
    run: &RunContext,
    plan: &SealPlan,
    options: &ProcessOptions,
) -> Result<Sealed, ProcessError> {
    let identity = &plan.identity;
    let host_id = |id: u32| {
        options
            .host_id_base
            .checked_add(id)
            .ok_or_else(|| ProcessError::Plan {
                problems: format!("host id base {} + id {id} overflows", options.host_id_base),
            })
    };
    let (host_uid, host_gid) = (host_id(identity.uid)?, host_id(identity.gid)?);

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
        pty: false,
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
    let oom_file = cgroup.applied().memory.as_ref().map(|m| {
        m.path.join(match m.hierarchy {
            Hierarchy::V1 => "memory.oom_control",
            Hierarchy::V2 => "memory.events",
        })
    });
    let cgroup_procs = cgroup
        .paths()
        .into_iter()
        .map(|p| p.join("cgroup.procs"))
        .collect();

    let mut env: Vec<(String, String)> = plan
        .environment
        .vars
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    for credential in &identity.credentials {
        env.retain(|(k, _)| *k != credential.name);
        env.push((
            credential.name.clone(),
            credential.expose_value().to_owned(),
        ));
    }
    let spec = RunSpec {
        plan: mount_plan,
        env,
        uid: identity.uid,
        gid: identity.gid,
        host_uid,
        host_gid,
        cgroup_procs,
        oom_file,
        wall_time_ms: plan.environment.limits.wall_time_ms,
    };
    Ok(Sealed {
        spec: Arc::new(spec),
        cgroup,
        layout,
    })
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
    }
}

/// Runs [`PROBE_SCRIPT`] in the run and compares what it saw (blocking).
pub(crate) fn probe(spec: &RunSpec, expected: &Expected) -> Result<ObservedBoundary, ProcessError> {
    let (read, write) = pipe("the probe's stdout pipe")?;
    let mut request = spec.request(vec!["/bin/sh".into(), "-c".into(), PROBE_SCRIPT.into()]);
    request.stdout = Some(write);
    let child = spawn(&request);
    drop(request);
    let mut child: SpawnedChild = child.map_err(|source| ProcessError::Spawn {
        step: "starting the boundary probe",
        source,
    })?;
    let mut output = String::new();
    std::fs::File::from(read)
        .take(1 << 20)
        .read_to_string(&mut output)
        .map_err(|source| ProcessError::Pipe {
            step: "reading the probe's output",
            source,
        })?;
    let status = child.wait().map_err(|source| ProcessError::Spawn {
        step: "waiting for the boundary probe",
        source,
    })?;
    let mut observed = observe::observe(&output, expected);
    observed.facts.insert(
        "probe_status".into(),
        serde_json::json!(format!("{status:?}")),
    );
    Ok(observed)
}

/// A close-on-exec pipe: (read end, write end).
pub(crate) fn pipe(step: &'static str) -> Result<(OwnedFd, OwnedFd), ProcessError> {
    nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC).map_err(|errno| ProcessError::Pipe {
        step,
        source: errno.into(),
    })
}
