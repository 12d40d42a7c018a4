//! What a backend gives the egress proxy it starts for a workspace, and what
//! the workspace's commands are told about it.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

/// The port of the proxy's HTTP listener (`CONNECT` and plain HTTP) on the
/// workspace's own loopback.
pub const HTTP_PROXY_PORT: u16 = 3128;
/// The run-directory file the proxy appends its attempts to; the runner
/// exports it as the evidence's `network.jsonl`.
pub const ATTEMPT_LOG_FILE: &str = "network.jsonl";
/// The port of its SOCKS5 listener.
pub const SOCKS_PROXY_PORT: u16 = 1080;

/// The egress proxy's configuration (a JSON file the backend writes in the
/// run directory).
///
/// The proxy makes its listeners inside the workspace's network namespace
/// (`netns`), on the workspace's own loopback, so that only that workspace
/// can reach them, and its outbound connections from the host's; then it
/// drops to `uid`/`gid` and serves until it is killed with the workspace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct EgressConfig {
    /// The destinations that may be reached (`host:port`).
    pub allow: Vec<String>,
    /// The destinations that may not, whatever `allow` says.
    pub deny: Vec<String>,
    /// The workspace's network namespace (`/proc/<pid>/ns/net`).
    pub netns: PathBuf,
    /// The file each attempt is appended to (`network.jsonl`, one JSON
    /// [`NetworkAttempt`](super::NetworkAttempt) per line).
    pub log: PathBuf,
    /// The run's cgroup in the unified (v2) hierarchy, whose `cmd-N` children
    /// tell which command a connecting process belongs to.
    pub cgroup: Option<PathBuf>,
    /// The host user the proxy runs as once its listeners exist.
    pub uid: u32,
    /// Its group.
    pub gid: u32,
}

/// The variables that point a workspace's commands at its egress proxy: the
/// usual proxy variables in both cases, `NO_PROXY` for the workspace's own
/// loopback, and what common package managers read besides.
pub fn proxy_vars() -> BTreeMap<String, String> {
    let http = format!("http://127.0.0.1:{HTTP_PROXY_PORT}");
    let socks = format!("socks5h://127.0.0.1:{SOCKS_PROXY_PORT}");
    let no_proxy = "localhost,127.0.0.1,::1".to_owned();
    let mut vars = BTreeMap::new();
    for (name, value) in [
        ("HTTP_PROXY", &http),
        ("HTTPS_PROXY", &http),
        ("ALL_PROXY", &socks),
        ("NO_PROXY", &no_proxy),
    ] {
        vars.insert(name.to_owned(), value.clone());
        vars.insert(name.to_ascii_lowercase(), value.clone());
    }
    // npm and cargo have variables of their own; pip and git read the above.
    for name in [
        "npm_config_proxy",
        "npm_config_https_proxy",
        "CARGO_HTTP_PROXY",
    ] {
        vars.insert(name.to_owned(), http.clone());
    }
    vars.insert("npm_config_noproxy".into(), no_proxy);
    vars
}
