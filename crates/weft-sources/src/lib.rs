//! weft-sources: tools users declare and bring, beside weft's built-in ones.
//!
//! A declared tool is a [`ToolDef`] — name, description, input and output JSON Schemas,
//! effect class, idempotency, timeout, default retry, cost — and a source that performs the
//! call ([`SourceDef`]). [`DeclaredTool`] wraps any source in the same rules: the spec the
//! validator and the planner see, a timeout, retries of retryable failures with the same
//! idempotency key, and the result checked against the output schema (a mismatch is a step
//! failure, never a silent pass). The node (`weft-node`) reads the definitions from
//! `weft.toml` (`[[tools.declared]]`) and registers them in its one registry, so every call
//! passes the same tool-call chain as a built-in's.

pub mod command;
mod declared;
mod def;
pub mod http;
pub mod mcp;
mod sandbox;
pub mod worker;

pub use command::CommandDef;
pub use declared::{DeclaredTool, Source};
pub use def::{RetryDef, SourceDef, ToolDef};
pub use http::HttpDef;
pub use mcp::{McpServerDef, discover};
pub use worker::{WorkerDef, default_subject, subject_token};

/// Why a declared tool could not be built.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The definition is wrong (a schema that does not compile, an empty name, …).
    #[error("[invalid_tool] tool `{name}`: {message}")]
    Invalid {
        /// The tool.
        name: String,
        /// What is wrong.
        message: String,
    },
    /// An MCP server (`[[tools.mcp]]`) could not be reached or listed at start.
    #[error("[mcp_unavailable] MCP server `{server}`: {message}")]
    McpUnavailable {
        /// The server's name (its tools' prefix).
        server: String,
        /// What failed.
        message: String,
    },
}

/// One declared tool: `def` wrapped as a [`DeclaredTool`] around the source it names (for
/// callers that want its [`DeclaredTool::source`] description too).
pub fn declare(def: &ToolDef) -> Result<DeclaredTool, Error> {
    DeclaredTool::new(def, def.source.open(def)?)
}

/// The tools `defs` declare, each wrapped as a [`DeclaredTool`] around its source.
pub fn build(defs: &[ToolDef]) -> Result<Vec<std::sync::Arc<dyn weft_tools::Tool>>, Error> {
    defs.iter()
        .map(|d| {
            let source = d.source.open(d)?;
            Ok(std::sync::Arc::new(DeclaredTool::new(d, source)?)
                as std::sync::Arc<dyn weft_tools::Tool>)
        })
        .collect()
}
