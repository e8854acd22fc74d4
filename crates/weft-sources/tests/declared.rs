//! The rules every declared tool follows, whatever its source: the spec comes from the
//! definition, a retryable failure is retried with the same idempotency key up to the
//! definition's `retry.max`, the whole call is bounded by `timeout_ms`, and a result that
//! does not match `output_schema` is a fatal `output_invalid` failure.

#![allow(clippy::unwrap_used)]

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_sources::{DeclaredTool, Source, ToolDef};
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

/// Fails `fails` times (retryable), then answers `answer`; hangs when `hang`; records the
/// idempotency key of every call.
struct Scripted {
    fails: u32,
    calls: AtomicU32,
    answer: Value,
    hang: bool,
    keys: Mutex<Vec<String>>,
}

impl Source for Scripted {
    fn call(&self, ctx: ToolContext, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let n = self.calls.fetch_add(1, Ordering::Relaxed);
        self.keys
            .lock()
            .unwrap()
            .push(ctx.idempotency_key.to_string());
        let (fail, hang, answer) = (n < self.fails, self.hang, self.answer.clone());
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            if fail {
                return Err(ToolError::retryable("unavailable", "try again"));
            }
            Ok(answer)
        })
    }
    fn describe(&self) -> String {
        "scripted".into()
    }
}

fn def(extra: Value) -> ToolDef {
    let mut d = json!({
        "name": "extract_facts", "description": "Extract facts",
        "effect": "read", "idempotent": true,
        "input_schema": {"type": "object", "required": ["text"]},
        "source": {"kind": "fixed", "result": null}
    });
    for (k, v) in extra.as_object().unwrap() {
        d[k] = v.clone();
    }
    serde_json::from_value(d).unwrap()
}

fn scripted(fails: u32, answer: Value, hang: bool) -> Arc<Scripted> {
    Arc::new(Scripted {
        fails,
        calls: AtomicU32::new(0),
        answer,
        hang,
        keys: Mutex::new(Vec::new()),
    })
}

#[tokio::test]
async fn the_spec_comes_from_the_definition() {
    let t = DeclaredTool::new(&def(json!({})), scripted(0, json!({}), false)).unwrap();
    let s = t.spec();
    assert_eq!(s.name, "extract_facts");
    assert_eq!(s.effect, weft_core::Effect::Read);
    assert!(s.idempotent);
    assert_eq!(
        s.args_schema,
        json!({"type": "object", "required": ["text"]})
    );
    assert_eq!(t.source(), "scripted");
}

#[tokio::test]
async fn retryable_failures_are_retried_with_the_same_key() {
    let src = scripted(2, json!({"facts": []}), false);
    let t = DeclaredTool::new(
        &def(json!({"retry": {"max": 2, "backoff_ms": 1}})),
        Arc::clone(&src) as Arc<dyn Source>,
    )
    .unwrap();
    let r = t
        .call(ToolContext::detached("s"), json!({"text": "x"}))
        .await;
    assert_eq!(r.unwrap(), json!({"facts": []}));
    let keys = src.keys.lock().unwrap().clone();
    assert_eq!(keys.len(), 3);
    assert!(keys.iter().all(|k| *k == keys[0]), "{keys:?}");

    // One retry fewer than needed: the last failure is the result.
    let src = scripted(2, json!({}), false);
    let t = DeclaredTool::new(
        &def(json!({"retry": {"max": 1, "backoff_ms": 1}})),
        Arc::clone(&src) as Arc<dyn Source>,
    )
    .unwrap();
    let e = t
        .call(ToolContext::detached("s"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "unavailable");
    assert_eq!(src.calls.load(Ordering::Relaxed), 2);
}

#[tokio::test(start_paused = true)]
async fn a_call_past_its_timeout_fails_retryably() {
    let t = DeclaredTool::new(
        &def(json!({"timeout_ms": 50})),
        scripted(0, json!({}), true),
    )
    .unwrap();
    let e = t
        .call(ToolContext::detached("s"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "timeout");
    assert!(e.retryable);
    assert!(e.message.contains("50 ms"), "{e}");
}

#[tokio::test]
async fn a_result_outside_the_output_schema_is_a_failure() {
    let schema = json!({"type": "object", "required": ["facts"],
        "properties": {"facts": {"type": "array"}}});
    let t = DeclaredTool::new(
        &def(json!({"output_schema": schema})),
        scripted(0, json!({"facts": "not a list"}), false),
    )
    .unwrap();
    let e = t
        .call(ToolContext::detached("s"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "output_invalid");
    assert!(!e.retryable);
    assert!(e.message.contains("/facts"), "{e}");
    let ok = DeclaredTool::new(
        &def(json!({"output_schema": schema})),
        scripted(0, json!({"facts": [1]}), false),
    )
    .unwrap();
    assert!(ok.call(ToolContext::detached("s"), json!({})).await.is_ok());
}

#[test]
fn bad_definitions_are_refused() {
    let bad_schema = def(json!({"input_schema": {"type": 12}}));
    let e = DeclaredTool::new(&bad_schema, scripted(0, json!({}), false)).unwrap_err();
    assert!(e.to_string().contains("input_schema"), "{e}");
    // A pattern whose check could backtrack without bound: refused with the reason, in
    // either schema.
    let backref = json!({"type": "string", "pattern": "^(a|a)*\\1$"});
    for field in ["input_schema", "output_schema"] {
        let tool = def(json!({ field: backref }));
        let e = DeclaredTool::new(&tool, scripted(0, json!({}), false)).unwrap_err();
        let e = e.to_string();
        assert!(
            e.contains(field) && e.contains("without backtracking"),
            "{e}"
        );
    }
    let zero = def(json!({"timeout_ms": 0}));
    assert!(DeclaredTool::new(&zero, scripted(0, json!({}), false)).is_err());
    let unknown: Result<ToolDef, _> = serde_json::from_value(json!({
        "name": "x", "source": {"kind": "fixed", "result": 1}, "colour": "red"}));
    assert!(unknown.is_err());
    let kind: Result<ToolDef, _> =
        serde_json::from_value(json!({"name": "x", "source": {"kind": "carrier-pigeon"}}));
    assert!(kind.is_err());
}
