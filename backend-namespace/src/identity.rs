//! [`NamespaceIdentity`]: who a namespace run executes as, and its credentials.
//!
//! Inside its user namespace a run is uid/gid 1000 (`unprivileged`) or 0
//! (`namespace-root`, for package managers that insist); either is mapped to an
//! unprivileged host id by the process boundary, never to host root. Declared
//! credentials are issued for this run by the host application's
//! [`CredentialSource`]; the plan carries their values for the process boundary to
//! inject, and serializes only their names and digests.

use std::sync::Arc;

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, CredentialSource, IdentityBoundary, IdentityCapabilities, IdentityPlan,
    RunContext,
};
pub use workspace_core::boundary::{IdentityError, RUN_USER_ID};
use workspace_core::contract::UserClass;

/// The Identity boundary of the namespace backend.
#[derive(Clone, Debug, Default)]
pub struct NamespaceIdentity {
    credentials: Option<Arc<dyn CredentialSource>>,
}

impl NamespaceIdentity {
    /// Runs without credentials: a contract that declares some is rejected.
    pub fn new() -> Self {
        Self::default()
    }

    /// Issues declared credentials from `source`.
    pub fn with_credential_source(source: Arc<dyn CredentialSource>) -> Self {
        Self {
            credentials: Some(source),
        }
    }
}

#[async_trait]
impl IdentityBoundary for NamespaceIdentity {
    fn capabilities(&self) -> IdentityCapabilities {
        IdentityCapabilities {
            users: vec![UserClass::Unprivileged, UserClass::NamespaceRoot],
            credentials: self.credentials.is_some(),
        }
    }

    fn name(&self) -> &'static str {
        "backend-namespace identity"
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

    /// A credential source that issues a fixed token per name.
    #[derive(Debug)]
    struct FixedTokens;

    #[async_trait]
    impl CredentialSource for FixedTokens {
        async fn issue(
            &self,
            _run: &RunContext,
            credential: &Credential,
        ) -> Result<IssuedCredential, BoundaryError> {
            Ok(IssuedCredential::new(
                &credential.name,
                format!("token-for-{}", credential.name),
                1,
            ))
        }
    }

    fn run(user: UserClass, credentials: Vec<Credential>) -> RunContext {
        let mut contract =
            Contract::preset(TaskShape::NarrowFix, "t", SourceSection::new(".", "HEAD"));
        contract.identity.user = user;
        contract.identity.credentials = credentials;
        RunContext {
            run_id: RunId::new("run-id").unwrap(),
            contract: Arc::new(contract),
            run_dir: "/nonexistent".into(),
            runtime_dir: "/nonexistent".into(),
        }
    }

    fn declared(name: &str) -> Credential {
        Credential {
            name: name.into(),
            source: "vault".into(),
            ttl: DurationSpec::from_secs(600),
            scope: Vec::new(),
        }
    }

    #[tokio::test]
    async fn the_run_user_is_unprivileged_or_root_inside_only() {
        let plan = NamespaceIdentity::new()
            .prepare(&run(UserClass::Unprivileged, vec![]))
            .await
            .unwrap();
        assert_eq!((plan.uid, plan.gid), (RUN_USER_ID, RUN_USER_ID));
        let plan = NamespaceIdentity::new()
            .prepare(&run(UserClass::NamespaceRoot, vec![]))
            .await
            .unwrap();
        assert_eq!((plan.uid, plan.gid), (0, 0));
    }

    #[tokio::test]
    async fn declared_credentials_are_issued_and_never_serialized() {
        let identity = NamespaceIdentity::with_credential_source(Arc::new(FixedTokens));
        assert!(identity.capabilities().credentials);
        let plan = identity
            .prepare(&run(
                UserClass::Unprivileged,
                vec![declared("REVIEW_TOKEN")],
            ))
            .await
            .unwrap();
        assert_eq!(plan.credentials[0].expose_value(), "token-for-REVIEW_TOKEN");
        let json = serde_json::to_string(&plan).unwrap();
        assert!(
            json.contains("REVIEW_TOKEN") && !json.contains("token-for-"),
            "{json}"
        );
        assert!(!format!("{plan:?}").contains("token-for-"));
    }

    #[tokio::test]
    async fn credentials_without_a_source_are_refused_naming_the_field() {
        let identity = NamespaceIdentity::new();
        assert!(!identity.capabilities().credentials);
        let err = identity
            .prepare(&run(UserClass::Unprivileged, vec![declared("TOKEN")]))
            .await
            .unwrap_err();
        let text = format!(
            "{err}: {}",
            std::error::Error::source(&err)
                .map(ToString::to_string)
                .unwrap_or_default()
        );
        assert!(text.contains("identity.credentials[0] (TOKEN)"), "{text}");
    }
}
