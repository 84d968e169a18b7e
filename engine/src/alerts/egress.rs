//! Where alert webhooks may go.
//!
//! Policy: unless `alerts.allow_private_webhooks` is set, a webhook reaches only public
//! addresses: a URL naming a loopback, private, link-local, shared (CGNAT), multicast or
//! unspecified address is refused before any connection, and a host name is resolved by
//! `PublicOnly`, which drops such addresses from the answer (so a name cannot be pointed at
//! 127.0.0.1 after the rule is saved: the check is made on the address actually dialled).
//! Redirects are never followed (a public endpoint could bounce the request inward).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

fn public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, ..] = ip.octets();
    let shared = a == 100 && (64..128).contains(&b);
    let this_network = a == 0;
    let reserved = a >= 240;
    let benchmarking = a == 198 && (b == 18 || b == 19);
    !(ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_unspecified()
        || ip.is_broadcast()
        || ip.is_multicast()
        || shared
        || this_network
        || reserved
        || benchmarking)
}

fn public_v6(ip: Ipv6Addr) -> bool {
    if let Some(v4) = ip.to_ipv4_mapped() {
        return public_v4(v4);
    }
    // NAT64 (64:ff9b::/96) reaches the IPv4 address it embeds.
    let s = ip.segments();
    if s[0] == 0x64 && s[1] == 0xff9b && s[2..6] == [0; 4] {
        let o = ip.octets();
        return public_v4(Ipv4Addr::new(o[12], o[13], o[14], o[15]));
    }
    !(ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_multicast()
        || ip.is_unique_local()
        || ip.is_unicast_link_local())
}

/// Whether a webhook may connect to this address without `allow_private_webhooks`.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => public_v4(v4),
        IpAddr::V6(v6) => public_v6(v6),
    }
}

/// Why a URL may not be called, when it names a non-public address literally (or is not a
/// URL at all). Host names are checked at resolution, by `PublicOnly`.
pub fn refuse_literal(url: &str) -> Option<String> {
    literal(url).map(|why| format!("not sent: {why}"))
}

fn literal(url: &str) -> Option<String> {
    let parsed = match url::Url::parse(url) {
        Ok(u) => u,
        Err(e) => return Some(format!("the webhook URL is not valid ({e})")),
    };
    let ip = match parsed.host()? {
        url::Host::Ipv4(v4) => IpAddr::V4(v4),
        url::Host::Ipv6(v6) => IpAddr::V6(v6),
        url::Host::Domain(_) => return None,
    };
    (!is_public(ip)).then(|| {
        format!("{ip} is a loopback, private or link-local address (set alerts.allow_private_webhooks to allow)")
    })
}

/// How long saving a rule waits for its webhook's host name to resolve.
const RESOLVE_AT_SAVE: std::time::Duration = std::time::Duration::from_secs(3);

/// Why a webhook URL would never be called, said when the rule is saved rather than at every
/// delivery: a non-public address, or a host name that resolves only to such addresses. A
/// name that does not resolve now is let through (DNS may be down; each delivery says so).
pub async fn refused_at_save(url: &str) -> Option<String> {
    if let Some(why) = literal(url) {
        return Some(format!("the alert policy will never call it: {why}"));
    }
    let parsed = url::Url::parse(url).ok()?;
    let Some(url::Host::Domain(host)) = parsed.host() else { return None };
    let port = parsed.port_or_known_default().unwrap_or(443);
    let found = tokio::time::timeout(RESOLVE_AT_SAVE, tokio::net::lookup_host((host, port))).await.ok()?.ok()?;
    let found: Vec<SocketAddr> = found.collect();
    (!found.is_empty() && !found.iter().any(|a| is_public(a.ip())))
        .then(|| format!("the alert policy will never call it: {}", NotPublic::of(host)))
}

/// A host name that resolves only to addresses webhooks may not reach: the resolver's error,
/// which a delivery recognises (it is not retried, the answer would be the same).
#[derive(Debug)]
pub struct NotPublic(String);

impl NotPublic {
    fn of(host: &str) -> Self {
        Self(format!(
            "{host} resolves only to loopback, private or link-local addresses (set alerts.allow_private_webhooks to allow)"
        ))
    }

    /// Whether `e` or one of its causes is a `NotPublic`.
    pub fn caused(e: &(dyn std::error::Error + 'static)) -> bool {
        let mut cause = Some(e);
        while let Some(c) = cause {
            if c.is::<NotPublic>() {
                return true;
            }
            cause = c.source();
        }
        false
    }
}

impl std::fmt::Display for NotPublic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for NotPublic {}

/// A resolver that answers only public addresses.
#[derive(Debug, Default)]
pub struct PublicOnly;

impl Resolve for PublicOnly {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        Box::pin(async move {
            let found: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let public: Vec<SocketAddr> = found.into_iter().filter(|a| is_public(a.ip())).collect();
            if public.is_empty() {
                return Err(Box::new(NotPublic::of(&host)) as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(public.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn inward_addresses_are_not_public() {
        for s in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "fd00::1",
            "::ffff:127.0.0.1",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(ip(s)), "{s}");
        }
        for s in ["93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8", "64:ff9b::808:808"] {
            assert!(is_public(ip(s)), "{s}");
        }
    }

    #[test]
    fn a_literal_inward_url_is_refused_and_a_name_is_left_to_the_resolver() {
        let why = refuse_literal("http://127.0.0.1:15672/api/bindings").unwrap();
        assert!(why.contains("127.0.0.1") && why.contains("allow_private_webhooks"), "{why}");
        assert!(refuse_literal("http://[::1]:9000/x").is_some());
        assert!(refuse_literal("http://0x7f000001/").is_some(), "the URL parser normalises hex IPv4");
        assert!(refuse_literal("https://hooks.slack.com/services/T/B/x").is_none());
        assert!(refuse_literal("https://93.184.216.34/x").is_none());
    }

    #[tokio::test]
    async fn saving_refuses_what_would_never_be_called_and_lets_an_unknown_name_through() {
        let why = refused_at_save("http://127.0.0.1:9/hook?token=x").await.unwrap();
        assert!(why.contains("never call it") && why.contains("127.0.0.1"), "{why}");
        assert!(!why.contains("token"), "{why}");
        let why = refused_at_save("http://localhost:9/hook").await.unwrap();
        assert!(why.contains("localhost resolves only to loopback"), "{why}");
        assert_eq!(refused_at_save("https://192.0.2.1/hook").await, None, "a public literal");
        assert_eq!(refused_at_save("https://no-such-host.invalid/hook").await, None, "unresolvable now: let through");
    }

    #[tokio::test]
    async fn localhost_resolves_to_nothing_usable() {
        let name: Name = "localhost".parse().unwrap();
        let err = match PublicOnly.resolve(name).await {
            Ok(_) => panic!("localhost resolved to a public address"),
            Err(e) => e.to_string(),
        };
        assert!(err.contains("localhost resolves only to loopback"), "{err}");
    }
}
