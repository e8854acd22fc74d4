//! A recording fake engine and helpers shared by the tests.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::Value;
use weft_tools::{BoxFuture, ChildPlan, TimerRequest, ToolContext, ToolError, ToolServices};

/// 2024-01-02T03:04:05.678Z.
pub(crate) const NOW_MS: i64 = 1_704_164_645_678;

#[derive(Default)]
pub(crate) struct FakeServices {
    pub timers: Mutex<Vec<TimerRequest>>,
    pub context: Mutex<HashMap<String, Value>>,
    pub children: Mutex<Vec<(ChildPlan, Value)>>,
}

impl ToolServices for FakeServices {
    fn now_ms(&self) -> i64 {
        NOW_MS
    }
    fn set_timer(&self, _: &ToolContext, timer: TimerRequest) -> Result<String, ToolError> {
        let mut t = self.timers.lock().unwrap();
        t.push(timer);
        Ok(format!("t{}", t.len()))
    }
    fn context_get(&self, _: &ToolContext, key: &str) -> Option<Value> {
        self.context.lock().unwrap().get(key).cloned()
    }
    fn context_put(&self, _: &ToolContext, key: &str, value: Value) -> Result<(), ToolError> {
        self.context.lock().unwrap().insert(key.to_string(), value);
        Ok(())
    }
    fn run_child(
        &self,
        _: &ToolContext,
        plan: ChildPlan,
        input: Value,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.children.lock().unwrap().push((plan, input.clone()));
        Box::pin(async move { Ok(serde_json::json!({"done": [input]})) })
    }
}

/// A context on `services` with the given idempotency key.
pub(crate) fn ctx_with(services: Arc<FakeServices>, key: &str) -> ToolContext {
    let mut ctx = ToolContext::detached("s");
    ctx.services = services;
    ctx.idempotency_key = Arc::from(key);
    ctx
}

/// A fresh empty directory under the target's temp dir.
pub(crate) fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-tools-test-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Calls `tool` in `reg`.
pub(crate) async fn call(
    reg: &weft_tools::Registry,
    tool: &str,
    ctx: ToolContext,
    args: Value,
) -> Result<Value, ToolError> {
    reg.get(tool)
        .unwrap_or_else(|| panic!("{tool} is not registered"))
        .call(ctx, args)
        .await
}
