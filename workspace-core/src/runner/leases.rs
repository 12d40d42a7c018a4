//! The host-wide names and ports a run holds, leased by the runner.
//!
//! A cache prefix and a database schema name declared by the contract are stems:
//! each run gets a unique name from its stem (`cache-3`, `orders_3`), unique across
//! every process sharing the runtime directory, and finds it in its environment
//! as `AGENT_WORKSPACE_CACHE_PREFIX` and `AGENT_WORKSPACE_DB_SCHEMA`. Declared
//! ports are leased on the host only when the process boundary does not give each
//! run a network of its own. The names are kept in the run directory so a resumed
//! run leases the very same ones again.
//!
//! A name belongs to the workspace for its whole life, not to the process that
//! drives it: where the sandbox holds descriptors for its life (the capacity
//! ticket's), it holds the names' locks too, so a workspace left detached keeps
//! them, and another workspace never gets the same name while it lives. The
//! next process that attaches finds them held under the run's own record.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::error::RunErrorKind;
use crate::RunId;
use crate::contract::ProcessSection;
use crate::lease::{LeaseError, Leases, NameKind, NameLease, PortLease};

/// The environment variable that carries a run's cache prefix.
pub const CACHE_PREFIX_VAR: &str = "AGENT_WORKSPACE_CACHE_PREFIX";
/// The environment variable that carries a run's database schema name.
pub const SCHEMA_VAR: &str = "AGENT_WORKSPACE_DB_SCHEMA";
/// The file in the run directory that records the leased names.
pub const LEASES_STATE_FILE: &str = "leases.json";

/// What a run leased, by name: kept in the run directory, listed in the outcome.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeasedNames {
    /// The cache prefix, if the contract declares one.
    pub cache_prefix: Option<String>,
    /// The schema name, if the contract declares one.
    pub schema: Option<String>,
    /// Ports leased on the host (empty when the run has a network of its own).
    pub host_ports: Vec<u16>,
}

impl LeasedNames {
    /// One line per lease, for the outcome.
    pub fn describe(&self) -> Vec<String> {
        let mut lines = Vec::new();
        lines.extend(
            self.cache_prefix
                .iter()
                .map(|n| format!("cache prefix {n}")),
        );
        lines.extend(self.schema.iter().map(|n| format!("schema {n}")));
        lines.extend(self.host_ports.iter().map(|p| format!("host port {p}")));
        lines
    }

    /// The variables that tell the run its names.
    pub fn vars(&self) -> BTreeMap<String, String> {
        let mut vars = BTreeMap::new();
        if let Some(name) = &self.cache_prefix {
            vars.insert(CACHE_PREFIX_VAR.to_owned(), name.clone());
        }
        if let Some(name) = &self.schema {
            vars.insert(SCHEMA_VAR.to_owned(), name.clone());
        }
        vars
    }
}

/// The locks behind a run's leases: released when dropped (or when the process
/// dies, however it dies).
#[derive(Debug, Default)]
pub(super) struct RunLeases {
    pub names: LeasedNames,
    _locks: Vec<NameLease>,
    _ports: Vec<PortLease>,
}

impl RunLeases {
    /// Leases what `section` declares for `run_id`: fresh unique names, or exactly
    /// `previous` ones when the run is resumed. With `held_by_sandbox`, a previous
    /// name whose lock is taken under the run's own record is the run's (its
    /// live sandbox holds it); the caller makes sure that sandbox lives.
    pub(super) fn acquire(
        runtime_dir: &Path,
        run_id: &RunId,
        section: &ProcessSection,
        private_network: bool,
        previous: Option<&LeasedNames>,
        held_by_sandbox: bool,
    ) -> Result<Self, RunErrorKind> {
        let wants_ports = !private_network && !section.ports.is_empty();
        if section.cache_prefix.is_none() && section.database_schema.is_none() && !wants_ports {
            return Ok(Self::default());
        }
        let leases = Leases::open(runtime_dir, 1..=u16::MAX).map_err(lease_error)?;
        let holder = run_id.as_str();
        let mut run = Self::default();
        // The name, and its lock unless the run's sandbox holds it.
        let name = |kind: NameKind, stem: &str, before: Option<&String>| match before {
            Some(exact) if held_by_sandbox => leases
                .lease_name_unless_held_by(kind, exact, holder)
                .map(|lease| (exact.clone(), lease)),
            Some(exact) => leases
                .lease_name(kind, exact, holder)
                .map(|lease| (exact.clone(), Some(lease))),
            None => leases
                .lease_unique(kind, stem, holder)
                .map(|lease| (lease.name().to_owned(), Some(lease))),
        };
        if let Some(stem) = &section.cache_prefix {
            let before = previous.and_then(|p| p.cache_prefix.as_ref());
            let (leased, lock) = name(NameKind::CachePrefix, stem, before).map_err(lease_error)?;
            run.names.cache_prefix = Some(leased);
            run._locks.extend(lock);
        }
        if let Some(stem) = &section.database_schema {
            let before = previous.and_then(|p| p.schema.as_ref());
            let (leased, lock) = name(NameKind::Schema, stem, before).map_err(lease_error)?;
            run.names.schema = Some(leased);
            run._locks.extend(lock);
        }
        if wants_ports {
            for &port in &section.ports {
                let lease = leases.lease_port_exact(port, holder).map_err(lease_error)?;
                run.names.host_ports.push(port);
                run._ports.push(lease);
            }
        }
        Ok(run)
    }

    /// Descriptors of the names' locks for the sandbox to hold for its life:
    /// from then on dropping these leases only closes this process's copies.
    pub(super) fn share(&mut self) -> std::io::Result<Vec<std::os::fd::OwnedFd>> {
        self._locks.iter_mut().map(NameLease::share).collect()
    }
}

fn lease_error(error: LeaseError) -> RunErrorKind {
    RunErrorKind::Lease(error)
}
