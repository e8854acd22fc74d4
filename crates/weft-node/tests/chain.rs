//! One tool-call path: a link installed at the outermost stage of a node's chain sees every
//! call, on every path — an immediate tool called inline, a spawned `write` tool and its
//! retry, a child plan's step, a repaired plan's step, an action re-dispatched by recovery
//! in a new node, and a call made outside any instance (which passes the chain without the
//! journal gate).

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{Counting, Log};
use serde_json::{Value, json};
use weft_core::{Effect, Plan, Status, ToolSpec};
use weft_node::{Builder, Config, Node};
use weft_runtime::{RepairContext, RepairError, Repairer};
use weft_tools::{BoxFuture, Stage, Tool, ToolContext, ToolError};

/// A test tool: immediate or not, with an effect class, whose first `fails` attempts fail
/// and which hangs while `hang` is set.
struct Probe {
    spec: ToolSpec,
    immediate: bool,
    fails: u32,
    hang: Arc<AtomicBool>,
}

fn probe(name: &str, effect: Effect, immediate: bool, fails: u32) -> Probe {
    Probe {
        spec: ToolSpec {
            name: name.into(),
            description: name.into(),
            args_schema: json!({}),
            effect,
            idempotent: true,
            cost: None,
            llm: false,
        },
        immediate,
        fails,
        hang: Arc::new(AtomicBool::new(false)),
    }
}

impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn is_immediate(&self) -> bool {
        self.immediate
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let fail = ctx.attempt <= self.fails;
        let hang = self.hang.load(Ordering::Relaxed);
        Box::pin(async move {
            if hang {
                std::future::pending::<()>().await;
            }
            if fail {
                return Err(ToolError::retryable("flaky", "this attempt fails"));
            }
            Ok(args)
        })
    }
}

struct Fixed(Value);

impl Repairer for Fixed {
    fn repair(&self, _ctx: RepairContext) -> BoxFuture<'static, Result<Plan, RepairError>> {
        let doc = self.0.clone();
        Box::pin(async move {
            weft_core::load::plan_from_value(doc, &Default::default())
                .map_err(|e| RepairError::new("decode", e.to_string()))
        })
    }
}

fn steps(last: Value) -> Value {
    json!({
        "inline": {"on": ["start"], "action": "p.inline", "args": {}, "emits": ["x1"]},
        "spawned": {"on": ["x1"], "action": "p.write", "args": {},
                    "retry": {"max": 3, "backoff_ms": 1}, "emits": ["x2"]},
        "child": {"on": ["x2"], "action": "plan.run", "emits": ["x3"],
                  "args": {"plan": "kid"}},
        "last": last
    })
}

fn plan(last: Value) -> Value {
    json!({"plan_name": "paths", "graph_type": "acyclic",
        "events": {"start": {}, "x1": {}, "x2": {}, "x3": {}, "done": {"kind": "output"}},
        "steps": steps(last)})
}

fn node_builder(dir: &std::path::Path, log: &Log, hang: bool) -> Builder {
    let mut config = Config::default();
    config.store.url = dir.join("weft.db").display().to_string();
    let waiting = probe("p.wait", Effect::Read, false, 0);
    waiting.hang.store(hang, Ordering::Relaxed);
    Builder::new(config)
        .link(Stage::Policy, Arc::new(Counting(Arc::clone(log))))
        .tool(Arc::new(probe("p.inline", Effect::Pure, true, 0)))
        .tool(Arc::new(probe("p.write", Effect::Write, false, 1)))
        .tool(Arc::new(probe("p.child", Effect::Pure, true, 0)))
        .tool(Arc::new(probe("p.repaired", Effect::Read, false, 0)))
        .tool(Arc::new(probe("p.broken", Effect::Read, false, u32::MAX)))
        .tool(Arc::new(waiting))
        .repairer(Arc::new(Fixed(plan(json!(
            {"on": ["x3"], "action": "p.repaired", "args": {}, "emits": ["done"]}
        )))))
}

fn taken(log: &Log) -> Vec<String> {
    std::mem::take(&mut *log.lock().unwrap())
}

async fn completed(node: &Node, h: &weft_runtime::InstanceHandle) {
    let o = tokio::time::timeout(Duration::from_secs(20), node.durable().unwrap().wait(h))
        .await
        .expect("the instance settles")
        .unwrap();
    assert_eq!(o.status, Status::Completed, "{o:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_on_every_path_passes_the_chain() {
    let dir = std::env::temp_dir().join(format!("weft-node-chain-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log: Log = Arc::default();

    // Inline, spawned and retried, a child plan's step, a repaired plan's step.
    let node = node_builder(&dir, &log, true).open().await.unwrap();
    let d = node.durable().unwrap();
    d.register(
        "local",
        json!({"plan_name": "kid", "graph_type": "acyclic",
            "events": {"start": {}, "out": {"kind": "output"}},
            "steps": {"k": {"on": ["start"], "action": "p.child", "args": {}, "emits": ["out"]}}}),
    )
    .await
    .unwrap();
    d.register(
        "local",
        plan(
            json!({"on": ["x3"], "action": "p.broken", "args": {}, "emits": ["done"],
                    "on_fail": "repair"}),
        ),
    )
    .await
    .unwrap();
    let h = d.start("local", "paths", json!({})).unwrap();
    completed(&node, &h).await;
    let calls = taken(&log);
    let count = |name: &str| calls.iter().filter(|c| *c == name).count();
    assert_eq!(count("p.inline"), 1, "inline: {calls:?}");
    assert_eq!(count("p.write"), 2, "spawned, and its retry: {calls:?}");
    assert_eq!(count("p.broken"), 1, "the failing step: {calls:?}");
    assert_eq!(count("plan.run"), 1, "{calls:?}");
    assert_eq!(count("p.child"), 1, "the child plan's step: {calls:?}");
    assert_eq!(
        count("p.repaired"),
        1,
        "the repaired plan's step: {calls:?}"
    );

    // A call outside any instance passes the chain too.
    let t = node.outside_registry().get("p.inline").unwrap();
    t.call(ToolContext::detached("react"), json!({}))
        .await
        .unwrap();
    assert_eq!(taken(&log), ["p.inline"]);
    let stages: Vec<(Stage, Option<String>)> = node.chain();
    assert_eq!(stages[0], (Stage::Policy, Some("counting".into())));
    assert!(
        stages
            .iter()
            .any(|(s, l)| *s == Stage::Durability && l.is_some())
    );

    // Re-dispatched after recovery: the first node's `p.wait` hangs; a new node over the
    // same store recovers the instance and calls it again, through its own chain.
    d.register(
        "local",
        json!({"plan_name": "wait", "graph_type": "acyclic",
            "events": {"start": {}, "done": {"kind": "output"}},
            "steps": {"w": {"on": ["start"], "action": "p.wait", "args": {}, "emits": ["done"]}}}),
    )
    .await
    .unwrap();
    let h = d.start("local", "wait", json!({})).unwrap();
    let id = h.id().to_string();
    for _ in 0..200 {
        if log.lock().unwrap().iter().any(|c| c == "p.wait") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(taken(&log), ["p.wait"]);
    d.flush().await.unwrap();
    d.shutdown().await.unwrap();
    drop(h);
    drop(node);

    let node2 = node_builder(&dir, &log, false).open().await.unwrap();
    let report = node2.durable().unwrap().recover().await.unwrap();
    assert_eq!(report.redispatched, 1, "{report:?}");
    let h2 = report
        .handles
        .iter()
        .find(|h| h.id() == id)
        .unwrap()
        .clone();
    completed(&node2, &h2).await;
    assert_eq!(
        taken(&log),
        ["p.wait"],
        "re-dispatched through the new node's chain"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
