//! The router over PostgreSQL (`WEFT_TEST_POSTGRES_URL`, one schema per test; ignored unless
//! the variable was set at build time): plans, a run to completion with trace and journal,
//! events routed durably, tenant isolation.

mod common;

use axum::http::StatusCode;
use common::*;
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn postgres_plans_instances_events_and_tenants() {
    let s = postgres(two_tenants(), "pg_subset").await;
    let created = s.create_example("fanout.json", Some(TOK_A)).await;
    assert_eq!(created["version"], 1);
    let (st, v) = s
        .post(
            "/v1/instances",
            Some(TOK_A),
            &json!({"plan": "fanout", "input": {"dataset": "pg"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let state = s.wait_status(&id, Some(TOK_A), "completed").await;
    assert_eq!(state["fired"], 11);
    let (_, t) = s
        .get(&format!("/v1/instances/{id}/trace"), Some(TOK_A))
        .await;
    assert_eq!(t["steps"].as_array().map(Vec::len), Some(11));
    let (_, j) = s
        .get(&format!("/v1/instances/{id}/journal"), Some(TOK_A))
        .await;
    assert_eq!(j["records"][0]["kind"], "instance.started");

    let (_, v) = s
        .post(
            "/v1/instances",
            Some(TOK_A),
            &json!({"plan_inline": ticker()}),
        )
        .await;
    let live = v["id"].as_str().unwrap().to_string();
    let batch: Vec<_> = (0..20).map(|n| cloud_event("tick", n, None)).collect();
    let (st, v, _) = s
        .call(
            req("POST", "/v1/events", Some(TOK_A))
                .header("content-type", "application/cloudevents-batch+json")
                .body(axum::body::Body::from(
                    serde_json::Value::Array(batch).to_string(),
                ))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 20, "routed": 20, "duplicates": 0})
        )
    );
    let (_, j) = s
        .get(
            &format!("/v1/instances/{live}/journal?limit=1000"),
            Some(TOK_A),
        )
        .await;
    let tokens = j["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "token.added")
        .count();
    assert_eq!(tokens, 20);

    assert_eq!(
        s.get("/v1/plans", Some(TOK_B)).await.1,
        json!({"plans": []})
    );
    assert_eq!(
        s.get(&format!("/v1/instances/{id}"), Some(TOK_B)).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        s.get(&format!("/v1/instances/{live}/journal"), Some(TOK_B))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(s.get("/readyz", None).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn postgres_deduplicates_events_across_a_restart() {
    let url = std::env::var("WEFT_TEST_POSTGRES_URL").expect("WEFT_TEST_POSTGRES_URL");
    let schema = format!(
        "weft_server_dedup_{}",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000_000_000)
            .unwrap_or_default()
    );
    let s = postgres_in(two_tenants(), &url, &schema).await;
    let (st, v) = s
        .post(
            "/v1/instances",
            Some(TOK_A),
            &json!({"plan_inline": ticker()}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let ev = json!({"specversion": "1.0", "id": "pg-1", "source": "/pg", "type": "tick",
        "data": {"n": 1}, "weftinstance": id});
    let (_, v) = s.post("/v1/events", Some(TOK_A), &ev).await;
    assert_eq!(v, json!({"accepted": 1, "routed": 1, "duplicates": 0}));
    let (_, v) = s.post("/v1/events", Some(TOK_A), &ev).await;
    assert_eq!(v, json!({"accepted": 1, "routed": 0, "duplicates": 1}));
    s.state.durable().shutdown().await.expect("shutdown");
    drop(s);
    let s = postgres_in(two_tenants(), &url, &schema).await;
    let (_, v) = s.post("/v1/events", Some(TOK_A), &ev).await;
    assert_eq!(v, json!({"accepted": 1, "routed": 0, "duplicates": 1}));
    let (_, j) = s
        .get(
            &format!("/v1/instances/{id}/journal?limit=1000"),
            Some(TOK_A),
        )
        .await;
    let tokens = j["records"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "token.added")
        .count();
    assert_eq!(tokens, 1, "{j}");
}
