//! `<run dir>/sandbox.json`: where a run's live sandbox is, for the instance that
//! attaches to it later (another process, after the one that sealed it exited).
//!
//! Only what cannot be derived again is kept: pid 1's host pid (checked against
//! the run's cgroup before it is trusted, since pids are reused), the working
//! directory inside and the digest of the mount plan applied. No credential is
//! written: the attaching runner issues them again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use workspace_core::boundary::PreviewEndpoint;

use super::error::ProcessError;

/// The file's name in the run directory.
pub(crate) const SANDBOX_STATE_FILE: &str = "sandbox.json";

/// What is recorded of a live sandbox.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct SandboxState {
    /// The host pid of the sandbox's pid 1.
    pub pid: u32,
    /// The host pid of its door, when it has one (see [`crate::spawn::Sandbox`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door: Option<u32>,
    /// Where commands start inside.
    pub workdir: String,
    /// The sha256 of the mount plan applied.
    pub mount_plan_sha256: String,
    /// The published ports' host ends (held by pid 1).
    #[serde(default)]
    pub previews: Vec<PreviewEndpoint>,
    /// The kernel's id of the boot the sandbox started in: a different one
    /// now means the host restarted since (and its writable layer, mounted
    /// without syncs, may miss writes made before an unclean restart).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The cgroup directory the run's cgroups were made in: the process that
    /// attaches or ends the run later finds them there, whatever its own
    /// default (another `--cgroup-parent`, `AGENT_WORKSPACE_CGROUP_PARENT`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cgroup_parent: Option<String>,
}

impl SandboxState {
    /// Where the run's cgroups are: the recorded parent, else `default` (a
    /// record written before the parent was kept).
    pub(crate) fn cgroup_parent_or<'a>(&'a self, default: &'a str) -> &'a str {
        self.cgroup_parent.as_deref().unwrap_or(default)
    }
}

/// The kernel's id of this boot (`None` where it cannot be read).
pub(crate) fn boot_id() -> Option<String> {
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .ok()
        .map(|id| id.trim().to_owned())
}

fn path(run_dir: &Path) -> PathBuf {
    run_dir.join(SANDBOX_STATE_FILE)
}

/// Writes the state (atomically: a temporary file renamed over it).
pub(crate) fn write(run_dir: &Path, state: &SandboxState) -> Result<(), ProcessError> {
    let target = path(run_dir);
    let io = |source| ProcessError::Io {
        step: "recording the sandbox",
        path: target.clone(),
        source,
    };
    std::fs::create_dir_all(run_dir).map_err(io)?;
    let staging = run_dir.join(format!(".{SANDBOX_STATE_FILE}.tmp"));
    let text = serde_json::to_vec_pretty(state).map_err(|e| io(std::io::Error::other(e)))?;
    std::fs::write(&staging, text).map_err(io)?;
    std::fs::rename(&staging, &target).map_err(io)
}

/// The recorded state, `None` when there is none.
pub(crate) fn read(run_dir: &Path) -> Result<Option<SandboxState>, ProcessError> {
    let target = path(run_dir);
    let text = match std::fs::read(&target) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(ProcessError::Io {
                step: "reading the sandbox record",
                path: target,
                source,
            });
        }
    };
    serde_json::from_slice(&text)
        .map(Some)
        .map_err(|e| ProcessError::Io {
            step: "reading the sandbox record",
            path: target,
            source: std::io::Error::new(std::io::ErrorKind::InvalidData, e),
        })
}

/// Removes the record (nothing to remove is fine).
pub(crate) fn remove(run_dir: &Path) -> Result<(), ProcessError> {
    let target = path(run_dir);
    match std::fs::remove_file(&target) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(ProcessError::Io {
            step: "removing the sandbox record",
            path: target,
            source,
        }),
    }
}
