//! Seed 004 end to end: the seed's sample `POST /plan/react` request, unchanged, completes
//! on a server whose configuration declares the tool it names (`extract_facts`), with a
//! scripted model standing in for the LLM. The tool runs through the node's registry and
//! chain (its call is counted by the server's metrics), and its result reaches the trace.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;
use weft_llm::{ScriptedExchange, ScriptedProvider};
use weft_server::{AppState, ServerConfig};

/// The seed's sample request (seed 004 §7), byte for byte (weft-llm's seed fixture).
const SEED_REQUEST: &str = include_str!("../../weft-llm/tests/fixtures/seed004-request.json");

fn step(v: Value) -> ScriptedExchange {
    ScriptedExchange::content(v.to_string()).with_usage(40, 10)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_request_completes_with_a_declared_extract_facts() {
    let facts = json!({"facts": [["Alice", "lives_in", "Paris"], ["Alice", "works_at", "Acme Corp"],
        ["Bob", "manages", "Alice"]]});
    let mut config = weft_node::Config::default();
    config.tools.declared = vec![
        serde_json::from_value(json!({
            "name": "extract_facts", "effect": "read", "idempotent": true,
            "description": "Extract structured subject/predicate/object facts from a span of text.",
            "input_schema": {"type": "object", "required": ["text"],
                             "properties": {"text": {"type": "string"}}},
            "output_schema": {"type": "object", "required": ["facts"]},
            "source": {"kind": "fixed", "result": facts}
        }))
        .unwrap(),
    ];
    let script = vec![
        step(json!({"thought": "Extract the facts first.", "finish": false,
            "action": {"tool_id": "extract_facts",
                       "input": {"text": "Alice lives in Paris, works at Acme Corp, and her manager is Bob."}},
            "final_answer": null})),
        step(json!({"thought": "Summarize.", "finish": true, "action": null,
            "final_answer": {"content": "- Alice lives in Paris\n- Alice works at Acme Corp\n- Bob is her manager",
                             "structured": {}}}))
        .when_last("Observation for step 0"),
    ];
    let dir = std::env::temp_dir().join(format!("weft-server-react-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = weft_store_sqlite::open(&dir.join("weft.db").display().to_string())
        .await
        .unwrap();
    let builder =
        weft_node::Builder::new(config).llm(Some(Arc::new(ScriptedProvider::new(script))));
    let (state, _) = AppState::open(builder, Some(store), ServerConfig::default())
        .await
        .unwrap();
    let app = weft_server::app(state);
    let res = app
        .clone()
        .oneshot(
            Request::post("/plan/react")
                .header("content-type", "application/json")
                .body(Body::from(SEED_REQUEST))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::OK, "{v}");
    assert!(
        v["final_answer"]["content"]
            .as_str()
            .unwrap()
            .contains("Bob is her manager"),
        "{v}"
    );
    let trace = v["trace"].as_array().unwrap();
    assert_eq!(trace.len(), 2, "{v}");
    assert_eq!(trace[0]["action"]["tool_id"], "extract_facts");
    assert!(
        trace[0]["observation"].to_string().contains("Acme Corp"),
        "the declared tool's result is the observation: {v}"
    );
    assert_eq!(v["usage"]["tool_calls"], 1);
    assert_eq!(v["usage"]["stop_reason"], "finish");
    assert!(v.get("error").is_none(), "{v}");
    // The tool's call went through the node's chain: the metrics stage counted it.
    let res = app
        .oneshot(Request::get("/metrics").body(Body::empty()).unwrap())
        .await
        .unwrap();
    let text = String::from_utf8(
        axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .unwrap()
            .to_vec(),
    )
    .unwrap();
    let fired = text
        .lines()
        .find(|l| l.starts_with("weft_steps_fired_total"))
        .unwrap_or_default()
        .to_string();
    assert!(fired.ends_with(" 1"), "{fired}\n{text}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// A tool that records the tenant of the calls it serves.
struct Probe(weft_tools::ToolSpec, Arc<std::sync::Mutex<Vec<String>>>);

impl weft_tools::Tool for Probe {
    fn spec(&self) -> &weft_tools::ToolSpec {
        &self.0
    }
    fn call(
        &self,
        ctx: weft_tools::ToolContext,
        args: Value,
    ) -> weft_tools::BoxFuture<'static, Result<Value, weft_tools::ToolError>> {
        self.1.lock().unwrap().push(ctx.tenant.to_string());
        Box::pin(async move { Ok(args) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_loop_calls_tools_as_the_callers_tenant() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let spec: weft_tools::ToolSpec = serde_json::from_value(
        json!({"name": "probe", "description": "records its caller", "effect": "read"}),
    )
    .unwrap();
    let script = vec![
        step(json!({"thought": "ask", "finish": false,
            "action": {"tool_id": "probe", "input": {"q": 1}}, "final_answer": null})),
        step(json!({"thought": "done", "finish": true, "action": null,
            "final_answer": {"content": "ok"}})),
    ];
    let dir = std::env::temp_dir().join(format!("weft-server-react-t-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let store = weft_store_sqlite::open(&dir.join("weft.db").display().to_string())
        .await
        .unwrap();
    let builder = weft_node::Builder::new(weft_node::Config::default())
        .llm(Some(Arc::new(ScriptedProvider::new(script))))
        .tool(Arc::new(Probe(spec, Arc::clone(&seen))));
    let config = ServerConfig {
        tokens: [("tok-a".to_string(), "tenant-a".to_string())].into(),
        ..ServerConfig::default()
    };
    let (state, _) = AppState::open(builder, Some(store), config).await.unwrap();
    let req = json!({"caller": "t", "goal": {"type": "analysis", "description": "ask"},
        "context": {}, "toolset": [{"tool_id": "probe"}], "limits": {"max_steps": 3},
        "preferences": {"return_trace": true}});
    let res = weft_server::app(state)
        .oneshot(
            Request::post("/plan/react")
                .header("content-type", "application/json")
                .header("authorization", "Bearer tok-a")
                .body(Body::from(req.to_string()))
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(*seen.lock().unwrap(), ["tenant-a"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// `[budget.planner]`: the tenant's planner calls are counted (two model calls per request
/// here); the call over `max_llm_calls` is refused before it reaches the model, with `429
/// planner_rejected`, and a `dev.weft.planner.rejected` event goes out on the tenant's stream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_planner_quota_refuses_the_call_over_it_and_publishes_planner_rejected() {
    use futures::StreamExt as _;
    let request: Value = json!({
        "caller": "debug-shell",
        "goal": {"type": "analysis", "description": "Say hello.", "metadata": {}},
        "context": {"conversation_history": [], "orion_state_snapshot": {}, "external_facts": {}},
        "toolset": [],
        "limits": {"max_steps": 3, "max_tokens_reason": 64, "max_tokens_answer": 64, "timeout_seconds": 10},
        "preferences": {"style": "concise", "allow_internal_thought_logging": true, "return_trace": true}
    });
    let answer = || {
        step(json!({"thought": "Done.", "finish": true, "action": null,
            "final_answer": {"content": "hello", "structured": {}}}))
    };
    // Enough answers for three requests: only the budget can stop the third.
    let script = vec![answer(), answer(), answer()];
    let mut config = weft_node::Config::default();
    config.budget.planner = Some(weft_node::config::PlannerBudget {
        max_llm_calls: Some(2),
        ..Default::default()
    });
    let builder =
        weft_node::Builder::new(config).llm(Some(Arc::new(ScriptedProvider::new(script))));
    let (state, _) = AppState::open(builder, None, ServerConfig::default())
        .await
        .unwrap();
    let app = weft_server::app(state);
    let post = |body: &Value| {
        Request::post("/plan/react")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap()
    };
    let stream = app
        .clone()
        .oneshot(
            Request::get("/v1/events/stream?type=planner.*")
                .body(Body::empty())
                .unwrap(),
        )
        .await
        .unwrap();
    assert_eq!(stream.status(), StatusCode::OK);
    for _ in 0..2 {
        let res = app.clone().oneshot(post(&request)).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }
    let res = app.clone().oneshot(post(&request)).await.unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS, "{v}");
    assert_eq!(v["code"], "planner_rejected", "{v}");
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or_default()
            .contains("2 of 2 calls"),
        "{v}"
    );
    assert!(
        v["hint"]
            .as_str()
            .unwrap_or_default()
            .contains("[budget.planner]"),
        "{v}"
    );
    // The refusal on the tenant's event stream.
    let mut frames = stream.into_body().into_data_stream();
    let mut text = String::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !text.contains("dev.weft.planner.rejected") {
        let chunk = tokio::time::timeout_at(deadline, frames.next())
            .await
            .expect("no planner.rejected event within 10 s")
            .expect("the stream ended")
            .unwrap();
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(text.contains("\"tenant\":\"local\""), "{text}");
}
