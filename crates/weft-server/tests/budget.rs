//! A plan's budget over the API: a plan some run of which would pass its `limits` is refused
//! before it runs (A010); a reactive plan, which has no static bound, is stopped at run time:
//! the call over the limit is refused and the instance fails, its state shows what it used
//! against the limits, and `/metrics` counts the use and the refusal. The operator's
//! `[budget]` with `on_exceeded = "pause"`: the instance is paused over a budget, resumed
//! over the API it pauses again while still over, and a restart keeps it paused.
//! `GET /v1/quotas` shows a tenant's quotas and what was used of them, and no other tenant's;
//! without quotas it answers with none.

#![allow(clippy::unwrap_used)]

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::{TOK_A, TOK_B, cloud_event, on_node, req, sqlite, ticker, two_tenants};
use serde_json::json;

const A: Option<&str> = Some(TOK_A);

/// Plan `two`: two `echo` calls, one after the other.
fn two_echoes() -> serde_json::Value {
    json!({"plan_name": "two", "graph_type": "acyclic",
        "events": {"start": {}, "a": {}, "done": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "echo", "emits": ["a"]},
            "two": {"on": ["a"], "action": "echo", "emits": ["done"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_refuse_a_plan_before_it_runs_and_stop_an_instance_while_it_runs() {
    let s = sqlite(two_tenants()).await;
    let chain = json!({"plan_name": "tight", "graph_type": "acyclic",
        "limits": {"max_tool_calls": 2},
        "events": {"start": {}, "a": {}, "b": {}, "done": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "echo", "emits": ["a"]},
            "two": {"on": ["a"], "action": "echo", "emits": ["b"]},
            "three": {"on": ["b"], "action": "echo", "emits": ["done"]}}});
    let (st, v) = s.post("/v1/plans", A, &chain).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v.to_string().contains("A010"), "{v}");

    let mut plan = ticker();
    plan["limits"] = json!({"max_tool_calls": 2});
    let (st, v) = s.post("/v1/plans", A, &plan).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s.post("/v1/instances", A, &json!({"plan": "ticker"})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    for n in 1..=3 {
        let (st, _, _) = s
            .call(
                req("POST", "/v1/events", A)
                    .header("content-type", "application/cloudevents+json")
                    .body(Body::from(cloud_event("tick", n, Some(&id)).to_string()))
                    .unwrap(),
            )
            .await;
        assert_eq!(st, StatusCode::ACCEPTED);
    }
    let failed = s.wait_status(&id, A, "failed").await;
    assert!(failed.to_string().contains("budget_exceeded"), "{failed}");
    assert_eq!(failed["usage"]["tool_calls"], 2, "{failed}");
    assert_eq!(failed["usage"]["limits"]["max_tool_calls"], 2, "{failed}");

    // Counted when the instance ends (its tracker runs right after the status is stored).
    let mut text = String::new();
    for _ in 0..100 {
        let (_, metrics) = s.get("/metrics", None).await;
        text = metrics.as_str().unwrap_or_default().to_string();
        if text
            .lines()
            .any(|l| l.contains("budget_exceeded_instances") && l.ends_with(" 1"))
        {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(
        text.lines()
            .any(|l| l.contains("budget_exceeded_instances") && l.ends_with(" 1")),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l.contains("budget_used") && l.contains("tool_calls") && l.ends_with(" 2")),
        "{text}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_over_the_operators_budget_pauses_its_instance_across_resume_and_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let mut node = weft_node::Config::default();
    node.budget.instance = Some(weft_core::PlanLimits {
        max_tool_calls: Some(1),
        ..Default::default()
    });
    node.budget.on_exceeded = weft_node::config::OnExceeded::Pause;
    let open = || async {
        let store: std::sync::Arc<dyn weft_store::Store> =
            weft_store_sqlite::open(path.to_str().unwrap())
                .await
                .unwrap();
        on_node(node.clone(), store, two_tenants()).await
    };
    let s = open().await;
    let two = two_echoes();
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": two}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let paused = s.wait_status(&id, A, "paused").await;
    assert!(
        paused["reason"]
            .as_str()
            .is_some_and(|r| r.contains("the budget of every instance")),
        "{paused}"
    );
    assert_eq!(paused["usage"]["tool_calls"], 1, "{paused}");

    // Resumed while still over: the call is charged again and the instance pauses again.
    let (st, v) = s
        .post(&format!("/v1/instances/{id}/resume"), A, &json!({}))
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let again = s.wait_status(&id, A, "paused").await;
    assert_eq!(again["usage"]["tool_calls"], 1, "{again}");

    // A new process over the same store: the instance is still paused, not failed or run.
    drop(s);
    let s = open().await;
    let after = s.wait_status(&id, A, "paused").await;
    assert_eq!(after["usage"]["tool_calls"], 1, "{after}");
    let (st, v) = s
        .post(&format!("/v1/instances/{id}/stop"), A, &json!({}))
        .await;
    assert_eq!(
        (st, v["status"].as_str()),
        (StatusCode::OK, Some("stopped")),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quotas_route_shows_what_the_tenant_used_of_each_quota() {
    let dir = tempfile::tempdir().unwrap();
    let mut node = weft_node::Config::default();
    let calls = |n| weft_core::PlanLimits {
        max_tool_calls: Some(n),
        ..Default::default()
    };
    node.budget.tenant = Some(calls(100));
    node.budget.plan = Some(calls(50));
    node.budget.planner = Some(weft_node::config::PlannerBudget {
        max_llm_calls: Some(9),
        ..Default::default()
    });
    let store: std::sync::Arc<dyn weft_store::Store> =
        weft_store_sqlite::open(dir.path().join("weft.db").to_str().unwrap())
            .await
            .unwrap();
    let s = on_node(node, store, two_tenants()).await;
    let two = two_echoes();
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": two}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    s.wait_status(v["id"].as_str().unwrap(), A, "completed")
        .await;

    let (st, q) = s.get("/v1/quotas", A).await;
    assert_eq!(st, StatusCode::OK, "{q}");
    assert_eq!(q["shared"], true, "{q}");
    assert_eq!(q["tenant"]["limits"]["max_tool_calls"], 100, "{q}");
    assert_eq!(q["tenant"]["used"]["tool_calls"], 2, "{q}");
    assert_eq!(q["plans"]["two"]["used"]["tool_calls"], 2, "{q}");
    assert_eq!(q["plans"]["two"]["limits"]["max_tool_calls"], 50, "{q}");
    assert_eq!(q["plan_limits"]["max_tool_calls"], 50, "{q}");
    assert_eq!(q["planner"]["limits"]["max_llm_calls"], 9, "{q}");
    assert_eq!(q["planner"]["used"]["llm_calls"], 0, "{q}");
    assert!(
        q["period_ends_ms"].as_i64().unwrap() > weft_store::now_ms(),
        "{q}"
    );
    // Another tenant sees its own counts only.
    let (st, b) = s.get("/v1/quotas", Some(TOK_B)).await;
    assert_eq!(st, StatusCode::OK, "{b}");
    assert_eq!(b["tenant"]["used"]["tool_calls"], 0, "{b}");
    assert_eq!(b["plans"], json!({}), "{b}");
    // No plan of its counted yet, but the per-plan quota is there to be used.
    assert_eq!(b["plan_limits"]["max_tool_calls"], 50, "{b}");
    // And without a token, nothing.
    let (st, _) = s.get("/v1/quotas", None).await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

/// Without `[budget]` quotas the route answers, with nothing in it: what the UI shows as "no
/// quotas configured".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quotas_route_without_quotas_is_empty() {
    let s = sqlite(two_tenants()).await;
    let (st, q) = s.get("/v1/quotas", A).await;
    assert_eq!(st, StatusCode::OK, "{q}");
    assert_eq!(q["tenant"], json!(null), "{q}");
    assert_eq!(q["plans"], json!({}), "{q}");
    assert_eq!(q["plan_limits"], json!(null), "{q}");
    assert_eq!(q["planner"], json!(null), "{q}");
}

/// Two servers on one PostgreSQL schema count a tenant quota together: the second opens
/// after the first added its two calls to the store, so its own second call is the fourth of
/// three and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn two_servers_on_postgres_share_a_tenant_quota() {
    let url = std::env::var("WEFT_TEST_POSTGRES_URL").unwrap();
    let schema = format!(
        "weft_server_quota_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
            % 1_000_000_000_000
    );
    let mut node = weft_node::Config::default();
    node.budget.tenant = Some(weft_core::PlanLimits {
        max_tool_calls: Some(3),
        ..Default::default()
    });
    node.budget.period_secs = 1 << 40;
    let open = || async {
        let store: std::sync::Arc<dyn weft_store::Store> = std::sync::Arc::new(
            weft_store_postgres::PgStore::open_in_schema(&url, Some(&schema))
                .await
                .unwrap(),
        );
        on_node(node.clone(), store, two_tenants()).await
    };
    let two = json!({"plan_inline": two_echoes()});
    let first = open().await;
    let (st, v) = first.post("/v1/instances", A, &two).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    first
        .wait_status(v["id"].as_str().unwrap(), A, "completed")
        .await;
    // Reading the quotas adds this server's count to the store.
    let (_, q) = first.get("/v1/quotas", A).await;
    assert_eq!(q["tenant"]["used"]["tool_calls"], 2, "{q}");

    let second = open().await;
    let (st, v) = second.post("/v1/instances", A, &two).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let failed = second
        .wait_status(v["id"].as_str().unwrap(), A, "failed")
        .await;
    assert!(
        failed.to_string().contains("quota of tenant `tenant-a`"),
        "{failed}"
    );
    // The refused call is not counted; each server reads the other's count.
    let (_, q) = second.get("/v1/quotas", A).await;
    assert_eq!(q["tenant"]["used"]["tool_calls"], 3, "{q}");
    let (_, q) = first.get("/v1/quotas", A).await;
    assert_eq!(q["tenant"]["used"]["tool_calls"], 3, "{q}");
}
