//! [`ContainerEnvironment`]: the Environment boundary's decisions for a run in
//! an OCI container.
//!
//! The plan is the contract's ([`EnvironmentPlan::for_contract`]): a minimal
//! base, the allowlisted host variables, the declared ones, and the contract's
//! limits or finite defaults. The process boundary applies it to the
//! container's processes, under an image's own `Env` for the base's defaults.
//! A container has its private loopback only: an allowlist (which needs an
//! egress proxy this backend does not start) is not among its network modes,
//! so such a contract is refused before anything is created.

use std::collections::BTreeMap;

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, EnvironmentBoundary, EnvironmentCapabilities, EnvironmentPlan, LimitKind,
    RunContext,
};
use workspace_core::contract::NetworkMode;

/// The Environment boundary of the container backend.
#[derive(Clone, Debug, Default)]
pub struct ContainerEnvironment {
    /// The host variables an allowlist may pass through.
    host: BTreeMap<String, String>,
}

impl ContainerEnvironment {
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
        Self { host }
    }
}

#[async_trait]
impl EnvironmentBoundary for ContainerEnvironment {
    fn capabilities(&self) -> EnvironmentCapabilities {
        EnvironmentCapabilities {
            network: vec![NetworkMode::Deny, NetworkMode::Loopback],
            limits: vec![
                LimitKind::Cpu,
                LimitKind::Memory,
                LimitKind::Pids,
                // Kept on the run's disk, when the process boundary is given disks.
                LimitKind::Disk,
                LimitKind::Tmp,
                LimitKind::WallTime,
                LimitKind::OpenFiles,
            ],
            services: true,
        }
    }

    fn name(&self) -> &'static str {
        "backend-container environment"
    }

    async fn prepare(&self, run: &RunContext) -> Result<EnvironmentPlan, BoundaryError> {
        Ok(EnvironmentPlan::for_contract(&run.contract, &self.host))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use workspace_core::RunId;
    use workspace_core::contract::{Contract, SourceSection, TaskShape};

    use super::*;

    #[tokio::test]
    async fn only_allowlisted_host_variables_pass_and_no_allowlist_network_is_offered() {
        let environment = ContainerEnvironment::with_host_vars(BTreeMap::from([
            ("AWS_SECRET_ACCESS_KEY".to_owned(), "host-secret".to_owned()),
            ("CARGO_HOME".to_owned(), "/opt/cargo".to_owned()),
        ]));
        assert!(
            !environment
                .capabilities()
                .network
                .contains(&NetworkMode::Allowlist)
        );
        let mut contract =
            Contract::preset(TaskShape::NarrowFix, "t", SourceSection::new(".", "HEAD"));
        contract.environment.env_allow = vec!["CARGO_HOME".into()];
        let run = RunContext {
            run_id: RunId::new("run-env").unwrap(),
            contract: Arc::new(contract),
            run_dir: "/nonexistent".into(),
            runtime_dir: "/nonexistent".into(),
        };
        let plan = environment.prepare(&run).await.unwrap();
        assert_eq!(plan.vars["CARGO_HOME"], "/opt/cargo");
        assert!(!plan.vars.contains_key("AWS_SECRET_ACCESS_KEY"), "{plan:?}");
        assert_eq!(plan.vars["PATH"], workspace_core::boundary::DEFAULT_PATH);
        assert!(plan.defaults.contains("PATH"));
    }
}
