//! `agent.react` is a registered tool of every node: a plan step runs the seed-004 loop
//! (here with a scripted model), and the loop's own tool calls pass the node's chain and act
//! for the step's tenant and instance.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_llm::{ScriptedExchange, ScriptedProvider};
use weft_node::{Builder, Config};
use weft_tools::{BoxFuture, Stage, Tool, ToolContext, ToolError, ToolSpec};

/// A tool that records the tenant and instance of the calls it serves.
struct Probe(ToolSpec, Arc<Mutex<Vec<(String, String)>>>);

impl Tool for Probe {
    fn spec(&self) -> &ToolSpec {
        &self.0
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.1
            .lock()
            .unwrap()
            .push((ctx.tenant.to_string(), ctx.instance.to_string()));
        Box::pin(async move { Ok(args) })
    }
}

fn step(v: Value) -> ScriptedExchange {
    ScriptedExchange::content(v.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_react_runs_in_a_plan_and_its_calls_pass_the_chain() {
    let script = vec![
        step(json!({"thought": "look", "finish": false,
            "action": {"tool_id": "probe", "input": {"said": "hello"}}, "final_answer": null})),
        step(json!({"thought": "done", "finish": true, "action": null,
            "final_answer": {"content": "it said hello"}})),
    ];
    let log = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let spec: ToolSpec = serde_json::from_value(
        json!({"name": "probe", "description": "records its caller", "effect": "read"}),
    )
    .unwrap();
    let node = Builder::new(Config::default())
        .tool(Arc::new(Probe(spec, Arc::clone(&seen))))
        .llm(Some(Arc::new(ScriptedProvider::new(script))))
        .link(Stage::Policy, Arc::new(common::Counting(Arc::clone(&log))))
        .in_memory()
        .unwrap();
    assert!(node.registry().get("agent.react").is_some());
    let plan = json!({"plan_name": "ask", "graph_type": "acyclic",
        "events": {"start": {}, "done": {"kind": "output"}},
        "steps": {"think": {"on": ["start"], "action": "agent.react",
            "args": {"goal": "what did it say?", "toolset": ["probe"]}, "emits": ["done"]}}});
    let compiled = node
        .engine()
        .register(weft_core::load::plan_from_value(plan, &Default::default()).unwrap())
        .unwrap();
    let h = node
        .engine()
        .start_with("tenant-x", &compiled, json!({}), Default::default())
        .expect("the plan takes any input");
    let o = h.wait().await;
    assert_eq!(o.status, weft_core::Status::Completed, "{o:?}");
    let out = serde_json::to_value(&o.results).unwrap();
    assert!(out.to_string().contains("it said hello"), "{out}");
    // The step's own call and the loop's call of `probe` both passed the chain.
    assert_eq!(*log.lock().unwrap(), ["agent.react", "probe"]);
    // The loop's call acted for the step: its tenant and instance.
    assert_eq!(
        *seen.lock().unwrap(),
        [("tenant-x".to_string(), h.id().to_string())]
    );
}
