//! `http.request`'s side of the address guard (`weft_tools::http_guard`): the DNS resolver
//! its client uses, which screens every answer through the shared guard.

use std::net::SocketAddr;
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};
pub(crate) use weft_tools::http_guard::{Allowlist, Denied};

/// Resolves names with the system resolver, dropping special answers for names that were
/// not allowlisted exactly ([`weft_tools::http_guard::screen`]).
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
        let allow = Arc::clone(&self.allow);
        Box::pin(async move {
            let all: Vec<SocketAddr> = tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let addrs = weft_tools::http_guard::screen(&allow, &host, all)
                .map_err(|d| Box::new(d) as Box<dyn std::error::Error + Send + Sync>)?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[tokio::test]
    async fn names_resolving_only_to_special_addresses_are_refused_unless_exact() {
        // `localhost` is in every /etc/hosts; the allowlist's name check refuses it before
        // the resolver, so the resolver is called directly here.
        let name = || "localhost".parse::<Name>().unwrap();
        let wild = GuardedResolver::new(Arc::new(Allowlist::new(&["*".into()])));
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
        let exact = GuardedResolver::new(Arc::new(Allowlist::new(&["localhost".into()])));
        let addrs: Vec<SocketAddr> = exact.resolve(name()).await.unwrap().collect();
        assert!(!addrs.is_empty() && addrs.iter().all(|a| a.ip().is_loopback()));
    }
}
