//! The Identity boundary: which user, credentials and authority the agent has.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};
use super::units::DurationSpec;

/// Who the agent runs as, which credentials it receives and what it may decide.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct IdentitySection {
    /// The execution identity inside the isolated environment. Never host root.
    #[serde(default)]
    pub user: UserClass,
    /// Short-lived credentials injected for this run only. Evidence records their
    /// names and digests, never their values.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub credentials: Vec<Credential>,
    /// Tools the agent framework may let the agent call (recorded in the evidence;
    /// empty means no tools beyond running commands in the workspace).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tools: Vec<String>,
    /// What the agent may decide on its own.
    #[serde(default)]
    pub authority: Authority,
}

/// The uid/gid class a run executes as.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum UserClass {
    /// A non-root uid inside, mapped to an unprivileged host uid.
    #[default]
    Unprivileged,
    /// uid 0 inside a user namespace (for package managers that insist), still mapped
    /// to an unprivileged host uid and without capabilities on the host.
    NamespaceRoot,
}

/// One credential injected into the run.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Credential {
    /// The environment variable that carries it.
    pub name: String,
    /// Which credential source issues it (resolved by the host application).
    pub source: String,
    /// How long it stays valid; at most 24 hours.
    pub ttl: DurationSpec,
    /// What it grants, as the issuer names it (e.g. `repo:read`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub scope: Vec<String>,
}

/// What the agent may decide on its own. Everything is denied by default; merging
/// and deploying are never the agent's: promotion decides them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Authority {
    /// May the agent merge? Always `false`: merges follow `promotion.merge_approval`.
    #[serde(default)]
    pub merge: bool,
    /// May the agent deploy? Always `false`: deployment is out of scope of a run.
    #[serde(default)]
    pub deploy: bool,
    /// May the agent's credentials reach production systems? Always `false`.
    #[serde(default)]
    pub production: bool,
}

/// The longest lifetime of an injected credential.
pub const MAX_CREDENTIAL_TTL: DurationSpec = DurationSpec::from_secs(24 * 3600);

impl IdentitySection {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        let mut names = Vec::new();
        for (i, credential) in self.credentials.iter().enumerate() {
            let field = indexed("identity.credentials", i);
            let name_field = format!("{field}.name");
            if checks::env_name(problems, &name_field, &credential.name) {
                checks::unique_name(
                    problems,
                    &name_field,
                    &credential.name,
                    &mut names,
                    "credential",
                );
            }
            if credential.source.trim().is_empty() {
                problems.push(
                    format!("{field}.source"),
                    "is empty; name the credential source",
                );
            }
            if credential.ttl.as_millis() == 0 {
                problems.push(
                    format!("{field}.ttl"),
                    "is zero; a credential must live long enough to be used",
                );
            } else if credential.ttl > MAX_CREDENTIAL_TTL {
                problems.push(
                    format!("{field}.ttl"),
                    format!(
                        "{} is not short-lived; at most {MAX_CREDENTIAL_TTL}",
                        credential.ttl
                    ),
                );
            }
        }
        let mut tools = Vec::new();
        for (i, tool) in self.tools.iter().enumerate() {
            checks::unique_name(
                problems,
                &indexed("identity.tools", i),
                tool,
                &mut tools,
                "tool",
            );
        }
        for (field, granted, why) in [
            (
                "identity.authority.merge",
                self.authority.merge,
                "merges follow promotion.merge_approval",
            ),
            (
                "identity.authority.deploy",
                self.authority.deploy,
                "deployment is out of scope of a run",
            ),
            (
                "identity.authority.production",
                self.authority.production,
                "a run never holds production credentials",
            ),
        ] {
            if granted {
                problems.push(field, format!("cannot be granted to an agent: {why}"));
            }
        }
    }
}
