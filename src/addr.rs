//! The address rule of the URL monitor: which IP addresses count as *public* and may be connected
//! to, so a jobs file cannot make the monitor reach into the host's own network. Pure functions, no
//! I/O. It sits below both the URL probe (`gate`) and the jobs-file check (`config`), which
//! refuses a literal private address up front, so neither imports the other.
//!
//! Owns: the classifier and the [`AddressPolicy`] abstraction the URL probe validates every
//! resolved (or literal) address with. Must not touch: networking, DNS.
//!
//! Non-public (rejected unless `allow_private`): unspecified (`0.0.0.0/8`, `::`), loopback
//! (`127/8`, `::1`), RFC 1918, CGNAT `100.64/10`, link-local (`169.254/16`, `fe80::/10`), IETF
//! protocol assignments `192.0.0/24`, documentation (`192.0.2/24`, `198.51.100/24`,
//! `203.0.113/24`, `2001:db8::/32`, `3fff::/20`), benchmarking (`198.18/15`, `2001:2::/48`),
//! 6to4 relay anycast `192.88.99/24`, multicast (`224/4`, `ff00::/8`), reserved `240/4`,
//! broadcast, ULA `fc00::/7`, deprecated site-local `fec0::/10`, discard-only `100::/64`,
//! NAT64 local-use `64:ff9b:1::/48`; and the IPv4-mapped (`::ffff:a.b.c.d`), IPv4-compatible
//! (`::a.b.c.d`), NAT64 (`64:ff9b::/96`) and 6to4 (`2002::/16`) forms of any non-public IPv4.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

/// Why an address is not public, or `None` when it is.
pub fn classify(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => classify_v4(v4),
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

fn in_v4(ip: Ipv4Addr, net: [u8; 4], prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u32::MAX << (32 - prefix)
    };
    (u32::from(ip) & mask) == (u32::from(Ipv4Addr::from(net)) & mask)
}

fn in_v6(ip: Ipv6Addr, net: Ipv6Addr, prefix: u32) -> bool {
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - prefix)
    };
    (u128::from(ip) & mask) == (u128::from(net) & mask)
}

pub fn classify_v4(ip: Ipv4Addr) -> Option<&'static str> {
    const TABLE: &[([u8; 4], u32, &str)] = &[
        ([0, 0, 0, 0], 8, "unspecified / this network (0.0.0.0/8)"),
        ([10, 0, 0, 0], 8, "private (RFC 1918, 10/8)"),
        ([100, 64, 0, 0], 10, "carrier-grade NAT (100.64/10)"),
        ([127, 0, 0, 0], 8, "loopback (127/8)"),
        ([169, 254, 0, 0], 16, "link-local (169.254/16)"),
        ([172, 16, 0, 0], 12, "private (RFC 1918, 172.16/12)"),
        ([192, 0, 0, 0], 24, "IETF protocol assignments (192.0.0/24)"),
        ([192, 0, 2, 0], 24, "documentation (192.0.2/24)"),
        ([192, 88, 99, 0], 24, "6to4 relay anycast (192.88.99/24)"),
        ([192, 168, 0, 0], 16, "private (RFC 1918, 192.168/16)"),
        ([198, 18, 0, 0], 15, "benchmarking (198.18/15)"),
        ([198, 51, 100, 0], 24, "documentation (198.51.100/24)"),
        ([203, 0, 113, 0], 24, "documentation (203.0.113/24)"),
        ([224, 0, 0, 0], 4, "multicast (224/4)"),
        ([255, 255, 255, 255], 32, "broadcast (255.255.255.255)"),
        ([240, 0, 0, 0], 4, "reserved (240/4)"),
    ];
    TABLE
        .iter()
        .find(|(net, p, _)| in_v4(ip, *net, *p))
        .map(|(_, _, why)| *why)
}

pub fn classify_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let bits = u128::from(ip);
    if bits == 0 {
        return Some("unspecified (::)");
    }
    if bits == 1 {
        return Some("loopback (::1)");
    }
    // IPv4-mapped ::ffff:a.b.c.d
    if let Some(v4) = ip.to_ipv4_mapped() {
        return classify_v4(v4).map(|_| "IPv4-mapped IPv6 of a non-public IPv4 address");
    }
    // IPv4-compatible ::a.b.c.d (deprecated, still routed by some stacks)
    if bits >> 32 == 0 {
        let v4 = Ipv4Addr::from(bits as u32);
        return classify_v4(v4).map(|_| "IPv4-compatible IPv6 of a non-public IPv4 address");
    }
    let net = |s: &str| s.parse::<Ipv6Addr>().unwrap_or(Ipv6Addr::UNSPECIFIED);
    // NAT64 well-known prefix 64:ff9b::/96 embeds the IPv4 address in the low 32 bits.
    if in_v6(ip, net("64:ff9b::"), 96) {
        let v4 = Ipv4Addr::from(bits as u32);
        return classify_v4(v4).map(|_| "NAT64 (64:ff9b::/96) of a non-public IPv4 address");
    }
    // 6to4 2002:AABB:CCDD::/48 embeds the IPv4 address in bits 16..48.
    if in_v6(ip, net("2002::"), 16) {
        let v4 = Ipv4Addr::from((bits >> 80) as u32);
        return classify_v4(v4).map(|_| "6to4 (2002::/16) of a non-public IPv4 address");
    }
    const TABLE: &[(&str, u32, &str)] = &[
        ("64:ff9b:1::", 48, "NAT64 local-use (64:ff9b:1::/48)"),
        ("100::", 64, "discard-only (100::/64)"),
        ("2001:2::", 48, "benchmarking (2001:2::/48)"),
        ("2001:db8::", 32, "documentation (2001:db8::/32)"),
        ("3fff::", 20, "documentation (3fff::/20)"),
        ("fc00::", 7, "unique local (fc00::/7)"),
        ("fe80::", 10, "link-local (fe80::/10)"),
        ("fec0::", 10, "site-local (fec0::/10)"),
        ("ff00::", 8, "multicast (ff00::/8)"),
    ];
    TABLE
        .iter()
        .find(|(n, p, _)| in_v6(ip, net(n), *p))
        .map(|(_, _, why)| *why)
}

/// Decides whether an address may be connected to: `Err(reason)` rejects it. Injectable so tests
/// can declare a loopback alias "public" and exercise mixed answers and rebinding locally.
pub type AddressPolicy = Arc<dyn Fn(IpAddr) -> Result<(), String> + Send + Sync>;

/// The production rule: only public addresses ([`classify`]).
pub fn public_only() -> AddressPolicy {
    Arc::new(|ip| match classify(ip) {
        None => Ok(()),
        Some(why) => Err(format!("{ip} is {why}")),
    })
}

/// `allow_private: true`: every address is acceptable (the other URL guarantees still apply).
pub fn allow_all() -> AddressPolicy {
    Arc::new(|_| Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(s: &str) -> Option<&'static str> {
        classify(s.parse().unwrap())
    }

    #[test]
    fn ipv4_table() {
        let rejected = [
            ("0.0.0.0", "unspecified"),
            ("0.1.2.3", "unspecified"),
            ("10.0.0.1", "RFC 1918"),
            ("10.255.255.255", "RFC 1918"),
            ("172.16.0.1", "RFC 1918"),
            ("172.31.255.255", "RFC 1918"),
            ("192.168.1.1", "RFC 1918"),
            ("100.64.0.1", "carrier-grade"),
            ("100.127.255.255", "carrier-grade"),
            ("127.0.0.1", "loopback"),
            ("127.255.0.9", "loopback"),
            ("169.254.169.254", "link-local"),
            ("192.0.0.8", "IETF"),
            ("192.0.2.10", "documentation"),
            ("198.51.100.7", "documentation"),
            ("203.0.113.99", "documentation"),
            ("198.18.0.1", "benchmarking"),
            ("198.19.255.254", "benchmarking"),
            ("192.88.99.1", "6to4 relay"),
            ("224.0.0.1", "multicast"),
            ("239.255.255.250", "multicast"),
            ("240.0.0.1", "reserved"),
            ("250.1.2.3", "reserved"),
            ("255.255.255.255", "broadcast"),
        ];
        for (ip, why) in rejected {
            let got = c(ip).unwrap_or_else(|| panic!("{ip} should be rejected"));
            assert!(got.contains(why), "{ip}: {got} should mention {why}");
        }
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "93.184.216.34",
            "100.63.255.255",
            "100.128.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "169.253.255.255",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "11.0.0.0",
        ] {
            assert_eq!(c(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn ipv6_table() {
        let rejected = [
            ("::", "unspecified"),
            ("::1", "loopback"),
            ("fe80::1", "link-local"),
            ("febf::1", "link-local"),
            ("fec0::1", "site-local"),
            ("fc00::1", "unique local"),
            ("fd12:3456::1", "unique local"),
            ("ff02::1", "multicast"),
            ("2001:db8::1", "documentation"),
            ("3fff::1", "documentation"),
            ("2001:2::1", "benchmarking"),
            ("100::1", "discard"),
            ("64:ff9b:1::1", "local-use"),
        ];
        for (ip, why) in rejected {
            let got = c(ip).unwrap_or_else(|| panic!("{ip} should be rejected"));
            assert!(got.contains(why), "{ip}: {got} should mention {why}");
        }
        for ip in [
            "2606:4700:4700::1111",
            "2001:4860:4860::8888",
            "2a00:1450::1",
        ] {
            assert_eq!(c(ip), None, "{ip} is public");
        }
    }

    #[test]
    fn embedded_ipv4_forms_follow_the_embedded_address() {
        let rejected = [
            ("::ffff:127.0.0.1", "IPv4-mapped"),
            ("::ffff:10.1.2.3", "IPv4-mapped"),
            ("::ffff:169.254.169.254", "IPv4-mapped"),
            ("::ffff:0.0.0.0", "IPv4-mapped"),
            ("::127.0.0.1", "IPv4-compatible"),
            ("::10.0.0.1", "IPv4-compatible"),
            ("64:ff9b::127.0.0.1", "NAT64"),
            ("64:ff9b::a9fe:a9fe", "NAT64"), // 169.254.169.254
            ("64:ff9b::192.168.0.1", "NAT64"),
            ("2002:7f00:1::", "6to4"),   // 127.0.0.1
            ("2002:a00:1::1", "6to4"),   // 10.0.0.1
            ("2002:c0a8:101::", "6to4"), // 192.168.1.1
            ("2002:a9fe:a9fe::1", "6to4"),
        ];
        for (ip, why) in rejected {
            let got = c(ip).unwrap_or_else(|| panic!("{ip} should be rejected"));
            assert!(got.contains(why), "{ip}: {got} should mention {why}");
        }
        for ip in [
            "::ffff:8.8.8.8",
            "::8.8.8.8",
            "64:ff9b::8.8.8.8",
            "2002:808:808::1",
        ] {
            assert_eq!(c(ip), None, "{ip} embeds a public address");
        }
    }

    #[test]
    fn policies() {
        let p = public_only();
        let err = p("10.0.0.1".parse().unwrap()).unwrap_err();
        assert_eq!(err, "10.0.0.1 is private (RFC 1918, 10/8)");
        assert!(p("8.8.8.8".parse().unwrap()).is_ok());
        assert!(allow_all()("127.0.0.1".parse().unwrap()).is_ok());
    }
}
