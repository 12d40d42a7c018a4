//! The Promotion boundary: how a result becomes visible.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};
use super::units::DurationSpec;

/// How a run's result becomes visible: always as a patch with evidence, optionally
/// as a draft review branch, never merged or deployed by the run.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PromotionSection {
    /// Where the result goes.
    #[serde(default)]
    pub target: PromotionTarget,
    /// Checks that must pass on the exact patch before it is promoted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub required_checks: Vec<RequiredCheck>,
    /// Who must approve before the result may be marked as a merge candidate.
    #[serde(default)]
    pub merge_approval: Approval,
}

/// Where a result goes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum PromotionTarget {
    /// A patch file and the evidence bundle; nothing is written to the repository.
    #[default]
    Patch,
    /// Also a commit on `refs/heads/review/<run-id>` in the source repository, once
    /// the required checks have passed for this patch.
    DraftReview,
}

/// A check run on the workspace before promotion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RequiredCheck {
    /// Unique name of the check.
    pub name: String,
    /// Program and arguments, run in the sealed workspace.
    pub command: Vec<String>,
    /// Wall-clock cap for the check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<DurationSpec>,
}

/// Who approves a merge candidate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum Approval {
    /// A recorded human approval, bound to the patch digest.
    #[default]
    Human,
    /// No approval: the result can be marked a merge candidate once checks pass.
    DangerNone,
}

impl PromotionSection {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        let mut names = Vec::new();
        for (i, check) in self.required_checks.iter().enumerate() {
            let field = indexed("promotion.required_checks", i);
            checks::unique_name(
                problems,
                &format!("{field}.name"),
                &check.name,
                &mut names,
                "check",
            );
            checks::command(problems, &format!("{field}.command"), &check.command);
            if check.timeout.is_some_and(|t| t.as_millis() == 0) {
                problems.push(
                    format!("{field}.timeout"),
                    "is zero; the check could never pass",
                );
            }
        }
    }
}
