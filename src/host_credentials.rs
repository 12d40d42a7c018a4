//! Credentials from the invoking environment: `source = "env:NAME"` issues the
//! value of the host variable `NAME` (what a CI job or a framework's shell
//! already holds, given to one run by name, never by passing the environment).

use async_trait::async_trait;
use workspace_core::boundary::{
    BoundaryError, BoundaryKind, CredentialSource, IssuedCredential, RunContext,
};
use workspace_core::clock::unix_ms_now;
use workspace_core::contract::Credential;

/// The prefix of a `source` this issuer serves.
pub const ENV_SOURCE_PREFIX: &str = "env:";

/// Issues `env:NAME` credentials from this process's environment; any other
/// source is refused, naming the credential.
#[derive(Clone, Copy, Debug, Default)]
pub struct HostEnvCredentials;

/// Why a credential could not be issued from the environment.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HostEnvCredentialError {
    /// The source is not `env:NAME`.
    #[error(
        "credential {credential}: source {source_name:?} is not served here; use \"env:VARIABLE\" to pass a variable of the invoking environment"
    )]
    UnknownSource {
        /// The credential.
        credential: String,
        /// Its declared source.
        source_name: String,
    },
    /// The variable is not set (or not UTF-8, or empty).
    #[error("credential {credential}: the invoking environment has no variable {variable}")]
    Unset {
        /// The credential.
        credential: String,
        /// The variable it names.
        variable: String,
    },
}

#[async_trait]
impl CredentialSource for HostEnvCredentials {
    async fn issue(
        &self,
        _run: &RunContext,
        credential: &Credential,
    ) -> Result<IssuedCredential, BoundaryError> {
        let refuse = |e: HostEnvCredentialError| {
            BoundaryError::new(BoundaryKind::Identity, "issue credential", e)
        };
        let Some(variable) = credential.source.strip_prefix(ENV_SOURCE_PREFIX) else {
            return Err(refuse(HostEnvCredentialError::UnknownSource {
                credential: credential.name.clone(),
                source_name: credential.source.clone(),
            }));
        };
        let value = std::env::var(variable)
            .ok()
            .filter(|v| !v.is_empty())
            .ok_or_else(|| {
                refuse(HostEnvCredentialError::Unset {
                    credential: credential.name.clone(),
                    variable: variable.to_owned(),
                })
            })?;
        let ttl_ms = u64::try_from(credential.ttl.as_duration().as_millis()).unwrap_or(u64::MAX);
        let expires = unix_ms_now().saturating_add(ttl_ms);
        Ok(IssuedCredential::new(
            credential.name.clone(),
            value,
            expires,
        ))
    }
}
