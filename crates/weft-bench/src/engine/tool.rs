//! The benchmark step tool `bench.add`: passes the object it gets through and adds one key
//! (`out = {...in, key: value}`, BENCHMARKS.md). With several inputs (the W2 join) it merges
//! the input objects in binding order first.

use std::sync::Arc;

use serde_json::{Map, Value, json};
use weft_core::{Effect, ToolSpec};
use weft_tools::{BoxFuture, InlineArgs, InlineContext, Tool, ToolContext, ToolError};

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
                cost: None,
                llm: false,
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
    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        // Needs only its inputs and args: no context is built. Literal args (every
        // benchmark step) are read in place; only the key and the value are copied.
        let (key, value) = match args {
            InlineArgs::Owned(a) => fields(a)?,
            InlineArgs::Literal(a) => {
                let Value::Object(a) = a else {
                    return Err(not_object());
                };
                let (Some(Value::String(key)), Some(value)) = key_and_value(a) else {
                    return Err(missing_fields());
                };
                (key.clone(), value.clone())
            }
        };
        let mut inputs = ctx.take_input_values();
        Ok(merge(std::iter::from_fn(|| inputs.next_arc()), key, value))
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
    let inputs = Arc::unwrap_or_clone(ctx.inputs);
    Ok(merge(inputs.into_iter().map(|(_, p)| p), key, value))
}

/// `key` and `value` of owned args.
fn fields(args: Value) -> Result<(String, Value), ToolError> {
    let Value::Object(a) = args else {
        return Err(not_object());
    };
    let (Some(Value::String(key)), Some(value)) = key_and_value(a) else {
        return Err(missing_fields());
    };
    Ok((key, value))
}

/// The `key` and `value` entries of args, owned or borrowed, found by walking the entries
/// (no hashing, nothing copied).
fn key_and_value<K: AsRef<str>, V>(
    entries: impl IntoIterator<Item = (K, V)>,
) -> (Option<V>, Option<V>) {
    let (mut key, mut value) = (None, None);
    for (k, v) in entries {
        match k.as_ref() {
            "key" => key = Some(v),
            "value" => value = Some(v),
            _ => {}
        }
    }
    (key, value)
}

/// The input objects merged in binding order, plus `key: value`. An input only the tool
/// holds is taken over, a shared one copied.
fn merge(inputs: impl Iterator<Item = Arc<Value>>, key: String, value: Value) -> Value {
    let mut out: Option<Map<String, Value>> = None;
    for p in inputs {
        match Arc::try_unwrap(p) {
            Ok(Value::Object(o)) => match &mut out {
                None => out = Some(o),
                Some(m) => extend(m, o),
            },
            Ok(_) => {}
            // Copied: a clone keeps the hashes (inserting the keys one by one would hash
            // each again).
            Err(shared) => match (&mut out, &*shared) {
                (None, Value::Object(o)) => out = Some(o.clone()),
                (Some(m), Value::Object(o)) => extend(m, o.clone()),
                _ => {}
            },
        }
    }
    let mut out = out.unwrap_or_default();
    out.insert(key, value);
    Value::Object(out)
}

/// `m.extend(o)`, skipping the leading entries of `o` that `m` holds at the same place
/// with an identical value (objects derived from one ancestor, as the branches of a join,
/// share a prefix): inserting those again would hash each key to change nothing.
fn extend(m: &mut Map<String, Value>, o: Map<String, Value>) {
    let same = m
        .iter()
        .zip(&o)
        .take_while(|((mk, mv), (ok, ov))| mk == ok && identical(mv, ov))
        .count();
    // Inserted one by one: `extend` would reserve room for half the entries it skips.
    for (k, v) in o.into_iter().skip(same) {
        m.insert(k, v);
    }
}

/// Equal and written the same: key order counts and `0.0` is not `-0.0` (`==` on values
/// ignores both).
fn identical(a: &Value, b: &Value) -> bool {
    match (a, b) {
        // Integers compare as they are; floats by their bits, and never equal an integer.
        (Value::Number(x), Value::Number(y)) if !x.is_f64() && !y.is_f64() => x == y,
        (Value::Number(x), Value::Number(y)) => {
            x.is_f64() && y.is_f64() && x.as_f64().map(f64::to_bits) == y.as_f64().map(f64::to_bits)
        }
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| identical(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|((kp, p), (kq, q))| kp == kq && identical(p, q))
        }
        _ => a == b,
    }
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
                InlineArgs::Literal(&args),
            )
            .expect("add");
        assert_eq!(shared, now);
        let owned = t
            .call_inline(
                InlineContext::new(inputs(), &build),
                InlineArgs::Owned(args),
            )
            .expect("add");
        assert_eq!(owned, now);
        let bad = t.call_inline(
            InlineContext::new(inputs(), &build),
            InlineArgs::Literal(&json!({"key": 1, "value": 2})),
        );
        assert_eq!(bad.err().map(|e| e.code), Some("args_invalid".to_string()));
    }

    #[test]
    fn merging_a_shared_prefix_is_merging() {
        let cases = [
            (json!({"a": 1, "b": 2}), json!({"a": 1, "b": 2, "c": 3})),
            (json!({"a": 1, "b": 2}), json!({"a": 1, "b": 5, "c": 3})),
            (json!({"a": 0.0, "b": 2}), json!({"a": -0.0, "b": 2})),
            (json!({"a": 1, "b": 2}), json!({"a": 1.0, "b": 2})),
            (
                json!({"a": {"x": 1, "y": 2}}),
                json!({"a": {"y": 2, "x": 1}}),
            ),
            (
                json!({"a": [1, {"z": 1}]}),
                json!({"a": [1, {"z": 1}], "q": null}),
            ),
            (json!({"b": 1, "a": 2}), json!({"a": 2, "b": 1})),
        ];
        for (m, o) in cases {
            let (Value::Object(mut m), Value::Object(o)) = (m, o) else {
                unreachable!()
            };
            let mut plain = m.clone();
            plain.extend(o.clone());
            extend(&mut m, o);
            assert_eq!(
                serde_json::to_string(&m).expect("ser"),
                serde_json::to_string(&plain).expect("ser")
            );
        }
    }
}
