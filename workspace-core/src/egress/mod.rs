//! Egress through an allowlist (`environment.network.mode = "allowlist"`): the
//! policy a run's egress proxy applies, the variables that point a run's
//! commands at it, and the record of each attempt (`network.jsonl`).
//!
//! The policy is data and decisions only; the proxy that applies it is a
//! program of its own that a backend starts per workspace (see
//! [`EgressConfig`]).

mod address;
mod config;
mod destination;
mod policy;
mod record;

pub use address::special_use;
pub use config::{ATTEMPT_LOG_FILE, EgressConfig, HTTP_PROXY_PORT, SOCKS_PROXY_PORT, proxy_vars};
pub use destination::{Destination, DestinationError, HostPattern, Requested};
pub use policy::{Decision, EgressPolicy};
pub use record::{NetworkAttempt, Protocol};
