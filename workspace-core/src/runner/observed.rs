//! `observed.json`: what was applied and what the probe inside the boundary saw.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::boundary::{
    EnvironmentPlan, FilesystemRecord, IdentityPlan, ObservedBoundary, ResolvedLimits,
};
use crate::contract::NetworkMode;

/// The content of `observed.json`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ObservedRecord {
    /// What the probe inside the sealed boundary saw, and every mismatch with the
    /// contract.
    pub probe: ObservedBoundary,
    /// The filesystem grants applied.
    pub filesystem: FilesystemRecord,
    /// The environment applied (variable names only: values may be private).
    pub environment: AppliedEnvironment,
    /// The identity (credential names and digests, never values).
    pub identity: IdentityPlan,
    /// The capped disk the run's writable layer lives on, as mounted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<crate::boundary::DiskRecord>,
}

/// The environment a run was sealed with, without variable values.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AppliedEnvironment {
    /// The names of the variables every command starts with.
    pub variables: Vec<String>,
    /// The network policy.
    pub network: NetworkMode,
    /// The limits.
    pub limits: ResolvedLimits,
    /// The toolchain fingerprint.
    pub fingerprint: BTreeMap<String, String>,
}

impl From<&EnvironmentPlan> for AppliedEnvironment {
    fn from(plan: &EnvironmentPlan) -> Self {
        Self {
            variables: plan.vars.keys().cloned().collect(),
            network: plan.network,
            limits: plan.limits,
            fingerprint: plan.fingerprint.clone(),
        }
    }
}
