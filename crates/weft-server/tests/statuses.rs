//! Honest statuses through the HTTP API (issue #28): an instance that waits for a declared
//! input event is `waiting` with the event named (instance JSON and the list filter), then
//! `completed` once the event arrives; a real deadlock is `stuck`.

mod common;

use std::time::Duration;

use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

const A: Option<&str> = Some(TOK_A);

/// Polls the list filter until it holds `id` (the record follows the live status).
async fn listed(s: &Srv, status: &str, id: &str) -> bool {
    for _ in 0..500 {
        let (st, v) = s.get(&format!("/v1/instances?status={status}"), A).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        let ids: Vec<&str> = v["instances"]
            .as_array()
            .map(|a| a.iter().filter_map(|i| i["id"].as_str()).collect())
            .unwrap_or_default();
        if ids.contains(&id) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

fn approval_plan() -> Value {
    json!({"plan_name": "approval", "graph_type": "acyclic",
        "events": {"start": {}, "approval": {"kind": "input"}, "done": {"kind": "output"}},
        "steps": {"go": {"on": ["start", "approval"], "action": "echo", "args": {},
            "emits": ["done"]}}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_instance_names_its_event_then_completes() {
    let s = sqlite(two_tenants()).await;
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": approval_plan()}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let v = s.wait_status(&id, A, "waiting").await;
    assert_eq!(v["awaits"]["events"], json!(["approval"]), "{v}");
    assert_eq!(v["waiting"][0]["lacks"], json!(["approval"]), "{v}");
    assert!(listed(&s, "waiting", &id).await, "listed as waiting");

    let (st, v) = s
        .post("/v1/events", A, &cloud_event("approval", 1, Some(&id)))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let v = s.wait_status(&id, A, "completed").await;
    assert_eq!(v["awaits"], Value::Null, "{v}");
    assert!(listed(&s, "completed", &id).await, "listed as completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadlock_is_stuck() {
    let s = sqlite(two_tenants()).await;
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(format!(
            "{}/../../examples/broken/deadlock.json",
            env!("CARGO_MANIFEST_DIR")
        ))
        .expect("example"),
    )
    .expect("json");
    let (st, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan_inline": doc, "input": {"amount": 500}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let v = s.wait_status(&id, A, "stuck").await;
    assert_eq!(v["awaits"], Value::Null, "{v}");
    assert!(listed(&s, "stuck", &id).await, "listed as stuck");
}
