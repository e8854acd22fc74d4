//! The external-tools crash-test workload (driven by `tests/crash_tools.rs`, which `kill -9`s
//! it while calls are in flight and restarts it): many instances of
//! `a (http, idempotent) → b (worker, not idempotent) → c (worker, idempotent) → d (http, not
//! idempotent)` on a durable SQLite store, with the four tools declared exactly as
//! `[[tools.declared]]` in `weft.toml` declares them and the node assembled by `weft-node`
//! (registry, tool-call chain with the journal gate, durable engine). The peers — an HTTP
//! server in the test process and a Python worker (`python/weft-worker`) over NATS — count
//! what they perform. On start it recovers what a killed process left, starts the runs never
//! durably started, waits for all of them and prints `DONE` (`weft_bench::crash::drive`).
//!
//! Usage: `weft-crashtest-tools DB_PATH HTTP_BASE_URL NATS_URL TENANT INSTANCES`.

use std::sync::Arc;

use serde_json::{Value, json};
use weft_store::Store;

/// The tools, as `[[tools.declared]]` entries (`http` to the test's server, `worker` to the
/// test's Python worker). No `retry`: a non-idempotent call is sent at most once per dispatch.
fn declared(http: &str, nats: &str) -> Result<Vec<weft_sources::ToolDef>, String> {
    let def = |name: &str, idempotent: bool, source: Value| {
        serde_json::from_value::<weft_sources::ToolDef>(json!({
            "name": name,
            "description": "crash-test effect (the peer counts it)",
            "effect": if idempotent { "read" } else { "write" },
            "idempotent": idempotent,
            "timeout_ms": 20_000,
            "source": source,
        }))
        .map_err(|e| format!("{name}: {e}"))
    };
    Ok(vec![
        def(
            "h.idem",
            true,
            json!({"kind": "http", "url": format!("{http}/idem")}),
        )?,
        def(
            "h.once",
            false,
            json!({"kind": "http", "url": format!("{http}/once")}),
        )?,
        def("w.idem", true, json!({"kind": "worker", "url": nats}))?,
        def("w.once", false, json!({"kind": "worker", "url": nats}))?,
    ])
}

/// The plan every instance runs; each tool answers its args plus `{<step>: <outcome>}`.
pub fn plan() -> Value {
    json!({"plan_name": "crash_tools", "graph_type": "acyclic",
    "events": {"start": {}, "e1": {}, "e2": {}, "e3": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "h.idem", "args": {"k": "${start.k}"},
            "emits": ["e1"]},
        "b": {"on": ["e1"], "action": "w.once", "args": {"k": "${e1.k}", "a": "${e1.a}"},
            "emits": ["e2"]},
        "c": {"on": ["e2"], "action": "w.idem",
            "args": {"k": "${e2.k}", "a": "${e2.a}", "b": "${e2.b}"}, "emits": ["e3"]},
        "d": {"on": ["e3"], "action": "h.once",
            "args": {"k": "${e3.k}", "a": "${e3.a}", "b": "${e3.b}", "c": "${e3.c}"},
            "emits": ["done"]}
    }})
}

async fn run(db: &str, http: &str, nats: &str, tenant: &str, n: u64) -> Result<(), String> {
    let store: Arc<dyn Store> = Arc::new(
        weft_store_sqlite::SqliteStore::open(db)
            .await
            .map_err(|e| e.to_string())?,
    );
    let mut config = weft_node::Config::default();
    config.tools.declared = declared(http, nats)?;
    let node = weft_node::Builder::new(config)
        .llm(None)
        .open_on(Arc::clone(&store))
        .await
        .map_err(|e| e.to_string())?;
    let d = node.durable().ok_or("the node is not durable")?;
    d.register(tenant, plan())
        .await
        .map_err(|e| e.to_string())?;
    weft_bench::crash::drive(&store, d, tenant, "crash_tools", n).await
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(db), Some(http), Some(nats), Some(tenant), Some(n)) = (
        args.get(1),
        args.get(2),
        args.get(3),
        args.get(4),
        args.get(5).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: weft-crashtest-tools DB_PATH HTTP_BASE_URL NATS_URL TENANT INSTANCES");
        std::process::exit(2);
    };
    weft_bench::crash::block_on("weft-crashtest-tools", run(db, http, nats, tenant, n));
}
