//! The allowlist's decisions: which destinations a run may reach, asked by
//! name before anything is resolved, then by the address the name resolved
//! to before anything is connected.

use std::net::IpAddr;

use serde::{Deserialize, Serialize};

use super::address::special_use;
use super::destination::{Destination, DestinationError, Requested};
use crate::contract::Network;

/// A run's egress policy: the contract's `allow` and `deny` destinations.
/// Deny wins; what no rule allows is denied; an empty allowlist allows
/// nothing.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct EgressPolicy {
    allow: Vec<Destination>,
    deny: Vec<Destination>,
}

/// A decision of the policy.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "decision", rename_all = "kebab-case")]
pub enum Decision {
    /// The destination may be reached.
    Allow {
        /// The rule that allows it (as the contract wrote it), or why its
        /// address may be connected to.
        reason: String,
    },
    /// It may not.
    Deny {
        /// Why, in words.
        reason: String,
    },
}

impl Decision {
    /// Whether the destination may be reached.
    pub fn allowed(&self) -> bool {
        matches!(self, Self::Allow { .. })
    }

    fn deny(reason: impl Into<String>) -> Self {
        Self::Deny {
            reason: reason.into(),
        }
    }
}

impl EgressPolicy {
    /// The policy of the contract's network section (validated: every
    /// destination parses).
    pub fn of(network: &Network) -> Result<Self, DestinationError> {
        let parse = |list: &[String]| {
            list.iter()
                .map(|d| Destination::parse(d))
                .collect::<Result<Vec<_>, _>>()
        };
        Ok(Self {
            allow: parse(&network.allow)?,
            deny: parse(&network.deny)?,
        })
    }

    /// The policy of `allow` and `deny` destinations.
    pub fn new(allow: Vec<Destination>, deny: Vec<Destination>) -> Self {
        Self { allow, deny }
    }

    /// The decision for a request of `host` (as the client wrote it) and
    /// `port`, before anything is resolved.
    pub fn decide(&self, host: &str, port: u16) -> Decision {
        let Some(asked) = Requested::parse(host) else {
            return Decision::deny(format!("{host:?} is neither a host name nor an address"));
        };
        if let Some(rule) = self.deny.iter().find(|d| d.matches(&asked, port)) {
            return Decision::deny(format!("denied by {rule}"));
        }
        match self.allow.iter().find(|d| d.matches(&asked, port)) {
            Some(rule) => Decision::Allow {
                reason: format!("allowed by {rule}"),
            },
            None => Decision::deny(format!("{asked}:{port} is not on the allowlist")),
        }
    }

    /// The decision for connecting to `address`, which an allowed request
    /// resolved to (an address literal resolves to itself): an address that is
    /// not public unicast is refused unless a rule names it literally.
    pub fn check_address(&self, address: IpAddr, port: u16) -> Decision {
        // The proxy connects from the host: its loopback is the host's, which
        // no contract reaches (the workspace's own is reached directly).
        if address.to_canonical().is_loopback() {
            return Decision::deny(format!(
                "resolves to {address}, the host's loopback, which no workspace reaches"
            ));
        }
        if self
            .deny
            .iter()
            .any(|d| d.port == port && d.names_address(address))
        {
            return Decision::deny(format!("{address} is denied"));
        }
        match special_use(address) {
            Some(kind)
                if !self
                    .allow
                    .iter()
                    .any(|d| d.port == port && d.names_address(address)) =>
            {
                Decision::deny(format!(
                    "resolves to {address}, {kind}, which the allowlist does not name"
                ))
            }
            Some(_) => Decision::Allow {
                reason: format!("{address} is named by the allowlist"),
            },
            None => Decision::Allow {
                reason: format!("{address} is a public address"),
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> EgressPolicy {
        let parse = |l: &[&str]| l.iter().map(|d| Destination::parse(d).unwrap()).collect();
        EgressPolicy::new(parse(allow), parse(deny))
    }

    #[test]
    fn deny_wins_and_what_no_rule_allows_is_denied() {
        let p = policy(&["*.example.org:443"], &["secret.example.org:443"]);
        assert!(p.decide("files.example.org", 443).allowed());
        assert_eq!(
            p.decide("secret.example.org", 443),
            Decision::Deny {
                reason: "denied by secret.example.org:443".into()
            }
        );
        assert_eq!(
            p.decide("files.example.org", 8443),
            Decision::Deny {
                reason: "files.example.org:8443 is not on the allowlist".into()
            }
        );
        assert!(!policy(&[], &[]).decide("example.org", 443).allowed());
        assert!(!p.decide("exa mple.org", 443).allowed());
    }

    #[test]
    fn an_allowed_name_that_resolves_inward_is_refused_unless_named() {
        let p = policy(&["pypi.org:443", "10.0.0.7:8080"], &[]);
        assert!(p.decide("pypi.org", 443).allowed());
        for inward in [
            "127.0.0.1",
            "169.254.169.254",
            "10.0.0.8",
            "::ffff:10.0.0.7",
            "fd00::1",
        ] {
            let decision = p.check_address(inward.parse().unwrap(), 443);
            assert!(!decision.allowed(), "{inward}: {decision:?}");
        }
        assert!(
            p.check_address("151.101.0.223".parse().unwrap(), 443)
                .allowed()
        );
        // Loopback never, not even named (the workspace's own is reached directly).
        let looped = policy(&["127.0.0.1:8080"], &[]);
        assert!(
            !looped
                .check_address("127.0.0.1".parse().unwrap(), 8080)
                .allowed()
        );
        let mapped = policy(&["[::ffff:127.0.0.1]:8080"], &[]);
        assert!(
            !mapped
                .check_address("::ffff:127.0.0.1".parse().unwrap(), 8080)
                .allowed()
        );
        // Named literally (and on that port), a private address may be reached.
        assert!(p.decide("10.0.0.7", 8080).allowed());
        assert!(p.check_address("10.0.0.7".parse().unwrap(), 8080).allowed());
        assert!(!p.check_address("10.0.0.7".parse().unwrap(), 8081).allowed());
    }

    #[test]
    fn a_denied_address_is_refused_even_when_a_name_allowed_it() {
        let p = policy(&["mirror.example.org:443"], &["[2001:4860::8888]:443"]);
        assert!(
            !p.check_address("2001:4860::8888".parse().unwrap(), 443)
                .allowed()
        );
    }
}
