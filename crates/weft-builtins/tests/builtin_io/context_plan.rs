//! `context.get` / `context.put` and `plan.run` through a fake engine.

use std::sync::Arc;

use serde_json::json;
use weft_builtins::default_registry;
use weft_tools::ChildPlan;

use crate::common::{FakeServices, call, ctx_with};

#[tokio::test]
async fn put_then_get_round_trips_and_default_applies() {
    let s = Arc::new(FakeServices::default());
    let reg = default_registry();
    let ctx = || ctx_with(Arc::clone(&s), "k");
    let r = call(
        &reg,
        "context.put",
        ctx(),
        json!({"key": "a", "value": [1, {"b": 2}]}),
    )
    .await
    .unwrap();
    assert_eq!(r, json!({"key": "a", "value": [1, {"b": 2}]}));
    let r = call(&reg, "context.get", ctx(), json!({"key": "a"}))
        .await
        .unwrap();
    assert_eq!(r, json!({"key": "a", "value": [1, {"b": 2}]}));
    let r = call(
        &reg,
        "context.get",
        ctx(),
        json!({"key": "zz", "default": 7}),
    )
    .await
    .unwrap();
    assert_eq!(r["value"], 7);
    let r = call(&reg, "context.get", ctx(), json!({"key": "zz"}))
        .await
        .unwrap();
    assert_eq!(r["value"], json!(null));
    for (tool, args) in [
        ("context.get", json!({})),
        ("context.get", json!({"key": 1})),
        ("context.get", json!({"key": ""})),
        ("context.put", json!({"key": "a"})),
        ("context.put", json!({"key": "a", "value": 1, "x": 2})),
    ] {
        let e = call(&reg, tool, ctx(), args).await.unwrap_err();
        assert_eq!(e.code, "args_invalid", "{tool}");
    }
}

#[tokio::test]
async fn plan_run_hands_the_child_plan_to_the_engine() {
    let s = Arc::new(FakeServices::default());
    let reg = default_registry();
    let ctx = || ctx_with(Arc::clone(&s), "k");
    let r = call(
        &reg,
        "plan.run",
        ctx(),
        json!({"plan": "child", "version": "2", "input": {"x": 1}}),
    )
    .await
    .unwrap();
    assert_eq!(r, json!({"done": [{"x": 1}]}));
    let inline = json!({"plan_name": "c", "graph_type": "acyclic", "events": {}, "steps": {}});
    call(&reg, "plan.run", ctx(), json!({"inline": inline}))
        .await
        .unwrap();
    let children = s.children.lock().unwrap().clone();
    assert_eq!(
        children[0],
        (
            ChildPlan::Named {
                name: "child".into(),
                version: Some("2".into())
            },
            json!({"x": 1})
        )
    );
    assert_eq!(children[1], (ChildPlan::Inline(inline.clone()), json!({})));
    drop(children);
    for args in [
        json!({}),
        json!({"input": 1}),
        json!({"plan": "a", "inline": {}}),
        json!({"plan": ""}),
        json!({"inline": inline, "version": "1"}),
        json!({"plan": 5}),
        json!({"plan": "a", "extra": 1}),
    ] {
        let e = call(&reg, "plan.run", ctx(), args).await.unwrap_err();
        assert_eq!(e.code, "args_invalid");
    }
    assert_eq!(s.children.lock().unwrap().len(), 2);
}
