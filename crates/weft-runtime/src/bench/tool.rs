//! The benchmark step tool `bench.add`: passes the object it gets through and adds one key
//! (`out = {...in, key: value}`, BENCHMARKS.md). With several inputs (the W2 join) it merges
//! the input objects in binding order first.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use weft_core::{Effect, ToolSpec};
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

/// The `bench.add` tool.
pub struct BenchAdd {
    spec: ToolSpec,
}

impl Default for BenchAdd {
    fn default() -> Self {
        BenchAdd {
            spec: ToolSpec {
                name: "bench.add".to_string(),
                description:
                    "Benchmark step: returns its input object(s) merged, plus {key: value}."
                        .to_string(),
                args_schema: json!({"type": "object", "required": ["key", "value"],
                    "properties": {"key": {"type": "string"}, "value": {}}}),
                effect: Effect::Pure,
                idempotent: true,
            },
        }
    }
}

impl Tool for BenchAdd {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        Box::pin(std::future::ready(add(&ctx, args)))
    }
}

fn add(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    let Value::Object(mut a) = args else {
        return Err(ToolError::fatal("args_invalid", "args must be an object"));
    };
    let (Some(Value::String(key)), Some(value)) = (a.remove("key"), a.remove("value")) else {
        return Err(ToolError::fatal(
            "args_invalid",
            "args need `key` (string) and `value`",
        ));
    };
    let mut out = match ctx.inputs.as_slice() {
        [(_, one)] => match &**one {
            Value::Object(m) => m.clone(),
            _ => Map::new(),
        },
        many => {
            let mut m = Map::new();
            for (_, p) in many {
                if let Value::Object(o) = &**p {
                    for (k, v) in o {
                        m.insert(k.clone(), v.clone());
                    }
                }
            }
            m
        }
    };
    out.insert(key, value);
    Ok(Value::Object(out))
}

/// A registry entry for the tool.
pub fn tool() -> Arc<dyn Tool> {
    Arc::new(BenchAdd::default())
}
