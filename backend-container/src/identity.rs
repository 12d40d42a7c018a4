//! [`ContainerIdentity`]: who a run in an OCI container executes as, and its
//! credentials.
//!
//! Inside the container a run is uid/gid 1000 (`unprivileged`) or 0
//! (`namespace-root`); the bundle's user namespace maps either to an
//! unprivileged host id, never to host root. Declared credentials are issued
//! for this run by the host application's [`CredentialSource`]
//! ([`IdentityPlan::issue`]); the plan carries their values for the process
//! boundary to put into the container's processes' environment, and
//! serializes only their names and fingerprints.

use std::sync::Arc;

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, CredentialSource, IdentityBoundary, IdentityCapabilities, IdentityPlan,
    RunContext,
};
use workspace_core::contract::UserClass;

/// The Identity boundary of the container backend.
#[derive(Clone, Debug, Default)]
pub struct ContainerIdentity {
    credentials: Option<Arc<dyn CredentialSource>>,
}

impl ContainerIdentity {
    /// An identity without a credential source: a contract that declares
    /// credentials is refused.
    pub fn new() -> Self {
        Self::default()
    }

    /// An identity whose declared credentials `source` issues.
    pub fn with_credential_source(source: Arc<dyn CredentialSource>) -> Self {
        Self {
            credentials: Some(source),
        }
    }
}

#[async_trait]
impl IdentityBoundary for ContainerIdentity {
    fn capabilities(&self) -> IdentityCapabilities {
        IdentityCapabilities {
            users: vec![UserClass::Unprivileged, UserClass::NamespaceRoot],
            credentials: self.credentials.is_some(),
        }
    }

    fn name(&self) -> &'static str {
        "backend-container identity"
    }

    async fn prepare(&self, run: &RunContext) -> Result<IdentityPlan, BoundaryError> {
        IdentityPlan::issue(run, self.credentials.as_deref()).await
    }
}

#[cfg(test)]
mod tests {
    use workspace_core::RunId;
    use workspace_core::boundary::IssuedCredential;
    use workspace_core::contract::{Contract, Credential, DurationSpec, SourceSection, TaskShape};

    use super::*;

    #[derive(Debug)]
    struct FixedTokens;

    #[async_trait]
    impl CredentialSource for FixedTokens {
        async fn issue(
            &self,
            _run: &RunContext,
            credential: &Credential,
        ) -> Result<IssuedCredential, BoundaryError> {
            Ok(IssuedCredential::new(&credential.name, "token-value", 1))
        }
    }

    fn run_declaring(name: &str) -> RunContext {
        let mut contract =
            Contract::preset(TaskShape::NarrowFix, "t", SourceSection::new(".", "HEAD"));
        contract.identity.credentials = vec![Credential {
            name: name.into(),
            source: "vault".into(),
            ttl: DurationSpec::from_secs(600),
            scope: Vec::new(),
        }];
        RunContext {
            run_id: RunId::new("run-id").unwrap(),
            contract: Arc::new(contract),
            run_dir: "/nonexistent".into(),
            runtime_dir: "/nonexistent".into(),
        }
    }

    #[tokio::test]
    async fn a_declared_credential_is_issued_by_the_source_or_refused_naming_it() {
        let run = run_declaring("REVIEW_TOKEN");
        let refused = ContainerIdentity::new().prepare(&run).await.unwrap_err();
        assert!(!ContainerIdentity::new().capabilities().credentials);
        assert!(
            workspace_core::error_chain(&refused)
                .contains("identity.credentials[0] (REVIEW_TOKEN): no credential source"),
            "{refused}"
        );
        let identity = ContainerIdentity::with_credential_source(Arc::new(FixedTokens));
        assert!(identity.capabilities().credentials);
        let plan = identity.prepare(&run).await.unwrap();
        assert_eq!((plan.uid, plan.gid), (1000, 1000));
        assert_eq!(plan.credentials[0].expose_value(), "token-value");
    }
}
