//! Scenario tests, one per semantic rule; each live run is also replayed from its journal
//! into the pure core and must give the same marking (STYLE §6).

mod common;

use common::{harness, harness_with, out, settle};
use serde_json::json;
use weft_core::Status;
use weft_runtime::{Delivery, Filter};

#[tokio::test]
async fn chain_completes_and_replays() {
    let h = harness_with(|o| o.trace = true);
    let p = h.plan(json!({"plan_name":"c","graph_type":"acyclic","events":{"start":{},"a":{},"done":{"kind":"output"}},
        "steps":{"s1":{"on":["start"],"action":"echo","args":{"x":"${start.n + 1}"},"emits":["a"]},
                 "s2":{"on":["a"],"action":"echo","args":{"y":"${a.x * 10}"},"emits":["done"]}}}));
    let i = h.engine.start("t", &p, json!({"n": 1})).expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "done"), vec![json!({"y": 20})]);
    let trace = o.trace.expect("trace on");
    assert_eq!(
        trace.iter().map(|t| t.step.as_str()).collect::<Vec<_>>(),
        ["s1", "s2"]
    );
    h.check_replay(&i);
    assert_eq!(h.engine.live_instances(), 0);
}

#[tokio::test]
async fn pending_tools_run_on_a_task_and_replay() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"y","graph_type":"acyclic","events":{"start":{},"a":{},"b":{},"done":{"kind":"output"}},
        "steps":{"s1":{"on":["start"],"action":"t.yield","args":{},"emits":["a","b"]},
                 "s2":{"on":["a"],"action":"t.yield","args":{"k":2},"emits":["a2"]},
                 "s3":{"on":["b"],"action":"t.yield","args":{"k":3},"emits":["b2"]},
                 "j":{"on":["a2","b2"],"action":"echo","args":{"ok":true},"emits":["done"]}}}).as_object().map(|o| {
        let mut o = o.clone();
        o["events"]["a2"] = json!({});
        o["events"]["b2"] = json!({});
        serde_json::Value::Object(o)
    }).expect("obj"));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    assert!(i.outcome_now().is_none(), "still running: pending actions");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "done"), vec![json!({"ok": true})]);
    h.check_replay(&i);
}

#[tokio::test]
async fn join_never_pairs_tokens_of_different_correlation() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"j","graph_type":"reactive","events":{"start":{},"l":{"kind":"input"},"r":{"kind":"input"},"both":{"kind":"output"}},
        "steps":{"join":{"on":["l","r"],"action":"echo","args":{"l":"${l.v}","r":"${r.v}"},"emits":["both"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let id = i.id().to_string();
    h.engine
        .ingest("t", "l", json!({"v": "l1"}), Some("c1"), Some(&id))
        .expect("l1");
    h.engine
        .ingest("t", "r", json!({"v": "r2"}), Some("c2"), Some(&id))
        .expect("r2");
    assert_eq!(i.state().fired, 0, "different correlations never pair");
    h.engine
        .ingest("t", "r", json!({"v": "r1"}), Some("c1"), Some(&id))
        .expect("r1");
    h.engine
        .ingest("t", "l", json!({"v": "l2"}), Some("c2"), Some(&id))
        .expect("l2");
    let core = i.core_instance().expect("core");
    let both = core.results(&i.plan().net);
    let both = &both.iter().find(|(e, _)| e == "both").expect("both").1;
    let pays: Vec<_> = both.iter().map(|t| (*t.payload).clone()).collect();
    assert_eq!(
        pays,
        vec![json!({"l":"l1","r":"r1"}), json!({"l":"l2","r":"r2"})]
    );
    h.check_replay(&i);
    i.stop();
    assert_eq!(i.wait().await.status, Status::Stopped);
    h.check_replay(&i);
}

#[tokio::test]
async fn a_false_guard_leaves_tokens_in_place() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"g","graph_type":"reactive","events":{"start":{},"x":{"kind":"input"},"big":{"kind":"output"}},
        "steps":{"s":{"on":["x"],"guard":"x.n > 10","action":"echo","args":{"n":"${x.n}"},"emits":["big"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    h.engine
        .ingest("t", "x", json!({"n": 1}), None, Some(i.id()))
        .expect("in");
    let st = i.state();
    assert_eq!(st.fired, 0);
    assert!(
        st.marking.contains(&("x".to_string(), 1)),
        "{:?}",
        st.marking
    );
    assert!(st.waiting.iter().any(|w| w.step == "s" && w.guard_blocked));
    h.engine
        .ingest("t", "x", json!({"n": 11}), None, Some(i.id()))
        .expect("in");
    let st = i.state();
    assert_eq!(st.fired, 1);
    assert!(st.marking.contains(&("x".to_string(), 1)));
    h.check_replay(&i);
}

#[tokio::test]
async fn exclusive_goes_to_one_consumer_broadcast_to_all() {
    let h = harness();
    let p = h.plan(
        json!({"plan_name":"e","graph_type":"reactive","events":{"start":{},
        "ex":{"kind":"input","consume":"exclusive"},"bc":{"kind":"input"},"o":{"kind":"output"}},
        "steps":{"a":{"on":["ex"],"action":"echo","args":{"by":"a"},"emits":["o"]},
                 "b":{"on":["ex"],"action":"echo","args":{"by":"b"},"emits":["o"]},
                 "c":{"on":["bc"],"action":"echo","args":{"by":"c"},"emits":["o"]},
                 "d":{"on":["bc"],"action":"echo","args":{"by":"d"},"emits":["o"]}}}),
    );
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    for _ in 0..5 {
        h.engine
            .ingest("t", "ex", json!({}), None, None)
            .expect("routed");
    }
    assert_eq!(
        i.state().fired,
        5,
        "each exclusive token taken exactly once"
    );
    h.engine
        .ingest("t", "bc", json!({}), None, None)
        .expect("routed");
    let st = i.state();
    assert_eq!(st.fired, 7, "a broadcast token reaches both listeners");
    assert!(st.marking.contains(&("o".to_string(), 7)));
    h.check_replay(&i);
}

#[tokio::test]
async fn channel_passing_pairs_each_reply_with_its_request() {
    let h = harness_with(|o| o.max_firings_per_sec = None);
    let p = h.plan(json!({"plan_name":"cp","graph_type":"reactive","events":{"start":{},
        "req":{"kind":"input"},"task":{},"reply":{"kind":"input"},"done":{"kind":"output"}},
        "steps":{"spawn":{"on":["req"],"action":"echo","args":{"n":"${req.n}"},
                    "emits":[{"event":"task","data":{"task_id":"${fresh()}","n":"${req.n}"}}]},
                 "collect":{"on":["task","reply"],"correlate":false,"guard":"reply.task_id == task.task_id",
                    "action":"echo","args":{"n":"${task.n}","r":"${reply.r}"},"emits":["done"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let n = 10_000;
    for k in 0..n {
        h.engine
            .ingest("t", "req", json!({"n": k}), None, Some(i.id()))
            .expect("req");
    }
    // fresh() ids are "<instance>.<firing>"; spawn firings are 0..n. Reply in a scrambled order.
    for j in 0..n {
        let k = (j * 7919) % n;
        let tid = format!("{}.{}", i.id(), k);
        h.engine
            .ingest(
                "t",
                "reply",
                json!({"task_id": tid, "r": k * 2}),
                None,
                Some(i.id()),
            )
            .expect("reply");
    }
    let core = i.core_instance().expect("core");
    let results = core.results(&i.plan().net);
    let done = &results.iter().find(|(e, _)| e == "done").expect("done").1;
    assert_eq!(done.len(), n as usize);
    for t in done {
        assert_eq!(
            t.payload["r"],
            json!(t.payload["n"].as_i64().expect("n") * 2),
            "{}",
            t.payload
        );
    }
    h.check_replay(&i);
}

#[tokio::test]
async fn retries_then_the_failed_event() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"r","graph_type":"acyclic","events":{"start":{},"ok":{"kind":"output"},
        "pay.failed":{},"sorry":{"kind":"output"}},
        "steps":{"pay":{"on":["start"],"action":"fail","args":{"message":"declined"},
                    "retry":{"max":2,"backoff_ms":100,"multiplier":2.0},"emits":["ok"]},
                 "apologise":{"on":["pay.failed"],"action":"echo","args":{"err":"${inputs[\"pay.failed\"].error.code}","n":"${inputs[\"pay.failed\"].attempts}"},"emits":["sorry"]}}}));
    let mut sub = h.engine.subscribe(Filter {
        type_prefix: Some("plan.".into()),
        ..Default::default()
    });
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    settle().await;
    assert_eq!(i.state().in_flight[0].attempt, 2, "first retry scheduled");
    h.advance(100).await;
    assert_eq!(i.state().in_flight[0].attempt, 3);
    h.advance(200).await;
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "sorry"), vec![json!({"err": "tool_error", "n": 3})]);
    h.check_replay(&i);
    let mut types = Vec::new();
    while let Ok(Some(Delivery::Event(e))) =
        tokio::time::timeout(std::time::Duration::from_millis(1), sub.recv()).await
    {
        assert_eq!(e.specversion, "1.0");
        assert_eq!(e.tenant, "t");
        types.push(e.ty.clone());
    }
    assert_eq!(
        types.first().map(String::as_str),
        Some("dev.weft.plan.started")
    );
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "dev.weft.plan.step.error")
            .count(),
        3
    );
    assert_eq!(
        types.last().map(String::as_str),
        Some("dev.weft.plan.completed")
    );
}

#[tokio::test]
async fn a_hanging_tool_times_out() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"to","graph_type":"acyclic","events":{"start":{},"ok":{"kind":"output"},"slow.failed":{},"late":{"kind":"output"}},
        "steps":{"slow":{"on":["start"],"action":"t.hang","args":{},"timeout_ms":500,"emits":["ok"]},
                 "note":{"on":["slow.failed"],"action":"echo","args":{"code":"${inputs[\"slow.failed\"].error.code}"},"emits":["late"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    settle().await;
    assert_eq!(i.state().in_flight.len(), 1);
    h.advance(499).await;
    assert_eq!(i.state().in_flight.len(), 1);
    h.advance(1).await;
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "late"), vec![json!({"code": "timeout"})]);
    h.check_replay(&i);
}

#[tokio::test]
async fn a_reactive_plan_handles_1000_events_then_stops() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"re","graph_type":"reactive","events":{"start":{},"msg":{"kind":"input"},"seen":{"kind":"output"}},
        "steps":{"handle":{"on":["msg"],"action":"echo","args":{"i":"${msg.i}"},"emits":["seen"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    for k in 0..1000 {
        assert_eq!(
            h.engine
                .ingest("t", "msg", json!({"i": k}), None, None)
                .expect("routed"),
            1
        );
    }
    assert_eq!(i.state().fired, 1000);
    assert!(i.outcome_now().is_none(), "reactive instances stay live");
    h.engine.stop(i.id()).expect("stops");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Stopped);
    assert_eq!(o.reason.as_deref(), Some("stopped by request"));
    assert_eq!(out(&o, "seen").len(), 1000);
    h.check_replay(&i);
    // An event for a stopped instance: a clear error, nothing routed.
    let e = h
        .engine
        .ingest("t", "msg", json!({}), None, Some(i.id()))
        .expect_err("stopped");
    assert_eq!(e.code(), "unknown_instance");
    assert_eq!(
        h.engine
            .ingest("t", "msg", json!({}), None, None)
            .expect("ok"),
        0
    );
}

#[tokio::test]
async fn a_runaway_loop_is_paused() {
    let h = harness_with(|o| o.max_firings_per_sec = Some(500));
    let p = h.plan(
        json!({"plan_name":"loop","graph_type":"reactive","events":{"start":{},"tick":{}},
        "steps":{"boot":{"on":["start"],"action":"noop","args":{},"emits":["tick"]},
                 "spin":{"on":["tick"],"action":"noop","args":{},"emits":["tick"]}}}),
    );
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    match &o.status {
        Status::Paused { reason } => assert!(reason.contains("firing-rate limit"), "{reason}"),
        other => panic!("expected paused, got {other:?}"),
    }
    let fired = i.state().fired;
    assert!((500..=510).contains(&fired), "{fired}");
    h.check_replay(&i);
    // Resuming gives it another window.
    h.clock.advance(1000);
    h.engine.resume(i.id()).expect("resumes");
    assert!(i.state().fired > fired);
    h.check_replay(&i);
}

#[tokio::test]
async fn idle_reactive_instances_expire() {
    let h = harness_with(|o| o.idle_expiry_ms = Some(60_000));
    let p = h.plan(json!({"plan_name":"idle","graph_type":"reactive","events":{"start":{},"msg":{"kind":"input"},"seen":{"kind":"output"}},
        "steps":{"handle":{"on":["msg"],"action":"echo","args":{},"emits":["seen"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    settle().await;
    h.advance(30_000).await;
    h.engine
        .ingest("t", "msg", json!({}), None, None)
        .expect("in");
    h.advance(40_000).await;
    assert!(i.outcome_now().is_none(), "activity re-arms the expiry");
    h.advance(30_000).await;
    let o = i.wait().await;
    assert_eq!(o.status, Status::Stopped);
    assert!(
        o.reason.as_deref().is_some_and(|r| r.contains("idle")),
        "{:?}",
        o.reason
    );
    h.check_replay(&i);
}

#[tokio::test]
async fn a_subplan_result_reaches_the_parent() {
    let h = harness();
    h.plan(json!({"plan_name":"child","graph_type":"acyclic","events":{"start":{},"answer":{"kind":"output"}},
        "steps":{"double":{"on":["start"],"action":"echo","args":{"v":"${start.x * 2}"},"emits":["answer"]}}}));
    let p = h.plan(json!({"plan_name":"parent","graph_type":"acyclic","events":{"start":{},"child.done":{},"got":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"child","input":{"x":"${start.x}"}},"emits":["child.done"]},
                 "use":{"on":["child.done"],"action":"echo","args":{"v":"${inputs[\"child.done\"].answer.v}"},"emits":["got"]}}}));
    let i = h.engine.start("t", &p, json!({"x": 21})).expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(out(&o, "got"), vec![json!({"v": 42})]);
    h.check_replay(&i);
}

#[tokio::test]
async fn a_child_input_that_does_not_match_its_schema_fails_the_call() {
    let h = harness();
    h.plan(json!({"plan_name":"typed-child","graph_type":"acyclic",
        "events":{"start":{"schema":{"type":"object","properties":{"x":{"type":"integer"}}}},"answer":{"kind":"output"}},
        "steps":{"double":{"on":["start"],"action":"echo","args":{"v":"${start.x * 2}"},"emits":["answer"]}}}));
    let p = h.plan(json!({"plan_name":"caller","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"typed-child","input":{"x":"${start.x}"}},"emits":["r"]}}}));
    let o = h
        .engine
        .start("t", &p, json!({"x": "21"}))
        .expect("starts")
        .wait()
        .await;
    match o.status {
        Status::Failed { reason } => assert!(reason.contains("[input_invalid]"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(h.engine.live_instances(), 0, "no child was started");
}

#[tokio::test]
async fn a_failing_child_is_a_tool_error() {
    let h = harness();
    h.plan(
        json!({"plan_name":"bad","graph_type":"acyclic","events":{"start":{},"x":{"kind":"output"}},
        "steps":{"f":{"on":["start"],"action":"fail","args":{},"emits":["x"]}}}),
    );
    let p = h.plan(
        json!({"plan_name":"par","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"bad"},"emits":["r"]}}}),
    );
    let o = h
        .engine
        .start("t", &p, json!({}))
        .expect("starts")
        .wait()
        .await;
    match o.status {
        Status::Failed { reason } => assert!(reason.contains("child_failed"), "{reason}"),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn tenants_never_see_each_others_events() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"ten","graph_type":"reactive","events":{"start":{},"msg":{"kind":"input"},"seen":{"kind":"output"}},
        "steps":{"handle":{"on":["msg"],"action":"echo","args":{"m":"${msg.m}"},"emits":["seen"]}}}));
    let a = h.engine.start("acme", &p, json!({})).expect("a");
    let b = h.engine.start("globex", &p, json!({})).expect("b");
    assert_eq!(
        h.engine
            .ingest("acme", "msg", json!({"m": "for acme"}), None, None)
            .expect("a"),
        1
    );
    assert_eq!(a.state().fired, 1);
    assert_eq!(b.state().fired, 0);
    // Naming another tenant's instance is refused.
    let e = h
        .engine
        .ingest("globex", "msg", json!({}), None, Some(a.id()))
        .expect_err("isolated");
    assert_eq!(e.code(), "unknown_instance");
    h.check_replay(&a);
    h.check_replay(&b);
}

#[tokio::test]
async fn only_input_events_are_accepted() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"in","graph_type":"reactive","events":{"start":{},"msg":{"kind":"input"},"internal":{},"seen":{"kind":"output"}},
        "steps":{"handle":{"on":["msg"],"action":"echo","args":{},"emits":["internal"]},
                 "next":{"on":["internal"],"action":"echo","args":{},"emits":["seen"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let e = h
        .engine
        .ingest("t", "internal", json!({}), None, Some(i.id()))
        .expect_err("internal");
    assert_eq!(e.code(), "event_not_accepted");
    assert_eq!(
        h.engine
            .ingest("t", "internal", json!({}), None, None)
            .expect("ok"),
        0
    );
}

/// Every token put on an event with a `schema` matches it: the input and events from outside
/// are refused before anything is queued, a step's emit that does not match fails the step.
#[tokio::test]
async fn payloads_are_checked_against_their_events_schemas() {
    let h = harness();
    let int_n = |min: i64| json!({"type":"object","required":["n"],"properties":{"n":{"type":"integer","minimum":min}}});
    let p = h.plan(json!({"plan_name":"typed","graph_type":"reactive",
        "events":{"start":{"schema":{"type":"object","required":["who"]}},
                  "msg":{"kind":"input","schema":int_n(-100)},
                  "shaped":{"schema":int_n(0)},
                  "seen":{"kind":"output"},"bad":{"kind":"output"}},
        "steps":{"shape":{"on":["msg"],"action":"echo","args":{"n":"${msg.n - 5}"},"emits":["shaped"],"on_fail":"emit:bad"},
                 "handle":{"on":["shaped"],"action":"echo","args":{"n":"${shaped.n}"},"emits":["seen"]}}}));
    // The input goes on `start`: without `who` nothing starts.
    let e = h.engine.start("t", &p, json!({})).expect_err("no `who`");
    assert_eq!(e.code(), "input_invalid");
    assert!(e.to_string().contains("`start`"), "{e}");
    assert_eq!(h.engine.live_instances(), 0);
    let i = h
        .engine
        .start("t", &p, json!({"who": "x"}))
        .expect("starts");
    // An event whose payload does not match reaches no instance, named or routed.
    for target in [Some(i.id()), None] {
        let e = h
            .engine
            .ingest("t", "msg", json!({"n": "seven"}), None, target)
            .expect_err("a string is not an integer");
        assert_eq!(e.code(), "payload_invalid");
        match &e {
            weft_runtime::Error::PayloadInvalid { at, event, .. } => {
                assert_eq!((at.as_str(), event.as_str()), ("/n", "msg"));
            }
            other => panic!("{other:?}"),
        }
    }
    // A batch is refused whole, naming the event that does not match.
    let ev = |n: serde_json::Value| weft_runtime::BatchEvent {
        event: "msg".into(),
        payload: json!({ "n": n }),
        correlation: None,
        instance: None,
    };
    let (k, e) = h
        .engine
        .ingest_batch("t", vec![ev(json!(7)), ev(json!(-101))])
        .expect_err("the second is under the minimum");
    assert_eq!((k, e.code()), (1, "payload_invalid"));
    let st = i.state();
    assert_eq!(st.fired, 0, "{st:?}");
    assert!(
        !st.marking.iter().any(|(e, n)| e == "msg" && *n > 0),
        "{st:?}"
    );
    // Matching payloads go through; a step's emit is checked against its event's schema.
    h.engine
        .ingest("t", "msg", json!({"n": 7}), None, None)
        .expect("n = 7");
    h.engine
        .ingest("t", "msg", json!({"n": 1}), None, Some(i.id()))
        .expect("n = 1, but 1 - 5 is under `shaped`'s minimum");
    let core = i.core_instance().expect("core");
    let results = core.results(&i.plan().net);
    let on = |name: &str| -> Vec<serde_json::Value> {
        results
            .iter()
            .find(|(e, _)| e == name)
            .map(|(_, ts)| ts.iter().map(|t| (*t.payload).clone()).collect())
            .unwrap_or_default()
    };
    assert_eq!(on("seen"), vec![json!({"n": 2})]);
    let bad = on("bad");
    assert_eq!(bad.len(), 1, "{bad:?}");
    assert_eq!(bad[0]["error"]["code"], "emit_invalid", "{bad:?}");
    let msg = bad[0]["error"]["message"].as_str().unwrap_or_default();
    assert!(
        msg.contains("`shaped`") && msg.contains("(at `/n`)"),
        "{msg}"
    );
    h.check_replay(&i);
}

#[tokio::test]
async fn timers_put_tokens_later() {
    let h = harness();
    let p =
        h.plan(serde_json::from_str(include_str!("../../../examples/timer.json")).expect("json"));
    let i = h
        .engine
        .start("t", &p, json!({"email": "a@example.com"}))
        .expect("starts");
    settle().await;
    assert!(
        i.outcome_now().is_none(),
        "waiting for the timer, not stuck"
    );
    assert_eq!(h.engine.pending_timers(), 1);
    h.advance(3_600_000).await;
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    h.check_replay(&i);
}

#[tokio::test]
async fn context_put_then_get() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"kv","graph_type":"acyclic","events":{"start":{},"put":{},"got":{"kind":"output"}},
        "steps":{"p":{"on":["start"],"action":"context.put","args":{"key":"k","value":"${start.v}"},"emits":["put"]},
                 "g":{"on":["put"],"action":"context.get","args":{"key":"k"},"emits":["got"]}}}));
    let o = h
        .engine
        .start("t", &p, json!({"v": 7}))
        .expect("starts")
        .wait()
        .await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(out(&o, "got")[0]["value"], json!(7));
}

/// A join that lacks a declared input event is `waiting` for it (named in the outcome and
/// in `plan.waiting`), never `stuck`, and completes once the event arrives.
#[tokio::test]
async fn waiting_instances_say_what_they_wait_for() {
    let h = harness();
    let p = h.plan(json!({"plan_name":"st","graph_type":"acyclic","events":{"start":{},"a":{},"b":{"kind":"input"},"done":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"echo","args":{},"emits":["a"]},
                 "j":{"on":["a","b"],"action":"echo","args":{},"emits":["done"]}}}));
    let mut sub = h.engine.subscribe(Filter::default());
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = i.wait().await;
    assert_eq!(o.status, Status::Waiting);
    assert_eq!(
        o.awaits.as_ref().map(|a| a.events.clone()),
        Some(vec!["b".to_string()])
    );
    assert_eq!(o.waiting[0].step, "j");
    assert_eq!(o.waiting[0].lacks, vec!["b".to_string()]);
    let mut settled = Vec::new();
    while let Ok(Some(d)) =
        tokio::time::timeout(std::time::Duration::from_millis(200), sub.recv()).await
    {
        if let weft_runtime::Delivery::Event(ev) = d
            && matches!(
                ev.ty.as_str(),
                "dev.weft.plan.waiting" | "dev.weft.plan.stuck"
            )
        {
            settled.push(ev.clone());
            break;
        }
    }
    assert_eq!(settled.len(), 1, "a plan.waiting event");
    assert_eq!(settled[0].ty, "dev.weft.plan.waiting");
    assert_eq!(settled[0].data["awaits"]["events"], json!(["b"]));
    // An input event revives it.
    h.engine
        .ingest("t", "b", json!({}), None, Some(i.id()))
        .expect("in");
    assert_eq!(i.wait().await.status, Status::Completed);
    h.check_replay(&i);
}

/// A manual clock that, when told to, moves forward at the start of the next `sleep`: time
/// passing between the timer service's reading of the clock and its sleep.
#[derive(Clone)]
struct Racing {
    clock: weft_runtime::ManualClock,
    jump: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl weft_runtime::Clock for Racing {
    fn now_ms(&self) -> i64 {
        self.clock.now_ms()
    }
    fn sleep(&self, ms: u64) -> weft_tools::BoxFuture<'static, ()> {
        let jump = self.jump.swap(0, std::sync::atomic::Ordering::SeqCst);
        if jump > 0 {
            self.clock.advance(jump);
        }
        self.clock.sleep(ms)
    }
}

/// A timer whose due time passes while the timer service computes how long to sleep still
/// fires then, not one wait later.
#[tokio::test]
async fn a_timer_due_while_the_service_goes_to_sleep_fires() {
    use weft_runtime::Clock;
    let racing = Racing {
        clock: weft_runtime::ManualClock::new(1_700_000_000_000),
        jump: Default::default(),
    };
    let h = harness_with(|o| o.clock = std::sync::Arc::new(racing.clone()));
    let p =
        h.plan(serde_json::from_str(include_str!("../../../examples/timer.json")).expect("json"));
    let first = h
        .engine
        .start("t", &p, json!({"email": "a@example.com"}))
        .expect("starts");
    settle().await;
    assert_eq!(h.engine.pending_timers(), 1);
    // The next sleep starts 1 s late: the first timer (due in 1 s) is due by then.
    racing
        .jump
        .store(1_000, std::sync::atomic::Ordering::SeqCst);
    let second = h
        .engine
        .start("t", &p, json!({"email": "b@example.com"}))
        .expect("starts");
    settle().await;
    assert_eq!(racing.now_ms(), 1_700_000_001_000, "the clock jumped");
    for i in [&first, &second] {
        let o = tokio::time::timeout(std::time::Duration::from_secs(5), i.wait())
            .await
            .expect("the due timer fired");
        assert_eq!(o.status, Status::Completed, "{o:?}");
    }
}
