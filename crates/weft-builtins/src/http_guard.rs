//! Where `http.request` may go: the host allowlist and a DNS resolver that refuses names
//! resolving to addresses on the weft machine or its private network.
//!
//! **Special addresses** ([`special`]): loopback (`127.0.0.0/8`, `::1`), unspecified
//! (`0.0.0.0`, `::`), private (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, IPv6
//! unique-local `fc00::/7`), link-local (`169.254.0.0/16` — the cloud metadata service at
//! `169.254.169.254` — and `fe80::/10`) and carrier-grade NAT (`100.64.0.0/10`), also in their
//! IPv4-mapped IPv6 form (`::ffff:169.254.169.254`). They are reachable only through an entry
//! of `tools.http.allow_hosts` that names the host exactly (the IP literal, or the name that
//! resolves to them); `*` and `*.example.com` never admit them. The names `localhost` and
//! `*.localhost` need an exact entry too.
//!
//! The allowlist is checked before any connection and again for every redirect target
//! (literal IP hops included); the resolver closes the gap an allowlisted *name* would
//! otherwise open, e.g. a wildcard subdomain whose DNS record points at 127.0.0.1 or
//! 169.254.169.254: its special answers are dropped, and a name with nothing else left is
//! refused. Refusals are [`Denied`], which `http.request` reports with the code `denied`.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

/// The compiled `allow_hosts` list.
#[derive(Debug, Default)]
pub(crate) struct Allowlist {
    /// Exact host names and IP literals, normalised.
    exact: HashSet<String>,
    /// `*.example.com` entries, stored as `.example.com`.
    suffixes: Vec<String>,
    /// A lone `*` entry: any host that is not special (see the module docs).
    any: bool,
}

/// Why a host may not be called.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct Denied(pub String);

impl Allowlist {
    /// Compiles the configured patterns.
    pub(crate) fn new(patterns: &[String]) -> Self {
        let mut a = Allowlist::default();
        for p in patterns {
            let p = normalise(p);
            if p == "*" {
                a.any = true;
            } else if let Some(rest) = p.strip_prefix("*.") {
                a.suffixes.push(format!(".{rest}"));
            } else if !p.is_empty() {
                a.exact.insert(p);
            }
        }
        a
    }

    /// Whether `host` (as in a URL: a name, an IPv4 literal or a bracketed IPv6 literal) is
    /// allowed. Special addresses and loopback names only pass when listed exactly.
    pub(crate) fn check(&self, host: &str) -> Result<(), Denied> {
        let h = normalise(host);
        if self.exact.contains(&h) {
            return Ok(());
        }
        let deny = |why: &str| {
            Err(Denied(format!(
                "host `{h}` is not allowed: {why}; {}",
                allow_hint(&h)
            )))
        };
        if let Ok(ip) = h.parse::<IpAddr>() {
            if let Some(class) = special(ip) {
                return deny(&format!(
                    "it is a {class} address ({}), reachable only when listed exactly in \
                     tools.http.allow_hosts (`*` and `*.domain` entries never admit it)",
                    class.ranges()
                ));
            }
            return if self.any {
                Ok(())
            } else {
                deny("IP addresses must be listed exactly in tools.http.allow_hosts")
            };
        }
        if h == "localhost" || h.ends_with(".localhost") {
            return deny("loopback names must be listed exactly in tools.http.allow_hosts");
        }
        if self.any || self.suffixes.iter().any(|s| h.ends_with(s.as_str())) {
            return Ok(());
        }
        deny("not in tools.http.allow_hosts")
    }

    /// Whether `host` was listed exactly (so it may resolve to special addresses).
    pub(crate) fn is_exact(&self, host: &str) -> bool {
        self.exact.contains(&normalise(host))
    }
}

/// How to allow `host`: the configuration key in weft.toml and its environment form.
fn allow_hint(host: &str) -> String {
    format!(
        "to allow it: `[tools.http] allow_hosts = [\"{host}\"]` in weft.toml, or \
         WEFT_TOOLS_HTTP_ALLOW_HOSTS={host} (comma-separated; `*.example.com` allows subdomains)"
    )
}

/// Whether `allow_hosts` (`tools.http.allow_hosts` patterns) lets a call go to `host`; the
/// reason when not. For declarations checked before any call (tenants' `http` tools).
pub fn host_allowed(allow_hosts: &[String], host: &str) -> Result<(), String> {
    Allowlist::new(allow_hosts).check(host).map_err(|d| d.0)
}

/// Lowercase, without IPv6 brackets or a trailing dot; IP literals in canonical form.
fn normalise(host: &str) -> String {
    let h = host.trim().trim_end_matches('.').to_ascii_lowercase();
    let h = h
        .strip_prefix('[')
        .and_then(|s| s.strip_suffix(']'))
        .map(str::to_string)
        .unwrap_or(h);
    match h.parse::<IpAddr>() {
        Ok(ip) => ip.to_string(),
        Err(_) => h,
    }
}

/// A class of addresses only an exact `allow_hosts` entry reaches (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Special {
    /// `127.0.0.0/8`, `::1`.
    Loopback,
    /// `0.0.0.0`, `::` (connecting to it reaches the local machine).
    Unspecified,
    /// `10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, `fc00::/7`.
    Private,
    /// `169.254.0.0/16` (cloud metadata at `169.254.169.254`), `fe80::/10`.
    LinkLocal,
    /// `100.64.0.0/10`.
    CarrierGradeNat,
}

impl Special {
    /// The ranges of the class, for messages.
    fn ranges(self) -> &'static str {
        match self {
            Special::Loopback => "127.0.0.0/8, ::1",
            Special::Unspecified => "0.0.0.0, ::",
            Special::Private => "10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16, fc00::/7",
            Special::LinkLocal => {
                "169.254.0.0/16, fe80::/10; the cloud metadata service is 169.254.169.254"
            }
            Special::CarrierGradeNat => "100.64.0.0/10",
        }
    }
}

impl std::fmt::Display for Special {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Special::Loopback => "loopback",
            Special::Unspecified => "unspecified",
            Special::Private => "private",
            Special::LinkLocal => "link-local",
            Special::CarrierGradeNat => "carrier-grade NAT",
        })
    }
}

/// The special class of `ip`, if any; an IPv4-mapped IPv6 address (`::ffff:a.b.c.d`) is
/// classed as its IPv4 address.
pub(crate) fn special(ip: IpAddr) -> Option<Special> {
    match ip {
        IpAddr::V4(v4) => {
            let [a, b, _, _] = v4.octets();
            if v4.is_loopback() {
                Some(Special::Loopback)
            } else if v4.is_unspecified() {
                Some(Special::Unspecified)
            } else if v4.is_private() {
                Some(Special::Private)
            } else if v4.is_link_local() {
                Some(Special::LinkLocal)
            } else if a == 100 && (b & 0xc0) == 64 {
                Some(Special::CarrierGradeNat)
            } else {
                None
            }
        }
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                special(IpAddr::V4(v4))
            } else if v6.is_loopback() {
                Some(Special::Loopback)
            } else if v6.is_unspecified() {
                Some(Special::Unspecified)
            } else if v6.is_unique_local() {
                Some(Special::Private)
            } else if v6.is_unicast_link_local() {
                Some(Special::LinkLocal)
            } else {
                None
            }
        }
    }
}

/// Resolves names with the system resolver, dropping special answers for names that were
/// not allowlisted exactly.
#[derive(Debug)]
pub(crate) struct GuardedResolver {
    allow: Arc<Allowlist>,
}

impl GuardedResolver {
    /// A resolver guarding `allow`.
    pub(crate) fn new(allow: Arc<Allowlist>) -> Self {
        GuardedResolver { allow }
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let host = name.as_str().to_string();
        let exact = self.allow.is_exact(&host);
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let (addrs, dropped): (Vec<SocketAddr>, Vec<SocketAddr>) = all
                .into_iter()
                .partition(|a| exact || special(a.ip()).is_none());
            if addrs.is_empty() && !dropped.is_empty() {
                return Err(Box::new(only_special(&host, &dropped))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// The refusal of `host`, whose answers were all special (`dropped`).
fn only_special(host: &str, dropped: &[SocketAddr]) -> Denied {
    let mut classes: Vec<Special> = Vec::new();
    let mut ips: Vec<IpAddr> = Vec::new();
    for a in dropped {
        if let Some(c) = special(a.ip())
            && !classes.contains(&c)
        {
            classes.push(c);
        }
        if !ips.contains(&a.ip()) {
            ips.push(a.ip());
        }
    }
    let classes: Vec<String> = classes.iter().map(Special::to_string).collect();
    let ips: Vec<String> = ips.iter().map(IpAddr::to_string).collect();
    Denied(format!(
        "host `{host}` resolves only to {} addresses ({}), which a wildcard never admits; \
         list it exactly in tools.http.allow_hosts to allow that; {}",
        classes.join(" and "),
        ips.join(", "),
        allow_hint(host)
    ))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn class(ip: &str) -> Option<Special> {
        special(ip.parse().unwrap())
    }

    /// Each case is one address and its expected class; the boundaries of every range are
    /// there, with the first address outside on each side.
    #[test]
    fn special_classes_and_their_boundaries() {
        use Special::*;
        let cases: &[(&str, Option<Special>)] = &[
            // Loopback 127.0.0.0/8 and ::1.
            ("126.255.255.255", None),
            ("127.0.0.0", Some(Loopback)),
            ("127.0.0.1", Some(Loopback)),
            ("127.255.255.255", Some(Loopback)),
            ("128.0.0.0", None),
            ("::1", Some(Loopback)),
            ("::2", None),
            // Unspecified.
            ("0.0.0.0", Some(Unspecified)),
            ("::", Some(Unspecified)),
            // Private 10.0.0.0/8.
            ("9.255.255.255", None),
            ("10.0.0.0", Some(Private)),
            ("10.255.255.255", Some(Private)),
            ("11.0.0.0", None),
            // Private 172.16.0.0/12.
            ("172.15.255.255", None),
            ("172.16.0.0", Some(Private)),
            ("172.31.255.255", Some(Private)),
            ("172.32.0.0", None),
            // Private 192.168.0.0/16.
            ("192.167.255.255", None),
            ("192.168.0.0", Some(Private)),
            ("192.168.255.255", Some(Private)),
            ("192.169.0.0", None),
            // Unique-local fc00::/7.
            ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("fc00::", Some(Private)),
            ("fd12:3456::1", Some(Private)),
            ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some(Private)),
            ("fe00::", None),
            // Link-local 169.254.0.0/16 (cloud metadata) and fe80::/10.
            ("169.253.255.255", None),
            ("169.254.0.0", Some(LinkLocal)),
            ("169.254.169.254", Some(LinkLocal)),
            ("169.254.255.255", Some(LinkLocal)),
            ("169.255.0.0", None),
            ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", None),
            ("fe80::", Some(LinkLocal)),
            ("fe80::1", Some(LinkLocal)),
            ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Some(LinkLocal)),
            ("fec0::", None),
            // Carrier-grade NAT 100.64.0.0/10.
            ("100.63.255.255", None),
            ("100.64.0.0", Some(CarrierGradeNat)),
            ("100.127.255.255", Some(CarrierGradeNat)),
            ("100.128.0.0", None),
            // IPv4-mapped IPv6 forms.
            ("::ffff:127.0.0.1", Some(Loopback)),
            ("::ffff:0.0.0.0", Some(Unspecified)),
            ("::ffff:10.1.2.3", Some(Private)),
            ("::ffff:172.16.0.0", Some(Private)),
            ("::ffff:172.32.0.0", None),
            ("::ffff:192.168.1.1", Some(Private)),
            ("::ffff:169.254.169.254", Some(LinkLocal)),
            ("::ffff:a9fe:a9fe", Some(LinkLocal)),
            ("::ffff:100.64.0.1", Some(CarrierGradeNat)),
            ("::ffff:8.8.8.8", None),
            // Ordinary public addresses.
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("93.184.216.34", None),
            ("2606:4700:4700::1111", None),
            ("2001:db8::1", None),
        ];
        for (ip, want) in cases {
            assert_eq!(class(ip), *want, "{ip}");
        }
    }

    fn list(entries: &[&str]) -> Allowlist {
        Allowlist::new(&entries.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn special_literals_need_an_exact_entry_whatever_the_wildcards() {
        let wild = list(&["*", "*.example.com"]);
        for host in [
            "127.0.0.1",
            "0.0.0.0",
            "10.0.0.1",
            "172.16.0.0",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "[::1]",
            "[::]",
            "[fd00::1]",
            "[fe80::1]",
            "[::ffff:169.254.169.254]",
            "[::ffff:a9fe:a9fe]",
            "[::ffff:10.0.0.1]",
        ] {
            let e = wild.check(host).unwrap_err().0;
            assert!(
                e.contains("listed exactly in tools.http.allow_hosts")
                    && e.contains("allow_hosts = ["),
                "{host}: {e}"
            );
            let exact = list(&[host]);
            assert!(exact.check(host).is_ok(), "{host} listed exactly");
        }
        let e = wild.check("169.254.169.254").unwrap_err().0;
        assert!(e.contains("link-local") && e.contains("metadata"), "{e}");
        let e = wild.check("[::ffff:169.254.169.254]").unwrap_err().0;
        assert!(e.contains("link-local"), "{e}");
        let e = wild.check("172.16.0.0").unwrap_err().0;
        assert!(e.contains("private"), "{e}");
        let e = wild.check("100.100.100.200").unwrap_err().0;
        assert!(e.contains("carrier-grade NAT"), "{e}");
        // Just outside the ranges, `*` admits the literal.
        for host in [
            "172.15.255.255",
            "172.32.0.0",
            "169.255.0.0",
            "100.128.0.0",
            "8.8.8.8",
        ] {
            assert!(wild.check(host).is_ok(), "{host}");
        }
        // An exact entry for one special address admits that one only.
        let one = list(&["*", "10.0.0.1"]);
        assert!(one.check("10.0.0.1").is_ok());
        assert!(one.check("10.0.0.2").is_err());
    }

    #[tokio::test]
    async fn names_resolving_only_to_special_addresses_are_refused_unless_exact() {
        // `localhost` is in every /etc/hosts; the allowlist's name check refuses it before
        // the resolver, so the resolver is called directly here.
        let name = || "localhost".parse::<Name>().unwrap();
        let wild = GuardedResolver::new(Arc::new(list(&["*"])));
        let Err(e) = wild.resolve(name()).await else {
            panic!("localhost resolved under `*`");
        };
        let e = e.to_string();
        assert!(
            e.contains("`localhost`")
                && e.contains("loopback")
                && e.contains("list it exactly in tools.http.allow_hosts"),
            "{e}"
        );
        let exact = GuardedResolver::new(Arc::new(list(&["localhost"])));
        let addrs: Vec<SocketAddr> = exact.resolve(name()).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    }

    #[test]
    fn the_refusal_names_the_host_every_class_and_every_address() {
        let d = only_special(
            "evil.example.com",
            &[
                "169.254.169.254:0".parse().unwrap(),
                "10.0.0.1:0".parse().unwrap(),
                "10.0.0.1:0".parse().unwrap(),
            ],
        )
        .0;
        assert!(
            d.contains("`evil.example.com`")
                && d.contains("link-local")
                && d.contains("private")
                && d.contains("169.254.169.254, 10.0.0.1)")
                && d.contains("list it exactly in tools.http.allow_hosts"),
            "{d}"
        );
    }
}
