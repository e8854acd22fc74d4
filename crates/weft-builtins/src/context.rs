//! `context.get` / `context.put`: the instance's key-value context, through the engine.
//!
//! The store itself belongs to the runtime (it is journalled with the instance); these tools
//! only check args and shape results, so they stay testable with a fake `ToolServices`.

use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::builtin::{FnTool, builtin_spec};
use crate::support::{invalid, parse_args};
use crate::{Registry, ToolContext, ToolError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GetArgs {
    key: String,
    #[serde(default)]
    default: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutArgs {
    key: String,
    value: Value,
}

/// Registers `context.get` and `context.put`.
pub fn register(reg: &mut Registry) {
    reg.register(Arc::new(FnTool::new(builtin_spec("context.get"), get)));
    reg.register(Arc::new(FnTool::new(builtin_spec("context.put"), put)));
}

/// `context.get`: `{key, value}`, with `default` (or null) when the key is absent.
pub fn get(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    let a: GetArgs = parse_args("context.get", args)?;
    check_key("context.get", &a.key)?;
    let value = ctx
        .services
        .context_get(ctx, &a.key)
        .or(a.default)
        .unwrap_or(Value::Null);
    Ok(serde_json::json!({ "key": a.key, "value": value }))
}

/// `context.put`: stores `value` under `key`; returns `{key, value}`.
pub fn put(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    let a: PutArgs = parse_args("context.put", args)?;
    check_key("context.put", &a.key)?;
    ctx.services.context_put(ctx, &a.key, a.value.clone())?;
    Ok(serde_json::json!({ "key": a.key, "value": a.value }))
}

fn check_key(tool: &str, key: &str) -> Result<(), ToolError> {
    if key.is_empty() {
        return Err(invalid(tool, "key: must not be empty"));
    }
    Ok(())
}
