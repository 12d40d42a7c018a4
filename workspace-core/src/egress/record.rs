//! `network.jsonl`: one record per connection attempt through a run's egress
//! proxy, allowed or not.

use serde::{Deserialize, Serialize};

use super::policy::Decision;

/// How a client asked the proxy for a destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// HTTP `CONNECT host:port` (what HTTPS through `HTTPS_PROXY` uses).
    HttpConnect,
    /// A plain HTTP request with an absolute URL (`HTTP_PROXY`).
    Http,
    /// SOCKS5 `CONNECT` (`ALL_PROXY=socks5h://...`).
    Socks5,
}

/// One attempt, as the proxy saw it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAttempt {
    /// When it was asked, in milliseconds since the Unix epoch.
    pub at_unix_ms: u64,
    /// The command whose process asked (its sequence number), when the proxy
    /// could tell.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub command: Option<u32>,
    /// How it was asked.
    pub protocol: Protocol,
    /// The destination as the client asked for it (`host:port`).
    pub destination: String,
    /// The address the proxy resolved it to and checked (the one it
    /// connected to, when it did).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolved: Option<String>,
    /// Allowed or denied, and why.
    #[serde(flatten)]
    pub decision: Decision,
    /// Why an allowed attempt still failed (the connection was refused, the
    /// name did not resolve).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Bytes from the client to the destination.
    pub bytes_up: u64,
    /// Bytes from the destination to the client.
    pub bytes_down: u64,
    /// How long the connection lasted, in milliseconds.
    pub duration_ms: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_one_flat_json_object() {
        let record = NetworkAttempt {
            at_unix_ms: 1,
            command: Some(2),
            protocol: Protocol::HttpConnect,
            destination: "pypi.org:443".into(),
            resolved: Some("151.101.0.223:443".into()),
            decision: Decision::Allow {
                reason: "allowed by pypi.org:443".into(),
            },
            error: None,
            bytes_up: 10,
            bytes_down: 20,
            duration_ms: 3,
        };
        let json = serde_json::to_value(&record).unwrap();
        assert_eq!(json["decision"], "allow");
        assert_eq!(json["reason"], "allowed by pypi.org:443");
        assert_eq!(json["protocol"], "http-connect");
        let back: NetworkAttempt = serde_json::from_value(json).unwrap();
        assert_eq!(back, record);
    }
}
