//! The definition of a declared tool, as `weft.toml` writes it:
//!
//! ```toml
//! [[tools.declared]]
//! name = "extract_facts"
//! description = "Extract facts from a text"
//! effect = "read"              # pure | read | write
//! idempotent = true
//! timeout_ms = 30000
//! retry = { max = 2, backoff_ms = 200 }
//! input_schema = { type = "object", required = ["text"], properties = { text = { type = "string" } } }
//! source = { kind = "http", url = "http://127.0.0.1:9000/extract" }
//! ```

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::Effect;

use crate::Error;
use crate::declared::Source;

/// A declared tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolDef {
    /// The action name plans use.
    pub name: String,
    /// What it does (shown to the LLM planner).
    #[serde(default)]
    pub description: String,
    /// JSON Schema of the args (default: any object).
    #[serde(default = "any_object")]
    pub input_schema: Value,
    /// JSON Schema every result must match (default: not checked).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
    /// Effect class (default `write`: assume the worst).
    #[serde(default = "write")]
    pub effect: Effect,
    /// Whether a second call with the same idempotency key is safe.
    #[serde(default)]
    pub idempotent: bool,
    /// Whole-call timeout in milliseconds, retries included (default 30 s).
    #[serde(default = "default_timeout_ms")]
    pub timeout_ms: u64,
    /// Retries of retryable failures inside one call, with the same idempotency key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<RetryDef>,
    /// Declared cost of one call (for budgets).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// What performs the call.
    pub source: SourceDef,
}

impl ToolDef {
    /// The spec the validator, the planner and the registry see.
    pub fn spec(&self) -> weft_core::ToolSpec {
        weft_core::ToolSpec {
            name: self.name.clone(),
            description: self.description.clone(),
            args_schema: self.input_schema.clone(),
            effect: self.effect,
            idempotent: self.idempotent,
            cost: self.cost,
            llm: false,
        }
    }

    /// What its calls need (for its security profile, `weft_tools::profile`): its source's
    /// hosts, paths, limits and isolation, and its `timeout_ms`.
    pub fn needs(&self) -> weft_tools::Needs {
        let needs = match &self.source {
            SourceDef::Fixed { .. } => weft_tools::Needs::nothing("fixed"),
            SourceDef::Worker(w) => w.needs(),
            SourceDef::Http(h) => h.needs(),
            SourceDef::Command(c) => c.needs(),
        };
        weft_tools::Needs {
            time_ms: Some(self.timeout_ms),
            ..needs
        }
    }
}

/// Retries of a declared tool.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryDef {
    /// Further attempts after the first.
    pub max: u32,
    /// Delay before the first retry, doubled after each (default 100 ms).
    #[serde(default = "default_backoff_ms")]
    pub backoff_ms: u64,
}

/// Where a declared tool's calls go. Each kind is one variant and one module.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum SourceDef {
    /// Answers every call with `result` (offline demos and tests of the declared-tool
    /// rules; no I/O).
    Fixed {
        /// The result of every call.
        result: Value,
    },
    /// Asks remote workers over NATS request/reply (`python/weft-worker` is the worker
    /// side); workers of one tool share its calls ([`crate::worker`]).
    Worker(crate::worker::WorkerDef),
    /// POSTs the args as JSON to an HTTP endpoint; the JSON answer is the result
    /// ([`crate::http`]).
    Http(crate::http::HttpDef),
    /// Runs a program (no shell) with the args as JSON on stdin; one JSON value on stdout is
    /// the result ([`crate::command`]).
    Command(crate::command::CommandDef),
}

impl SourceDef {
    /// The kind's name, as `weft.toml` writes it.
    pub fn kind(&self) -> &'static str {
        match self {
            SourceDef::Fixed { .. } => "fixed",
            SourceDef::Worker(_) => "worker",
            SourceDef::Http(_) => "http",
            SourceDef::Command(_) => "command",
        }
    }

    /// The source that performs `def`'s calls.
    pub(crate) fn open(&self, def: &ToolDef) -> Result<std::sync::Arc<dyn Source>, Error> {
        let _ = def;
        match self {
            SourceDef::Fixed { result } => Ok(std::sync::Arc::new(Fixed(result.clone()))),
            SourceDef::Worker(w) => Ok(std::sync::Arc::new(crate::worker::Worker::open(def, w)?)),
            SourceDef::Http(h) => Ok(std::sync::Arc::new(crate::http::Http::open(&def.name, h)?)),
            SourceDef::Command(c) => Ok(std::sync::Arc::new(crate::command::CommandSource::open(
                &def.name, c,
            )?)),
        }
    }
}

/// The `fixed` source.
struct Fixed(Value);

impl Source for Fixed {
    fn call(
        &self,
        _ctx: weft_tools::ToolContext,
        _args: Value,
    ) -> weft_tools::BoxFuture<'static, Result<Value, weft_tools::ToolError>> {
        let v = self.0.clone();
        Box::pin(async move { Ok(v) })
    }

    fn describe(&self) -> String {
        "fixed".into()
    }
}

fn any_object() -> Value {
    serde_json::json!({"type": "object"})
}
fn write() -> Effect {
    Effect::Write
}
fn default_timeout_ms() -> u64 {
    30_000
}
fn default_backoff_ms() -> u64 {
    100
}
