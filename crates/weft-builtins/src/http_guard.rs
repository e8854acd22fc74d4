//! Where `http.request` may go: the host allowlist and a DNS resolver that refuses names
//! resolving to loopback.
//!
//! The allowlist is checked before any connection (and again for every redirect target);
//! the resolver closes the gap an allowlisted *name* would otherwise open, e.g. a wildcard
//! subdomain whose DNS record points at 127.0.0.1 to reach services on the weft machine.

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
    /// A lone `*` entry: any host that is not loopback.
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
    /// allowed. Loopback hosts only pass when listed exactly.
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
            if is_local(ip) {
                return deny("loopback addresses must be listed exactly in tools.http.allow_hosts");
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

    /// Whether `host` was listed exactly (so it may resolve to loopback).
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

/// Loopback, or the unspecified address (which connects to the local machine).
fn is_local(ip: IpAddr) -> bool {
    let ip = match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map(IpAddr::V4).unwrap_or(ip),
        v4 => v4,
    };
    ip.is_loopback() || ip.is_unspecified()
}

/// Resolves names with the system resolver, dropping loopback answers for names that were
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
            let found = !all.is_empty();
            let addrs: Vec<SocketAddr> = all
                .into_iter()
                .filter(|a| exact || !is_local(a.ip()))
                .collect();
            if found && addrs.is_empty() {
                return Err(Box::new(Denied(format!(
                    "host `{host}` resolves only to loopback addresses; list it exactly in \
                     tools.http.allow_hosts to allow that; {}",
                    allow_hint(&host)
                )))
                    as Box<dyn std::error::Error + Send + Sync>);
            }
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}
