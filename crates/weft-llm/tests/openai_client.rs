//! The OpenAI-compatible client against a local fake server (axum on 127.0.0.1:0): 429 with
//! `Retry-After` then 200, 5xx retries, tool-call `arguments` as an object, timeouts, and the
//! Azure `api-version` / `api-key` option.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use serde_json::{Value, json};
use weft_llm::{
    ChatProvider, ChatRequest, Error, Message, OpenAiConfig, OpenAiProvider, ToolChoice, ToolDef,
};

type Behaviour = Arc<dyn Fn(usize, &HeaderMap, &Uri, &Value) -> Response + Send + Sync>;

async fn serve(b: Behaviour) -> (String, Arc<AtomicUsize>) {
    let hits = Arc::new(AtomicUsize::new(0));
    let h = hits.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(
            move |headers: HeaderMap, uri: Uri, body: axum::Json<Value>| {
                let n = h.fetch_add(1, Ordering::SeqCst);
                let b = b.clone();
                async move { b(n, &headers, &uri, &body.0) }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), hits)
}

fn ok_body() -> Value {
    json!({"id": "x", "object": "chat.completion", "model": "fake", "system_fingerprint": "extra",
           "choices": [{"index": 0, "finish_reason": "stop", "logprobs": null,
                        "message": {"role": "assistant", "content": "hello"}}],
           "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})
}

fn provider(url: String) -> OpenAiProvider {
    let mut c = OpenAiConfig::new(url, "fake-model");
    c.api_key = Some("sk-test".into());
    c.backoff_base = Duration::from_millis(10);
    c.backoff_max = Duration::from_secs(5);
    c.max_retries = 3;
    c.timeout = Duration::from_secs(5);
    OpenAiProvider::new(c).unwrap()
}

fn req() -> ChatRequest {
    ChatRequest {
        messages: vec![Message::user("hi")],
        ..ChatRequest::default()
    }
}

#[tokio::test]
async fn rate_limited_then_ok_honours_retry_after() {
    let (url, hits) = serve(Arc::new(|n, h, _, body| {
        assert_eq!(h.get("authorization").unwrap(), "Bearer sk-test");
        assert_eq!(body["model"], "fake-model");
        if n == 0 {
            (
                StatusCode::TOO_MANY_REQUESTS,
                [("retry-after", "1")],
                "slow down",
            )
                .into_response()
        } else {
            axum::Json(ok_body()).into_response()
        }
    }))
    .await;
    let t0 = Instant::now();
    let r = provider(url).chat(&req()).await.unwrap();
    assert!(
        t0.elapsed() >= Duration::from_millis(950),
        "Retry-After: 1 was not honoured"
    );
    assert_eq!(r.content.as_deref(), Some("hello"));
    assert_eq!(r.usage.total_tokens, 6);
    assert_eq!(hits.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn server_errors_are_retried_then_reported() {
    let (url, hits) = serve(Arc::new(|n, _, _, _| {
        if n < 2 {
            (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response()
        } else {
            axum::Json(ok_body()).into_response()
        }
    }))
    .await;
    provider(url).chat(&req()).await.unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    let (url, hits) = serve(Arc::new(|_, _, _, _| {
        (StatusCode::BAD_GATEWAY, "down").into_response()
    }))
    .await;
    let err = provider(url).chat(&req()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "LLM server answered HTTP 502 after 4 attempt(s): down"
    );
    assert_eq!(hits.load(Ordering::SeqCst), 4);
}

#[tokio::test]
async fn client_errors_are_not_retried() {
    let (url, hits) = serve(Arc::new(|_, _, _, _| {
        (StatusCode::BAD_REQUEST, "bad schema").into_response()
    }))
    .await;
    let err = provider(url).chat(&req()).await.unwrap_err();
    assert!(matches!(err, Error::Rejected { status: 400, .. }), "{err}");
    assert_eq!(hits.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn tool_call_arguments_as_object_and_missing_id() {
    let (url, _) = serve(Arc::new(|_, _, _, body| {
        assert_eq!(body["tool_choice"]["function"]["name"], "create_plan");
        axum::Json(json!({"choices": [{"finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
            "tool_calls": [{"type": "function", "function": {"name": "create_plan", "arguments": {"plan_name": "p"}}}]}}]}))
            .into_response()
    }))
    .await;
    let mut r = req();
    r.tools = vec![ToolDef {
        name: "create_plan".into(),
        description: String::new(),
        parameters: json!({"type": "object"}),
    }];
    r.tool_choice = ToolChoice::Function("create_plan".into());
    let resp = provider(url).chat(&r).await.unwrap();
    assert_eq!(resp.content, None);
    assert_eq!(resp.tool_calls[0].id, "call_0");
    assert_eq!(
        serde_json::from_str::<Value>(&resp.tool_calls[0].arguments).unwrap(),
        json!({"plan_name": "p"})
    );
}

#[tokio::test]
async fn prefill_mode_sends_the_llama_cpp_trick() {
    let (url, _) = serve(Arc::new(|_, _, _, body| {
        assert_eq!(body["tool_choice"], "required");
        assert_eq!(body["messages"].as_array().unwrap().last().unwrap()["content"], "<tool_call>\n");
        assert_eq!(body["stop"], json!(["</tool_call>"]));
        axum::Json(json!({"choices": [{"message": {"content": "{\"name\": \"f\", \"arguments\": {\"a\": 1}}"}}]})).into_response()
    }))
    .await;
    let mut c = OpenAiConfig::new(url, "m");
    c.prefill_tool_call = true;
    let mut r = req();
    r.tools = vec![ToolDef {
        name: "f".into(),
        description: String::new(),
        parameters: json!({}),
    }];
    r.tool_choice = ToolChoice::Function("f".into());
    let resp = OpenAiProvider::new(c).unwrap().chat(&r).await.unwrap();
    assert_eq!(resp.tool_calls[0].name, "f");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn timeouts_are_retried_then_reported() {
    let (url, hits) = serve(Arc::new(|_, _, _, _| {
        std::thread::sleep(Duration::from_millis(400));
        axum::Json(ok_body()).into_response()
    }))
    .await;
    let mut c = OpenAiConfig::new(url, "m");
    c.timeout = Duration::from_millis(100);
    c.max_retries = 1;
    c.backoff_base = Duration::from_millis(1);
    let err = OpenAiProvider::new(c)
        .unwrap()
        .chat(&req())
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "LLM request timed out after 2 attempt(s) of 100 ms each"
    );
    assert!(hits.load(Ordering::SeqCst) >= 1);
}

#[tokio::test]
async fn azure_style_query_and_header() {
    let (url, _) = serve(Arc::new(|_, h, uri, _| {
        assert_eq!(uri.query(), Some("api-version=2024-06-01"));
        assert_eq!(h.get("api-key").unwrap(), "k");
        assert!(h.get("authorization").is_none());
        axum::Json(ok_body()).into_response()
    }))
    .await;
    let mut c = OpenAiConfig::new(url, "deployment");
    c.api_key = Some("k".into());
    c.azure_api_version = Some("2024-06-01".into());
    OpenAiProvider::new(c).unwrap().chat(&req()).await.unwrap();
}

#[test]
fn config_from_environment() {
    let env = |k: &str| match k {
        "WEFT_LLM_BASE_URL" => Some("http://127.0.0.1:1/v1".to_string()),
        "WEFT_LLM_MODEL" => Some("smol".to_string()),
        "WEFT_LLM_PREFILL_TOOL_CALL" => Some("1".to_string()),
        _ => None,
    };
    let c = OpenAiConfig::from_lookup(env).unwrap();
    assert_eq!((c.model.as_str(), c.prefill_tool_call), ("smol", true));
    assert_eq!(c.endpoint(), "http://127.0.0.1:1/v1/chat/completions");
    let e = OpenAiConfig::from_lookup(|_| None).unwrap_err().to_string();
    assert!(
        e.contains("WEFT_LLM_BASE_URL (llm.base_url in weft.toml) is not set"),
        "{e}"
    );
    assert!(!e.contains(":8080"), "weft's own port is not an LLM's: {e}");
}
