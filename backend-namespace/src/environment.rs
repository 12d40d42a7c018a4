//! [`NamespaceEnvironment`]: the Environment boundary's decisions for a namespace run.
//!
//! The plan is the contract's ([`EnvironmentPlan::for_contract`]: a minimal
//! base, the allowlisted host variables, the declared ones; the contract's
//! limits or finite defaults); an allowlisted run's commands are also pointed
//! at its egress proxy ([`proxy_vars`]).

use std::collections::BTreeMap;

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, EnvironmentBoundary, EnvironmentCapabilities, EnvironmentPlan, LimitKind,
    RunContext,
};
pub use workspace_core::boundary::{DEFAULT_LIMITS, DEFAULT_PATH};
use workspace_core::contract::NetworkMode;
use workspace_core::egress::proxy_vars;

/// The home directory of the unprivileged run user (see the mount plan).
pub const HOME: &str = workspace_core::boundary::RUN_HOME;

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
        Self::with_host_vars(workspace_core::boundary::host_vars())
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
        let mut plan = EnvironmentPlan::for_contract(&run.contract, &self.host);
        if plan.network == NetworkMode::Allowlist {
            plan.vars.extend(proxy_vars());
        }
        Ok(plan)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use workspace_core::RunId;
    use workspace_core::contract::{
        ByteSize, Contract, HomeDir, Limits, SourceSection, TaskShape, UserClass,
    };

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
        let resolved = workspace_core::boundary::ResolvedLimits::of(&limits);
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
