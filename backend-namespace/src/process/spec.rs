//! What every command of a sealed run starts from: its working directory,
//! environment (credentials included), ids and resource limits.

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;

use workspace_core::boundary::{ResolvedLimits, RunContext, SealPlan};

use crate::cgroup::RunCgroup;
use crate::spawn::{JoinRequest, ResourceLimits};

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
    /// The number of the next cgroup of a process the runner gave no number
    /// (`bg-<n>`); a numbered command's is `cmd-<its number>`.
    pub(crate) next_background: AtomicU32,
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
    pub(crate) fn new(run: &RunContext, plan: &SealPlan, workdir: String) -> Self {
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
            next_background: AtomicU32::new(1),
        }
    }

    /// A request for `argv` in this run joining `cgroup`, cwd and stdio left to
    /// the caller.
    pub(crate) fn request(&self, argv: Vec<String>, cgroup: &RunCgroup) -> JoinRequest {
        let mut request = JoinRequest::new(argv, self.workdir.clone());
        request.env = self.env.clone();
        request.uid = self.uid;
        request.gid = self.gid;
        request.cgroups = cgroup.paths().into_iter().map(PathBuf::from).collect();
        request.rlimits = self.rlimits;
        request
    }
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

#[cfg(test)]
mod tests {
    use super::*;

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
