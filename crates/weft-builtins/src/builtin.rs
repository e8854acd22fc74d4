//! Built-in tools that need nothing but memory: `noop`, `echo`, `log`, `fail`.
//!
//! Their specs come from the same `builtin_tools.json` the validator reads, so the two can
//! never disagree. Tools with I/O (HTTP, email, timers, processes, child plans) live in their
//! own modules.

use std::sync::Arc;

use serde_json::Value;
use weft_core::catalog::{StaticCatalog, ToolCatalog, ToolSpec};

use crate::{BoxFuture, InlineArgs, InlineContext, Registry, Tool, ToolContext, ToolError};

/// The spec of a built-in tool, from `builtin_tools.json`.
pub fn builtin_spec(name: &str) -> ToolSpec {
    StaticCatalog::builtin()
        .spec(name)
        .cloned()
        .unwrap_or_else(|| ToolSpec {
            name: name.to_string(),
            description: String::new(),
            args_schema: serde_json::json!({}),
            effect: weft_core::catalog::Effect::Pure,
            idempotent: true,
            cost: None,
            llm: false,
        })
}

/// A tool implemented by a plain synchronous function.
pub struct FnTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F> FnTool<F>
where
    F: Fn(&ToolContext, Value) -> Result<Value, ToolError> + Send + Sync + 'static,
{
    /// Wraps `f` with `spec`.
    pub fn new(spec: ToolSpec, f: F) -> Self {
        FnTool { spec, f }
    }
}

impl<F> Tool for FnTool<F>
where
    F: Fn(&ToolContext, Value) -> Result<Value, ToolError> + Send + Sync + 'static,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let r = (self.f)(&ctx, args);
        Box::pin(std::future::ready(r))
    }
    fn is_immediate(&self) -> bool {
        true
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        (self.f)(&ctx, args)
    }
    /// A function called in the loop (no I/O: it is immediate) touches only the engine.
    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        Some(weft_tools::Needs::nothing("builtin"))
    }
}

/// `noop` as a tool: like [`noop`], but takes the input payload over instead of copying it
/// when the runtime hands the firing's tokens to the tool.
struct Noop {
    spec: ToolSpec,
}

impl Tool for Noop {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        Some(weft_tools::Needs::nothing("builtin"))
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        Box::pin(std::future::ready(noop_owned(ctx, args)))
    }
    fn is_immediate(&self) -> bool {
        true
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        noop_owned(ctx, args)
    }
    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        // Needs no context; literal args: copies only the entries merged into the output.
        let n = ctx.len();
        let mut out = match n {
            0 => Value::Object(serde_json::Map::new()),
            1 => ctx
                .take_input_values()
                .next()
                .unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            _ => ctx.input(0).map(|(_, p)| (**p).clone()).unwrap_or_default(),
        };
        if let Value::Object(o) = &mut out {
            match args {
                InlineArgs::Owned(Value::Object(a)) => o.extend(a),
                InlineArgs::Literal(a) => {
                    if let Value::Object(a) = a {
                        o.extend(a.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                InlineArgs::Owned(_) => {}
            }
        }
        Ok(out)
    }
}

fn noop_owned(ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
    let mut out = noop_input(ctx);
    if let (Value::Object(o), Value::Object(a)) = (&mut out, args) {
        o.extend(a);
    }
    Ok(out)
}

/// The payload `noop` starts from: its only input taken over, else a copy of the first.
fn noop_input(ctx: ToolContext) -> Value {
    if ctx.inputs.is_empty() {
        Value::Object(serde_json::Map::new())
    } else if ctx.inputs.len() == 1 {
        ctx.take_input_values()
            .next()
            .unwrap_or_else(|| Value::Object(serde_json::Map::new()))
    } else {
        (*ctx.inputs[0].1).clone()
    }
}

/// `noop`: passes its (first) input token's payload through, merged with object args.
pub fn noop(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    let mut out = match ctx.inputs.first() {
        Some((_, p)) => (**p).clone(),
        None => Value::Object(serde_json::Map::new()),
    };
    if let (Value::Object(o), Value::Object(a)) = (&mut out, args) {
        o.extend(a);
    }
    Ok(out)
}

/// The in-memory built-ins.
pub fn register_pure(reg: &mut Registry) {
    reg.register(Arc::new(Noop {
        spec: builtin_spec("noop"),
    }));
    reg.register(Arc::new(FnTool::new(
        builtin_spec("echo"),
        |_: &ToolContext, a: Value| Ok(a),
    )));
    reg.register(Arc::new(FnTool::new(
        builtin_spec("log"),
        |ctx: &ToolContext, a: Value| {
            let msg = a.get("message").cloned().unwrap_or(Value::Null);
            Ok(serde_json::json!({"logged": msg, "step": &*ctx.step}))
        },
    )));
    reg.register(Arc::new(FnTool::new(
        builtin_spec("fail"),
        |_: &ToolContext, a: Value| {
            let msg = a
                .get("message")
                .and_then(Value::as_str)
                .unwrap_or("the `fail` tool always fails");
            Err(ToolError::retryable("tool_error", msg))
        },
    )));
}

/// Registers every built-in tool: the in-memory ones, and the I/O ones configured by `cfg`
/// (`process.run` only when `cfg.process.enabled`). The LLM tools (`llm.complete`,
/// `agent.react`) are registered by the LLM layer.
pub fn register_all(reg: &mut Registry, cfg: &crate::ToolsConfig) {
    register_pure(reg);
    reg.register(Arc::new(crate::http::HttpTool::new(&cfg.http)));
    crate::timer::register(reg);
    crate::context::register(reg);
    reg.register(Arc::new(crate::email::EmailTool::new(&cfg.email)));
    reg.register(Arc::new(crate::plan_run::PlanRunTool::new()));
    if cfg.process.enabled {
        reg.register(Arc::new(crate::process::ProcessTool::new(&cfg.process)));
    }
}

/// A registry with every built-in tool under the default (offline, locked-down) config.
pub fn default_registry() -> Registry {
    let mut reg = Registry::new();
    register_all(&mut reg, &crate::ToolsConfig::default());
    reg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inputs(vals: &[Value]) -> Vec<(Arc<str>, Arc<Value>)> {
        vals.iter()
            .enumerate()
            .map(|(k, v)| (Arc::from(format!("e{k}")), Arc::new(v.clone())))
            .collect()
    }

    fn call_both(ins: &[Value], args: Value) -> (Value, Value, Value) {
        let noop = Noop {
            spec: builtin_spec("noop"),
        };
        let build = |inputs: Vec<(Arc<str>, Arc<Value>)>| {
            let mut c = ToolContext::detached("s");
            c.inputs = Arc::new(inputs);
            c
        };
        let mut ctx = ToolContext::detached("s");
        ctx.inputs = Arc::new(inputs(ins));
        let now = noop.call_now(ctx, args.clone()).expect("noop");
        let shared = noop
            .call_inline(
                InlineContext::new(inputs(ins), &build),
                InlineArgs::Literal(&args),
            )
            .expect("noop");
        let owned = noop
            .call_inline(
                InlineContext::new(inputs(ins), &build),
                InlineArgs::Owned(args),
            )
            .expect("noop");
        (now, shared, owned)
    }

    #[test]
    fn noop_inline_matches_call_now() {
        let cases = [
            (vec![], serde_json::json!({"a": 1})),
            (
                vec![serde_json::json!({"x": 1})],
                serde_json::json!({"a": 2}),
            ),
            (
                vec![serde_json::json!({"x": 1}), serde_json::json!({"y": 2})],
                serde_json::json!({"x": 3}),
            ),
            (vec![serde_json::json!([1])], serde_json::json!({"a": 1})),
            (vec![serde_json::json!({"x": 1})], Value::Null),
        ];
        for (ins, args) in cases {
            let (now, shared, owned) = call_both(&ins, args.clone());
            assert_eq!(now, shared, "shared args, inputs {ins:?}, args {args}");
            assert_eq!(now, owned, "owned args, inputs {ins:?}, args {args}");
        }
        let (now, _, _) = call_both(&[serde_json::json!({"x": 1})], serde_json::json!({"a": 2}));
        assert_eq!(now, serde_json::json!({"x": 1, "a": 2}));
    }
}
