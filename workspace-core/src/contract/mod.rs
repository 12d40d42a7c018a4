//! The workspace contract: one section per boundary, readable by a reviewer,
//! enforced or rejected by a backend.
//!
//! A contract is plain data (TOML or JSON through serde, unknown fields refused).
//! [`Contract::validate`] reports *every* problem at once, each naming its field
//! path, so a reviewer fixes a contract in one pass:
//!
//! ```
//! use workspace_core::contract::Contract;
//!
//! let toml = r#"
//! objective = "fix the rounding of refunds"
//! shape = "narrow-fix"
//! [source]
//! repo = "../payments-api"
//! revision = "8f3c2d1"
//! [filesystem]
//! writable = ["src", "../elsewhere"]
//! "#;
//! let problems = Contract::parse_toml(toml).unwrap().validate().unwrap_err();
//! assert_eq!(
//!     problems.to_string(),
//!     r#"filesystem.writable[1]: "../elsewhere" leads outside the workspace root"#
//! );
//! ```

mod checks;
mod environment;
mod error;
mod filesystem;
mod identity;
mod problem;
mod process;
mod promotion;
mod services;
mod shape;
mod source;
mod units;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use environment::{
    Assurance, EnvironmentSection, Fixture, Limits, Network, NetworkMode, Runtime,
};
pub use error::{ContractError, Format};
pub use filesystem::{FilesystemSection, HomeDir, HostMount, MountMode, exclusion_glob};
pub use identity::{Authority, Credential, IdentitySection, MAX_CREDENTIAL_TTL, UserClass};
pub use problem::{Problem, Problems};
pub use process::{CleanupOwner, IsolationLevel, ProcessSection};
pub use promotion::{Approval, PromotionSection, PromotionTarget, RequiredCheck};
pub use services::{HealthCheck, HttpCheck, Probe, Service};
pub use shape::TaskShape;
pub use source::{CheckoutOrigin, Materialization, SourceSection, UntrackedInput};
pub use units::{ByteSize, DurationSpec};

/// The declared six boundaries of one run, plus what the run is for.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Contract {
    /// The task, in the words given to the agent.
    pub objective: String,
    /// The kind of work; it adds rules to validation.
    pub shape: TaskShape,
    /// Source: which code and initial state the agent receives.
    pub source: SourceSection,
    /// Filesystem: which paths the agent may read or modify.
    #[serde(default)]
    pub filesystem: FilesystemSection,
    /// Process: which processes, ports, caches and schemas belong to the run.
    #[serde(default)]
    pub process: ProcessSection,
    /// Environment: runtime, services, network and limits.
    #[serde(default)]
    pub environment: EnvironmentSection,
    /// Identity: user, credentials and authority.
    #[serde(default)]
    pub identity: IdentitySection,
    /// Promotion: how the result becomes visible.
    #[serde(default)]
    pub promotion: PromotionSection,
}

impl Contract {
    /// Parses TOML and validates: the contract, or every problem found.
    pub fn from_toml(text: &str) -> Result<Self, ContractError> {
        let contract = Self::parse_toml(text)?;
        contract
            .validate()
            .map_err(|problems| ContractError::Invalid { problems })?;
        Ok(contract)
    }

    /// Parses JSON and validates: the contract, or every problem found.
    pub fn from_json(text: &str) -> Result<Self, ContractError> {
        let contract = Self::parse_json(text)?;
        contract
            .validate()
            .map_err(|problems| ContractError::Invalid { problems })?;
        Ok(contract)
    }

    /// Parses TOML without validating (to inspect or fix a contract).
    pub fn parse_toml(text: &str) -> Result<Self, ContractError> {
        let deserializer = toml::de::Deserializer::parse(text)
            .map_err(|e| ContractError::toml(text, String::new(), e))?;
        serde_path_to_error::deserialize(deserializer).map_err(|e| {
            let path = e.path().to_string();
            ContractError::toml(text, path, e.into_inner())
        })
    }

    /// Parses JSON without validating.
    pub fn parse_json(text: &str) -> Result<Self, ContractError> {
        let mut deserializer = serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(&mut deserializer).map_err(|e| {
            let path = e.path().to_string();
            ContractError::json(path, e.into_inner())
        })
    }

    /// The contract as TOML.
    pub fn to_toml(&self) -> Result<String, ContractError> {
        toml::to_string_pretty(self).map_err(|source| ContractError::Serialize {
            format: Format::Toml,
            source: Box::new(source),
        })
    }

    /// The contract as pretty JSON.
    pub fn to_json(&self) -> Result<String, ContractError> {
        serde_json::to_string_pretty(self).map_err(|source| ContractError::Serialize {
            format: Format::Json,
            source: Box::new(source),
        })
    }

    /// Every problem in the contract, in document order; `Ok` when there is none.
    pub fn validate(&self) -> Result<(), Problems> {
        let mut problems = Problems::new();
        if self.objective.trim().is_empty() {
            problems.push("objective", "is empty; state the task the agent is given");
        }
        self.source.validate(&mut problems);
        self.filesystem.validate(&mut problems);
        self.process.validate(&mut problems);
        self.environment.validate(&mut problems);
        services::validate(&self.environment.services, &mut problems);
        self.identity.validate(&mut problems);
        self.promotion.validate(&mut problems);
        self.validate_cross_sections(&mut problems);
        self.validate_shape(&mut problems);
        problems.into_result()
    }

    /// Rules that relate two sections.
    fn validate_cross_sections(&self, problems: &mut Problems) {
        if let Some(check) = &self.process.preview_check
            && !self.process.ports.contains(&check.port)
        {
            problems.push(
                "process.preview_check.port",
                format!(
                    "port {} is not published; add it to process.ports",
                    check.port
                ),
            );
        }
        for (i, credential) in self.identity.credentials.iter().enumerate() {
            if self.environment.env.contains_key(&credential.name)
                || self.environment.env_allow.contains(&credential.name)
            {
                problems.push(
                    format!("identity.credentials[{i}].name"),
                    format!(
                        "{:?} is also set through environment.env or env_allow; a credential has one source",
                        credential.name
                    ),
                );
            }
        }
        if self.promotion.merge_approval == Approval::DangerNone
            && self.promotion.target == PromotionTarget::DraftReview
            && self.promotion.required_checks.is_empty()
        {
            problems.push(
                "promotion.merge_approval",
                "with no approval and no required checks nothing stands between the agent and a merge candidate",
            );
        }
    }

    /// The JSON Schema of a contract, generated from these types.
    pub fn json_schema() -> serde_json::Value {
        let schema = schemars::schema_for!(Contract);
        schema.to_value()
    }
}
