//! `[budget]` in the configuration: the node counts every call of every plan at the chain's
//! budget stage, against the limits of each instance and the tenant's quota, and a plan's own
//! `limits` still apply; durable nodes count the quotas in the store, together and across
//! restarts.

// Test support: a failing step must panic the test.
#![allow(clippy::unwrap_used)]

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

/// Asserts that `status` is a failure whose reason says `why`.
fn failed_with(status: &Status, why: &str) {
    match status {
        Status::Failed { reason } => assert!(reason.contains(why), "{reason}"),
        other => panic!("{other:?}"),
    }
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
        .expect("the plan takes any input")
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
        .expect("the plan takes any input")
        .wait()
        .await;
    failed_with(&o.status, "quota of tenant `local`");
    // Another tenant has a quota of its own.
    let o = engine
        .start_with("other", &bare, json!({}), Default::default())
        .expect("the plan takes any input")
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

/// A fresh directory for one test's store.
fn store_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("weft-node-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A durable node on `store` under a tenant quota of five calls, as `owner`. (The nodes of a
/// test share one opened store: the test is about the counters; weft-server's PostgreSQL
/// test runs two servers on one database.)
async fn quota_node(store: &std::sync::Arc<dyn weft_store::Store>, owner: &str) -> weft_node::Node {
    let mut c = Config::default();
    c.store.owner = Some(owner.to_string());
    c.budget.tenant = Some(PlanLimits {
        max_tool_calls: Some(5),
        ..PlanLimits::default()
    });
    // One period for the whole test (a day's would end at midnight), and no sync but the
    // test's own.
    c.budget.period_secs = 1 << 40;
    c.budget.sync_ms = 3_600_000;
    let node = Builder::new(c)
        .open_on(std::sync::Arc::clone(store))
        .await
        .expect("node");
    node.durable()
        .unwrap()
        .register("local", two_echoes("p"))
        .await
        .unwrap();
    node
}

async fn run_p(node: &weft_node::Node) -> Status {
    let d = node.durable().unwrap();
    let h = d.start("local", "p", json!({})).unwrap();
    tokio::time::timeout(std::time::Duration::from_secs(20), d.wait(&h))
        .await
        .expect("the instance settles")
        .unwrap()
        .status
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_quota_is_counted_through_the_store_by_every_process_and_after_a_restart() {
    let dir = store_dir("shared-quota");
    let store: std::sync::Arc<dyn weft_store::Store> = std::sync::Arc::new(
        weft_store_sqlite::SqliteStore::open(&dir.join("weft.db"))
            .await
            .unwrap(),
    );
    let a = quota_node(&store, "a").await;
    assert_eq!(run_p(&a).await, Status::Completed);
    a.sync_counts().await.unwrap();
    // A second process starts from the store's two calls.
    let b = quota_node(&store, "b").await;
    assert_eq!(run_p(&b).await, Status::Completed);
    b.sync_counts().await.unwrap();
    a.sync_counts().await.unwrap();
    // Four calls between them: the first process's next instance makes the fifth and is
    // refused the sixth.
    failed_with(&run_p(&a).await, "quota of tenant `local`");
    a.sync_counts().await.unwrap();
    drop((a, b));
    // A node opened afterwards goes on from the store's five calls.
    let c = quota_node(&store, "c").await;
    failed_with(&run_p(&c).await, "to 6 against");
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_planner_quota_of_a_one_shot_run_is_counted_in_the_store() {
    let dir = store_dir("planner-quota");
    let store: std::sync::Arc<dyn weft_store::Store> = std::sync::Arc::new(
        weft_store_sqlite::SqliteStore::open(&dir.join("weft.db"))
            .await
            .unwrap(),
    );
    let mut c = Config::default();
    c.budget.period_secs = 1 << 40;
    c.budget.planner = Some(weft_node::config::PlannerBudget {
        max_llm_calls: Some(2),
        ..Default::default()
    });
    let local = weft_llm::Correlation::new("local");
    let open = || weft_node::llm::PlannerQuota::open(&c.budget, Some(store.clone()));
    let first = open().await.unwrap().expect("a ledger");
    let r = first.budget().reserve(&local, 100).unwrap();
    first.budget().settle(r, 7);
    first.sync().await.unwrap();
    // The next run starts from the store's count: one call and 7 tokens.
    let next = open().await.unwrap().expect("a ledger");
    let spent = next.budget().spent_by_tenant("local");
    assert_eq!((spent.calls, spent.tokens), (1, 7));
    let r = next.budget().reserve(&local, 100).unwrap();
    next.budget().settle(r, 3);
    let e = next.budget().reserve(&local, 100).unwrap_err().to_string();
    assert!(e.contains("2 of 2 calls"), "{e}");
    // Another tenant counts apart.
    assert!(
        next.budget()
            .reserve(&weft_llm::Correlation::new("other"), 1)
            .is_ok()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
