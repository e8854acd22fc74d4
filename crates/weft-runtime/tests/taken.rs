//! Immediate tools run two ways: *taken* (the default: the loop takes the firing's tokens,
//! calls the tool at once and puts its result, with no in-flight record in between) and
//! *recorded* (the firing is recorded as in flight first, as for every other tool; the
//! engine does this while a trace or a bus subscriber watches the firing). Both must reach
//! exactly the same instance, firing for firing and token for token, write the same
//! journal, and replay to the same marking: here every plan runs both ways and the two
//! are compared, failures included (a tool error, a panic, args that do not render or do
//! not match the schema, an abort while other firings are ready).

mod common;

use common::{Harness, assert_same, harness_with, out};
use serde_json::{Value, json};
use weft_core::Status;
use weft_runtime::{Delivery, Filter};

/// The engine with a trace (every firing recorded as in flight) or without (taken).
fn harness(recorded: bool) -> Harness {
    harness_with(|o| o.trace = recorded)
}

/// Runs `plan` on both engines with the same input and events; returns the taken run's
/// instance and outcome (none while it runs) after checking that the two instances, their
/// journals, replays and outcomes agree.
async fn both_ways(
    plan: Value,
    input: Value,
    events: &[(&str, Value)],
) -> (weft_core::Instance, Option<weft_runtime::Outcome>) {
    let mut outcomes = Vec::new();
    let mut runs = Vec::new();
    for recorded in [false, true] {
        let h = harness(recorded);
        let name = h.plan(plan.clone());
        let i = h.engine.start("t", &name, input.clone()).expect("starts");
        for (event, payload) in events {
            h.engine
                .ingest("t", event, payload.clone(), None, Some(i.id()))
                .expect("accepted");
        }
        let o = i.outcome_now();
        h.check_replay(&i);
        runs.push((
            h.journal.inputs(i.id()),
            i.core_instance().expect("started"),
        ));
        outcomes.push(o);
    }
    let (recorded, taken) = (runs.pop().expect("two"), runs.pop().expect("two"));
    assert_same(&taken.1, &recorded.1);
    assert_eq!(
        serde_json::to_value(&taken.1.in_flight).expect("ser"),
        serde_json::to_value(&recorded.1.in_flight).expect("ser"),
        "in-flight records differ"
    );
    assert_eq!(taken.0, recorded.0, "journals differ");
    let recorded_o = outcomes.pop().expect("two");
    let taken_o = outcomes.pop().expect("two");
    assert_eq!(
        taken_o
            .as_ref()
            .map(|o| (&o.status, serde_json::to_value(&o.results).expect("ser"))),
        recorded_o
            .as_ref()
            .map(|o| (&o.status, serde_json::to_value(&o.results).expect("ser"))),
        "outcomes differ"
    );
    (taken.1, taken_o)
}

fn step(on: &[&str], action: &str, args: Value, emits: &[&str]) -> Value {
    json!({"on": on, "action": action, "args": args, "emits": emits})
}

#[tokio::test]
async fn a_fan_out_and_join_is_the_same_either_way() {
    let mut steps = serde_json::Map::new();
    let mut events = serde_json::Map::new();
    events.insert("start".into(), json!({}));
    let mut joined = Vec::new();
    for j in 0..6 {
        let d = format!("d{j}");
        events.insert(d.clone(), json!({}));
        steps.insert(
            format!("b{j}"),
            step(
                &["start"],
                "echo",
                json!({"j": j, "n": "${start.n}"}),
                &[&d],
            ),
        );
        joined.push(d);
    }
    events.insert("done".into(), json!({"kind": "output"}));
    let on: Vec<&str> = joined.iter().map(String::as_str).collect();
    steps.insert(
        "join".into(),
        step(&on, "echo", json!({"all": true}), &["done"]),
    );
    let plan =
        json!({"plan_name": "fan", "graph_type": "acyclic", "events": events, "steps": steps});
    let (_, o) = both_ways(plan, json!({"n": 3}), &[]).await;
    let o = o.expect("settled");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "done"), vec![json!({"all": true})]);
}

#[tokio::test]
async fn failures_are_the_same_either_way() {
    // Every way an immediate call can fail, each dropped by `on_fail: continue`, beside a
    // step that succeeds.
    let mut steps = serde_json::Map::new();
    let failing = [
        ("tool_error", "fail", json!({"message": "no"})),
        ("panics", "t.panic", json!({})),
        ("bad_schema", "t.strict", json!({"n": "${start.s}"})),
        (
            "bad_render",
            "echo",
            json!({"x": "${start.missing.deeper}"}),
        ),
    ];
    for (name, action, args) in failing {
        let mut s = step(&["start"], action, args, &["never"]);
        s["on_fail"] = json!("continue");
        steps.insert(name.into(), s);
    }
    steps.insert(
        "ok".into(),
        step(&["start"], "echo", json!({"s": "${start.s}"}), &["done"]),
    );
    let plan = json!({"plan_name": "failing", "graph_type": "acyclic",
        "events": {"start": {}, "never": {"kind": "output"}, "done": {"kind": "output"}},
        "steps": steps});
    let (_, o) = both_ways(plan, json!({"s": "text"}), &[]).await;
    let o = o.expect("settled");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "done"), vec![json!({"s": "text"})]);
}

#[tokio::test]
async fn an_abort_among_ready_outcomes_is_the_same_either_way() {
    // `boom` fails (abort) while `a` and `b`, fired in the same turn, have their results
    // ready: they are still put, and the instance fails.
    let plan = json!({"plan_name": "abort", "graph_type": "acyclic",
    "events": {"start": {}, "x": {}, "y": {"kind": "output"}, "z": {"kind": "output"}},
    "steps": {
        "a": step(&["start"], "echo", json!({"a": 1}), &["x"]),
        "boom": step(&["start"], "fail", json!({}), &["y"]),
        "b": step(&["start"], "echo", json!({"b": 1}), &["z"]),
        "c": step(&["x"], "echo", json!({"c": 1}), &["y"]),
    }});
    let (_, o) = both_ways(plan, json!({}), &[]).await;
    let o = o.expect("settled");
    assert!(matches!(o.status, Status::Failed { .. }), "{:?}", o.status);
}

#[tokio::test]
async fn a_reactive_plan_with_many_events_is_the_same_either_way() {
    // Exclusive and broadcast consumers, a correlated join, a loop that counts down.
    let plan = json!({"plan_name": "reactive", "graph_type": "reactive",
    "events": {"tick": {"kind": "input"}, "work": {"consume": "exclusive"},
               "seen": {}, "left": {}, "count": {"kind": "input"}, "out": {}},
    "steps": {
        "fan": step(&["tick"], "echo", json!({"n": "${tick.n}"}), &["work", "seen"]),
        "w1": step(&["work"], "echo", json!({"w": 1, "n": "${work.n}"}), &["out"]),
        "w2": step(&["work"], "echo", json!({"w": 2, "n": "${work.n}"}), &["out"]),
        "pair": step(&["seen", "out"], "noop", json!({}), &[]),
        "down": {"on": ["count"], "action": "echo", "args": {"n": "${count.n - 1}"},
                 "emits": [{"event": "count", "when": "result.n > 0"}, {"event": "left"}]},
    }});
    let mut events: Vec<(&str, Value)> = (0..40).map(|n| ("tick", json!({"n": n}))).collect();
    events.push(("count", json!({"n": 25})));
    let (inst, o) = both_ways(plan, json!({}), &events).await;
    assert!(o.is_none());
    assert_eq!(inst.status, Status::Running);
    assert!(inst.fired > 100, "fired {}", inst.fired);
}

#[tokio::test]
async fn a_subscriber_sees_every_firing() {
    // While someone listens, firings are recorded so their lifecycle events are published:
    // one `plan.step.started` and one `plan.step.finished` per step.
    let h = harness(false);
    let p = h.plan(json!({"plan_name": "c", "graph_type": "acyclic",
        "events": {"start": {}, "a": {}, "done": {"kind": "output"}},
        "steps": {"s1": step(&["start"], "echo", json!({}), &["a"]),
                  "s2": step(&["a"], "echo", json!({}), &["done"])}}));
    let mut sub = h.engine.subscribe(Filter::default());
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    assert_eq!(i.wait().await.status, Status::Completed);
    let mut types = Vec::new();
    while let Some(Delivery::Event(e)) = sub.recv().await {
        types.push(e.ty.clone());
        if e.ty == "dev.weft.plan.completed" {
            break;
        }
    }
    let count = |t: &str| types.iter().filter(|x| *x == t).count();
    assert_eq!(count("dev.weft.plan.step.started"), 2, "{types:?}");
    assert_eq!(count("dev.weft.plan.step.finished"), 2, "{types:?}");
}
