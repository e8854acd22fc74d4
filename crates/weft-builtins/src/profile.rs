//! What each built-in tool needs ([`weft_tools::Needs`]), from the configuration alone, so a
//! step's profile can be derived without building the tool (`weft profile`) and the tools
//! built from the same configuration report the same ([`weft_tools::Tool::profile_needs`]).

use std::path::PathBuf;

use weft_tools::{Isolation, Needs};

use crate::ToolsConfig;

/// The needs of the built-in tool `name` under `cfg`; `None` for a name that is not one.
pub fn needs(name: &str, cfg: &ToolsConfig) -> Option<Needs> {
    let nothing = Needs::nothing("builtin");
    Some(match name {
        // Pure helpers, and the engine-backed tools: they touch only the engine.
        "noop" | "echo" | "log" | "fail" | "timer.after" | "timer.at" | "timer.cron"
        | "context.get" | "context.put" | "plan.run" => nothing,
        "http.request" => Needs {
            network: cfg.http.allow_hosts.clone(),
            time_ms: Some(cfg.http.default_timeout_ms),
            ..nothing
        },
        "send_email" => match &cfg.email.smtp {
            Some(smtp) => Needs {
                network: vec![match smtp.port {
                    Some(port) => format!("{}:{port}", smtp.host),
                    None => smtp.host.clone(),
                }],
                time_ms: Some(smtp.timeout_ms),
                ..nothing
            },
            None => Needs {
                write: vec![cfg.email.outbox_dir.clone()],
                ..nothing
            },
        },
        // A child process of weft's, not confined: what its commands reach is theirs.
        "process.run" => Needs {
            network: vec!["*".into()],
            read: vec![PathBuf::from("/")],
            write: vec![PathBuf::from("/")],
            time_ms: Some(cfg.process.default_timeout_ms),
            isolation: Isolation::Process,
            ..nothing
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn every_builtin_has_needs_and_http_follows_its_allowlist() {
        let mut cfg = ToolsConfig::default();
        for t in weft_core::StaticCatalog::builtin().iter() {
            if !t.llm {
                assert!(needs(&t.name, &cfg).is_some(), "{}", t.name);
            }
        }
        assert!(needs("nope", &cfg).is_none());
        assert!(needs("http.request", &cfg).unwrap().network.is_empty());
        cfg.http.allow_hosts = vec!["api.example.com".into()];
        assert_eq!(
            needs("http.request", &cfg).unwrap().network,
            ["api.example.com"]
        );
        assert_eq!(
            needs("send_email", &cfg).unwrap().write,
            [PathBuf::from(".weft/outbox")]
        );
    }
}
