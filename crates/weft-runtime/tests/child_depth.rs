//! Child plans that run themselves (issue #27, item 2): a plan naming itself statically is
//! refused at registration, a name computed at run time stops at `limits.max_child_depth`
//! with a clear error, and neither overflows the stack.

mod common;

use common::harness;
use serde_json::json;
use weft_core::Status;

#[tokio::test]
async fn a_plan_running_itself_by_name_is_refused_at_registration() {
    let h = harness();
    let direct = json!({"plan_name":"me","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"me"},"emits":["r"]}}});
    let plan: weft_core::Plan = serde_json::from_value(direct).expect("plan");
    let err = h.engine.register(plan).expect_err("self-reference");
    assert!(err.to_string().contains("me → me"), "{err}");

    // Indirect: a → b → a, where b is registered first.
    let b = json!({"plan_name":"b","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"a"},"emits":["r"]}}});
    h.engine
        .register(serde_json::from_value(b).expect("plan"))
        .expect("b alone is fine");
    let a = json!({"plan_name":"a","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"b"},"emits":["r"]}}});
    let err = h
        .engine
        .register(serde_json::from_value(a).expect("plan"))
        .expect_err("a → b → a");
    assert!(err.to_string().contains("a → b → a"), "{err}");
}

#[tokio::test]
async fn a_computed_self_reference_stops_at_the_depth_limit() {
    let h = harness();
    let p = h.plan(
        json!({"plan_name":"rec","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run",
            "args":{"plan":"${start.name}","input":{"name":"${start.name}"}},"emits":["r"]}}}),
    );
    let o = h
        .engine
        .start("t", &p, json!({"name": "rec"}))
        .expect("starts")
        .wait()
        .await;
    match o.status {
        Status::Failed { reason } => {
            assert!(reason.contains("child_depth"), "{reason}");
            assert!(reason.contains("limits.max_child_depth"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// The depth is journaled with the start (`Input::Start`, folded into `Extras`): an instance
/// restored from its journal keeps it, so a crash does not reset the count. Restored deep
/// past the limit, its `plan.run` is refused; counted from 0 again it would run the child.
#[tokio::test]
async fn a_restored_instance_keeps_its_child_depth() {
    let h = harness();
    let leaf = json!({"plan_name":"leaf","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"e":{"on":["start"],"action":"echo","args":{"x":1},"emits":["r"]}}});
    h.engine
        .register(serde_json::from_value(leaf).expect("plan"))
        .expect("leaf");
    let name = h.plan(
        json!({"plan_name":"deep","graph_type":"acyclic","events":{"start":{},"r":{"kind":"output"}},
        "steps":{"call":{"on":["start"],"action":"plan.run","args":{"plan":"leaf"},"emits":["r"]}}}),
    );
    let p = h.engine.plan(&name).expect("registered");
    let depth = 1_000;
    let (mut inst, mut extras) = (None, weft_runtime::Extras::default());
    let start = weft_runtime::Input::Start {
        plan: std::sync::Arc::clone(&p.name),
        input: json!({}),
        now: 0,
        depth,
    };
    assert!(weft_runtime::journal_hook::fold(
        &p.net,
        "i7",
        &mut inst,
        &mut extras,
        &start
    ));
    assert_eq!(extras.depth, depth);
    let (restored, _) = h
        .engine
        .restore_with(
            "t",
            &p,
            inst.expect("started"),
            &Default::default(),
            &extras,
        )
        .expect("restores");
    match restored.wait().await.status {
        Status::Failed { reason } => assert!(reason.contains("child_depth"), "{reason}"),
        other => panic!("{other:?}"),
    }
}
