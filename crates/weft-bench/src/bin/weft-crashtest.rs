//! The crash-test workload (driven by `tests/crash.rs`, which `kill -9`s it at random
//! moments and restarts it): many instances of `a (idempotent) → 40 ms durable timer →
//! b (not idempotent) → c (idempotent)` on the durable SQLite store. Every tool appends
//! `<key>\t<tool>\t<outcome>` to an effects file *when its effect happens*, so the test can
//! prove that no non-idempotent effect ran twice and no idempotent one ran twice with
//! different outcomes. On start it recovers what a previous (killed) process left, starts
//! the instances that were never durably started, waits for all of them and prints `DONE`.
//!
//! Usage: `weft-crashtest DB_PATH EFFECTS_PATH INSTANCES`.

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::{Effect, ToolSpec};
use weft_durable::{Durable, DurableConfig};
use weft_runtime::EngineOptions;
use weft_store::Store;
use weft_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError};

const TENANT: &str = "crash";

/// A side-effecting tool: waits a little (so kills land mid-flight), records its effect,
/// returns its input plus `{step: outcome}`.
struct Fx {
    spec: ToolSpec,
    log: Arc<Mutex<std::fs::File>>,
}

fn outcome_of(key: &str, idempotent: bool) -> String {
    // Deterministic per key for the idempotent tool; the non-idempotent one also derives
    // it from the key (what matters there is that it ran at most once).
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in key.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    format!("{}{h:016x}", if idempotent { "i" } else { "o" })
}

impl Tool for Fx {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, ctx: ToolContext, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let log = Arc::clone(&self.log);
        let idempotent = self.spec.idempotent;
        let name = self.spec.name.clone();
        Box::pin(async move {
            let key = ctx.idempotency_key.to_string();
            let delay = 1 + (outcome_of(&key, true).len() as u64 + key.len() as u64) % 7;
            tokio::time::sleep(Duration::from_millis(delay)).await;
            let out = outcome_of(&key, idempotent);
            {
                let mut f = log.lock().unwrap_or_else(|e| e.into_inner());
                let line = format!("{key}\t{name}\t{out}\n");
                f.write_all(line.as_bytes())
                    .map_err(|e| ToolError::retryable("io", e.to_string()))?;
            }
            let mut m = match ctx.inputs.first().map(|(_, v)| (**v).clone()) {
                Some(Value::Object(m)) => m,
                _ => serde_json::Map::new(),
            };
            m.insert(ctx.step.to_string(), Value::from(out));
            Ok(Value::Object(m))
        })
    }
}

/// The plan every instance runs: after `a`, a 40 ms durable timer must fire before `b`
/// (kills land between its `timer.set` and its firing, so recovery re-arms it).
pub fn plan() -> Value {
    json!({"plan_name": "crash", "graph_type": "acyclic",
    "events": {"start": {}, "e1": {}, "armed": {}, "tick": {"kind": "input"}, "e2": {},
        "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "fx.idem", "args": {}, "emits": ["e1"]},
        "t": {"on": ["e1"], "action": "timer.after", "args": {"ms": 40, "event": "tick"},
            "emits": [{"event": "armed", "data": {"k": "${e1.k}", "a": "${e1.a}"}}]},
        "b": {"on": ["armed", "tick"], "action": "fx.once", "args": {}, "emits": ["e2"]},
        "c": {"on": ["e2"], "action": "fx.idem", "args": {}, "emits": ["done"]}
    }})
}

async fn run(db: &str, effects: &str, n: u64) -> Result<(), String> {
    let log = Arc::new(Mutex::new(
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(effects)
            .map_err(|e| format!("{effects}: {e}"))?,
    ));
    let store: Arc<dyn Store> = Arc::new(
        weft_store_sqlite::SqliteStore::open(db)
            .await
            .map_err(|e| e.to_string())?,
    );
    let mut reg = Registry::new();
    for (name, idempotent) in [("fx.idem", true), ("fx.once", false)] {
        reg.register(Arc::new(Fx {
            spec: ToolSpec {
                name: name.to_string(),
                description: "crash-test effect".to_string(),
                args_schema: json!({}),
                effect: if idempotent {
                    Effect::Read
                } else {
                    Effect::Write
                },
                idempotent,
                cost: None,
                llm: false,
            },
            log: Arc::clone(&log),
        }));
    }
    weft_builtins::timer::register(&mut reg);
    let d = Durable::open(
        Arc::clone(&store),
        EngineOptions {
            registry: Arc::new(reg),
            cron: Some(Arc::new(weft_builtins::timer::next_occurrence)),
            ..EngineOptions::default()
        },
        DurableConfig::default(),
    )
    .await
    .map_err(|e| e.to_string())?;
    d.register(TENANT, plan())
        .await
        .map_err(|e| e.to_string())?;
    weft_bench::crash::drive(&store, &d, TENANT, "crash", n).await
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(db), Some(effects), Some(n)) = (
        args.get(1),
        args.get(2),
        args.get(3).and_then(|s| s.parse::<u64>().ok()),
    ) else {
        eprintln!("usage: weft-crashtest DB_PATH EFFECTS_PATH INSTANCES");
        std::process::exit(2);
    };
    weft_bench::crash::block_on("weft-crashtest", run(db, effects, n));
}
