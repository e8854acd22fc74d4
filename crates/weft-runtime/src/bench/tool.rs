//! The benchmark step tool `bench.add`: passes the object it gets through and adds one key
//! (`out = {...in, key: value}`, BENCHMARKS.md). With several inputs (the W2 join) it merges
//! the input objects in binding order first.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use weft_core::{Effect, ToolSpec};
use weft_tools::{Args, BoxFuture, InlineContext, Tool, ToolContext, ToolError};

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
        Box::pin(std::future::ready(add(ctx, args)))
    }
    fn is_immediate(&self) -> bool {
        true
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        add(ctx, args)
    }
    fn call_inline(&self, ctx: InlineContext<'_>, args: Args) -> Result<Value, ToolError> {
        // Needs only its inputs and args: no context is built. Literal args (every
        // benchmark step) are read in place; only the key and the value are copied.
        let (key, value) = match args {
            Args::Owned(a) => fields(a)?,
            Args::Shared(a) => {
                let Value::Object(a) = &*a else {
                    return Err(not_object());
                };
                let (mut key, mut value) = (None, None);
                for (k, v) in a {
                    match k.as_str() {
                        "key" => key = Some(v),
                        "value" => value = Some(v),
                        _ => {}
                    }
                }
                let (Some(Value::String(key)), Some(value)) = (key, value) else {
                    return Err(missing_fields());
                };
                (key.clone(), value.clone())
            }
        };
        Ok(merge(ctx.take_input_values(), key, value))
    }
}

fn not_object() -> ToolError {
    ToolError::fatal("args_invalid", "args must be an object")
}

fn missing_fields() -> ToolError {
    ToolError::fatal("args_invalid", "args need `key` (string) and `value`")
}

/// `{...in, key: value}`. Takes the input objects over when the runtime handed them to the
/// tool (nothing else holds them), else copies them.
fn add(ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
    let (key, value) = fields(args)?;
    Ok(merge(ctx.take_input_values(), key, value))
}

/// `key` and `value` of owned args.
fn fields(args: Value) -> Result<(String, Value), ToolError> {
    let Value::Object(a) = args else {
        return Err(not_object());
    };
    // Take both fields by walking the entries (no hashing, nothing copied).
    let (mut key, mut value) = (None, None);
    for (k, v) in a {
        match k.as_str() {
            "key" => key = Some(v),
            "value" => value = Some(v),
            _ => {}
        }
    }
    let (Some(Value::String(key)), Some(value)) = (key, value) else {
        return Err(missing_fields());
    };
    Ok((key, value))
}

/// The input objects merged in binding order (taken over when only the tool holds them),
/// plus `key: value`.
fn merge(inputs: impl Iterator<Item = Value>, key: String, value: Value) -> Value {
    let mut out: Option<Map<String, Value>> = None;
    for p in inputs {
        let Value::Object(o) = p else { continue };
        match &mut out {
            None => out = Some(o),
            Some(m) => m.extend(o),
        }
    }
    let mut out = out.unwrap_or_default();
    out.insert(key, value);
    Value::Object(out)
}

/// A registry entry for the tool.
pub fn tool() -> Arc<dyn Tool> {
    Arc::new(BenchAdd::default())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs() -> Vec<(Arc<str>, Arc<Value>)> {
        vec![
            (Arc::from("a"), Arc::new(json!({"run": 1, "x": 1}))),
            (Arc::from("b"), Arc::new(json!({"x": 2, "y": 3}))),
        ]
    }

    #[test]
    fn inline_call_matches_call_now() {
        let t = BenchAdd::default();
        let build = |inputs: Vec<(Arc<str>, Arc<Value>)>| {
            let mut c = ToolContext::detached("s");
            c.inputs = Arc::new(inputs);
            c
        };
        let args = json!({"key": "k", "value": 7});
        let mut ctx = ToolContext::detached("s");
        ctx.inputs = Arc::new(inputs());
        let now = t.call_now(ctx, args.clone()).expect("add");
        assert_eq!(now, json!({"run": 1, "x": 2, "y": 3, "k": 7}));
        let shared = t
            .call_inline(
                InlineContext::new(inputs(), &build),
                Args::Shared(Arc::new(args.clone())),
            )
            .expect("add");
        assert_eq!(shared, now);
        let owned = t
            .call_inline(InlineContext::new(inputs(), &build), Args::Owned(args))
            .expect("add");
        assert_eq!(owned, now);
        let bad = t.call_inline(
            InlineContext::new(inputs(), &build),
            Args::Shared(Arc::new(json!({"key": 1, "value": 2}))),
        );
        assert_eq!(bad.err().map(|e| e.code), Some("args_invalid".to_string()));
    }
}
