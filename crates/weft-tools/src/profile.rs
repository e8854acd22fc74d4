//! Step security profiles (seed 002 §1.e): what a step's call may touch, derived before it
//! runs, so that people (`weft profile PLAN`), policies (the `profile` of the policy input)
//! and the sources that enforce it read one description.
//!
//! A tool states its [`Needs`] ([`crate::Tool::profile_needs`]; the sources build them from
//! their configuration: `[tools]` allow_hosts for `http.request`, a `command` source's
//! `network`, `read_paths`, `write_paths`, `memory_mb`, `cpu_seconds`). [`derive()`] adds what the
//! spec and the step say — the effect class (determinism) and the step's `timeout_ms` — and
//! gives the [`Profile`]. It is pure: no I/O, the same inputs give the same profile.
//!
//! A tool that states nothing is assumed to need everything (any host, the whole filesystem,
//! no isolation), unless its effect class is `pure`: a pure tool's result depends on its args
//! only, so it needs neither network nor filesystem. Path and host lists use one convention:
//! `[]` is nothing, `["/"]` the whole filesystem, `["*"]` any host.
//!
//! Where a profile is enforced: `command` tools run sandboxed (Landlock for the filesystem, a
//! network namespace without interfaces when they have no network, rlimits); `http.request` and
//! declared `http` tools reach only their hosts ([`crate::http_guard`]); the other kinds are
//! described, not confined, and their `isolation` says so.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::{Effect, ToolSpec};

/// How far a tool's calls are kept from weft and from each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Isolation {
    /// Runs inside weft's process (built-in tools, `http` sources).
    None,
    /// A child process of weft, not confined (an MCP server over stdio, `process.run`).
    Process,
    /// A child process confined to its profile: Landlock, network namespace, rlimits.
    Sandboxed,
    /// Runs elsewhere (a worker, an MCP server over HTTP): its host decides what it reaches;
    /// weft controls only what it sends.
    Remote,
}

/// What a tool says it needs; [`derive()`] makes a [`Profile`] of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Needs {
    /// Where the tool comes from: `builtin`, `http`, `command`, `worker`, `mcp`, `fixed`.
    pub source: String,
    /// Hosts it may reach (`host`, `host:port`, `*.domain`, `*` for any); empty: none.
    pub network: Vec<String>,
    /// Paths it may read; `["/"]` is everything, empty nothing.
    pub read: Vec<PathBuf>,
    /// Paths it may write; empty: read-only.
    pub write: Vec<PathBuf>,
    /// Its own time limit per call, in milliseconds.
    pub time_ms: Option<u64>,
    /// Address-space limit, in MiB.
    pub memory_mb: Option<u64>,
    /// CPU-time limit, in seconds.
    pub cpu_seconds: Option<u64>,
    /// How it is kept apart.
    pub isolation: Isolation,
}

impl Needs {
    /// A tool that touches nothing outside weft (engine services at most).
    pub fn nothing(source: &str) -> Self {
        Needs {
            source: source.to_string(),
            network: Vec::new(),
            read: Vec::new(),
            write: Vec::new(),
            time_ms: None,
            memory_mb: None,
            cpu_seconds: None,
            isolation: Isolation::None,
        }
    }

    /// A tool that may touch anything (what is assumed when nothing is said).
    pub fn anything(source: &str) -> Self {
        Needs {
            network: vec!["*".into()],
            read: vec![PathBuf::from("/")],
            write: vec![PathBuf::from("/")],
            ..Needs::nothing(source)
        }
    }
}

/// The network part of a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NetworkAcl {
    /// Hosts the call may reach; `[]` none, `["*"]` any host (special addresses — loopback,
    /// private, link-local — still need an exact entry where weft enforces it).
    pub hosts: Vec<String>,
}

/// The filesystem part of a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FilesystemAcl {
    /// Readable paths (and everything beneath); `["/"]` is everything.
    pub read: Vec<PathBuf>,
    /// Writable paths (and everything beneath).
    pub write: Vec<PathBuf>,
    /// Nothing is writable.
    pub read_only: bool,
}

/// Resource limits of one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceLimits {
    /// Wall time: the step's `timeout_ms` or the tool's own, the smaller.
    pub time_ms: Option<u64>,
    /// Address space, in MiB.
    pub memory_mb: Option<u64>,
    /// CPU time, in seconds.
    pub cpu_seconds: Option<u64>,
}

/// A step's security profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Profile {
    /// The tool (the step's action).
    pub tool: String,
    /// Where the tool comes from (see [`Needs::source`]); `unknown` when it said nothing.
    pub source: String,
    /// Its effect class.
    pub effect: Effect,
    /// Same args, same result: the effect class is `pure`.
    pub deterministic: bool,
    /// What may be reached.
    pub network: NetworkAcl,
    /// What may be read and written.
    pub filesystem: FilesystemAcl,
    /// Time, memory and CPU.
    pub limits: ResourceLimits,
    /// How it is kept apart.
    pub isolation: Isolation,
}

/// The profile of a call of `spec`'s tool, which states `needs` (or nothing), from a step
/// whose own time limit is `step_timeout_ms`.
pub fn derive(spec: &ToolSpec, needs: Option<&Needs>, step_timeout_ms: Option<u64>) -> Profile {
    let assumed;
    let needs = match needs {
        Some(n) => n,
        None => {
            assumed = if spec.effect == Effect::Pure {
                Needs::nothing("unknown")
            } else {
                Needs::anything("unknown")
            };
            &assumed
        }
    };
    let time_ms = match (step_timeout_ms, needs.time_ms) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Profile {
        tool: spec.name.clone(),
        source: needs.source.clone(),
        effect: spec.effect,
        deterministic: spec.effect == Effect::Pure,
        network: NetworkAcl {
            hosts: needs.network.clone(),
        },
        filesystem: FilesystemAcl {
            read: needs.read.clone(),
            write: needs.write.clone(),
            read_only: needs.write.is_empty(),
        },
        limits: ResourceLimits {
            time_ms,
            memory_mb: needs.memory_mb,
            cpu_seconds: needs.cpu_seconds,
        },
        isolation: needs.isolation,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn spec(effect: Effect) -> ToolSpec {
        ToolSpec {
            name: "t".into(),
            description: String::new(),
            args_schema: serde_json::json!({}),
            effect,
            idempotent: false,
            cost: None,
            llm: false,
        }
    }

    #[test]
    fn silence_assumes_everything_unless_pure() {
        let p = derive(&spec(Effect::Write), None, None);
        assert_eq!(p.network.hosts, ["*"]);
        assert_eq!(p.filesystem.write, [PathBuf::from("/")]);
        assert!(!p.deterministic && !p.filesystem.read_only);
        let p = derive(&spec(Effect::Pure), None, Some(5));
        assert!(p.network.hosts.is_empty() && p.filesystem.read.is_empty());
        assert!(p.deterministic && p.filesystem.read_only);
        assert_eq!(p.limits.time_ms, Some(5));
    }

    #[test]
    fn the_smaller_time_limit_wins_and_needs_carry_over() {
        let needs = Needs {
            network: vec!["api.example.com:443".into()],
            write: vec![PathBuf::from("/srv/out")],
            time_ms: Some(30_000),
            memory_mb: Some(256),
            isolation: Isolation::Sandboxed,
            ..Needs::nothing("command")
        };
        let p = derive(&spec(Effect::Read), Some(&needs), Some(2_000));
        assert_eq!(p.limits.time_ms, Some(2_000));
        let p = derive(&spec(Effect::Read), Some(&needs), None);
        assert_eq!(p.limits.time_ms, Some(30_000));
        assert_eq!(p.limits.memory_mb, Some(256));
        assert_eq!(p.source, "command");
        assert_eq!(p.isolation, Isolation::Sandboxed);
        assert_eq!(p.network.hosts, ["api.example.com:443"]);
        assert!(!p.filesystem.read_only);
    }
}
