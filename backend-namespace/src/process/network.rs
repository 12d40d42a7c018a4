//! The network a run's commands find, read back once it is sealed: the
//! workspace's network namespace routes nowhere but its own loopback,
//! whatever the mode (its routing tables, read from the host through the
//! sandbox's pid 1), and for an allowlisted run a direct connection out fails
//! while the egress proxy answers on that loopback (tried from a thread in the
//! namespace: a few milliseconds, paid by allowlisted runs only).

use std::net::{Ipv4Addr, SocketAddr};
use std::time::Duration;

use serde::Serialize;
use workspace_core::contract::NetworkMode;
use workspace_core::egress::{HTTP_PROXY_PORT, SOCKS_PROXY_PORT};

use super::error::ProcessError;
use super::in_sandbox;
use super::seal::Sealed;

/// A public address a direct connection from inside is tried to (it must
/// never get there).
const OUTSIDE: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::new(1, 1, 1, 1)), 443);
/// How long either connection may take.
const TIMEOUT: Duration = Duration::from_secs(1);

/// What `observed.json` records of the run's network (`probe.facts.network`).
#[derive(Debug, Serialize)]
pub(crate) struct NetworkObservation {
    /// The declared mode.
    mode: NetworkMode,
    /// The interfaces of the routes of the namespace's IPv4 and IPv6 tables
    /// that do not stay on its loopback (none, or a mismatch).
    routes_out: Vec<String>,
    /// An allowlisted run's checks from inside.
    #[serde(skip_serializing_if = "Option::is_none")]
    egress: Option<EgressObservation>,
}

#[derive(Debug, Serialize)]
struct EgressObservation {
    /// How a direct connection from inside to [`OUTSIDE`] ended.
    direct_connect: String,
    /// Whether it connected (a mismatch).
    direct_connected: bool,
    /// The proxy's listeners, and whether they answered.
    http: String,
    socks: String,
    answered: bool,
}

impl NetworkObservation {
    /// The difference from the contract, if any.
    pub(crate) fn mismatch(&self) -> Option<String> {
        if !self.routes_out.is_empty() {
            return Some(format!(
                "the run's network has routes out (through {})",
                self.routes_out.join(", ")
            ));
        }
        match &self.egress {
            Some(egress) if egress.direct_connected => Some(format!(
                "a direct connection from inside reached {OUTSIDE}: the run has a route out"
            )),
            Some(egress) if !egress.answered => Some(format!(
                "environment.network.mode = allowlist, and the egress proxy does not answer at {} inside",
                egress.http
            )),
            _ => None,
        }
    }
}

/// Reads the run's routes and, for an allowlisted run, tries the connections
/// from inside (blocking threads).
pub(crate) async fn observe(
    sealed: &Sealed,
    mode: NetworkMode,
) -> Result<NetworkObservation, ProcessError> {
    let sandbox = std::sync::Arc::clone(&sealed.sandbox);
    tokio::task::spawn_blocking(move || {
        let routes_out = routes_out(sandbox.entry_pid());
        let egress = match mode {
            NetworkMode::Allowlist => {
                let direct = in_sandbox::connect_out(&sandbox, OUTSIDE, TIMEOUT)?;
                Some(EgressObservation {
                    direct_connected: direct.is_none(),
                    direct_connect: match direct {
                        Some(e) => format!("failed: {e}"),
                        None => "connected".into(),
                    },
                    http: format!("127.0.0.1:{HTTP_PROXY_PORT}"),
                    socks: format!("127.0.0.1:{SOCKS_PROXY_PORT}"),
                    answered: in_sandbox::connect(&sandbox, HTTP_PROXY_PORT, TIMEOUT).is_ok()
                        && in_sandbox::connect(&sandbox, SOCKS_PROXY_PORT, TIMEOUT).is_ok(),
                })
            }
            NetworkMode::Deny | NetworkMode::Loopback => None,
        };
        Ok(NetworkObservation {
            mode,
            routes_out,
            egress,
        })
    })
    .await
    .map_err(|source| ProcessError::Task {
        step: "observing the run's network",
        source,
    })?
}

/// The interfaces of the routes in the network namespace of `pid` that leave
/// its loopback (`/proc/<pid>/net/route` and `ipv6_route`); a table that
/// cannot be read counts as a route out.
fn routes_out(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    for (table, iface_column) in [("route", 0), ("ipv6_route", 9)] {
        let path = format!("/proc/{pid}/net/{table}");
        let Ok(text) = std::fs::read_to_string(&path) else {
            out.push(format!("(unreadable {path})"));
            continue;
        };
        let rows = text.lines().skip(usize::from(table == "route"));
        for row in rows {
            if let Some(iface) = row.split_whitespace().nth(iface_column)
                && iface != "lo"
                && !out.iter().any(|o| o == iface)
            {
                out.push(iface.to_owned());
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_has_routes_out_and_they_are_named() {
        // This test's own namespace is the host's: its routes leave.
        let out = routes_out(std::process::id());
        assert!(!out.is_empty(), "the host has a route out: {out:?}");
        assert!(!out.iter().any(|o| o == "lo"), "{out:?}");
    }
}
