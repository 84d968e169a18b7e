//! Which peers may speak for the client: `auth.trusted_proxies`.
//!
//! Policy: `X-Forwarded-For` and `auth.proxy_user_header` are believed only when the TCP peer
//! is a listed proxy. The client is then the right-most `X-Forwarded-For` address that is not
//! itself a listed proxy (each proxy appends the peer it saw, so entries to the left of the
//! last untrusted one may be forged). A malformed entry ends the walk at the proxy.

use std::net::IpAddr;

use ipnet::IpNet;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses addresses (`10.0.0.7`) and networks (`10.0.0.0/8`, `fd00::/8`).
    pub fn parse(entries: &[String]) -> Result<Self, String> {
        let mut nets = Vec::with_capacity(entries.len());
        for e in entries.iter().map(|e| e.trim()).filter(|e| !e.is_empty()) {
            let net = match e.parse::<IpNet>() {
                Ok(n) => n,
                Err(_) => match e.parse::<IpAddr>() {
                    Ok(ip) => IpNet::from(ip),
                    Err(_) => return Err(format!("`{e}` is not an IP address or a network like 10.0.0.0/8")),
                },
            };
            nets.push(net);
        }
        Ok(Self(nets))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn trusts(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        self.0.iter().any(|n| n.contains(&ip))
    }

    /// The client's address: the peer's, or, when the peer is trusted, the one it forwards.
    pub fn client(&self, peer: IpAddr, forwarded_for: Option<&str>) -> IpAddr {
        let mut client = canonical(peer);
        if !self.trusts(client) {
            return client;
        }
        let Some(chain) = forwarded_for else { return client };
        for hop in chain.rsplit(',') {
            match hop.trim().parse::<IpAddr>() {
                Ok(ip) => {
                    client = canonical(ip);
                    if !self.trusts(client) {
                        break;
                    }
                }
                Err(_) => break,
            }
        }
        client
    }
}

/// IPv4 peers on a dual-stack socket arrive as `::ffff:a.b.c.d`.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn an_untrusted_peer_cannot_forward_an_address() {
        let t = TrustedProxies::parse(&["10.0.0.0/8".into()]).unwrap();
        assert_eq!(t.client(ip("203.0.113.9"), Some("1.2.3.4")), ip("203.0.113.9"));
    }

    #[test]
    fn a_trusted_peer_forwards_the_right_most_untrusted_address() {
        let t = TrustedProxies::parse(&["10.0.0.0/8".into(), "192.0.2.1".into()]).unwrap();
        assert_eq!(t.client(ip("10.1.1.1"), Some("6.6.6.6, 198.51.100.7, 192.0.2.1")), ip("198.51.100.7"));
        assert_eq!(t.client(ip("10.1.1.1"), None), ip("10.1.1.1"));
        assert_eq!(t.client(ip("10.1.1.1"), Some("garbage")), ip("10.1.1.1"));
        assert_eq!(t.client(ip("::ffff:10.1.1.1"), Some("198.51.100.7")), ip("198.51.100.7"));
    }

    #[test]
    fn a_bad_entry_is_named() {
        let e = TrustedProxies::parse(&["10.0.0.0/33".into()]).unwrap_err();
        assert!(e.contains("10.0.0.0/33"), "{e}");
    }
}
