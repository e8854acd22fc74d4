//! Small helpers the I/O tools share: typed args with stable errors, and deadlines.

use std::time::{Duration, Instant};

use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::{ToolContext, ToolError};

/// Decodes a tool's args into its typed form; any mismatch is a fatal `args_invalid`.
pub(crate) fn parse_args<T: DeserializeOwned>(tool: &str, args: Value) -> Result<T, ToolError> {
    serde_json::from_value(args)
        .map_err(|e| ToolError::fatal("args_invalid", format!("{tool}: {e}")))
}

/// A fatal `args_invalid` error.
pub(crate) fn invalid(tool: &str, message: impl std::fmt::Display) -> ToolError {
    ToolError::fatal("args_invalid", format!("{tool}: {message}"))
}

/// The time budget of a call: the shortest of the args' `timeout_ms`, the step's deadline
/// and the configured default.
pub(crate) fn budget(ctx: &ToolContext, arg_ms: Option<u64>, default_ms: u64) -> Duration {
    let mut d = Duration::from_millis(arg_ms.unwrap_or(default_ms));
    if let Some(deadline) = ctx.deadline {
        d = d.min(deadline.saturating_duration_since(Instant::now()));
    }
    d
}

/// The first `max` characters of `s`, marked when cut (for error messages).
pub(crate) fn snippet(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}
