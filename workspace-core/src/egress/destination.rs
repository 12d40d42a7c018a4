//! A destination of the allowlist (`environment.network.allow` and `deny`):
//! `host:port`, where the host is a name (`pypi.org`), a wildcard for every
//! name below a suffix (`*.pythonhosted.org`), an IPv4 literal or a bracketed
//! IPv6 literal (`[2001:db8::1]`).

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The host part of a [`Destination`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// Exactly this name (lowercase, without a trailing dot).
    Name(String),
    /// Every name that ends with `.` + this suffix (not the suffix itself).
    Below(String),
    /// This address, named literally.
    Address(IpAddr),
}

/// One `host:port` of the allowlist.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// Which hosts.
    pub host: HostPattern,
    /// Which port.
    pub port: u16,
}

/// Why a text is not a [`Destination`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{text:?} is not host:port ({why})")]
pub struct DestinationError {
    /// The text.
    pub text: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl Destination {
    /// Parses `host:port`.
    pub fn parse(text: &str) -> Result<Self, DestinationError> {
        let fail = |why| DestinationError {
            text: text.to_owned(),
            why,
        };
        let (host, port) = text.rsplit_once(':').ok_or(fail("no port"))?;
        let port = port
            .parse::<u16>()
            .ok()
            .filter(|p| *p != 0)
            .ok_or(fail("the port is not a number from 1 to 65535"))?;
        let host = if let Some(inner) = host.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or(fail("an IPv6 literal is written [address]"))?;
            HostPattern::Address(IpAddr::V6(
                inner
                    .parse::<Ipv6Addr>()
                    .map_err(|_| fail("not an IPv6 address"))?,
            ))
        } else if let Ok(v4) = host.parse::<Ipv4Addr>() {
            HostPattern::Address(IpAddr::V4(v4))
        } else if let Some(suffix) = host.strip_prefix("*.") {
            HostPattern::Below(name(suffix).ok_or(fail("not a host name after \"*.\""))?)
        } else {
            HostPattern::Name(name(host).ok_or(fail("not a host name"))?)
        };
        Ok(Self { host, port })
    }

    /// Whether a request for `host` (a name or an address literal, as the
    /// client asked) and `port` is this destination.
    pub fn matches(&self, host: &Requested, port: u16) -> bool {
        if port != self.port {
            return false;
        }
        match (&self.host, host) {
            (HostPattern::Name(name), Requested::Name(asked)) => name == asked,
            (HostPattern::Below(suffix), Requested::Name(asked)) => asked
                .strip_suffix(suffix.as_str())
                .is_some_and(|rest| rest.ends_with('.') && rest.len() > 1),
            (HostPattern::Address(address), Requested::Address(asked)) => address == asked,
            _ => false,
        }
    }

    /// Whether this destination is a loopback address literal.
    pub fn is_loopback(&self) -> bool {
        matches!(self.host, HostPattern::Address(address) if address.to_canonical().is_loopback())
    }

    /// Whether this destination names `address` literally.
    pub fn names_address(&self, address: IpAddr) -> bool {
        self.host == HostPattern::Address(address)
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.host {
            HostPattern::Name(name) => write!(f, "{name}:{}", self.port),
            HostPattern::Below(suffix) => write!(f, "*.{suffix}:{}", self.port),
            HostPattern::Address(IpAddr::V4(v4)) => write!(f, "{v4}:{}", self.port),
            HostPattern::Address(IpAddr::V6(v6)) => write!(f, "[{v6}]:{}", self.port),
        }
    }
}

/// The host a client asked for: a name, or an address literal.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    /// A host name (lowercase, without a trailing dot).
    Name(String),
    /// An address literal.
    Address(IpAddr),
}

impl Requested {
    /// What a client's host text asks for (`example.org`, `10.0.0.1`,
    /// `[::1]` or `::1`); `None` for text that is neither a name nor an
    /// address.
    pub fn parse(host: &str) -> Option<Self> {
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(address) = bare.parse::<IpAddr>() {
            return Some(Self::Address(address));
        }
        name(host).map(Self::Name)
    }
}

impl fmt::Display for Requested {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Name(name) => f.write_str(name),
            Self::Address(IpAddr::V4(v4)) => write!(f, "{v4}"),
            Self::Address(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
        }
    }
}

/// `text` as a host name: 1 to 253 characters of dot-separated labels of
/// letters, digits, `-` and `_` (not at a label's ends for `-`), lowercased,
/// one trailing dot dropped.
fn name(text: &str) -> Option<String> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let valid_label = |label: &str| {
        (1..=63).contains(&label.len())
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    ((1..=253).contains(&text.len()) && text.split('.').all(valid_label))
        .then(|| text.to_ascii_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(host: &str) -> Requested {
        Requested::parse(host).unwrap()
    }

    #[test]
    fn names_wildcards_and_literals_parse_and_print_back() {
        for text in [
            "pypi.org:443",
            "*.pythonhosted.org:443",
            "10.0.0.7:8080",
            "[2001:db8::1]:443",
        ] {
            assert_eq!(Destination::parse(text).unwrap().to_string(), text);
        }
        assert_eq!(
            Destination::parse("PyPI.org.:443").unwrap().to_string(),
            "pypi.org:443"
        );
    }

    #[test]
    fn malformed_destinations_say_what_is_wrong() {
        for (text, why) in [
            ("pypi.org", "no port"),
            ("pypi.org:0", "the port is not a number from 1 to 65535"),
            ("pypi.org:https", "the port is not a number from 1 to 65535"),
            ("2001:db8::1:443", "not a host name"),
            ("[2001:db8::1:443", "an IPv6 literal is written [address]"),
            ("*.:443", "not a host name after \"*.\""),
            ("a b:80", "not a host name"),
            ("-a.org:80", "not a host name"),
            (":80", "not a host name"),
        ] {
            assert_eq!(Destination::parse(text).unwrap_err().why, why, "{text}");
        }
    }

    #[test]
    fn a_wildcard_covers_names_below_its_suffix_only() {
        let below = Destination::parse("*.example.org:443").unwrap();
        assert!(below.matches(&asked("files.example.org"), 443));
        assert!(below.matches(&asked("a.b.example.org"), 443));
        assert!(!below.matches(&asked("example.org"), 443));
        assert!(!below.matches(&asked("badexample.org"), 443));
        assert!(!below.matches(&asked("files.example.org"), 80));
        assert!(!below.matches(&asked("example.org.evil.net"), 443));
    }

    #[test]
    fn an_exact_name_is_matched_without_case_or_trailing_dot() {
        let exact = Destination::parse("pypi.org:443").unwrap();
        assert!(exact.matches(&asked("PYPI.ORG."), 443));
        assert!(!exact.matches(&asked("www.pypi.org"), 443));
        // A name never matches an address rule, nor an address a name rule.
        let literal = Destination::parse("10.0.0.7:80").unwrap();
        assert!(literal.matches(&asked("10.0.0.7"), 80));
        assert!(!exact.matches(&asked("10.0.0.7"), 443));
        assert!(literal.names_address("10.0.0.7".parse().unwrap()));
        assert!(
            Destination::parse("[::1]:80")
                .unwrap()
                .matches(&asked("::1"), 80)
        );
    }
}
