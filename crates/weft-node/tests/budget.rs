//! `[budget]` in the configuration: the node counts every call of every plan at the chain's
//! budget stage, against the limits of each instance and the tenant's quota, and a plan's own
//! `limits` still apply.

use serde_json::json;
use weft_core::{PlanLimits, Status};
use weft_node::{Builder, Config};

fn two_echoes(name: &str) -> serde_json::Value {
    json!({"plan_name": name, "graph_type": "acyclic",
    "events": {"start": {}, "a": {}, "b": {"kind": "output"}},
    "steps": {
        "one": {"on": ["start"], "action": "echo", "args": {"n": 1}, "emits": ["a"]},
        "two": {"on": ["a"], "action": "echo", "args": {"n": 2}, "emits": ["b"]}
    }})
}

#[tokio::test]
async fn a_configured_tenant_quota_counts_every_plans_calls() {
    let mut c = Config::default();
    c.budget.tenant = Some(PlanLimits {
        max_tool_calls: Some(3),
        ..PlanLimits::default()
    });
    let node = Builder::new(c).in_memory().expect("node");
    assert!(
        node.chain()
            .iter()
            .any(|(stage, link)| *stage == weft_tools::Stage::Budget
                && link.as_deref().is_some_and(|l| l.contains("[budget]"))),
        "{:?}",
        node.chain()
    );
    let engine = node.engine();
    let bare = engine.compile_value(two_echoes("bare")).expect("compiles");
    let o = engine
        .start_with("local", &bare, json!({}), Default::default())
        .wait()
        .await;
    assert_eq!(o.status, Status::Completed);
    // A plan with limits of its own is still under the tenant's quota: its second call is
    // the tenant's fourth.
    let mut own = two_echoes("own");
    own["limits"] = json!({"max_tool_calls": 10});
    let own = engine.compile_value(own).expect("compiles");
    let o = engine
        .start_with("local", &own, json!({}), Default::default())
        .wait()
        .await;
    match &o.status {
        Status::Failed { reason } => {
            assert!(reason.contains("quota of tenant `local`"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
    // Another tenant has a quota of its own.
    let o = engine
        .start_with("other", &bare, json!({}), Default::default())
        .wait()
        .await;
    assert_eq!(o.status, Status::Completed);
}

#[tokio::test]
async fn without_budgets_the_chain_has_no_budget_link() {
    let node = Builder::new(Config::default()).in_memory().expect("node");
    assert!(
        node.chain()
            .iter()
            .all(|(stage, link)| *stage != weft_tools::Stage::Budget || link.is_none()),
        "{:?}",
        node.chain()
    );
}
