//! The Environment boundary trait and the plan it hands to the process boundary.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, EnvironmentCapabilities, RunContext};
use crate::contract::{Contract, HomeDir, Limits, NetworkMode, UserClass};

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

/// `PATH` inside a run whose base system does not bring its own: the usual
/// directories of one.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";

/// The home directory of the unprivileged run user (see the mount plan).
pub const RUN_HOME: &str = "/home/agent";

/// Finite defaults for limits a contract leaves unset.
pub const DEFAULT_LIMITS: ResolvedLimits = ResolvedLimits {
    cpu_millis: None,
    memory_bytes: Some(4 << 30),
    pids: Some(1024),
    disk_bytes: None,
    tmp_bytes: Some(1 << 30),
    wall_time_ms: Some(30 * 60 * 1000),
    open_files: Some(4096),
};

impl ResolvedLimits {
    /// The contract's limits, with [`DEFAULT_LIMITS`] for those left unset.
    pub fn of(limits: &Limits) -> Self {
        Self {
            cpu_millis: limits.cpu_millis().or(DEFAULT_LIMITS.cpu_millis),
            memory_bytes: limits
                .memory
                .map(|m| m.bytes())
                .or(DEFAULT_LIMITS.memory_bytes),
            pids: limits.pids.or(DEFAULT_LIMITS.pids),
            disk_bytes: limits.disk.map(|d| d.bytes()).or(DEFAULT_LIMITS.disk_bytes),
            tmp_bytes: limits.tmp.map(|t| t.bytes()).or(DEFAULT_LIMITS.tmp_bytes),
            wall_time_ms: limits
                .wall_time
                .map(|w| w.as_millis())
                .or(DEFAULT_LIMITS.wall_time_ms),
            open_files: limits.open_files.or(DEFAULT_LIMITS.open_files),
        }
    }
}

impl EnvironmentPlan {
    /// What `contract` asks for, whoever applies it. The variables start
    /// empty; into them go, in this order (later wins): a minimal base
    /// (`PATH`, `HOME`, `USER`, `LANG=C.UTF-8`), the variables of `host` the
    /// contract's allowlist names (an empty allowlist passes none), and the
    /// contract's declared variables. Credentials are not here: the identity
    /// plan carries them, so their values never enter a record that is
    /// serialized. Limits are the contract's, or [`DEFAULT_LIMITS`].
    pub fn for_contract(contract: &Contract, host: &BTreeMap<String, String>) -> Self {
        let environment = &contract.environment;
        let root = contract.identity.user == UserClass::NamespaceRoot;
        // `USER` and `HOME` follow the identity and the mount plan; the rest
        // of the defaults give way to a base system's own values.
        let mut defaults = BTreeSet::from(["PATH".to_owned(), "LANG".to_owned()]);
        let mut vars = BTreeMap::from([
            ("PATH".to_owned(), DEFAULT_PATH.to_owned()),
            (
                "USER".to_owned(),
                if root { "root" } else { "agent" }.to_owned(),
            ),
            ("LANG".to_owned(), "C.UTF-8".to_owned()),
        ]);
        match (contract.filesystem.home, root) {
            (HomeDir::None, _) => {}
            (HomeDir::Empty, true) => {
                vars.insert("HOME".into(), "/root".into());
            }
            (HomeDir::Empty, false) => {
                vars.insert("HOME".into(), RUN_HOME.into());
            }
        }
        for (name, value) in host {
            if environment.passes(name) {
                defaults.remove(name);
                vars.insert(name.clone(), value.clone());
            }
        }
        defaults.retain(|name| !environment.env.contains_key(name));
        vars.extend(environment.env.clone());
        let mut fingerprint = BTreeMap::new();
        if let Some(toolchain) = &environment.runtime.toolchain {
            fingerprint.insert("toolchain.declared".into(), toolchain.clone());
        }
        Self {
            vars,
            defaults,
            network: environment.network.mode,
            limits: ResolvedLimits::of(&environment.limits),
            fingerprint,
        }
    }
}

/// The calling process's environment, its UTF-8 variables: what a contract's
/// allowlist may pass into a run ([`EnvironmentPlan::for_contract`]).
///
/// # Ambient authority
/// Reads the calling process's environment.
pub fn host_vars() -> BTreeMap<String, String> {
    std::env::vars_os()
        .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
        .collect()
}
