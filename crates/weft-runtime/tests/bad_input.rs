//! Bad input: each case gets a clear error or an error token, and the instance and the
//! process survive.

mod common;

use common::{harness, harness_with, out};
use serde_json::json;
use weft_core::Status;

fn failed_reason(s: &Status) -> &str {
    match s {
        Status::Failed { reason } => reason,
        other => panic!("expected failed, got {other:?}"),
    }
}

#[tokio::test]
async fn unknown_tool_at_run_time_is_fatal() {
    let h = harness_with(|o| o.check_tools = false);
    let p = h.plan(json!({"plan_name":"u","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"no.such.tool","args":{},"retry":{"max":3},"emits":["x"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    assert!(failed_reason(&o.status).contains("unknown_tool"), "{o:?}");
    h.check_replay(&i);
}

#[tokio::test]
async fn unknown_tool_is_refused_at_registration_by_default() {
    let h = harness();
    let doc = json!({"plan_name":"u","graph_type":"acyclic","events":{"start":{},"x":{}},
        "steps":{"s":{"on":["start"],"action":"no.such.tool","args":{},"emits":["x"]}}});
    let e = h
        .engine
        .register(weft_core::load::plan_from_value(doc, &Default::default()).expect("loads"))
        .expect_err("invalid");
    assert_eq!(e.code(), "invalid_plan");
}

#[tokio::test]
async fn args_failing_the_schema_at_run_time() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"a","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"},"s.failed":{},"e":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"t.strict","args":{"n":"${start.n}"},"retry":{"max":3},"emits":["x"]},
                 "h":{"on":["s.failed"],"action":"echo","args":{"c":"${inputs[\"s.failed\"].error.code}","m":"${inputs[\"s.failed\"].error.message}"},"emits":["e"]}}}));
    let i = h
        .engine
        .start("t", &p, json!({"n": "not a number"}))
        .expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    let e = &out(&o, "e")[0];
    assert_eq!(e["c"], json!("args_invalid"));
    assert!(e["m"].as_str().expect("msg").contains("/n"), "{e}");
    h.check_replay(&i);
    let ok = h
        .engine
        .start("t", &p, json!({"n": 3}))
        .expect("starts")
        .wait()
        .await;
    assert_eq!(out(&ok, "x"), vec![json!({"n": 3})]);
}

#[tokio::test]
async fn a_panicking_tool_is_an_error_not_a_crash() {
    let h = harness();
    let p = h.plan(
        json!({"plan_name":"p","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"t.panic","args":{},"emits":["x"]}}}),
    );
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    let r = failed_reason(&o.status);
    assert!(r.contains("tool_panic") && r.contains("boom"), "{r}");
    h.check_replay(&i);
    // The engine still works.
    let q = h.plan(
        json!({"plan_name":"q","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"echo","args":{},"emits":["x"]}}}),
    );
    assert_eq!(
        h.engine
            .start("t", &q, json!({}))
            .expect("starts")
            .wait()
            .await
            .status,
        Status::Completed
    );
}

#[tokio::test]
async fn a_hanging_tool_without_timeout_can_be_stopped() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"hang","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"t.hang","args":{},"emits":["x"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    common::settle().await;
    let st = h.engine.state(i.id()).expect("live");
    assert_eq!(st.in_flight.len(), 1);
    assert_eq!(st.in_flight[0].step, "s");
    h.engine.stop(i.id()).expect("stops");
    assert_eq!(i.wait().await.status, Status::Stopped);
    h.check_replay(&i);
    assert_eq!(h.engine.live_instances(), 0);
}

#[tokio::test]
async fn a_10_mb_payload_works() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"big","graph_type":"acyclic","events":{"start":{},"a":{},"x":{"kind":"output"}},
        "steps":{"s1":{"on":["start"],"action":"noop","args":{},"emits":["a"]},
                 "s2":{"on":["a"],"action":"noop","args":{"len":"${size(a.blob)}"},"emits":["x"]}}}));
    let blob = "x".repeat(10 * 1024 * 1024);
    let i = h
        .engine
        .start("t", &p, json!({"blob": blob}))
        .expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    let x = &out(&o, "x")[0];
    assert_eq!(x["len"], json!(10 * 1024 * 1024));
    assert_eq!(x["blob"].as_str().map(str::len), Some(10 * 1024 * 1024));
}

#[tokio::test]
async fn a_guard_that_errors_leaves_tokens_and_the_instance_lives() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"ge","graph_type":"reactive","events":{"start":{},"x":{"kind":"input"},"o":{"kind":"output"}},
        "steps":{"s":{"on":["x"],"guard":"x.n > 1","action":"echo","args":{},"emits":["o"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    // `x.n` is missing: the guard errors, which counts as false.
    h.engine
        .ingest("t", "x", json!({"m": 1}), None, Some(i.id()))
        .expect("in");
    let st = i.state();
    assert_eq!(st.fired, 0);
    assert!(st.waiting.iter().any(|w| w.guard_blocked));
    h.engine
        .ingest("t", "x", json!({"n": 2}), None, Some(i.id()))
        .expect("in");
    assert_eq!(i.state().fired, 1);
    h.check_replay(&i);
}

#[tokio::test]
async fn args_that_cannot_be_rendered_are_fatal() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"ar","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"echo","args":{"v":"${start.missing.deeper}"},"emits":["x"]}}}));
    let o = h
        .engine
        .start("t", &p, json!({}))
        .expect("starts")
        .wait()
        .await;
    assert!(failed_reason(&o.status).contains("args_invalid"), "{o:?}");
}

#[tokio::test]
async fn unknown_plan_and_instance_are_clear_errors() {
    let h = harness();
    assert_eq!(
        h.engine
            .start("t", "nope", json!({}))
            .expect_err("no plan")
            .code(),
        "unknown_plan"
    );
    assert_eq!(
        h.engine.stop("i999").expect_err("none").code(),
        "unknown_instance"
    );
    assert_eq!(
        h.engine.state("garbage").expect_err("none").code(),
        "unknown_instance"
    );
}

/// Issue #26: a guard that fails to evaluate (here a division by zero) is reported, not
/// silently taken for "false": in the stuck diagnosis, the lifecycle events and the reason.
#[tokio::test]
async fn a_guard_error_is_surfaced_in_the_stuck_diagnosis_and_events() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"gz","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"s":{"on":["start"],"guard":"size(start) / 0 > 1","action":"echo","args":{},"emits":["done"]}}}));
    let mut sub = h.engine.subscribe(weft_runtime::Filter::default());
    let i = h.engine.start("t", &p, json!({"a": 1})).expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Stuck);
    let w = o.waiting.iter().find(|w| w.step == "s").expect("s waits");
    let e = w.guard_error.as_deref().expect("the guard's error");
    assert!(e.to_lowercase().contains("division by zero"), "{e}");
    let mut step_error = None;
    let mut stuck = None;
    while let Ok(Some(d)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), sub.recv()).await
    {
        if let weft_runtime::Delivery::Event(ev) = d {
            match ev.ty.as_str() {
                "dev.weft.plan.step.error" => step_error = Some(ev.data.clone()),
                "dev.weft.plan.stuck" => {
                    stuck = Some(ev.data.clone());
                    break;
                }
                _ => {}
            }
        }
    }
    let step_error = step_error.expect("a plan.step.error for the guard");
    assert_eq!(step_error["guard"], json!(true));
    assert_eq!(step_error["error"]["code"], json!("guard_error"));
    let stuck = stuck.expect("plan.stuck");
    assert!(
        stuck["waiting"][0]["guard_error"]
            .as_str()
            .is_some_and(|m| m.to_lowercase().contains("division by zero")),
        "{stuck}"
    );
}
