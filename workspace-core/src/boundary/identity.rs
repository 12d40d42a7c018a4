//! The Identity boundary trait, the credential source seam and the identity plan.

use std::fmt;
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, IdentityCapabilities, RunContext};
use crate::contract::UserClass;

/// Decides who a run executes as and which credentials it receives.
#[async_trait]
pub trait IdentityBoundary: Send + Sync + Debug + 'static {
    /// What this implementation supports.
    fn capabilities(&self) -> IdentityCapabilities;

    /// The implementation's name, used in messages about unsupported settings.
    fn name(&self) -> &'static str {
        std::any::type_name::<Self>()
    }

    /// Resolves `run.contract.identity` into a plan: ids and issued credentials.
    async fn prepare(&self, run: &RunContext) -> Result<IdentityPlan, BoundaryError>;
}

/// The identity a run executes as.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityPlan {
    /// The uid/gid class.
    pub user: UserClass,
    /// uid inside the isolated environment.
    pub uid: u32,
    /// gid inside the isolated environment.
    pub gid: u32,
    /// Credentials to inject. Serialized without their values.
    pub credentials: Vec<IssuedCredential>,
}

/// A credential issued for one run. Its value never reaches `Debug`, `Display` or
/// serialization: evidence records the name and the digest only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedCredential {
    /// The environment variable that carries it.
    pub name: String,
    /// sha256 of the value (hex), so a reviewer can tell which credential was used.
    pub sha256: String,
    /// When it expires (Unix milliseconds).
    pub expires_unix_ms: u64,
    #[serde(skip)]
    value: SecretValue,
}

impl IssuedCredential {
    /// A credential named `name` with `value`, expiring at `expires_unix_ms`.
    pub fn new(name: impl Into<String>, value: impl Into<String>, expires_unix_ms: u64) -> Self {
        let value = value.into();
        Self {
            name: name.into(),
            sha256: crate::digest::sha256_hex(value.as_bytes()),
            expires_unix_ms,
            value: SecretValue(value),
        }
    }

    /// The value, for the process boundary to put into the run's environment.
    pub fn expose_value(&self) -> &str {
        &self.value.0
    }
}

impl Debug for IssuedCredential {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IssuedCredential")
            .field("name", &self.name)
            .field("sha256", &self.sha256)
            .field("expires_unix_ms", &self.expires_unix_ms)
            .finish_non_exhaustive()
    }
}

#[derive(Clone, Default, PartialEq, Eq)]
struct SecretValue(String);

/// Where short-lived credentials come from: the host application's issuer.
#[async_trait]
pub trait CredentialSource: Send + Sync + Debug + 'static {
    /// Issues the credential `name` from `source` with the given scope and lifetime.
    async fn issue(
        &self,
        run: &RunContext,
        credential: &crate::contract::Credential,
    ) -> Result<IssuedCredential, BoundaryError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credential_values_never_reach_debug_or_json() {
        let credential = IssuedCredential::new("REVIEW_TOKEN", "s3cr3t-value", 1);
        let debug = format!("{credential:?}");
        let json = serde_json::to_string(&credential).expect("serialize");
        assert!(!debug.contains("s3cr3t-value"), "{debug}");
        assert!(!json.contains("s3cr3t-value"), "{json}");
        assert!(json.contains(&credential.sha256));
        assert_eq!(credential.expose_value(), "s3cr3t-value");
    }
}
