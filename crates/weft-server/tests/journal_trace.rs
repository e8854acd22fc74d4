//! The timeline survives a restart: `GET /v1/instances/{id}/trace` of an instance that ran
//! before the server restarted (no engine in the new process kept its trace) is read from the
//! instance's journal, with the same steps, outcomes and attempts the live trace had.

mod common;

use axum::http::StatusCode;
use serde_json::{Value, json};

use common::{Srv, TOK_A, sqlite_at, two_tenants};

const A: Option<&str> = Some(TOK_A);

/// `(step, outcome, attempts)` of every firing, sorted (the order of concurrent firings may
/// differ between the live trace and the journal).
fn summary(trace: &Value) -> Vec<(String, String, u64)> {
    let mut v: Vec<_> = trace["steps"]
        .as_array()
        .expect("steps")
        .iter()
        .map(|s| {
            (
                s["step"].as_str().unwrap_or("").to_string(),
                s["outcome"].as_str().unwrap_or("").to_string(),
                s["attempts"].as_u64().unwrap_or(0),
            )
        })
        .collect();
    v.sort();
    v
}

async fn run(s: &Srv, plan: &str, input: Value, want: &str) -> String {
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan": plan, "input": input}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    s.wait_status(&id, A, want).await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_trace_of_an_instance_from_before_a_restart_comes_from_its_journal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weft.db");

    let s = sqlite_at(&path, two_tenants()).await;
    s.create_example("fanout.json", A).await;
    s.create_example("failure-handling.json", A).await;
    let fan = run(&s, "fanout", json!({"dataset": "d"}), "completed").await;
    let fail = run(
        &s,
        "failure-handling",
        json!({"order": "A-1", "email": "b@example.com"}),
        "completed",
    )
    .await;
    // A gated fan-out: its ten branches fire, then it waits for `approve` across the restart.
    let mut gated: Value =
        serde_json::from_str(include_str!("../../../examples/fanout.json")).expect("fanout");
    gated["plan_name"] = json!("fanout-gated");
    gated["events"]["approve"] = json!({"kind": "input"});
    gated["steps"]["merge"]["on"]
        .as_array_mut()
        .expect("on")
        .push(json!("approve"));
    let (st, v) = s.post("/v1/plans", A, &gated).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let waiting = run(&s, "fanout-gated", json!({"dataset": "w"}), "waiting").await;
    let (st, live_fan) = s.get(&format!("/v1/instances/{fan}/trace"), A).await;
    assert_eq!(st, StatusCode::OK, "{live_fan}");
    let (_, live_fail) = s.get(&format!("/v1/instances/{fail}/trace"), A).await;
    assert_eq!(live_fan["steps"].as_array().map(Vec::len), Some(11));
    s.state.durable().shutdown().await.expect("shutdown");
    drop(s);

    // A new process over the same store.
    let s = sqlite_at(&path, two_tenants()).await;
    let (st, fan_t) = s.get(&format!("/v1/instances/{fan}/trace"), A).await;
    assert_eq!(st, StatusCode::OK, "{fan_t}");
    assert_eq!(fan_t["recorded"], true, "{fan_t}");
    assert_eq!(summary(&fan_t), summary(&live_fan), "{fan_t}");
    for s in fan_t["steps"].as_array().unwrap() {
        let (a, b) = (s["started_ms"].as_i64(), s["finished_ms"].as_i64());
        assert!(a.is_some() && b >= a, "times of {s}");
        assert!(s["seq"].is_u64(), "{s}");
    }
    // The failed step: its error (code and message) and its three attempts.
    let (_, fail_t) = s.get(&format!("/v1/instances/{fail}/trace"), A).await;
    assert_eq!(summary(&fail_t), summary(&live_fail), "{fail_t}");
    let charge = fail_t["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == "charge")
        .expect("charge fired");
    assert_eq!(charge["outcome"], "error", "{charge}");
    assert_eq!(charge["attempts"], 3, "{charge}");
    assert!(
        charge["error"]
            .as_str()
            .unwrap_or("")
            .contains("card declined"),
        "{charge}"
    );

    // Recovered and continued in the new process: the timeline has the ten branches fired
    // before the restart and the join fired after it.
    let (st, v) = s
        .post(
            "/v1/events",
            A,
            &common::cloud_event("approve", 1, Some(&waiting)),
        )
        .await;
    assert!(st.is_success(), "{st} {v}");
    s.wait_status(&waiting, A, "completed").await;
    let (_, w) = s.get(&format!("/v1/instances/{waiting}/trace"), A).await;
    let steps: Vec<_> = summary(&w).into_iter().map(|(s, o, _)| (s, o)).collect();
    assert_eq!(steps.len(), 11, "{w}");
    assert!(steps.iter().all(|(_, o)| o == "ok"), "{w}");
    assert!(steps.iter().any(|(s, _)| s == "merge"), "{w}");
    assert!(steps.iter().any(|(s, _)| s == "check_shard_0"), "{w}");
}
