//! The real-server tier: weft-llm against a real OpenAI-compatible server with a real small
//! model (llama.cpp's `llama-server` + SmolLM2-135M; `scripts/llm-server.sh start`). Ignored
//! unless `WEFT_TEST_LLM_URL` was set at build time (`cfg(weft_llm)`, see `build.rs`). Asserts
//! protocol behaviour (a tool call parsed, JSON-schema
//! output parsed, the critic loop ending with a valid plan or a clear give-up), never quality.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::{Limits, StaticCatalog, ToolCatalog, ToolSpec, validate};
use weft_llm::{
    ChatRequest, Correlation, Error, Llm, Message, OpenAiConfig, OpenAiProvider, PlanOptions,
    ResponseFormat, ToolChoice, ToolDef, plan,
};

/// The server has one slot (`-np 1`): requests of tests running at once would queue there and
/// spend their timeouts waiting behind each other's, so the tests take turns.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The provider for the server at `WEFT_TEST_LLM_URL`; panics with a hint without it (these
/// tests run only when it was set at build time).
fn provider() -> OpenAiProvider {
    let url = match std::env::var("WEFT_TEST_LLM_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "the real-server tier needs a local LLM server and WEFT_TEST_LLM_URL is not set (it \
             was when the test was built): export WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start)"
        ),
    };
    let mut cfg = OpenAiConfig::new(
        url,
        std::env::var("WEFT_TEST_LLM_MODEL").unwrap_or_else(|_| "smollm2".into()),
    );
    cfg.prefill_tool_call = std::env::var("WEFT_TEST_LLM_PREFILL").map_or(true, |v| v != "0");
    cfg.timeout = Duration::from_secs(180);
    cfg.max_retries = 1;
    OpenAiProvider::new(cfg).expect("client")
}

#[tokio::test]
#[cfg_attr(
    not(weft_llm),
    ignore = "needs the local LLM server: set WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start) (bash .ci/run does)"
)]
async fn tool_call_is_parsed() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let p = provider();
    let llm = Llm::new(Arc::new(p));
    let req = ChatRequest {
        messages: vec![
            Message::system("You call functions."),
            Message::user("What is the weather in Paris?"),
        ],
        tools: vec![ToolDef {
            name: "get_weather".into(),
            description: "Current weather of a city".into(),
            parameters: json!({"type": "object", "required": ["city"],
                               "properties": {"city": {"type": "string", "maxLength": 40}}}),
        }],
        tool_choice: ToolChoice::Function("get_weather".into()),
        max_tokens: Some(64),
        ..ChatRequest::default()
    };
    let r = llm
        .chat(&Correlation::new("test"), "test", "tool", req)
        .await
        .expect("chat");
    let call = r
        .tool_calls
        .first()
        .unwrap_or_else(|| panic!("no tool call in {r:?}"));
    assert_eq!(call.name, "get_weather");
    let args: Value = serde_json::from_str(&call.arguments).expect("arguments are JSON");
    assert!(args.is_object(), "{args}");
    assert!(r.usage.total() > 0);
}

#[tokio::test]
#[cfg_attr(
    not(weft_llm),
    ignore = "needs the local LLM server: set WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start) (bash .ci/run does)"
)]
async fn json_schema_output_is_parsed() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let p = provider();
    let llm = Llm::new(Arc::new(p));
    let req = ChatRequest {
        messages: vec![Message::user("Name a colour. Answer in JSON.")],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "colour".into(),
            schema: json!({"type": "object", "additionalProperties": false, "required": ["colour"],
                           "properties": {"colour": {"type": "string", "maxLength": 20}}}),
            strict: true,
        }),
        max_tokens: Some(64),
        ..ChatRequest::default()
    };
    let r = llm
        .chat(&Correlation::new("test"), "test", "json", req)
        .await
        .expect("chat");
    let v: Value = serde_json::from_str(r.content.as_deref().unwrap_or("")).expect("JSON content");
    assert!(v.get("colour").and_then(Value::as_str).is_some(), "{v}");
}

fn tools() -> Vec<ToolSpec> {
    let c = StaticCatalog::builtin();
    ["log", "echo", "send_email", "llm.complete"]
        .iter()
        .filter_map(|n| c.spec(n).cloned())
        .collect()
}

/// Three shapes of request (one step, a chain, an LLM step). Every call is bounded by
/// `PLAN_TOKENS`: the 135M model often runs a candidate up to the cap (a cut-off candidate is
/// a finding the loop feeds back), so the cap, not the model, sets how long this test takes
/// on a busy machine.
const INSTRUCTIONS: [&str; 3] = [
    "Send an email to ann@example.com saying hello.",
    "Log the message 'started', then echo the input.",
    "Ask the LLM to write a haiku and log it.",
];

/// Completion cap per planning call: enough for a small plan.
const PLAN_TOKENS: u32 = 512;

#[tokio::test]
#[cfg_attr(
    not(weft_llm),
    ignore = "needs the local LLM server: set WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start) (bash .ci/run does)"
)]
async fn critic_loop_ends_with_a_valid_plan_or_a_clear_give_up() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let p = provider();
    let attempts: u32 = std::env::var("WEFT_TEST_LLM_ATTEMPTS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let llm = Llm::new(Arc::new(p));
    let catalog = {
        let mut c = StaticCatalog::new();
        tools().into_iter().for_each(|t| c.insert(t));
        c
    };
    for instruction in INSTRUCTIONS {
        let opts = PlanOptions {
            correlation: Correlation::new("test"),
            max_attempts: attempts,
            max_tokens: PLAN_TOKENS,
            ..PlanOptions::default()
        };
        match plan(&llm, instruction, &tools(), &opts).await {
            Ok(out) => {
                let v = validate(
                    &out.plan,
                    Some(&catalog as &dyn ToolCatalog),
                    &Limits::default(),
                );
                assert!(
                    !v.has_errors(),
                    "accepted plan has errors: {:?}",
                    v.findings
                );
                eprintln!(
                    "CRITIC-ROUNDS outcome=valid attempts={} critic_rounds={} instruction={instruction:?}",
                    out.attempts,
                    out.critic_rounds()
                );
            }
            Err(Error::PlanningFailed {
                attempts: n,
                findings,
            }) => {
                assert!(
                    !findings.is_empty(),
                    "a give-up must list the last findings"
                );
                eprintln!(
                    "CRITIC-ROUNDS outcome=gave-up attempts={n} critic_rounds={} last={} instruction={instruction:?}",
                    n.saturating_sub(1),
                    findings
                        .iter()
                        .map(|f| f.code.as_str())
                        .collect::<Vec<_>>()
                        .join(",")
                );
            }
            Err(other) => panic!("planning {instruction:?} failed outside the protocol: {other}"),
        }
    }
}
