//! Where HTTP calls may go: the host allowlist and the screening of DNS answers that keeps
//! names from leading to addresses on the weft machine or its private network. One guard for
//! `http.request` (weft-builtins, `tools.http.allow_hosts`) and declared `http` sources
//! (weft-sources, each source's own `allow_hosts`); each wires it into its HTTP client (the
//! redirect policy calls [`Allowlist::check`], the DNS resolver [`screen`]), so this module
//! holds the decisions and no client.
//!
//! **Special addresses** ([`special`]): loopback (`127.0.0.0/8`, `::1`), unspecified
//! (`0.0.0.0`, `::`), private (`10.0.0.0/8`, `172.16.0.0/12`, `192.168.0.0/16`, IPv6
//! unique-local `fc00::/7`), link-local (`169.254.0.0/16` — the cloud metadata service at
//! `169.254.169.254` — and `fe80::/10`) and carrier-grade NAT (`100.64.0.0/10`), also in their
//! IPv4-mapped IPv6 form (`::ffff:169.254.169.254`). They are reachable only through an
//! allowlist entry that names the host exactly (the IP literal, or the name that resolves to
//! them); `*` and `*.example.com` never admit them. The names `localhost` and `*.localhost`
//! need an exact entry too.
//!
//! The allowlist is checked before any connection and again for every redirect target
//! (literal IP hops included); screening the DNS answers closes the gap an allowlisted *name*
//! would otherwise open, e.g. a wildcard subdomain whose DNS record points at 127.0.0.1 or
//! 169.254.169.254: its special answers are dropped, and a name with nothing else left is
//! refused. Refusals are [`Denied`], which the tools report with the code `denied`.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};

/// The compiled `allow_hosts` list.
#[derive(Debug, Default)]
pub struct Allowlist {
    /// Exact host names and IP literals, normalised.
    exact: HashSet<String>,
    /// `*.example.com` entries, stored as `.example.com`.
    suffixes: Vec<String>,
    /// A lone `*` entry: any host that is not special (see the module docs).
    any: bool,
    /// Where the entries are configured, for messages: `None` is `tools.http.allow_hosts`;
    /// `Some(tool)` a declared source's own `allow_hosts`.
    source: Option<String>,
}

/// Why a host may not be called.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct Denied(pub String);

impl Allowlist {
    /// Compiles `tools.http.allow_hosts` (`http.request`'s patterns).
    pub fn new(patterns: &[String]) -> Self {
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

    /// Compiles the `allow_hosts` of the declared tool `tool`'s source: exact entries only
    /// matter there (the source calls its one URL; they admit special answers for a name).
    pub fn for_source(tool: &str, patterns: &[String]) -> Self {
        Allowlist {
            source: Some(tool.to_string()),
            ..Allowlist::new(patterns)
        }
    }

    /// The configuration key of the entries, for messages.
    fn key(&self) -> String {
        match &self.source {
            None => "tools.http.allow_hosts".into(),
            Some(tool) => format!("the source's allow_hosts (tool `{tool}`)"),
        }
    }

    /// How to allow `host`: the configuration to write.
    fn hint(&self, host: &str) -> String {
        match &self.source {
            None => allow_hint(host),
            Some(_) => format!(
                "to allow it: `allow_hosts = [\"{host}\"]` in the tool's source (weft.toml, \
                 [[tools.declared]])"
            ),
        }
    }

    /// Whether `host` (as in a URL: a name, an IPv4 literal or a bracketed IPv6 literal) is
    /// allowed. Special addresses and loopback names only pass when listed exactly.
    pub fn check(&self, host: &str) -> Result<(), Denied> {
        let h = normalise(host);
        if self.exact.contains(&h) {
            return Ok(());
        }
        let key = self.key();
        let deny = |why: &str| {
            Err(Denied(format!(
                "host `{h}` is not allowed: {why}; {}",
                self.hint(&h)
            )))
        };
        if let Ok(ip) = h.parse::<IpAddr>() {
            if let Some(class) = special(ip) {
                return deny(&format!(
                    "it is a {class} address ({}), reachable only when listed exactly in \
                     {key} (`*` and `*.domain` entries never admit it)",
                    class.ranges()
                ));
            }
            return if self.any {
                Ok(())
            } else {
                deny(&format!("IP addresses must be listed exactly in {key}"))
            };
        }
        if h == "localhost" || h.ends_with(".localhost") {
            return deny(&format!("loopback names must be listed exactly in {key}"));
        }
        if self.any || self.suffixes.iter().any(|s| h.ends_with(s.as_str())) {
            return Ok(());
        }
        deny(&format!("not in {key}"))
    }

    /// Like [`Allowlist::check`], but refuses only special hosts (special IP literals and
    /// loopback names) not listed exactly; any other host passes. For a declared source,
    /// whose URL is the operator's choice and whose only other hosts are redirect targets.
    pub fn check_special(&self, host: &str) -> Result<(), Denied> {
        let h = normalise(host);
        let special_literal = h.parse::<IpAddr>().ok().and_then(special).is_some();
        let loopback_name = h == "localhost" || h.ends_with(".localhost");
        if (special_literal || loopback_name) && !self.exact.contains(&h) {
            return self.check(host);
        }
        Ok(())
    }

    /// Whether `host` was listed exactly (so it may resolve to special addresses).
    pub fn is_exact(&self, host: &str) -> bool {
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
pub enum Special {
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
pub fn special(ip: IpAddr) -> Option<Special> {
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

/// The DNS answers of `host` a call may use: all of them when the allowlist names `host`
/// exactly, else those that are not special; [`Denied`] when that leaves nothing of a
/// non-empty answer. Resolvers call it on every lookup (for redirect hops too).
pub fn screen(
    allow: &Allowlist,
    host: &str,
    answers: Vec<SocketAddr>,
) -> Result<Vec<SocketAddr>, Denied> {
    let exact = allow.is_exact(host);
    let (addrs, dropped): (Vec<SocketAddr>, Vec<SocketAddr>) = answers
        .into_iter()
        .partition(|a| exact || special(a.ip()).is_none());
    if addrs.is_empty() && !dropped.is_empty() {
        return Err(only_special(allow, host, &dropped));
    }
    Ok(addrs)
}

/// The refusal of `host`, whose answers were all special (`dropped`).
fn only_special(allow: &Allowlist, host: &str, dropped: &[SocketAddr]) -> Denied {
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
         list it exactly in {} to allow that; {}",
        classes.join(" and "),
        ips.join(", "),
        allow.key(),
        allow.hint(host)
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

    #[test]
    fn names_resolving_only_to_special_addresses_are_refused_unless_exact() {
        let answers = |ips: &[&str]| -> Vec<SocketAddr> {
            ips.iter()
                .map(|ip| SocketAddr::new(ip.parse().unwrap(), 0))
                .collect()
        };
        let wild = list(&["*"]);
        let e = screen(&wild, "metadata.test", answers(&["169.254.169.254"]))
            .unwrap_err()
            .0;
        assert!(
            e.contains("`metadata.test`")
                && e.contains("link-local")
                && e.contains("list it exactly in tools.http.allow_hosts"),
            "{e}"
        );
        // Special answers beside public ones are dropped, the public ones kept.
        let kept = screen(&wild, "mixed.test", answers(&["10.0.0.1", "8.8.8.8"])).unwrap();
        assert_eq!(kept, answers(&["8.8.8.8"]));
        let exact = list(&["metadata.test"]);
        let kept = screen(&exact, "metadata.test", answers(&["169.254.169.254"])).unwrap();
        assert_eq!(kept, answers(&["169.254.169.254"]));
        // A declared source's refusal names its own allow_hosts.
        let source = Allowlist::for_source("facts", &[]);
        let e = screen(
            &source,
            "metadata.test",
            answers(&["::ffff:169.254.169.254"]),
        )
        .unwrap_err()
        .0;
        assert!(
            e.contains("the source's allow_hosts (tool `facts`)")
                && e.contains("allow_hosts = [\"metadata.test\"]"),
            "{e}"
        );
    }

    #[test]
    fn the_refusal_names_the_host_every_class_and_every_address() {
        let d = only_special(
            &Allowlist::default(),
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
