//! The Identity boundary trait, the credential source seam and the identity plan.

use std::fmt;
use std::fmt::Debug;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use super::{BoundaryError, BoundaryKind, IdentityCapabilities, RunContext};
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
/// serialization: evidence records the name and a keyed fingerprint only.
#[derive(Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IssuedCredential {
    /// The environment variable that carries it.
    pub name: String,
    /// The value's keyed fingerprint (`hmac-sha256:<hex>` under the host's key,
    /// see [`FingerprintKey`](crate::evidence::FingerprintKey)), set by the
    /// runner before anything is recorded: a reviewer can tell which runs got
    /// the same credential, and nobody without the key can test a guess.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fingerprint: Option<String>,
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
            fingerprint: None,
            expires_unix_ms,
            value: SecretValue(value),
        }
    }

    /// Sets the fingerprint under `key`.
    pub fn fingerprint_with(&mut self, key: &crate::evidence::FingerprintKey) {
        self.fingerprint = Some(key.fingerprint(self.value.0.as_bytes()));
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
            .field("fingerprint", &self.fingerprint)
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
        let dir = tempfile::tempdir().expect("tempdir");
        let key = crate::evidence::FingerprintKey::load_or_create(dir.path()).expect("key");
        let mut credential = IssuedCredential::new("REVIEW_TOKEN", "s3cr3t-value", 1);
        credential.fingerprint_with(&key);
        let debug = format!("{credential:?}");
        let json = serde_json::to_string(&credential).expect("serialize");
        assert!(!debug.contains("s3cr3t-value"), "{debug}");
        assert!(!json.contains("s3cr3t-value"), "{json}");
        let bare = crate::digest::sha256_hex(b"s3cr3t-value");
        assert!(!json.contains(&bare), "{json}");
        assert!(json.contains(&key.fingerprint(b"s3cr3t-value")), "{json}");
        assert_eq!(credential.expose_value(), "s3cr3t-value");
    }
}

/// uid and gid of an unprivileged run's user inside.
pub const RUN_USER_ID: u32 = 1000;

/// The uid and gid a run of `user` has inside: [`RUN_USER_ID`], or 0 for
/// namespace root.
pub const fn id_inside(user: UserClass) -> u32 {
    match user {
        UserClass::Unprivileged => RUN_USER_ID,
        UserClass::NamespaceRoot => 0,
    }
}

/// Why a run's credentials could not be issued.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IdentityError {
    /// The contract declares a credential and no source is configured.
    #[error("identity.credentials[{index}] ({name}): no credential source is configured")]
    NoCredentialSource {
        /// Its position in `identity.credentials`.
        index: usize,
        /// Its name.
        name: String,
    },
    /// The source issued another credential than the one asked for.
    #[error("identity.credentials[{index}]: asked for {declared}, the source issued {issued}")]
    WrongCredential {
        /// Its position in `identity.credentials`.
        index: usize,
        /// The name declared.
        declared: String,
        /// The name issued.
        issued: String,
    },
}

impl IdentityPlan {
    /// What `run`'s contract asks for, whoever applies it: [`RUN_USER_ID`]
    /// (or 0 for namespace root) and each declared credential issued by
    /// `source`, in order. A declared credential without a source, or one the
    /// source issues under another name, fails naming it.
    pub async fn issue(
        run: &RunContext,
        source: Option<&dyn CredentialSource>,
    ) -> Result<Self, BoundaryError> {
        let identity = &run.contract.identity;
        let id = id_inside(identity.user);
        let mut credentials = Vec::with_capacity(identity.credentials.len());
        for (index, declared) in identity.credentials.iter().enumerate() {
            let refuse = |err: IdentityError| {
                BoundaryError::new(BoundaryKind::Identity, "issue credential", err)
            };
            let Some(source) = source else {
                return Err(refuse(IdentityError::NoCredentialSource {
                    index,
                    name: declared.name.clone(),
                }));
            };
            let issued = source.issue(run, declared).await?;
            if issued.name != declared.name {
                return Err(refuse(IdentityError::WrongCredential {
                    index,
                    declared: declared.name.clone(),
                    issued: issued.name.clone(),
                }));
            }
            tracing::info!(run_id = %run.run_id, name = %issued.name, "credential issued");
            credentials.push(issued);
        }
        Ok(Self {
            user: identity.user,
            uid: id,
            gid: id,
            credentials,
        })
    }
}
