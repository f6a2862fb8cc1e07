//! Addresses a sandboxed command never reaches through the proxy unless a rule names
//! them exactly: this machine (loopback, unspecified), the networks behind it (private,
//! shared, link-local — cloud metadata lives at 169.254.169.254 and fd00:ec2::254 —,
//! unique-local), and what is not one host (multicast, broadcast, reserved). Checked on
//! the addresses the proxy resolved itself and connects to, so a name that resolves to
//! one (DNS rebinding) is refused the same as the address written out. IPv4 inside IPv6
//! (mapped, NAT64, 6to4) is checked as the IPv4 address it carries.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// Why `ip` is special, or `None` for an ordinary public address.
pub fn special(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => special_v4(v4),
        IpAddr::V6(v6) => special_v6(v6),
    }
}

fn special_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, ..] = ip.octets();
    Some(match () {
        _ if ip.is_unspecified() || a == 0 => "this host (0.0.0.0/8)",
        _ if ip.is_loopback() => "loopback",
        _ if ip.is_private() => "a private network",
        _ if a == 100 && (64..128).contains(&b) => "shared address space (100.64.0.0/10)",
        _ if ip.is_link_local() => "link-local (cloud metadata lives here)",
        _ if ip.is_multicast() => "multicast",
        _ if ip.is_broadcast() => "broadcast",
        _ if a >= 240 => "reserved (240.0.0.0/4)",
        _ if a == 192 && b == 0 && ip.octets()[2] == 0 => "IETF protocol assignments",
        _ if a == 198 && (b == 18 || b == 19) => "benchmarking (198.18.0.0/15)",
        _ => return None,
    })
}

fn special_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return special_v4(v4);
    }
    let s = ip.segments();
    // NAT64 (64:ff9b::/96) and 6to4 (2002::/16) carry an IPv4 address that is reached.
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0, 0, 0, 0] {
        return special_v4(Ipv4Addr::new(
            (s[6] >> 8) as u8,
            s[6] as u8,
            (s[7] >> 8) as u8,
            s[7] as u8,
        ));
    }
    if s[0] == 0x2002 {
        return special_v4(Ipv4Addr::new(
            (s[1] >> 8) as u8,
            s[1] as u8,
            (s[2] >> 8) as u8,
            s[2] as u8,
        ));
    }
    Some(match () {
        _ if ip.is_unspecified() => "this host (::)",
        _ if ip.is_loopback() => "loopback",
        _ if s[0] & 0xfe00 == 0xfc00 => {
            "a unique-local network (fc00::/7; metadata at fd00:ec2::254)"
        }
        _ if s[0] & 0xffc0 == 0xfe80 => "link-local",
        _ if s[0] & 0xffc0 == 0xfec0 => "site-local",
        _ if ip.is_multicast() => "multicast",
        // ::/96 (IPv4-compatible, deprecated) and the rest of ::/8.
        _ if s[0] == 0 => "reserved (::/8)",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_range_a_request_could_use_to_reach_inward_is_special() {
        for ip in [
            "127.0.0.1",
            "127.1.2.3",
            "0.0.0.0",
            "0.1.2.3",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "169.254.169.254",
            "224.0.0.1",
            "255.255.255.255",
            "240.0.0.1",
            "198.18.0.1",
            "::1",
            "::",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "64:ff9b::a9fe:a9fe",
            "2002:7f00:1::",
            "fd00:ec2::254",
            "fc00::1",
            "fe80::1",
            "ff02::1",
            "::127.0.0.1",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert!(special(parsed).is_some(), "{ip} must be special");
        }
    }

    #[test]
    fn public_addresses_are_ordinary() {
        for ip in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "2a00:1450::1",
            "64:ff9b::808:808",
        ] {
            let parsed: IpAddr = ip.parse().unwrap();
            assert_eq!(special(parsed), None, "{ip}");
        }
    }
}
