//! Property: for random small nets and random event orders, the runtime's final marking
//! equals the pure core's token game (a `weft_core::Instance` driven directly, one firing
//! at a time, as the oracle), and equals the replay of the runtime's own journal.
//!
//! Each case runs with immediate firings taken (the default) and recorded as in flight (a
//! trace on), which must give the same instance and journal.
//!
//! Nets are generated so the result does not depend on scheduling (each event has at most
//! one producer, outside events only land on source events), which lets the oracle use a
//! different firing order from the runtime and still be an exact reference.

mod common;

use proptest::prelude::*;
use serde_json::{Map, Value, json};
use weft_core::{ActionError, Instance, Net};

#[derive(Debug, Clone)]
struct Case {
    /// For event j >= 2: the inputs (indices < j) of its one producer step.
    producers: Vec<Vec<usize>>,
    /// (source event 0/1, correlation 0/1, value).
    events: Vec<(usize, usize, u32)>,
}

fn case() -> impl Strategy<Value = Case> {
    (1usize..6).prop_flat_map(|extra| {
        let producers = (0..extra)
            .map(|k| {
                let j = k + 2;
                prop::collection::vec(0..j, 1..=2).prop_map(|mut v| {
                    v.sort_unstable();
                    v.dedup();
                    v
                })
            })
            .collect::<Vec<_>>();
        (
            producers,
            prop::collection::vec((0usize..2, 0usize..2, 0u32..100), 0..25),
        )
            .prop_map(|(producers, events)| Case { producers, events })
    })
}

fn plan(c: &Case) -> Value {
    let mut events = Map::new();
    events.insert("start".into(), json!({}));
    events.insert("e0".into(), json!({"kind": "input"}));
    events.insert("e1".into(), json!({"kind": "input"}));
    let mut steps = Map::new();
    for (k, ins) in c.producers.iter().enumerate() {
        let j = k + 2;
        events.insert(format!("e{j}"), json!({}));
        let on: Vec<String> = ins.iter().map(|i| format!("e{i}")).collect();
        steps.insert(
            format!("p{j}"),
            json!({"on": on, "action": "echo", "args": {"s": j}, "emits": [format!("e{j}")]}),
        );
    }
    json!({"plan_name": "prop", "graph_type": "reactive", "events": events, "steps": steps})
}

/// The token game on the pure core: fire one step, complete it at once, repeat.
fn oracle(net: &Net, id: &str, c: &Case) -> Instance {
    let mut inst = Instance::start(net, id, json!({}), 0);
    let run = |inst: &mut Instance| {
        while let Some(f) = inst.next(net) {
            let out = f
                .args_value(net)
                .map(std::sync::Arc::new)
                .map_err(|e| ActionError::fatal("args_invalid", e));
            inst.complete(net, f.firing, out, 0);
        }
    };
    run(&mut inst);
    for &(src, corr, v) in &c.events {
        let e = net.event_id(&format!("e{src}")).expect("source");
        inst.add_token(net, e, json!({"v": v}), Some(&format!("c{corr}")), 0)
            .expect("accepted");
        run(&mut inst);
    }
    inst
}

/// Slot contents as (payload, correlation) sequences: token ids depend on firing order.
fn colours(inst: &Instance) -> Vec<Vec<(Value, String)>> {
    inst.marking
        .slots
        .iter()
        .map(|s| {
            s.tokens
                .iter()
                .map(|t| ((*t.payload).clone(), t.correlation.to_string()))
                .collect()
        })
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]
    #[test]
    fn runtime_marking_equals_the_core_token_game(c in case()) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("rt");
        rt.block_on(async {
            // Taken immediate firings (the default), then recorded ones (a trace on): the
            // same instance and journal either way (`tests/taken.rs`).
            let mut runs = Vec::new();
            for recorded in [false, true] {
                let h = common::harness_with(|o| {
                    o.max_firings_per_sec = None;
                    o.trace = recorded;
                });
                let name = h.plan(plan(&c));
                let i = h.engine.start("t", &name, json!({})).expect("starts");
                for &(src, corr, v) in &c.events {
                    h.engine
                        .ingest("t", &format!("e{src}"), json!({"v": v}), Some(&format!("c{corr}")), None)
                        .expect("routed");
                }
                let live = i.core_instance().expect("core");
                let expect = oracle(&i.plan().net, i.id(), &c);
                prop_assert_eq!(colours(&live), colours(&expect));
                prop_assert_eq!(live.fired, expect.fired);
                h.check_replay(&i);
                runs.push((live, h.journal.inputs(i.id())));
            }
            common::assert_same(&runs[0].0, &runs[1].0);
            prop_assert_eq!(&runs[0].1, &runs[1].1);
            Ok(())
        })?;
    }
}
