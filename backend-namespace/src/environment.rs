//! [`NamespaceEnvironment`]: the Environment boundary's decisions for a namespace run.
//!
//! The environment of a run starts empty. Into it go, in this order (later wins):
//! a minimal base (`PATH`, `HOME`, `USER`, `LANG=C.UTF-8`), the host variables the
//! contract's allowlist names (an empty allowlist passes none), and the contract's
//! declared variables. Credentials are not here: the identity plan carries them, so
//! their values never enter a record that is serialized. Limits are the contract's,
//! or a finite default for each one left unset.

use std::collections::{BTreeMap, BTreeSet};

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, EnvironmentBoundary, EnvironmentCapabilities, EnvironmentPlan, LimitKind,
    ResolvedLimits, RunContext,
};
use workspace_core::contract::{HomeDir, Limits, NetworkMode, UserClass};
use workspace_core::egress::proxy_vars;

/// `PATH` inside a run: the base system's directories.
pub const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin";
/// The home directory of the unprivileged run user (see the mount plan).
pub const HOME: &str = "/home/agent";

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

/// The Environment boundary of the namespace backend.
#[derive(Clone, Debug, Default)]
pub struct NamespaceEnvironment {
    /// The host variables an allowlist may pass through.
    host: BTreeMap<String, String>,
    /// Whether the process boundary starts an egress proxy for allowlisted
    /// runs (see [`ProcessOptions::egress_proxy`](crate::process::ProcessOptions::egress_proxy)).
    egress: bool,
}

impl NamespaceEnvironment {
    /// Reads the host environment once (the UTF-8 variables).
    ///
    /// # Ambient authority
    /// Reads the calling process's environment; only names on a contract's
    /// allowlist ever reach a run.
    pub fn from_host() -> Self {
        let host = std::env::vars_os()
            .filter_map(|(name, value)| Some((name.into_string().ok()?, value.into_string().ok()?)))
            .collect();
        Self {
            host,
            egress: false,
        }
    }

    /// Uses `host` as the host environment (for hosts that pass their own, and tests).
    pub fn with_host_vars(host: BTreeMap<String, String>) -> Self {
        Self {
            host,
            egress: false,
        }
    }

    /// Keeps allowlisted networks (`environment.network.mode = "allowlist"`):
    /// the process boundary starts their egress proxy, and their commands are
    /// pointed at it ([`proxy_vars`]). Without it such a contract is refused.
    pub fn with_egress_proxy(mut self) -> Self {
        self.egress = true;
        self
    }
}

#[async_trait]
impl EnvironmentBoundary for NamespaceEnvironment {
    fn capabilities(&self) -> EnvironmentCapabilities {
        EnvironmentCapabilities {
            network: if self.egress {
                vec![
                    NetworkMode::Deny,
                    NetworkMode::Loopback,
                    NetworkMode::Allowlist,
                ]
            } else {
                vec![NetworkMode::Deny, NetworkMode::Loopback]
            },
            limits: vec![
                LimitKind::Cpu,
                LimitKind::Memory,
                LimitKind::Pids,
                // Kept on the run's disk, which the process boundary makes.
                LimitKind::Disk,
                LimitKind::Tmp,
                LimitKind::WallTime,
                LimitKind::OpenFiles,
            ],
            services: true,
        }
    }

    fn name(&self) -> &'static str {
        "backend-namespace environment"
    }

    async fn prepare(&self, run: &RunContext) -> Result<EnvironmentPlan, BoundaryError> {
        let contract = &run.contract;
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
                vars.insert("HOME".into(), HOME.into());
            }
        }
        for (name, value) in &self.host {
            if environment.passes(name) {
                defaults.remove(name);
                vars.insert(name.clone(), value.clone());
            }
        }
        defaults.retain(|name| !environment.env.contains_key(name));
        vars.extend(environment.env.clone());
        if environment.network.mode == NetworkMode::Allowlist {
            vars.extend(proxy_vars());
        }
        let mut fingerprint = BTreeMap::new();
        if let Some(toolchain) = &environment.runtime.toolchain {
            fingerprint.insert("toolchain.declared".into(), toolchain.clone());
        }
        Ok(EnvironmentPlan {
            vars,
            defaults,
            network: environment.network.mode,
            limits: resolve_limits(&environment.limits),
            fingerprint,
        })
    }
}

/// The contract's limits, with [`DEFAULT_LIMITS`] for those left unset.
pub fn resolve_limits(limits: &Limits) -> ResolvedLimits {
    ResolvedLimits {
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use workspace_core::RunId;
    use workspace_core::contract::{ByteSize, Contract, SourceSection, TaskShape};

    use super::*;

    fn run(contract: Contract) -> RunContext {
        RunContext {
            run_id: RunId::new("run-env").unwrap(),
            contract: Arc::new(contract),
            run_dir: "/nonexistent/run".into(),
            runtime_dir: "/nonexistent/runtime".into(),
        }
    }

    fn host() -> NamespaceEnvironment {
        NamespaceEnvironment::with_host_vars(BTreeMap::from([
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "host-secret".to_owned()),
            ("HOME".to_owned(), "/root".to_owned()),
            ("SSH_AUTH_SOCK".to_owned(), "/tmp/ssh-agent.sock".to_owned()),
            ("TZ".to_owned(), "Europe/Berlin".to_owned()),
        ]))
    }

    fn preset() -> Contract {
        Contract::preset(TaskShape::NarrowFix, "t", SourceSection::new(".", "HEAD"))
    }

    #[tokio::test]
    async fn an_allowlist_needs_the_egress_proxy_and_points_the_commands_at_it() {
        let mut contract = preset();
        contract.environment.network.mode = NetworkMode::Allowlist;
        contract.environment.network.allow = vec!["pypi.org:443".into()];
        // Without the proxy, the mode is not kept (the stack refuses it).
        assert!(
            !host()
                .capabilities()
                .network
                .contains(&NetworkMode::Allowlist)
        );
        let environment = host().with_egress_proxy();
        assert!(
            environment
                .capabilities()
                .network
                .contains(&NetworkMode::Allowlist)
        );
        let plan = environment.prepare(&run(contract)).await.unwrap();
        assert_eq!(plan.vars["HTTPS_PROXY"], "http://127.0.0.1:3128");
        assert_eq!(plan.vars["all_proxy"], "socks5h://127.0.0.1:1080");
        assert_eq!(plan.vars["NO_PROXY"], "localhost,127.0.0.1,::1");
        // A run that is not allowlisted gets none of them.
        let plan = environment.prepare(&run(preset())).await.unwrap();
        assert!(
            !plan
                .vars
                .keys()
                .any(|k| k.to_ascii_lowercase().contains("proxy"))
        );
    }

    #[tokio::test]
    async fn an_empty_allowlist_passes_no_host_variable() {
        let plan = host().prepare(&run(preset())).await.unwrap();
        assert_eq!(
            plan.vars.get("HOME").map(String::as_str),
            Some(HOME),
            "never the host's HOME"
        );
        for leaked in ["AWS_SECRET_ACCESS_KEY", "SSH_AUTH_SOCK", "TZ"] {
            assert!(
                !plan.vars.contains_key(leaked),
                "{leaked} leaked: {:?}",
                plan.vars
            );
        }
        assert!(!plan.vars.values().any(|v| v.contains("host-secret")));
        assert_eq!(
            plan.vars.keys().collect::<Vec<_>>(),
            ["HOME", "LANG", "PATH", "USER"]
        );
    }

    #[tokio::test]
    async fn only_undeclared_path_and_lang_are_defaults_a_base_system_may_replace() {
        let plan = host().prepare(&run(preset())).await.unwrap();
        assert_eq!(
            plan.defaults.iter().collect::<Vec<_>>(),
            ["LANG", "PATH"],
            "USER and HOME follow the identity and the mounts"
        );
        let mut contract = preset();
        contract.environment.env = BTreeMap::from([("PATH".to_owned(), "/opt/bin".to_owned())]);
        let plan = host().prepare(&run(contract)).await.unwrap();
        assert_eq!(plan.defaults.iter().collect::<Vec<_>>(), ["LANG"]);
    }

    #[tokio::test]
    async fn allowlisted_and_declared_variables_pass_declared_last() {
        let mut contract = preset();
        contract.environment.env_allow = vec!["TZ".into()];
        contract.environment.env = BTreeMap::from([
            ("RUST_LOG".to_owned(), "info".to_owned()),
            ("TZ".to_owned(), "UTC".to_owned()),
        ]);
        let plan = host().prepare(&run(contract)).await.unwrap();
        assert_eq!(plan.vars.get("TZ").map(String::as_str), Some("UTC"));
        assert_eq!(plan.vars.get("RUST_LOG").map(String::as_str), Some("info"));
        assert!(!plan.vars.contains_key("AWS_SECRET_ACCESS_KEY"));
    }

    #[tokio::test]
    async fn no_home_means_no_home_variable_and_root_inside_gets_root_home() {
        let mut contract = preset();
        contract.filesystem.home = HomeDir::None;
        let plan = host().prepare(&run(contract)).await.unwrap();
        assert!(!plan.vars.contains_key("HOME"));

        let mut contract = preset();
        contract.identity.user = UserClass::NamespaceRoot;
        let plan = host().prepare(&run(contract)).await.unwrap();
        assert_eq!(plan.vars.get("HOME").map(String::as_str), Some("/root"));
        assert_eq!(plan.vars.get("USER").map(String::as_str), Some("root"));
    }

    #[test]
    fn unset_limits_get_finite_defaults() {
        let limits = Limits {
            memory: Some(ByteSize(1 << 20)),
            ..Limits::default()
        };
        let resolved = resolve_limits(&limits);
        assert_eq!(resolved.memory_bytes, Some(1 << 20));
        assert_eq!(resolved.pids, DEFAULT_LIMITS.pids);
        assert_eq!(resolved.wall_time_ms, DEFAULT_LIMITS.wall_time_ms);
        assert!(
            resolved.pids.is_some()
                && resolved.tmp_bytes.is_some()
                && resolved.open_files.is_some()
        );
    }
}
