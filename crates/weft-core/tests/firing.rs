//! Scenario tests of the firing rule on the pure [`Instance`] state machine, driven
//! synchronously by a tiny in-test executor (no runtime, no clock).

use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::instance::Completion;
use weft_core::{ActionError, Instance, Limits, Net, Status, parse_plan, validate};

fn net(plan: Value) -> Net {
    let bytes = serde_json::to_vec(&plan).expect("ser");
    let plan = parse_plan(&bytes, &Limits::default()).expect("parses");
    let v = validate(&plan, None, &Limits::default());
    assert!(!v.has_errors(), "{:#?}", v.findings);
    v.net.expect("net")
}

/// Runs every enabled firing to completion with a synchronous tool table; returns the
/// sequence of fired step names.
fn drive(net: &Net, inst: &mut Instance) -> Vec<String> {
    let mut trace = Vec::new();
    loop {
        let Some(f) = inst.next(net) else { break };
        let step = net.step(f.step);
        trace.push(step.name.clone());
        let mut outcome = tool(
            &step.action,
            f.args_value(net)
                .map_err(|e| ActionError::fatal("args_invalid", e)),
        );
        while let Completion::Retry { .. } =
            inst.complete(net, f.firing, outcome.clone().map(Arc::new), 0)
        {
            outcome = tool(
                &step.action,
                f.args_value(net)
                    .map_err(|e| ActionError::fatal("args_invalid", e)),
            );
        }
    }
    inst.settle(net);
    trace
}

fn tool(action: &str, args: Result<Value, ActionError>) -> Result<Value, ActionError> {
    let args = args?;
    match action {
        "echo" => Ok(args),
        "fail" => Err(ActionError::new("tool_error", "it failed")),
        _ => Ok(json!({"ok": true, "args": args})),
    }
}

fn outputs(net: &Net, inst: &Instance, event: &str) -> Vec<Value> {
    inst.results(net)
        .into_iter()
        .filter(|(e, _)| e == event)
        .flat_map(|(_, ts)| ts.into_iter().map(|t| (*t.payload).clone()))
        .collect()
}

#[test]
fn chain_runs_to_completion_with_templated_args() {
    let n = net(
        json!({"plan_name":"c","graph_type":"acyclic","events":{"start":{},"a":{},"done":{}},
        "steps":{"s1":{"on":["start"],"action":"echo","args":{"x":"${start.n + 1}"},"emits":["a"]},
                 "s2":{"on":["a"],"action":"echo","args":{"y":"${a.x * 10}","msg":"got ${a.x}"},"emits":["done"]}}}),
    );
    let mut inst = Instance::start(&n, "i1", json!({"n": 1}), 0);
    assert_eq!(drive(&n, &mut inst), vec!["s1", "s2"]);
    assert_eq!(inst.status, Status::Completed);
    assert_eq!(
        outputs(&n, &inst, "done"),
        vec![json!({"y": 20, "msg": "got 2"})]
    );
}

#[test]
fn join_never_pairs_tokens_of_different_correlation() {
    let n = net(
        json!({"plan_name":"j","graph_type":"reactive","events":{"start":{},"l":{"kind":"input"},"r":{"kind":"input"},"both":{}},
        "steps":{"join":{"on":["l","r"],"action":"echo","args":{"l":"${l.v}","r":"${r.v}"},"emits":["both"]}}}),
    );
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    let l = n.event_id("l").expect("l");
    let r = n.event_id("r").expect("r");
    inst.add_token(&n, l, json!({"v": "l-a"}), Some("a"), 0)
        .expect("add");
    inst.add_token(&n, r, json!({"v": "r-b"}), Some("b"), 0)
        .expect("add");
    assert!(
        drive(&n, &mut inst).is_empty(),
        "different correlations must not join"
    );
    inst.add_token(&n, r, json!({"v": "r-a"}), Some("a"), 0)
        .expect("add");
    inst.add_token(&n, l, json!({"v": "l-b"}), Some("b"), 0)
        .expect("add");
    assert_eq!(drive(&n, &mut inst).len(), 2);
    let mut got = outputs(&n, &inst, "both");
    got.sort_by_key(|v| v.to_string());
    assert_eq!(
        got,
        vec![
            json!({"l": "l-a", "r": "r-a"}),
            json!({"l": "l-b", "r": "r-b"})
        ]
    );
}

#[test]
fn false_guard_leaves_tokens_in_place() {
    let n = net(
        json!({"plan_name":"g","graph_type":"acyclic","events":{"start":{},"big":{}},
        "steps":{"check":{"on":["start"],"guard":"start.n > 10","action":"echo","emits":["big"]}}}),
    );
    let mut inst = Instance::start(&n, "i", json!({"n": 3}), 0);
    assert!(drive(&n, &mut inst).is_empty());
    assert_eq!(inst.status, Status::Stuck);
    assert_eq!(inst.marking.total(), 1, "the start token is still there");
    let w = inst.waiting(&n);
    assert_eq!(w.len(), 1);
    assert!(w[0].guard_blocked);
}

#[test]
fn guard_evaluation_error_means_not_enabled() {
    let n = net(
        json!({"plan_name":"g","graph_type":"acyclic","events":{"start":{},"x":{}},
        "steps":{"check":{"on":["start"],"guard":"start.missing.deeper == 1","action":"echo","emits":["x"]}}}),
    );
    let mut inst = Instance::start(&n, "i", json!({"n": 3}), 0);
    assert!(drive(&n, &mut inst).is_empty());
    assert_eq!(inst.status, Status::Stuck);
}

#[test]
fn exclusive_goes_to_one_consumer_broadcast_to_all() {
    let plan = |consume: &str| {
        json!({"plan_name":"x","graph_type":"acyclic",
        "events":{"start":{"consume": consume},"a":{},"b":{}},
        "steps":{"sa":{"on":["start"],"action":"echo","emits":["a"]},
                 "sb":{"on":["start"],"action":"echo","emits":["b"]}}})
    };
    let n = net(plan("exclusive"));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    assert_eq!(drive(&n, &mut inst).len(), 1);
    let n = net(plan("broadcast"));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    assert_eq!(drive(&n, &mut inst), vec!["sa", "sb"]);
}

#[test]
fn channel_passing_pairs_each_reply_with_its_request_among_10000() {
    let n = net(json!({"plan_name":"ch","graph_type":"reactive",
        "events":{"start":{},"spawn":{"kind":"input"},"reply":{"kind":"input"},"matched":{}},
        "steps":{"pair":{"on":["spawn","reply"],"guard":"reply.task_id == spawn.task_id","correlate":false,
                 "action":"echo","args":{"req":"${spawn.req}","resp":"${reply.resp}"},"emits":["matched"]}}}));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    let spawn = n.event_id("spawn").expect("spawn");
    let reply = n.event_id("reply").expect("reply");
    const N: usize = 10_000;
    for i in 0..N {
        inst.add_token(
            &n,
            spawn,
            json!({"task_id": format!("t{i}"), "req": i}),
            None,
            0,
        )
        .expect("add");
    }
    // Replies arrive in a scrambled order.
    for k in 0..N {
        let i = (k * 7919) % N;
        inst.add_token(
            &n,
            reply,
            json!({"task_id": format!("t{i}"), "resp": i * 2}),
            None,
            0,
        )
        .expect("add");
    }
    assert_eq!(drive(&n, &mut inst).len(), N);
    let out = outputs(&n, &inst, "matched");
    assert_eq!(out.len(), N);
    for v in out {
        assert_eq!(
            v["resp"].as_u64().expect("resp"),
            v["req"].as_u64().expect("req") * 2,
            "{v}"
        );
    }
    assert_eq!(
        inst.marking.total(),
        N + 1,
        "only the matched outputs (and the unused start token) remain"
    );
}

#[test]
fn retries_then_failed_token_then_handler() {
    let n = net(json!({"plan_name":"f","graph_type":"acyclic",
        "events":{"start":{},"ok":{},"risky.failed":{},"handled":{}},
        "steps":{"risky":{"on":["start"],"action":"fail","retry":{"max":2,"backoff_ms":10},"emits":["ok"]},
                 "handle":{"on":["risky.failed"],"action":"echo","args":{"why":"${inputs['risky.failed'].error.code}","n":"${inputs['risky.failed'].attempts}"},"emits":["handled"]}}}));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    let f = inst.next(&n).expect("fires");
    assert_eq!(
        inst.complete(&n, f.firing, Err(ActionError::new("e", "1")), 0),
        Completion::Retry {
            attempt: 2,
            delay_ms: 10
        }
    );
    assert_eq!(
        inst.complete(&n, f.firing, Err(ActionError::new("e", "2")), 0),
        Completion::Retry {
            attempt: 3,
            delay_ms: 20
        }
    );
    assert!(matches!(
        inst.complete(&n, f.firing, Err(ActionError::new("tool_error", "3")), 0),
        Completion::ErrorToken { .. }
    ));
    assert_eq!(
        inst.complete(&n, f.firing, Ok(Arc::new(json!({}))), 0),
        Completion::Unknown,
        "late outcome ignored"
    );
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Completed);
    assert_eq!(
        outputs(&n, &inst, "handled"),
        vec![json!({"why": "tool_error", "n": 3})]
    );
}

#[test]
fn abort_fails_the_instance_and_continue_drops() {
    let plan = |policy: &str| {
        json!({"plan_name":"f","graph_type":"acyclic","events":{"start":{},"ok":{},"other":{}},
        "steps":{"risky":{"on":["start"],"action":"fail","on_fail":policy,"emits":["ok"]},
                 "side":{"on":["start"],"action":"echo","emits":["other"]}}})
    };
    let n = net(plan("abort"));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    drive(&n, &mut inst);
    assert!(
        matches!(inst.status, Status::Failed { .. }),
        "{:?}",
        inst.status
    );
    let n = net(plan("continue"));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Completed);
    let n = net(plan("repair"));
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    drive(&n, &mut inst);
    assert!(matches!(inst.status, Status::Paused { .. }));
}

#[test]
fn conditional_and_shaped_emits_with_fresh_channel() {
    let n = net(
        json!({"plan_name":"s","graph_type":"acyclic","events":{"start":{},"hi":{},"lo":{},"task":{}},
        "steps":{"route":{"on":["start"],"action":"echo","args":{"n":"${start.n}"},
            "emits":[{"event":"hi","when":"result.n > 5"},{"event":"lo","when":"result.n <= 5"},
                     {"event":"task","data":{"task_id":"${fresh()}","n":"${result.n}"}}]}}}),
    );
    let mut inst = Instance::start(&n, "inst", json!({"n": 9}), 0);
    drive(&n, &mut inst);
    assert_eq!(outputs(&n, &inst, "hi").len(), 1);
    assert!(outputs(&n, &inst, "lo").is_empty());
    assert_eq!(
        outputs(&n, &inst, "task"),
        vec![json!({"task_id": "inst.0", "n": 9})]
    );
}

/// An instance that needs a declared input event is `waiting` for it (named), not `stuck`,
/// and completes once it arrives.
#[test]
fn an_instance_lacking_a_declared_input_waits_for_it_then_completes() {
    let n = net(
        json!({"plan_name":"s","graph_type":"acyclic","events":{"start":{},"approval":{"kind":"input"},"done":{}},
        "steps":{"go":{"on":["start","approval"],"action":"echo","emits":["done"]}}}),
    );
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Waiting);
    assert_eq!(inst.awaited_events(&n), vec!["approval".to_string()]);
    let w = inst.waiting(&n);
    assert_eq!(w[0].lacks, vec!["approval".to_string()]);
    inst.add_token(&n, n.event_id("approval").expect("e"), json!({}), None, 0)
        .expect("add");
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Completed);
}

/// `stuck` is for what nothing can move: the join lacks an internal event no step will
/// emit, and the initial event (not declared `kind: input`) takes the instance's input only.
/// A pending timer makes the same marking `waiting`.
#[test]
fn a_real_deadlock_is_stuck_unless_a_timer_is_pending() {
    let n = net(json!({"plan_name":"deadlock","graph_type":"acyclic",
        "events":{"start":{},"checked":{},"approved":{},"done":{"kind":"output"}},
        "steps":{
            "check":{"on":["start"],"action":"echo","args":{"amount":"${start.amount}"},
                "emits":["checked",{"event":"approved","when":"start.amount < 100"}]},
            "finish":{"on":["checked","approved"],"action":"echo","emits":["done"]}}}));
    let mut inst = Instance::start(&n, "i", json!({"amount": 500}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Stuck);
    assert!(inst.awaited_events(&n).is_empty());
    assert_eq!(inst.settle_with(&n, true), &Status::Waiting);
    assert_eq!(inst.settle_with(&n, false), &Status::Stuck);
}

/// A step guard-blocked on a declared input waits for another token there (a later reply
/// may match); one guard-blocked on internal events only is stuck.
#[test]
fn a_guard_blocked_join_on_an_input_event_is_waiting() {
    let n = net(json!({"plan_name":"w","graph_type":"acyclic",
        "events":{"start":{},"reply":{"kind":"input"},"done":{"kind":"output"}},
        "steps":{"collect":{"on":["start","reply"],"correlate":false,
            "guard":"reply.id == start.id","action":"echo","emits":["done"]}}}));
    let mut inst = Instance::start(&n, "i", json!({"id": 1}), 0);
    let reply = n.event_id("reply").expect("event");
    inst.add_token(&n, reply, json!({"id": 2}), None, 1)
        .expect("accepted");
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Waiting);
    assert_eq!(inst.awaited_events(&n), vec!["reply".to_string()]);
}

#[test]
fn tokens_refused_after_the_end() {
    let n = net(
        json!({"plan_name":"s","graph_type":"acyclic","events":{"start":{},"done":{}},
        "steps":{"go":{"on":["start"],"action":"echo","emits":["done"]}}}),
    );
    let mut inst = Instance::start(&n, "i", json!({}), 0);
    drive(&n, &mut inst);
    assert!(inst.add_token(&n, 0, json!({}), None, 0).is_err());
}

/// Snapshots keep the in-flight firings as a map from firing id to record (the form a
/// `BTreeMap` writes); one written that way loads and completes.
#[test]
fn in_flight_firings_keep_their_serialized_form() {
    let n = net(json!({
        "plan_name": "fan", "graph_type": "acyclic",
        "events": {"start": {}, "a": {}, "b": {}, "done": {"kind": "output"}},
        "steps": {
            "x": {"on": ["start"], "action": "echo", "args": {"k": 1}, "emits": ["a"]},
            "y": {"on": ["start"], "action": "echo", "args": {"k": 2}, "emits": ["b"]},
            "j": {"on": ["a", "b"], "action": "echo", "args": {}, "emits": ["done"]}
        }
    }));
    let mut inst = Instance::start(&n, "i1", json!({"run": 1}), 5);
    let f0 = inst.next(&n).expect("x fires");
    let f1 = inst.next(&n).expect("y fires");
    assert_eq!((f0.firing, f1.firing), (0, 1));
    let snap = serde_json::to_value(&inst).expect("ser");
    let in_flight = snap["in_flight"].as_object().expect("a map");
    assert_eq!(in_flight.keys().collect::<Vec<_>>(), ["0", "1"]);
    assert_eq!(in_flight["1"]["step"], json!(n.step_id("y")));
    assert_eq!(in_flight["1"]["attempt"], json!(1));
    assert_eq!(in_flight["1"]["tokens"][0]["payload"], json!({"run": 1}));
    // The same snapshot with its keys in another order (any map order must load).
    let mut shuffled = snap.clone();
    let recs = in_flight.clone();
    let mut m = serde_json::Map::new();
    m.insert("1".into(), recs["1"].clone());
    m.insert("0".into(), recs["0"].clone());
    shuffled["in_flight"] = Value::Object(m);
    for s in [snap, shuffled] {
        let mut back: Instance = serde_json::from_value(s).expect("de");
        back.marking.reindex(&n);
        assert_eq!(back.in_flight.keys().copied().collect::<Vec<_>>(), [0, 1]);
        // Outcomes in reverse order still find their firings.
        assert!(matches!(
            back.complete(&n, 1, Ok(Arc::new(json!({"b": 1}))), 6),
            Completion::Emitted(_)
        ));
        assert!(back.in_flight.contains_key(&0) && !back.in_flight.contains_key(&1));
        assert!(matches!(
            back.complete(&n, 0, Ok(Arc::new(json!({"a": 1}))), 6),
            Completion::Emitted(_)
        ));
        assert!(back.in_flight.is_empty());
        assert_eq!(
            back.complete(&n, 0, Ok(Arc::new(json!({}))), 6),
            Completion::Unknown
        );
        let trace = drive(&n, &mut back);
        assert_eq!(trace, ["j"]);
        assert_eq!(back.status, Status::Completed);
    }
}

/// Fires everything enabled, then completes the firings oldest first, each completion
/// followed by firing everything it enabled (the runtime's order). With `taking`, steps the
/// caller may take are taken ([`Instance::next_taking`]) and their results put with
/// [`Instance::emit_taken`]; a failing taken firing is recorded with `keep_in_flight` and
/// completed as usual. Returns the instance's serialized state.
fn drive_in_turns(net: &Net, taking: bool) -> Value {
    use std::collections::VecDeque;
    use weft_core::Next;
    enum Ready {
        Outcome(u64, Result<Arc<Value>, ActionError>),
        Emit(u64, u32, Arc<str>, Arc<Value>),
    }
    let mask = vec![taking; net.steps.len()];
    let mut inst = Instance::start(net, "i", json!({"n": 2}), 0);
    let mut ready = VecDeque::new();
    let fire_all = |inst: &mut Instance, ready: &mut VecDeque<Ready>| {
        while let Some(n) = inst.next_taking(net, &mask) {
            match n {
                Next::Fired(f) => {
                    let step = net.step(f.step);
                    let r = tool(
                        &step.action,
                        f.args_value(net)
                            .map_err(|e| ActionError::fatal("args_invalid", e)),
                    );
                    ready.push_back(Ready::Outcome(f.firing, r.map(Arc::new)));
                }
                Next::Taken(t) => {
                    let step = net.step(t.step);
                    let args = match &t.args {
                        Ok(Some(a)) => Ok(a.as_value().clone()),
                        Ok(None) => Ok(net
                            .literal_args(t.step)
                            .map(|v| (**v).clone())
                            .unwrap_or(Value::Null)),
                        Err(e) => Err(ActionError::fatal("args_invalid", e.clone())),
                    };
                    let corr = t
                        .tokens
                        .first()
                        .map(|t| Arc::clone(&t.correlation))
                        .expect("an input");
                    match tool(&step.action, args) {
                        Ok(v) => ready.push_back(Ready::Emit(t.firing, t.step, corr, Arc::new(v))),
                        Err(e) => {
                            inst.keep_in_flight(t.firing, t.step, Vec::new(), Some(corr));
                            ready.push_back(Ready::Outcome(t.firing, Err(e)));
                        }
                    }
                }
            }
        }
    };
    fire_all(&mut inst, &mut ready);
    while let Some(r) = ready.pop_front() {
        match r {
            Ready::Outcome(f, r) => {
                inst.complete(net, f, r, 1);
            }
            Ready::Emit(f, s, c, v) => {
                inst.emit_taken(net, f, s, c, v, 1);
            }
        }
        fire_all(&mut inst, &mut ready);
    }
    inst.settle(net);
    serde_json::to_value(&inst).expect("ser")
}

#[test]
fn taken_firings_reach_the_recorded_state() {
    let n = net(json!({"plan_name":"t","graph_type":"acyclic",
    "events":{"start":{},"a":{},"b":{},"c":{},"f":{},"done":{"kind":"output"},"x":{"kind":"output"}},
    "steps":{
        "s1":{"on":["start"],"action":"echo","args":{"n":"${start.n}"},"emits":["a","b"]},
        "s2":{"on":["a"],"action":"echo","args":{"k":1},"emits":["c"]},
        "s3":{"on":["b","c"],"action":"echo","args":{"k":2},"emits":["done"]},
        "boom":{"on":["start"],"action":"fail","args":{},"on_fail":"continue","emits":["x"]},
        "shaped":{"on":["b"],"action":"echo","args":{"k":3},
            "emits":[{"event":"f","when":"result.k == 3"}]}
    }}));
    let recorded = drive_in_turns(&n, false);
    let taken = drive_in_turns(&n, true);
    assert_eq!(taken, recorded);
    assert_eq!(taken["status"], json!({"status": "completed"}));
    // Every step fired once; `shaped` keeps its inputs, so it is never taken.
    assert_eq!(taken["fired"], json!(5));
}

/// Issue #26: when the plan declares `kind: output` events, only they complete an acyclic
/// instance; a token left on an undeclared, unconsumed event is `stuck`, not `completed`.
#[test]
fn declared_outputs_alone_complete_an_instance() {
    let plan = |done_kind: Value| {
        json!({"plan_name":"o","graph_type":"acyclic",
        "events":{"start":{},"done":done_kind,"log":{}},
        "steps":{"work":{"on":["start"],"action":"echo",
            "emits":["log",{"event":"done","when":"start.ok"}]}}})
    };
    let n = net(plan(json!({"kind": "output"})));
    let mut inst = Instance::start(&n, "i1", json!({"ok": false}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Stuck);
    let mut inst = Instance::start(&n, "i2", json!({"ok": true}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Completed);
    // Without declared outputs every unconsumed event is one, as before.
    let n = net(plan(json!({})));
    let mut inst = Instance::start(&n, "i3", json!({"ok": false}), 0);
    drive(&n, &mut inst);
    assert_eq!(inst.status, Status::Completed);
}
