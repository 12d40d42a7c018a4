//! The request target of a plain HTTP request the proxy forwards: the
//! destination it names (what the policy decides and `network.jsonl` records)
//! and the request the destination is sent.
//!
//! The destination is taken from the request target alone, which a proxied
//! request writes in absolute form (`GET http://svc.example:8080/path`). The
//! client's `Host` header is not trusted to agree with it: a name-based
//! server behind an allowed address would otherwise serve the site `Host`
//! names (`Host: evil.example`) while the record says `svc.example:8080`.
//! As RFC 9112 §3.2.2 asks of a proxy, every `Host` the client sent (one, none
//! or several) is replaced by one made from the checked destination, so what
//! reaches the destination is what was checked and recorded. A target without
//! an authority (origin form `GET /path`, asterisk form, an authority alone)
//! names no destination and is refused: the proxy never picks a destination
//! from `Host`.

use hyper::Uri;
use hyper::header::{HOST, HeaderMap, HeaderValue};

/// The one port a plain-HTTP target without a port means.
const HTTP_PORT: u16 = 80;

/// Why a request cannot be forwarded as plain HTTP (answered with 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum BadTarget {
    /// The target has no `http://` scheme: origin form (`GET /path`), asterisk
    /// form, an authority alone, or another scheme (`https://` goes through
    /// `CONNECT`).
    #[error("a proxied request names an http:// URL (use CONNECT for https)")]
    NotHttp,
    /// The target is `http://` with an empty host (`http://:8080/`), or one
    /// that cannot be a `Host` header.
    #[error("the request target {target} names no usable host")]
    BadHost {
        /// The target as the client wrote it.
        target: String,
    },
}

/// The destination of a plain HTTP request and what the destination is sent.
#[derive(Debug)]
pub(crate) struct Target {
    /// The host as the target writes it (an IPv6 address in brackets),
    /// without any user information.
    pub(crate) host: String,
    /// The port (80 when the target names none).
    pub(crate) port: u16,
    /// The `Host` the destination is sent: the host, with the port unless it
    /// is HTTP's own.
    host_header: HeaderValue,
}

impl Target {
    /// The destination `uri` names, refused when it names none.
    pub(crate) fn of(uri: &Uri) -> Result<Self, BadTarget> {
        if uri
            .scheme_str()
            .is_none_or(|s| !s.eq_ignore_ascii_case("http"))
        {
            return Err(BadTarget::NotHttp);
        }
        let bad = || BadTarget::BadHost {
            target: uri.to_string(),
        };
        let host = uri.host().filter(|h| !h.is_empty()).ok_or_else(bad)?;
        let port = uri.port_u16().unwrap_or(HTTP_PORT);
        let text = if port == HTTP_PORT {
            host.to_owned()
        } else {
            format!("{host}:{port}")
        };
        Ok(Self {
            host: host.to_owned(),
            port,
            host_header: HeaderValue::from_str(&text).map_err(|_| bad())?,
        })
    }

    /// Replaces every `Host` of `headers` (the client's, however many) with
    /// the one made from the destination.
    pub(crate) fn set_host(&self, headers: &mut HeaderMap) {
        // `insert` removes every earlier value of the name.
        headers.insert(HOST, self.host_header.clone());
    }
}

/// The request target without scheme and authority (`/path?query`): what the
/// destination is sent.
pub(crate) fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query()
        .map_or("/", |p| p.as_str())
        .parse()
        .unwrap_or_else(|_| Uri::from_static("/"))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn target(uri: &str) -> Result<Target, BadTarget> {
        Target::of(&uri.parse::<Uri>().unwrap())
    }

    #[test]
    fn the_host_sent_is_the_destination_checked_whatever_the_client_wrote() {
        let mut headers = HeaderMap::new();
        headers.append(HOST, HeaderValue::from_static("evil.example"));
        headers.append(HOST, HeaderValue::from_static("other.example"));
        let svc = target("http://svc.example:8080/a?b=c").unwrap();
        assert_eq!((svc.host.as_str(), svc.port), ("svc.example", 8080));
        svc.set_host(&mut headers);
        let hosts: Vec<_> = headers.get_all(HOST).iter().collect();
        assert_eq!(hosts, ["svc.example:8080"]);
        // None sent: one is added.
        let mut none = HeaderMap::new();
        svc.set_host(&mut none);
        assert_eq!(none[HOST], "svc.example:8080");
    }

    #[test]
    fn default_port_user_information_and_ipv6_literals() {
        let plain = target("http://svc.example/").unwrap();
        assert_eq!(plain.port, 80);
        assert_eq!(plain.host_header, "svc.example");
        // User information is not part of the destination, nor of Host.
        let user = target("http://evil.example@svc.example:8080/").unwrap();
        assert_eq!(user.host, "svc.example");
        assert_eq!(user.host_header, "svc.example:8080");
        let v6 = target("http://[2001:db8::1]:8081/").unwrap();
        assert_eq!(v6.host_header, "[2001:db8::1]:8081");
        let upper = target("HTTP://svc.example:81/").unwrap();
        assert_eq!(upper.host_header, "svc.example:81");
    }

    #[test]
    fn a_target_without_a_destination_is_refused() {
        for uri in ["/path", "*", "svc.example:8080", "https://svc.example/"] {
            assert_eq!(target(uri).unwrap_err(), BadTarget::NotHttp, "{uri}");
        }
    }

    #[test]
    fn the_origin_form_keeps_path_and_query_only() {
        let uri: Uri = "http://u:p@svc.example:8080/a/b?c=d".parse().unwrap();
        assert_eq!(origin_form(&uri), "/a/b?c=d");
        let bare: Uri = "http://svc.example".parse().unwrap();
        assert_eq!(origin_form(&bare), "/");
    }
}
