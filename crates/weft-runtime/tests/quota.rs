//! The operator's budgets (`weft_runtime::quota`): limits for instances whose plans set none,
//! quotas shared by a tenant's instances within a period, and a call over a budget that
//! pauses its instance instead of failing it, charged again once the instance is resumed.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::{harness_with, spec};
use serde_json::{Value, json};
use weft_builtins::builtin::FnTool;
use weft_core::{Effect, PlanLimits, Status};
use weft_runtime::quota::{OnExceeded, QuotaConfig, Quotas};
use weft_runtime::{Delivery, Filter};
use weft_tools::{BudgetLink, Stage, ToolContext};

/// A chain of `steps` steps calling `t.count`, with the plan's own `limits` if any.
fn chain(name: &str, steps: usize, limits: Option<Value>) -> Value {
    let mut events = serde_json::Map::new();
    let mut st = serde_json::Map::new();
    for i in 0..steps {
        events.insert(format!("e{i}"), json!({}));
        st.insert(
            format!("s{i}"),
            json!({"on": [format!("e{i}")], "action": "t.count", "emits": [format!("e{}", i + 1)]}),
        );
    }
    events.insert(format!("e{steps}"), json!({"kind": "output"}));
    let mut p = json!({"plan_name": name, "graph_type": "acyclic", "initial": ["e0"],
        "events": events, "steps": st});
    if let Some(l) = limits {
        p["limits"] = l;
    }
    p
}

fn calls(n: u64) -> PlanLimits {
    PlanLimits {
        max_tool_calls: Some(n),
        ..PlanLimits::default()
    }
}

/// An engine with `quotas` counted at the budget stage, and how often `t.count` ran.
fn harness(quotas: QuotaConfig) -> (common::Harness, Arc<AtomicUsize>) {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&ran);
    let h = harness_with(move |o| {
        let mut reg = common::registry();
        reg.register(Arc::new(FnTool::new(
            spec("t.count", Effect::Read),
            move |_: &ToolContext, _: Value| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(json!({}))
            },
        )));
        o.registry = Arc::new(reg);
        o.chain.set(
            Stage::Budget,
            Arc::new(BudgetLink {
                pausing: quotas.on_exceeded == OnExceeded::Pause,
                what: "test budgets",
            }),
        );
        o.quotas = Some(Arc::new(Quotas::new(quotas)));
    });
    (h, ran)
}

fn failed_reason(s: &Status) -> &str {
    match s {
        Status::Failed { reason } => reason,
        other => panic!("not failed: {other:?}"),
    }
}

#[tokio::test]
async fn a_tenant_quota_is_shared_by_its_instances_and_other_tenants_count_apart() {
    let (h, ran) = harness(QuotaConfig {
        tenant: Some(calls(3)),
        period_ms: 60_000,
        ..QuotaConfig::default()
    });
    let p = h.plan(chain("two", 2, None));
    let mut events = h.engine.subscribe(Filter::default());
    let first = h
        .engine
        .start("t", &p, json!({}))
        .expect("starts")
        .wait()
        .await;
    assert_eq!(first.status, Status::Completed);
    // The second instance's first call is the tenant's third; its second is refused.
    let second = h
        .engine
        .start("t", &p, json!({}))
        .expect("starts")
        .wait()
        .await;
    let reason = failed_reason(&second.status);
    assert!(reason.contains("quota of tenant `t`"), "{reason}");
    assert_eq!(ran.load(Ordering::SeqCst), 3);
    let other = h
        .engine
        .start("u", &p, json!({}))
        .expect("starts")
        .wait()
        .await;
    assert_eq!(other.status, Status::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 5);
    let mut exceeded = None;
    while let Ok(Some(d)) = tokio::time::timeout(Duration::from_millis(200), events.recv()).await {
        if let Delivery::Event(e) = d
            && e.ty == "dev.weft.budget.exceeded"
        {
            exceeded = Some(e.data.clone());
        }
    }
    let e = exceeded.expect("budget.exceeded published");
    assert_eq!(
        (&e["scope"], &e["limit"], &e["max"]),
        (&json!("tenant"), &json!("max_tool_calls"), &json!("3"))
    );
}

#[tokio::test]
async fn instance_limits_apply_to_plans_without_their_own() {
    let (h, ran) = harness(QuotaConfig {
        instance: Some(calls(1)),
        period_ms: 60_000,
        ..QuotaConfig::default()
    });
    let bare = h.plan(chain("bare", 2, None));
    let o = h
        .engine
        .start("t", &bare, json!({}))
        .expect("starts")
        .wait()
        .await;
    let reason = failed_reason(&o.status);
    assert!(reason.contains("the budget of every instance"), "{reason}");
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // A plan's own limits take the place of the operator's.
    let own = h.plan(chain("own", 2, Some(json!({"max_tool_calls": 5}))));
    let i = h.engine.start("t", &own, json!({})).expect("starts");
    assert_eq!(i.wait().await.status, Status::Completed);
    assert_eq!(i.state().usage.map(|u| u.tool_calls), Some(2));
}

/// Waits (on the manual clock's engine) until `f` holds of the instance's status.
async fn until(h: &weft_runtime::InstanceHandle, f: impl Fn(&Status) -> bool) -> Status {
    for _ in 0..200 {
        let s = h.state().status;
        if f(&s) {
            return s;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("status never reached: {:?}", h.state().status)
}

#[tokio::test]
async fn a_call_over_a_quota_pauses_its_instance_and_runs_once_resumed_in_a_new_period() {
    let (h, ran) = harness(QuotaConfig {
        tenant: Some(calls(1)),
        period_ms: 1_000,
        on_exceeded: OnExceeded::Pause,
        ..QuotaConfig::default()
    });
    let p = h.plan(chain("two", 2, None));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let paused = until(&i, |s| matches!(s, Status::Paused { .. })).await;
    let Status::Paused { reason } = &paused else {
        unreachable!()
    };
    assert!(
        reason.contains("quota of tenant `t`") && reason.contains("resume"),
        "{reason}"
    );
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // Resumed in the same period: charged again, refused again, paused again.
    h.engine.resume(i.id()).expect("resumes");
    until(&i, |s| matches!(s, Status::Paused { .. })).await;
    assert_eq!(ran.load(Ordering::SeqCst), 1);
    // A new period: the waiting call runs once, and the instance completes.
    h.advance(1_000).await;
    h.engine.resume(i.id()).expect("resumes");
    assert_eq!(i.wait().await.status, Status::Completed);
    assert_eq!(ran.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn stopping_an_instance_paused_over_a_budget_ends_its_waiting_call() {
    let (h, ran) = harness(QuotaConfig {
        instance: Some(calls(1)),
        period_ms: 1_000,
        on_exceeded: OnExceeded::Pause,
        ..QuotaConfig::default()
    });
    let p = h.plan(chain("two", 2, None));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    until(&i, |s| matches!(s, Status::Paused { .. })).await;
    h.engine.stop(i.id()).expect("stops");
    assert_eq!(i.wait().await.status, Status::Stopped);
    assert_eq!(ran.load(Ordering::SeqCst), 1);
}
