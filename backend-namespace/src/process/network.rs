//! The network a run's commands find, read back once it is sealed: a direct
//! connection out fails whatever the mode (the workspace's network namespace
//! has nothing but its own loopback), and an allowlisted run's egress proxy
//! answers on that loopback.

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
    /// How a direct connection from inside to [`OUTSIDE`] ended.
    direct_connect: String,
    /// Whether it connected (a mismatch).
    direct_connected: bool,
    /// An allowlisted run's proxy listeners, and whether they answered.
    #[serde(skip_serializing_if = "Option::is_none")]
    proxy: Option<ProxyObservation>,
}

#[derive(Debug, Serialize)]
struct ProxyObservation {
    http: String,
    socks: String,
    answered: bool,
}

impl NetworkObservation {
    /// The difference from the contract, if any.
    pub(crate) fn mismatch(&self) -> Option<String> {
        if self.direct_connected {
            return Some(format!(
                "a direct connection from inside reached {OUTSIDE}: the run has a route out"
            ));
        }
        match &self.proxy {
            Some(proxy) if !proxy.answered => Some(format!(
                "environment.network.mode = allowlist, and the egress proxy does not answer at {} inside",
                proxy.http
            )),
            _ => None,
        }
    }
}

/// Tries both connections from inside the sealed run (blocking threads).
pub(crate) async fn observe(
    sealed: &Sealed,
    mode: NetworkMode,
) -> Result<NetworkObservation, ProcessError> {
    let sandbox = std::sync::Arc::clone(&sealed.sandbox);
    tokio::task::spawn_blocking(move || {
        let direct = in_sandbox::connect_out(&sandbox, OUTSIDE, TIMEOUT)?;
        let proxy = (mode == NetworkMode::Allowlist).then(|| ProxyObservation {
            http: format!("127.0.0.1:{HTTP_PROXY_PORT}"),
            socks: format!("127.0.0.1:{SOCKS_PROXY_PORT}"),
            answered: in_sandbox::connect(&sandbox, HTTP_PROXY_PORT, TIMEOUT).is_ok()
                && in_sandbox::connect(&sandbox, SOCKS_PROXY_PORT, TIMEOUT).is_ok(),
        });
        Ok(NetworkObservation {
            mode,
            direct_connected: direct.is_none(),
            direct_connect: match direct {
                Some(e) => format!("failed: {e}"),
                None => "connected".into(),
            },
            proxy,
        })
    })
    .await
    .map_err(|source| ProcessError::Task {
        step: "observing the run's network",
        source,
    })?
}
