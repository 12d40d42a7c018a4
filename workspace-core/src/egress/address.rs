//! Addresses a proxy never connects to unless the contract names them
//! literally: the host itself and the networks around it (loopback, private,
//! link-local and cloud metadata endpoints, carrier-grade NAT, unique-local
//! IPv6), addresses no single host has (unspecified, broadcast, multicast,
//! reserved), and IPv6 forms that carry an IPv4 address (mapped, compatible,
//! NAT64) and so could smuggle any of these.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `address` is not a public unicast address, or `None` when it is one.
pub fn special_use(address: IpAddr) -> Option<&'static str> {
    match address {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(v4: Ipv4Addr) -> Option<&'static str> {
    let [a, b, _, _] = v4.octets();
    Some(match () {
        () if v4 == Ipv4Addr::new(169, 254, 169, 254) => "a cloud metadata address",
        () if v4.is_loopback() => "a loopback address",
        () if v4.is_unspecified() || a == 0 => "an unspecified address",
        () if v4.is_private() => "a private address",
        () if v4.is_link_local() => "a link-local address",
        () if a == 100 && (64..128).contains(&b) => "a carrier-grade NAT address",
        () if v4.is_broadcast() => "the broadcast address",
        () if v4.is_multicast() => "a multicast address",
        () if a >= 240 => "a reserved address",
        () => return None,
    })
}

/// The IPv6 address of a cloud's instance metadata service (AWS).
const METADATA_V6: Ipv6Addr = Ipv6Addr::new(0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254);

fn special_v6(v6: Ipv6Addr) -> Option<&'static str> {
    let first = v6.segments()[0];
    Some(match () {
        () if v6.to_ipv4_mapped().is_some() => "an IPv4-mapped address",
        () if v6 == METADATA_V6 => "a cloud metadata address",
        () if v6.is_loopback() => "a loopback address",
        () if v6.is_unspecified() => "an unspecified address",
        () if first & 0xfe00 == 0xfc00 => "a unique-local address",
        () if first & 0xffc0 == 0xfe80 => "a link-local address",
        () if v6.is_multicast() => "a multicast address",
        // IPv4-compatible (::a.b.c.d, deprecated) and NAT64 (64:ff9b::/96)
        // addresses carry an IPv4 address that may be any of the above.
        () if v6.segments()[..6] == [0; 6] => "an IPv4-compatible address",
        () if v6.segments()[..6] == [0x64, 0xff9b, 0, 0, 0, 0] => "a NAT64 address",
        () => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_of_inner_address_is_special() {
        for (address, kind) in [
            ("127.0.0.1", "a loopback address"),
            ("127.8.9.10", "a loopback address"),
            ("0.0.0.0", "an unspecified address"),
            ("10.1.2.3", "a private address"),
            ("172.16.0.1", "a private address"),
            ("172.31.255.255", "a private address"),
            ("192.168.1.1", "a private address"),
            ("169.254.169.254", "a cloud metadata address"),
            ("169.254.1.1", "a link-local address"),
            ("100.64.0.1", "a carrier-grade NAT address"),
            ("100.127.255.255", "a carrier-grade NAT address"),
            ("255.255.255.255", "the broadcast address"),
            ("224.0.0.1", "a multicast address"),
            ("::1", "a loopback address"),
            ("::", "an unspecified address"),
            ("::ffff:127.0.0.1", "an IPv4-mapped address"),
            ("::ffff:8.8.8.8", "an IPv4-mapped address"),
            ("fd00:ec2::254", "a cloud metadata address"),
            ("fc00::1", "a unique-local address"),
            ("fdab::1", "a unique-local address"),
            ("fe80::1", "a link-local address"),
            ("ff02::1", "a multicast address"),
            ("::7f00:1", "an IPv4-compatible address"),
            ("64:ff9b::a00:1", "a NAT64 address"),
        ] {
            assert_eq!(
                special_use(address.parse().unwrap()),
                Some(kind),
                "{address}"
            );
        }
    }

    #[test]
    fn public_unicast_addresses_are_not() {
        for address in [
            "8.8.8.8",
            "151.101.0.223",
            "100.63.0.1",
            "172.32.0.1",
            "2a04:4e42::223",
        ] {
            assert_eq!(special_use(address.parse().unwrap()), None, "{address}");
        }
    }
}
