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
mod image;
mod problem;
mod process;
mod promotion;
mod read;
mod services;
mod shape;
mod source;
mod units;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use environment::{
    Assurance, DEFAULT_OUTPUT_BYTES, DEFAULT_RESERVED_CPU_MILLIS, DEFAULT_RESERVED_MEMORY,
    EnvironmentSection, Fixture, Limits, Network, NetworkMode, OutputOverflow, Reservation,
    Runtime,
};
pub use error::{ContractError, Format};
pub use filesystem::{FilesystemSection, HomeDir, HostMount, MountMode, exclusion_glob};
pub use identity::{Authority, Credential, IdentitySection, MAX_CREDENTIAL_TTL, UserClass};
pub use image::{ImageReference, OCI_LAYOUT_SCHEME};
pub use problem::{Problem, Problems};
pub use process::{CleanupOwner, IsolationLevel, ProcessSection};
pub use promotion::{Approval, PromotionSection, PromotionTarget, RequiredCheck};
pub use services::{HealthCheck, HttpCheck, Probe, Service, ServiceTemplate};
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
    /// Source: which code and initial state the agent receives (the repository
    /// in the current directory at `HEAD` when left out).
    #[serde(default)]
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
        let tree = Self::toml_tree(text)?;
        Self::read_and_validate(tree, |path| read::toml_line(text, path))
    }

    /// Parses JSON and validates: the contract, or every problem found.
    pub fn from_json(text: &str) -> Result<Self, ContractError> {
        let tree = Self::json_tree(text)?;
        Self::read_and_validate(tree, |_| None)
    }

    /// Parses TOML without validating (to inspect or fix a contract): the
    /// contract, or every field it cannot read (unknown, of a wrong type), each
    /// with its line.
    pub fn parse_toml(text: &str) -> Result<Self, ContractError> {
        let tree = Self::toml_tree(text)?;
        Self::read_only(tree, |path| read::toml_line(text, path))
    }

    /// Parses JSON without validating: the contract, or every field it cannot
    /// read.
    pub fn parse_json(text: &str) -> Result<Self, ContractError> {
        let tree = Self::json_tree(text)?;
        Self::read_only(tree, |_| None)
    }

    /// The TOML document as a value tree; a syntax error stops here.
    fn toml_tree(text: &str) -> Result<toml::Value, ContractError> {
        toml::from_str(text).map_err(|e| ContractError::toml(text, String::new(), e))
    }

    /// The JSON document as a value tree; a syntax error stops here.
    fn json_tree(text: &str) -> Result<serde_json::Value, ContractError> {
        serde_json::from_str(text).map_err(|e| ContractError::json(String::new(), e))
    }

    fn read_only<T: read::Tree>(
        tree: T,
        line_of: impl Fn(&[serde_path_to_error::Segment]) -> Option<usize>,
    ) -> Result<Self, ContractError> {
        match read::read_all(tree, line_of) {
            (Some(contract), problems) if problems.is_empty() => Ok(contract),
            (_, problems) => Err(ContractError::Invalid { problems }),
        }
    }

    /// Reads the tree and validates what was read: every unreadable field and
    /// every rule broken by the rest, in one report.
    fn read_and_validate<T: read::Tree>(
        tree: T,
        line_of: impl Fn(&[serde_path_to_error::Segment]) -> Option<usize>,
    ) -> Result<Self, ContractError> {
        let (contract, mut problems) = read::read_all(tree, &line_of);
        if let Some(contract) = &contract
            && let Err(semantic) = contract.validate()
        {
            problems.merge(semantic);
        }
        problems.locate(|path| line_of(&read::segments(path)));
        problems.sort_by_line();
        match contract {
            Some(contract) if problems.is_empty() => Ok(contract),
            _ => Err(ContractError::Invalid { problems }),
        }
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
        services::validate(
            &self.environment.services,
            &self.filesystem.root,
            &mut problems,
        );
        self.identity.validate(&mut problems);
        self.promotion.validate(&mut problems);
        self.validate_cross_sections(&mut problems);
        self.validate_shape(&mut problems);
        problems.into_result()
    }

    /// Rules that relate two sections.
    fn validate_cross_sections(&self, problems: &mut Problems) {
        for (i, service) in self.environment.services.iter().enumerate() {
            let Some(template) = &service.template else {
                continue;
            };
            // Its mount point would be made in the host directory.
            if let Some(mount) = self.filesystem.host_mounts.iter().find(|m| {
                checks::is_under(&template.path, &m.target)
                    || checks::is_under(&m.target, &template.path)
            }) {
                problems.push(
                    format!("environment.services[{i}].template.path"),
                    format!(
                        "{:?} overlaps the host mount at {:?}",
                        template.path, mount.target
                    ),
                );
            }
        }
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
