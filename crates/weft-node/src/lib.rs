//! weft-node: the assembly point. It reads the configuration (`weft.toml`, `WEFT_…`
//! variables and flags, each value with where it came from) and builds a running weft from
//! it: store and bus through the table of openers, the tool registry, the tool-call chain,
//! the clock, the LLM provider and the repairer.
//!
//! - `config.rs` — the configuration model and its defaults (the embedded weft: no file).
//! - `load.rs` — layering (defaults → file → environment → flags), provenance, findings.
//! - `check.rs` — the checks beyond types (`weft config --check`).
//! - `openers.rs` — backends by URL scheme: a new backend is one entry.
//! - `node.rs` — [`Builder`] → [`Node`].
//! - `llm.rs`, `tokens.rs` — the LLM provider and the API tokens the configuration names.
//! - `tenant_tools.rs` — the tools tenants declare through the API ([`tenant_tools::Toolbox`]).
//! - `planner_bus.rs` — the seed-004 ReAct planner served over NATS request/reply
//!   (`[planner]`), the bus twin of `POST /plan/react`.
//!
//! **Architecture invariant:** no front end (CLI command, server module) builds an engine, a
//! store or a registry except through this crate.

mod check;
pub mod config;
mod counts;
mod error;
mod governance;
pub mod llm;
pub mod load;
mod node;
pub mod openers;
pub mod planner_bus;
pub mod tenant_tools;
pub mod tokens;

pub use check::check;
pub use config::Config;
pub use counts::{QuotaReport, QuotaUse};
pub use error::Error;
pub use governance::governance;
pub use load::{Entry, FlagValue, Inputs, Loaded, Source, load};
pub use node::{Builder, Node};
pub use openers::Openers;
pub use tokens::valid_name;

/// Loads the configuration and runs every check: the one way front ends read it. Values
/// refused while loading are left out, so the checks see the rest; they are skipped only
/// when the file itself could not be read or parsed.
pub fn load_checked(inputs: &Inputs<'_>, openers: &Openers) -> Loaded {
    let mut loaded = load(inputs);
    let unread = loaded
        .findings
        .iter()
        .any(|f| matches!(f.code.as_str(), "C001" | "C002") || f.pointer.is_empty());
    if !unread {
        check(&mut loaded, openers);
    }
    loaded
}
