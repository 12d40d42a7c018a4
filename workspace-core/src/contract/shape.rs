//! Task shapes: the five kinds of agent work, each with a least-privilege preset and
//! the rules a contract of that shape must keep.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Contract;
use super::environment::{Assurance, EnvironmentSection, Limits, Network, NetworkMode};
use super::filesystem::{FilesystemSection, MountMode};
use super::identity::IdentitySection;
use super::problem::{Problems, indexed};
use super::process::{IsolationLevel, ProcessSection};
use super::promotion::{Approval, PromotionSection, PromotionTarget};
use super::source::SourceSection;
use super::units::{ByteSize, DurationSpec};

/// The kind of work a run does; it picks the preset and adds rules to validation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum TaskShape {
    /// Reading and explaining code: nothing is writable, nothing is promoted but notes.
    ReadOnlyOrientation,
    /// A small change in a known place: the workspace is writable, a patch comes out.
    NarrowFix,
    /// One of several agents changing the same repository at once: each gets its own
    /// leases and its own review branch.
    ParallelChanges,
    /// Reproducing a problem across services: loopback network, services, more time.
    IntegrationInvestigation,
    /// A change where a mistake is expensive: required checks, human approval, full
    /// assurance, no read-write host mounts.
    HighConsequenceChange,
}

impl std::fmt::Display for TaskShape {
    /// The name a contract spells it with (`narrow-fix`).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ReadOnlyOrientation => "read-only-orientation",
            Self::NarrowFix => "narrow-fix",
            Self::ParallelChanges => "parallel-changes",
            Self::IntegrationInvestigation => "integration-investigation",
            Self::HighConsequenceChange => "high-consequence-change",
        })
    }
}

impl TaskShape {
    /// All shapes, in order of increasing consequence.
    pub const ALL: [TaskShape; 5] = [
        Self::ReadOnlyOrientation,
        Self::NarrowFix,
        Self::ParallelChanges,
        Self::IntegrationInvestigation,
        Self::HighConsequenceChange,
    ];
}

impl Contract {
    /// The least-privilege contract of `shape` for `objective` on `source`.
    ///
    /// Everything a shape does not need is denied: network, host mounts,
    /// credentials, authority. A high-consequence change still needs at least one
    /// `promotion.required_checks` entry before it validates, because only the
    /// caller knows which checks prove the change.
    pub fn preset(shape: TaskShape, objective: impl Into<String>, source: SourceSection) -> Self {
        let writes = shape != TaskShape::ReadOnlyOrientation;
        let whole_workspace = if writes {
            vec![".".to_owned()]
        } else {
            Vec::new()
        };
        let mut limits = Limits {
            cpus: Some(2.0),
            memory: Some(ByteSize(4 << 30)),
            pids: Some(512),
            // No disk cap by default: not every backend can enforce one, and a
            // preset must run on the default backend.
            disk: None,
            tmp: Some(ByteSize(1 << 30)),
            wall_time: Some(DurationSpec::from_secs(30 * 60)),
            open_files: Some(4096),
            // The default output cap: core keeps it, whatever the backend.
            output: None,
            output_overflow: None,
        };
        let mut network = Network::default();
        if shape == TaskShape::IntegrationInvestigation {
            network.mode = NetworkMode::Loopback;
            limits.memory = Some(ByteSize(8 << 30));
            limits.pids = Some(2048);
            limits.wall_time = Some(DurationSpec::from_secs(3600));
        }
        let target = match shape {
            TaskShape::ParallelChanges | TaskShape::HighConsequenceChange => {
                PromotionTarget::DraftReview
            }
            _ => PromotionTarget::Patch,
        };
        Contract {
            objective: objective.into(),
            shape,
            source,
            filesystem: FilesystemSection {
                writable: whole_workspace.clone(),
                outputs: whole_workspace,
                excluded: vec!["**/.env".into(), "**/.env.*".into()],
                ..FilesystemSection::default()
            },
            process: ProcessSection::default(),
            environment: EnvironmentSection {
                network,
                limits,
                assurance: Assurance::Required,
                ..EnvironmentSection::default()
            },
            identity: IdentitySection::default(),
            promotion: PromotionSection {
                target,
                merge_approval: Approval::Human,
                required_checks: Vec::new(),
            },
        }
    }

    /// The rules of the contract's shape.
    pub(crate) fn validate_shape(&self, problems: &mut Problems) {
        let shape = self.shape;
        if self.process.isolation == IsolationLevel::DangerSharedHost
            && shape != TaskShape::ReadOnlyOrientation
        {
            problems.push(
                "process.isolation",
                "danger-shared-host is only allowed for a read-only orientation",
            );
        }
        match shape {
            TaskShape::ReadOnlyOrientation => {
                if !self.filesystem.writable.is_empty() {
                    problems.push(
                        "filesystem.writable",
                        "a read-only orientation writes nothing; leave it empty",
                    );
                }
                if self.promotion.target != PromotionTarget::Patch {
                    problems.push(
                        "promotion.target",
                        "a read-only orientation has nothing to review; use \"patch\"",
                    );
                }
            }
            TaskShape::NarrowFix
            | TaskShape::ParallelChanges
            | TaskShape::IntegrationInvestigation => {
                if self.filesystem.writable.is_empty() {
                    problems.push(
                        "filesystem.writable",
                        format!("shape {shape} needs at least one writable path (e.g. writable = [\".\"])"),
                    );
                }
            }
            TaskShape::HighConsequenceChange => self.validate_high_consequence(problems),
        }
    }

    fn validate_high_consequence(&self, problems: &mut Problems) {
        if self.filesystem.writable.is_empty() {
            problems.push(
                "filesystem.writable",
                "a change needs at least one writable path",
            );
        }
        if self.environment.assurance != Assurance::Required {
            problems.push(
                "environment.assurance",
                "a high-consequence change requires \"required\" assurance",
            );
        }
        if self.promotion.merge_approval != Approval::Human {
            problems.push(
                "promotion.merge_approval",
                "a high-consequence change requires a human approval",
            );
        }
        if self.promotion.required_checks.is_empty() {
            problems.push(
                "promotion.required_checks",
                "a high-consequence change needs at least one required check",
            );
        }
        if self.environment.network.mode == NetworkMode::Allowlist {
            problems.push(
                "environment.network.mode",
                "a high-consequence change allows no outbound network",
            );
        }
        for (i, mount) in self.filesystem.host_mounts.iter().enumerate() {
            if mount.mode == MountMode::DangerReadWrite {
                problems.push(
                    format!("{}.mode", indexed("filesystem.host_mounts", i)),
                    "a high-consequence change allows no read-write host mounts",
                );
            }
        }
    }
}

#[cfg(test)]
mod display_tests {
    use super::TaskShape;

    #[test]
    fn a_shape_is_shown_as_a_contract_spells_it() {
        for shape in TaskShape::ALL {
            let spelled = serde_json::to_string(&shape).unwrap_or_default();
            assert_eq!(format!("\"{shape}\""), spelled);
        }
    }
}
