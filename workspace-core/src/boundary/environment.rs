//! The Environment boundary trait and the plan it hands to the process boundary.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, EnvironmentCapabilities, RunContext};
use crate::contract::NetworkMode;

/// Resolves the runtime a run executes in: variables, network, limits, toolchain.
///
/// It only decides; the process boundary applies its plan when it seals the run,
/// so an environment policy can be swapped without touching process isolation.
#[async_trait]
pub trait EnvironmentBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports.
    fn capabilities(&self) -> EnvironmentCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Resolves `run.contract.environment` into a plan.
    ///
    /// # Ambient authority
    /// Reads the host environment for the variables on the allowlist.
    async fn prepare(&self, run: &RunContext) -> Result<EnvironmentPlan, BoundaryError>;
}

/// The resolved environment of a run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct EnvironmentPlan {
    /// The complete set of variables the run's processes start with (no credentials:
    /// those come from the identity plan).
    pub vars: BTreeMap<String, String>,
    /// The names in `vars` whose values are the boundary's own defaults (no
    /// contract entry and no passed host variable set them, e.g. `PATH`): a
    /// base system that brings its own value for one (an OCI image's `Env`)
    /// is kept over them.
    #[serde(default)]
    pub defaults: BTreeSet<String>,
    /// The network policy to apply.
    pub network: NetworkMode,
    /// The limits to apply.
    pub limits: ResolvedLimits,
    /// The toolchain fingerprint (tool -> version line, plus digests).
    pub fingerprint: BTreeMap<String, String>,
}

/// Limits with every value decided (contract values, else backend defaults).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResolvedLimits {
    /// CPU share in thousandths of a core.
    pub cpu_millis: Option<u64>,
    /// Memory cap in bytes.
    pub memory_bytes: Option<u64>,
    /// Process and thread cap.
    pub pids: Option<u32>,
    /// Disk cap in bytes.
    pub disk_bytes: Option<u64>,
    /// Size of the private `/tmp` in bytes.
    pub tmp_bytes: Option<u64>,
    /// Wall-clock cap of one command, in milliseconds.
    pub wall_time_ms: Option<u64>,
    /// Open files per process.
    pub open_files: Option<u32>,
}
