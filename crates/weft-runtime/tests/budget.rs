//! Budgets at run time: a plan's `limits` are counted call by call before each call runs.
//! The call that would go over is refused (`budget_exceeded`, never reaching the tool), the
//! instance fails unless the plan handles it, `budget.exceeded` says which limit, and the
//! count is journaled so a replay (and recovery) knows it.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{harness_with, spec};
use serde_json::{Value, json};
use weft_builtins::builtin::FnTool;
use weft_core::{Effect, Status};
use weft_runtime::{Delivery, Filter, Input};
use weft_tools::ToolContext;

/// `steps` in a chain, each calling `tool`, with `limits`.
fn chain(steps: usize, tool: &str, limits: Value, on_fail: Option<&str>) -> Value {
    let mut events = serde_json::Map::new();
    let mut st = serde_json::Map::new();
    for i in 0..steps {
        events.insert(format!("e{i}"), json!({}));
    }
    events.insert(format!("e{steps}"), json!({"kind": "output"}));
    for i in 0..steps {
        let mut s =
            json!({"on": [format!("e{i}")], "action": tool, "emits": [format!("e{}", i + 1)]});
        if let Some(f) = on_fail {
            s["on_fail"] = json!(f);
        }
        st.insert(format!("s{i}"), s);
    }
    json!({"plan_name": "budgeted", "graph_type": "acyclic", "initial": ["e0"],
        "limits": limits, "events": events, "steps": st})
}

/// The harness with `t.priced` (cost 0.5, a model call), and how often it ran.
fn priced_harness() -> (common::Harness, Arc<AtomicUsize>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&calls);
    let h = harness_with(move |o| {
        let mut reg = common::registry();
        let mut s = spec("t.priced", Effect::Read);
        s.cost = Some(0.5);
        s.llm = true;
        reg.register(Arc::new(FnTool::new(
            s,
            move |_: &ToolContext, _: Value| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(json!({}))
            },
        )));
        o.registry = Arc::new(reg);
    });
    (h, calls)
}

#[tokio::test]
async fn the_call_over_a_limit_is_refused_and_the_instance_fails() {
    let (h, priced) = priced_harness();
    let p = h.plan(chain(4, "t.priced", json!({"max_tool_calls": 3}), None));
    let mut events = h.engine.subscribe(Filter::default());
    priced.store(0, Ordering::SeqCst);
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    match &o.status {
        Status::Failed { reason } => assert!(
            reason.contains("budget_exceeded") || reason.contains("limits.max_tool_calls"),
            "{reason}"
        ),
        other => panic!("{other:?}"),
    }
    // Three calls ran; the fourth never reached the tool.
    assert_eq!(priced.load(Ordering::SeqCst), 3);
    let state = i.state();
    let usage = state.usage.expect("a plan with limits reports its usage");
    assert_eq!((usage.tool_calls, usage.llm_calls, usage.cost), (3, 3, 1.5));
    let mut exceeded = None;
    while let Ok(d) =
        tokio::time::timeout(std::time::Duration::from_millis(200), events.recv()).await
    {
        match d {
            Some(Delivery::Event(e)) if e.ty == "dev.weft.budget.exceeded" => {
                exceeded = Some(e.data.clone())
            }
            Some(_) => {}
            None => break,
        }
    }
    let data = exceeded.expect("budget.exceeded published");
    assert_eq!(data["step"], "s3");
    assert_eq!(data["limit"], "max_tool_calls");
    assert_eq!(
        (data["used"].as_str(), data["max"].as_str()),
        (Some("4"), Some("3"))
    );
    // Each charge is journaled; the replay agrees with the live instance.
    let charged = h
        .journal
        .inputs(i.id())
        .iter()
        .filter(|r| matches!(r, Input::Charged { .. }))
        .count();
    assert_eq!(charged, 3);
    h.check_replay(&i);
}

#[tokio::test]
async fn cost_and_model_call_limits_and_a_handled_refusal() {
    let (h, priced) = priced_harness();
    // 0.5 per call: the third call would reach 1.5 > 1.2.
    let p = h.plan(chain(4, "t.priced", json!({"max_cost": 1.2}), None));
    priced.store(0, Ordering::SeqCst);
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    assert!(matches!(i.wait().await.status, Status::Failed { .. }));
    assert_eq!(priced.load(Ordering::SeqCst), 2);

    // `on_fail: continue` takes the refusal like any failure: the instance goes on (and
    // stops short of its output, so it is stuck rather than failed).
    let p = h.plan(chain(
        3,
        "t.priced",
        json!({"max_llm_calls": 1}),
        Some("continue"),
    ));
    priced.store(0, Ordering::SeqCst);
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Stuck, "{o:?}");
    assert_eq!(priced.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn plans_without_limits_count_nothing() {
    let (h, priced) = priced_harness();
    for limits in [Value::Null, json!({})] {
        let p = h.plan(chain(3, "t.priced", limits.clone(), None));
        let i = h.engine.start("t", &p, json!({})).expect("starts");
        assert_eq!(i.wait().await.status, Status::Completed);
        assert_eq!(i.state().usage.is_some(), !limits.is_null());
        assert!(
            !h.journal
                .inputs(i.id())
                .iter()
                .any(|r| matches!(r, Input::Charged { .. })),
            "no limit set, nothing charged"
        );
    }
    assert_eq!(priced.load(Ordering::SeqCst), 6);
}

#[tokio::test]
async fn the_wall_time_limit_refuses_the_first_call_after_it_passed() {
    let (h, priced) = priced_harness();
    // A reactive plan: each `tick` from outside makes one call.
    let p = h.plan(json!({"plan_name": "slow", "graph_type": "reactive",
        "limits": {"max_wall_ms": 60_000},
        "events": {"tick": {"kind": "input"}, "seen": {"kind": "output"}},
        "steps": {"see": {"on": ["tick"], "action": "t.priced", "emits": ["seen"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let id = i.id().to_string();
    h.engine
        .ingest("t", "tick", json!({}), None, Some(&id))
        .expect("first tick");
    common::settle().await;
    assert_eq!(priced.load(Ordering::SeqCst), 1, "within the minute");
    h.advance(60_001).await;
    h.engine
        .ingest("t", "tick", json!({}), None, Some(&id))
        .expect("second tick");
    let o = i.wait().await;
    match &o.status {
        Status::Failed { reason } => assert!(reason.contains("max_wall_ms"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(priced.load(Ordering::SeqCst), 1, "the late call never ran");
    h.check_replay(&i);
}
