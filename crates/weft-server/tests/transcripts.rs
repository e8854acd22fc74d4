//! The model exchanges an instance's steps make are kept in the store's transcripts and read
//! back over the API (`GET /v1/instances/{id}/transcripts`), scoped by tenant: another
//! tenant gets 404, an instance without model calls an empty list.

#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use common::{Srv, TOK_A, TOK_B, two_tenants};
use serde_json::{Value, json};
use weft_llm::{ScriptedExchange, ScriptedProvider};
use weft_server::AppState;

const A: Option<&str> = Some(TOK_A);
const B: Option<&str> = Some(TOK_B);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instances_model_exchanges_are_readable() {
    let dir = tempfile::tempdir().unwrap();
    let store: Arc<dyn weft_store::Store> =
        weft_store_sqlite::open(dir.path().join("weft.db").to_str().unwrap())
            .await
            .unwrap();
    let script = vec![ScriptedExchange::content("a haiku about nets").with_usage(12, 5)];
    let builder = weft_node::Builder::new(weft_node::Config::default())
        .llm(Some(Arc::new(ScriptedProvider::new(script))));
    let (state, _) = AppState::open(builder, Some(store), two_tenants())
        .await
        .unwrap();
    let s = Srv::from_state(state);
    let plan = json!({"plan_name": "poem", "graph_type": "acyclic",
        "events": {"start": {}, "done": {"kind": "output"}},
        "steps": {"write": {"on": ["start"], "action": "llm.complete",
            "args": {"prompt": "Write a haiku about Petri nets."}, "emits": ["done"]}}});
    let (st, v) = s.post("/v1/plans", A, &plan).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s.post("/v1/instances", A, &json!({"plan": "poem"})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    s.wait_status(&id, A, "completed").await;

    // Written in the background: poll briefly.
    let mut got = Value::Null;
    for _ in 0..250 {
        let (st, v) = s.get(&format!("/v1/instances/{id}/transcripts"), A).await;
        assert_eq!(st, StatusCode::OK, "{v}");
        if v["exchanges"].as_array().is_some_and(|e| !e.is_empty()) {
            got = v;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let ex = &got["exchanges"][0];
    assert_eq!(ex["purpose"], "complete", "{got}");
    assert_eq!(ex["correlation"]["instance"], id.as_str());
    assert!(
        ex["request"]
            .to_string()
            .contains("Write a haiku about Petri nets."),
        "{ex}"
    );
    assert_eq!(
        got["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 5})
    );

    // Another tenant does not see the instance at all.
    let (st, _) = s.get(&format!("/v1/instances/{id}/transcripts"), B).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = s.get("/v1/instances/nope/transcripts", A).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
}
