//! Shared helpers of the durability tests: stores (SQLite in a temp dir, PostgreSQL in a
//! fresh schema at `WEFT_TEST_POSTGRES_URL`) and test tools. The PostgreSQL tests are
//! ignored unless that variable was set at build time (`cfg(weft_postgres)`, `build.rs`).
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};
use weft_core::{Effect, ToolSpec};
use weft_durable::{Durable, DurableConfig};
use weft_runtime::EngineOptions;
use weft_store::Store;
use weft_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError};

static N: AtomicU64 = AtomicU64::new(0);

/// A fresh directory under the system temp dir.
pub(crate) fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weft-durable-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

pub(crate) async fn sqlite(tag: &str) -> (Arc<dyn Store>, std::path::PathBuf) {
    let path = temp_dir(tag).join("weft.db");
    let s = weft_store_sqlite::SqliteStore::open(&path).await.unwrap();
    (Arc::new(s), path)
}

/// `WEFT_TEST_POSTGRES_URL`. The PostgreSQL tests run only when it was set at build time
/// (`cfg(weft_postgres)`, see `build.rs`; otherwise they are ignored), so here a missing
/// variable is a failure with a hint, never a skip.
pub(crate) fn postgres_url() -> String {
    match std::env::var("WEFT_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "this test needs PostgreSQL and WEFT_TEST_POSTGRES_URL is not set (it was when the \
             test was built): export WEFT_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
             (bash .ci/run starts the server)"
        ),
    }
}

/// A PostgreSQL store in a fresh schema (panics without `WEFT_TEST_POSTGRES_URL`).
pub(crate) async fn postgres(tag: &str) -> Arc<dyn Store> {
    let url = postgres_url();
    let schema = format!(
        "durable_{tag}_{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let s = weft_store_postgres::PgStore::open_in_schema(&url, Some(&schema))
        .await
        .unwrap_or_else(|e| panic!("cannot open PostgreSQL at WEFT_TEST_POSTGRES_URL: {e}"));
    Arc::new(s)
}

/// A tool with a fixed behaviour.
pub(crate) struct TestTool {
    spec: ToolSpec,
    behaviour: Behaviour,
}

#[derive(Clone, Copy)]
pub(crate) enum Behaviour {
    /// Adds `{step: attempt}` to the input (async: one yield).
    Echo,
    /// Never finishes.
    Hang,
}

impl TestTool {
    pub(crate) fn make(name: &str, idempotent: bool, behaviour: Behaviour) -> Arc<dyn Tool> {
        Arc::new(TestTool {
            spec: ToolSpec {
                name: name.to_string(),
                description: "test tool".to_string(),
                args_schema: json!({}),
                effect: if idempotent {
                    Effect::Pure
                } else {
                    Effect::Write
                },
                idempotent,
                cost: None,
                llm: false,
            },
            behaviour,
        })
    }
}

impl Tool for TestTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let b = self.behaviour;
        Box::pin(async move {
            match b {
                Behaviour::Echo => {
                    tokio::task::yield_now().await;
                    let mut m = match ctx.inputs.first().map(|(_, v)| (**v).clone()) {
                        Some(Value::Object(m)) => m,
                        _ => serde_json::Map::new(),
                    };
                    m.insert(ctx.step.to_string(), json!(ctx.attempt));
                    Ok(Value::Object(m))
                }
                Behaviour::Hang => std::future::pending().await,
            }
        })
    }
}

/// A registry with bench.add, `echo` (idempotent), `once` (not), and `hang_idem` /
/// `hang_once` as given.
pub(crate) fn registry(hang: bool) -> Registry {
    let mut r = Registry::new();
    weft_builtins::builtin::register_pure(&mut r);
    r.register(weft_bench::engine::tool::tool());
    r.register(TestTool::make("echo", true, Behaviour::Echo));
    r.register(TestTool::make("once", false, Behaviour::Echo));
    let b = if hang {
        Behaviour::Hang
    } else {
        Behaviour::Echo
    };
    r.register(TestTool::make("hang_idem", true, b));
    r.register(TestTool::make("hang_once", false, b));
    r
}

pub(crate) async fn durable(store: Arc<dyn Store>, hang: bool, cfg: DurableConfig) -> Durable {
    Durable::open(
        store,
        EngineOptions {
            registry: Arc::new(registry(hang)),
            ..EngineOptions::default()
        },
        cfg,
    )
    .await
    .unwrap()
}

/// `a` (echo) → `b` (tool) → done.
pub(crate) fn two_step(name: &str, tool: &str) -> Value {
    json!({"plan_name": name, "graph_type": "acyclic",
    "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "echo", "args": {}, "emits": ["mid"]},
        "b": {"on": ["mid"], "action": tool, "args": {}, "emits": ["done"]}
    }})
}

/// A reactive plan: each `ping` runs `echo` and emits `pong`-less (the token is consumed).
pub(crate) fn reactive(name: &str) -> Value {
    json!({"plan_name": name, "graph_type": "reactive",
        "events": {"start": {}, "ping": {"kind": "input"}, "pong": {"kind": "output"}},
        "steps": {"probe": {"on": ["ping"], "action": "echo", "args": {}, "emits": []}}})
}

/// Runs one "process": a fresh multi-thread runtime that is dropped (with every task it
/// still has: timers, committers) when `f` returns, as a crash would end them.
pub(crate) fn process<T>(f: impl Future<Output = T>) -> T {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let out = rt.block_on(f);
    rt.shutdown_timeout(std::time::Duration::from_secs(5));
    out
}
