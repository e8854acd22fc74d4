//! Shared test harness: an engine on a manual clock with an in-memory journal, test tools,
//! and the replay check (STYLE §6): every scenario's journal, replayed into a fresh
//! `weft_core::Instance`, must give the same marking as the live run.
#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use weft_builtins::builtin::FnTool;
use weft_core::{Effect, Instance, ToolSpec};
use weft_runtime::journal_hook::replay;
use weft_runtime::{Engine, EngineOptions, InstanceHandle, ManualClock, MemoryJournal};
use weft_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError};

pub(crate) struct Harness {
    pub engine: Engine,
    pub journal: Arc<MemoryJournal>,
    pub clock: ManualClock,
}

pub(crate) fn spec(name: &str, effect: Effect) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: String::new(),
        args_schema: json!({}),
        effect,
        idempotent: true,
        cost: None,
        llm: false,
    }
}

/// A tool from a future-returning closure.
pub(crate) struct AsyncTool<F> {
    spec: ToolSpec,
    f: F,
}

impl<F> Tool for AsyncTool<F>
where
    F: Fn(ToolContext, Value) -> BoxFuture<'static, Result<Value, ToolError>> + Send + Sync,
{
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        (self.f)(ctx, args)
    }
}

pub(crate) fn async_tool<F>(name: &str, f: F) -> Arc<dyn Tool>
where
    F: Fn(ToolContext, Value) -> BoxFuture<'static, Result<Value, ToolError>>
        + Send
        + Sync
        + 'static,
{
    Arc::new(AsyncTool {
        spec: spec(name, Effect::Pure),
        f,
    })
}

pub(crate) static CALLS: AtomicUsize = AtomicUsize::new(0);

/// The real built-ins (email to a temp outbox) plus test tools.
pub(crate) fn registry() -> Registry {
    let mut cfg = weft_builtins::ToolsConfig::default();
    cfg.email.outbox_dir =
        std::env::temp_dir().join(format!("weft-runtime-test-{}", std::process::id()));
    let mut reg = Registry::new();
    weft_builtins::builtin::register_all(&mut reg, &cfg);
    // Offline stand-ins for the network and the LLM.
    reg.register(Arc::new(FnTool::new(
        spec("http.request", Effect::Write),
        |_: &ToolContext, a: Value| Ok(json!({"status": 200, "body": {"echo": a}})),
    )));
    reg.register(Arc::new(FnTool::new(
        spec("llm.complete", Effect::Read),
        |_: &ToolContext, _: Value| Ok(json!({"text": "APPROVE"})),
    )));
    reg.register(Arc::new(FnTool::new(
        spec("t.panic", Effect::Pure),
        |_: &ToolContext, _: Value| -> Result<Value, ToolError> { panic!("boom") },
    )));
    reg.register(async_tool(
        "t.hang",
        |_, _| Box::pin(std::future::pending()),
    ));
    reg.register(async_tool("t.yield", |ctx, a| {
        Box::pin(async move {
            tokio::task::yield_now().await;
            let input = ctx
                .inputs
                .first()
                .map(|(_, p)| (**p).clone())
                .unwrap_or(Value::Null);
            Ok(json!({"in": input, "args": a}))
        })
    }));
    reg.register(Arc::new(FnTool::new(
        spec("t.count", Effect::Pure),
        |ctx: &ToolContext, _: Value| {
            CALLS.fetch_add(1, Ordering::SeqCst);
            Ok(ctx
                .inputs
                .first()
                .map(|(_, p)| (**p).clone())
                .unwrap_or(Value::Null))
        },
    )));
    let mut strict = spec("t.strict", Effect::Pure);
    strict.args_schema =
        json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
    reg.register(Arc::new(FnTool::new(
        strict,
        |_: &ToolContext, a: Value| Ok(a),
    )));
    reg
}

pub(crate) fn harness_with(f: impl FnOnce(&mut EngineOptions)) -> Harness {
    let journal = Arc::new(MemoryJournal::new());
    let clock = ManualClock::new(1_700_000_000_000);
    let mut opts = EngineOptions {
        registry: Arc::new(registry()),
        clock: Arc::new(clock.clone()),
        journal: Some(journal.clone()),
        // Off, so immediate tools run as the engine runs them by default (taken, not
        // recorded as in flight); `tests/taken.rs` compares both ways.
        trace: false,
        ..EngineOptions::default()
    };
    f(&mut opts);
    Harness {
        engine: Engine::new(opts),
        journal,
        clock,
    }
}

pub(crate) fn harness() -> Harness {
    harness_with(|_| {})
}

impl Harness {
    pub(crate) fn plan(&self, doc: Value) -> String {
        let c = self.engine.register(
            weft_core::load::plan_from_value(doc, &Default::default()).expect("plan loads"),
        );
        c.expect("plan registers").name.to_string()
    }

    /// Advances the clock and lets tasks run.
    pub(crate) async fn advance(&self, ms: u64) {
        self.clock.advance(ms);
        settle().await;
    }

    /// The live instance equals its journal replayed into the pure core.
    pub(crate) fn check_replay(&self, h: &InstanceHandle) {
        let live = h.core_instance().expect("started");
        let inputs = self.journal.inputs(h.id());
        assert!(!inputs.is_empty(), "journal has inputs for {}", h.id());
        let replayed = replay(&h.plan().net, h.id(), &inputs).expect("replays");
        assert_same(&live, &replayed);
    }
}

pub(crate) fn assert_same(live: &Instance, replayed: &Instance) {
    assert_eq!(
        serde_json::to_value(&live.marking).expect("ser"),
        serde_json::to_value(&replayed.marking).expect("ser"),
        "marking differs from replay"
    );
    assert_eq!(live.status, replayed.status, "status differs from replay");
    assert_eq!(live.fired, replayed.fired, "firings differ from replay");
    assert_eq!(
        live.in_flight.keys().collect::<Vec<_>>(),
        replayed.in_flight.keys().collect::<Vec<_>>()
    );
}

/// Lets spawned tasks run until quiet.
pub(crate) async fn settle() {
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
}

/// Payloads on an output event of an outcome.
pub(crate) fn out(o: &weft_runtime::Outcome, event: &str) -> Vec<Value> {
    o.results
        .iter()
        .filter(|r| r.event == event)
        .flat_map(|r| r.payloads.iter().map(|p| (**p).clone()))
        .collect()
}
