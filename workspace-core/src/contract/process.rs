//! The Process boundary: which processes, ports, locks and caches can interact.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::checks;
use super::problem::{Problems, indexed};
use super::services::HttpCheck;

/// Which processes, ports, caches and databases belong to this run alone.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessSection {
    /// How the run's processes are separated from the host's and other runs'.
    #[serde(default)]
    pub isolation: IsolationLevel,
    /// Ports of the workspace published as preview endpoints: with a network of
    /// the run's own, each is a port inside the workspace that the runner
    /// forwards from a host loopback port of its own (any number of runs may use
    /// the same port); without one, the port itself, leased on the host for the
    /// run's whole life.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ports: Vec<u16>,
    /// An HTTP request through a preview endpoint when the run drains (before
    /// anything is stopped): its answer is recorded in `preview.json`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preview_check: Option<HttpCheck>,
    /// A cache key prefix leased to this run (e.g. `run-742`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_prefix: Option<String>,
    /// A database schema leased to this run (e.g. `agent_742`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub database_schema: Option<String>,
    /// Who tears the run's processes, mounts and leases down.
    #[serde(default)]
    pub cleanup_owner: CleanupOwner,
}

/// How a run's processes are separated.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum IsolationLevel {
    /// A process boundary of the run's own: its own pid, mount, network, ipc and uts
    /// namespaces (or container), killed as a whole tree.
    #[default]
    Task,
    /// Plain host processes: they can see and signal everything the runner's user
    /// can. Only for trusted, read-only work.
    DangerSharedHost,
}

/// Who owns the teardown of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub enum CleanupOwner {
    /// The runner tears down after exporting evidence, and `recover` does so when the
    /// runner died.
    #[default]
    Runner,
    /// The host application calls cleanup itself (evidence is still exported first).
    Caller,
}

impl ProcessSection {
    pub(crate) fn validate(&self, problems: &mut Problems) {
        let mut seen = Vec::new();
        for (i, port) in self.ports.iter().enumerate() {
            let field = indexed("process.ports", i);
            if *port == 0 {
                problems.push(
                    field,
                    "port 0 is not a port; lease a fixed port in 1..=65535",
                );
            } else if seen.contains(port) {
                problems.push(field, format!("port {port} is listed twice"));
            } else {
                seen.push(*port);
            }
        }
        if let Some(prefix) = &self.cache_prefix {
            checks::lease_name(problems, "process.cache_prefix", prefix);
        }
        if let Some(schema) = &self.database_schema {
            checks::sql_identifier(problems, "process.database_schema", schema);
        }
    }
}
