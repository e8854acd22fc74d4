//! The ReAct planner served over a real NATS server (`planner_bus.rs`): the seed-004 request
//! answered on the request's reply subject with the route's JSON (a declared tool's result in
//! the trace, the partial trace with `error` when the model fails mid-loop), a request
//! published without a reply subject answered on `<subject>.reply.<trace_id>`, every
//! malformed or refused request answered with its stable code (never a crash: the service
//! answers the next one), a flood beyond `max_concurrent` answered `busy` at once, and `stop`
//! letting the running request answer before unsubscribing. The model is scripted (and held
//! back by a gate where timing matters). Ignored unless `WEFT_TEST_NATS_URL` was set at build
//! time (`build.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use weft_llm::{ChatProvider, ChatRequest, ChatResponse, ScriptedExchange, ScriptedProvider};
use weft_node::config::PlannerConfig;
use weft_node::planner_bus::{self, PlannerBus, STATUS_HEADER, TRACE_HEADER};
use weft_node::{Builder, Config};

/// The seed's sample request (seed 004 §7), byte for byte (weft-llm's seed fixture).
const SEED_REQUEST: &str = include_str!("../../weft-llm/tests/fixtures/seed004-request.json");

fn nats_url() -> String {
    match std::env::var("WEFT_TEST_NATS_URL") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "this test needs WEFT_TEST_NATS_URL (it was set when the test was built): export WEFT_TEST_NATS_URL=nats://127.0.0.1:4222"
        ),
    }
}

/// A subject of this test process only (others may run the same tests at the same time).
fn subject(name: &str) -> String {
    format!("weft.test.planner.{}.{name}", std::process::id())
}

fn step(v: Value) -> ScriptedExchange {
    ScriptedExchange::content(v.to_string()).with_usage(40, 10)
}

fn call_extract() -> ScriptedExchange {
    step(
        json!({"thought": "Extract the facts first.", "finish": false,
        "action": {"tool_id": "extract_facts",
                   "input": {"text": "Alice lives in Paris, works at Acme Corp, and her manager is Bob."}},
        "final_answer": null}),
    )
}

fn finish() -> ScriptedExchange {
    step(
        json!({"thought": "Summarize.", "finish": true, "action": null,
        "final_answer": {"content": "- Alice lives in Paris\n- Bob is her manager", "structured": {}}}),
    )
}

/// A node whose `extract_facts` is a declared tool with a fixed result.
fn config() -> Config {
    let mut c = Config::default();
    c.tools.declared = vec![
        serde_json::from_value(json!({
            "name": "extract_facts", "effect": "read", "idempotent": true,
            "description": "Extract structured subject/predicate/object facts from a span of text.",
            "input_schema": {"type": "object", "required": ["text"],
                             "properties": {"text": {"type": "string"}}},
            "source": {"kind": "fixed", "result": {"facts": [["Bob", "manages", "Alice"]]}}
        }))
        .unwrap(),
    ];
    c
}

/// Serves the planner of a node with `llm` on a fresh subject.
async fn serve(
    name: &str,
    llm: Option<Arc<dyn ChatProvider>>,
    tune: impl FnOnce(&mut PlannerConfig),
) -> (PlannerBus, async_nats::Client, PlannerConfig) {
    let node = Builder::new(config()).llm(llm).in_memory().unwrap();
    let mut pc = PlannerConfig {
        nats_url: Some(nats_url()),
        subject: subject(name),
        ..PlannerConfig::default()
    };
    tune(&mut pc);
    let bus = planner_bus::spawn(&pc, node.planner_llm(), Arc::clone(node.outside_registry()))
        .await
        .unwrap();
    let client = async_nats::connect(nats_url()).await.unwrap();
    (bus, client, pc)
}

/// One request/reply: (status header, trace header, body).
async fn ask(
    client: &async_nats::Client,
    subject: &str,
    body: impl Into<Vec<u8>>,
    trace: Option<&str>,
) -> (String, String, Value) {
    let mut h = async_nats::HeaderMap::new();
    if let Some(t) = trace {
        h.insert(TRACE_HEADER, t);
    }
    let m = tokio::time::timeout(
        Duration::from_secs(20),
        client.request_with_headers(subject.to_string(), h, body.into().into()),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    let headers = m.headers.clone().unwrap_or_default();
    let get = |k: &str| {
        headers
            .get(k)
            .map(|v| v.as_str().to_string())
            .unwrap_or_default()
    };
    let v: Value = serde_json::from_slice(&m.payload).expect("the answer is JSON");
    (get(STATUS_HEADER), get(TRACE_HEADER), v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)]
async fn the_seed_request_is_answered_on_the_reply_subject() {
    let llm = Arc::new(ScriptedProvider::new(vec![
        call_extract(),
        finish().when_last("Observation for step 0"),
    ]));
    let (bus, client, pc) = serve("seed", Some(llm), |_| {}).await;
    let (status, trace, v) = ask(&client, &pc.subject, SEED_REQUEST, Some("trace-seed-1")).await;
    assert_eq!(status, "200", "{v}");
    assert_eq!(trace, "trace-seed-1");
    assert!(
        v["final_answer"]["content"]
            .as_str()
            .unwrap()
            .contains("Bob is her manager"),
        "{v}"
    );
    let steps = v["trace"].as_array().unwrap();
    assert_eq!(steps.len(), 2, "{v}");
    assert_eq!(steps[0]["action"]["tool_id"], "extract_facts");
    assert_eq!(
        steps[0]["observation"]["raw_cortex"],
        json!({"facts": [["Bob", "manages", "Alice"]]}),
        "the declared tool's result is the observation: {v}"
    );
    assert_eq!(v["usage"]["stop_reason"], "finish");
    assert!(v.get("error").is_none(), "{v}");
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)]
async fn a_mid_loop_llm_error_returns_the_partial_trace_with_an_error() {
    // One step, then the script is exhausted: the model fails after progress.
    let llm = Arc::new(ScriptedProvider::new(vec![call_extract()]));
    let (bus, client, pc) = serve("partial", Some(llm), |_| {}).await;
    // An empty goal is refused before the model is asked.
    let empty = json!({"goal": {"description": "  "}}).to_string();
    let (status, _, v) = ask(&client, &pc.subject, empty, None).await;
    assert_eq!(
        (status.as_str(), &v["error"]["code"]),
        ("400", &json!("invalid_request")),
        "{v}"
    );
    let (status, trace, v) = ask(&client, &pc.subject, SEED_REQUEST, None).await;
    assert_eq!(status, "200", "{v}");
    assert!(trace.starts_with("react-"), "a fresh trace id: {trace}");
    assert_eq!(v["trace"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["usage"]["stop_reason"], "llm_error", "{v}");
    assert_eq!(v["error"]["code"], "script_exhausted", "{v}");
    assert!(v["final_answer"]["content"].is_string(), "{v}");
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)]
async fn malformed_and_refused_requests_get_stable_codes() {
    // No model: a well-formed request is refused `llm_unavailable`.
    let (bus, client, pc) = serve("bad", None, |c| c.max_request_bytes = 4096).await;
    let s = pc.subject.as_str();
    let cases: Vec<(Vec<u8>, &str, &str)> = vec![
        (b"{not json".to_vec(), "400", "invalid_json"),
        (b"".to_vec(), "400", "invalid_json"),
        (vec![0xff, 0xfe, 0x00], "400", "invalid_json"),
        (br#"{"goal": 3}"#.to_vec(), "400", "invalid_request"),
        (b"[1, 2]".to_vec(), "400", "invalid_request"),
        (vec![b' '; 5000], "413", "payload_too_large"),
        (
            json!({"goal": {"description": "x"}, "toolset": [{"tool_id": "nope"}]})
                .to_string()
                .into_bytes(),
            "422",
            "unknown_tool",
        ),
        (SEED_REQUEST.as_bytes().to_vec(), "503", "llm_unavailable"),
    ];
    for (body, want_status, want_code) in cases {
        let shown = String::from_utf8_lossy(&body[..body.len().min(40)]).into_owned();
        let (status, _, v) = ask(&client, s, body, None).await;
        assert_eq!(status, want_status, "{shown}: {v}");
        assert_eq!(v["error"]["code"], want_code, "{shown}: {v}");
        assert_eq!(v["error"]["status"].to_string(), want_status, "{v}");
        assert!(v["error"]["message"].as_str().unwrap().len() > 5, "{v}");
        assert!(v.get("final_answer").is_none(), "{v}");
    }
    bus.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)]
async fn a_published_request_is_answered_on_its_trace_subject() {
    let (bus, client, pc) = serve("trace", None, |_| {}).await;
    // The trace id from the body, and from the header (escaped as one subject token).
    let mut from_body = client
        .subscribe(format!("{}.reply.t-123", pc.subject))
        .await
        .unwrap();
    let mut from_header = client
        .subscribe(format!("{}.reply.a%2Eb", pc.subject))
        .await
        .unwrap();
    client.flush().await.unwrap();
    let mut body: Value = serde_json::from_str(SEED_REQUEST).unwrap();
    body["trace_id"] = json!("t-123");
    client
        .publish(pc.subject.clone(), body.to_string().into())
        .await
        .unwrap();
    let mut h = async_nats::HeaderMap::new();
    h.insert(TRACE_HEADER, "a.b");
    client
        .publish_with_headers(pc.subject.clone(), h, b"{oops".to_vec().into())
        .await
        .unwrap();
    let m = tokio::time::timeout(Duration::from_secs(10), from_body.next())
        .await
        .unwrap()
        .unwrap();
    let v: Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(v["error"]["code"], "llm_unavailable", "{v}");
    assert_eq!(
        m.headers
            .as_ref()
            .unwrap()
            .get(TRACE_HEADER)
            .unwrap()
            .as_str(),
        "t-123"
    );
    let m = tokio::time::timeout(Duration::from_secs(10), from_header.next())
        .await
        .unwrap()
        .unwrap();
    let v: Value = serde_json::from_slice(&m.payload).unwrap();
    assert_eq!(v["error"]["code"], "invalid_json", "{v}");
    bus.stop().await;
}

/// A model that waits at a gate before each answer, telling when it is reached.
struct Gated {
    inner: ScriptedProvider,
    gate: Arc<tokio::sync::Semaphore>,
    entered: Arc<AtomicUsize>,
}

impl ChatProvider for Gated {
    fn name(&self) -> &str {
        "gated"
    }
    fn chat<'a>(
        &'a self,
        request: &'a ChatRequest,
    ) -> weft_llm::BoxFuture<'a, weft_llm::Result<ChatResponse>> {
        Box::pin(async move {
            self.entered.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.unwrap().forget();
            self.inner.chat(request).await
        })
    }
}

async fn until(mut f: impl FnMut() -> bool) {
    for _ in 0..500 {
        if f() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("timed out waiting");
}

fn tiny_request() -> String {
    json!({"goal": {"description": "answer"}, "toolset": [], "limits": {"max_steps": 1}})
        .to_string()
}

fn answer_now() -> ScriptedExchange {
    step(
        json!({"thought": "t", "finish": true, "action": null, "final_answer": {"content": "done"}}),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run does)"
)]
async fn beyond_max_concurrent_requests_are_answered_busy_and_stop_drains() {
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let llm = Arc::new(Gated {
        inner: ScriptedProvider::new(vec![answer_now(), answer_now()]),
        gate: Arc::clone(&gate),
        entered: Arc::clone(&entered),
    });
    let (bus, client, pc) = serve("busy", Some(llm), |c| c.max_concurrent = 1).await;
    // The first request holds the only slot at the gate.
    let first = {
        let (client, s) = (client.clone(), pc.subject.clone());
        tokio::spawn(async move { ask(&client, &s, tiny_request(), None).await })
    };
    until(|| entered.load(Ordering::SeqCst) == 1).await;
    // Ten more at once: each answered `busy` without waiting for the slot.
    let mut flood = Vec::new();
    for _ in 0..10 {
        let (client, s) = (client.clone(), pc.subject.clone());
        flood.push(tokio::spawn(async move {
            ask(&client, &s, tiny_request(), None).await
        }));
    }
    for f in flood {
        let (status, _, v) = f.await.unwrap();
        assert_eq!(
            (status.as_str(), &v["error"]["code"]),
            ("503", &json!("busy")),
            "{v}"
        );
    }
    assert_eq!(
        entered.load(Ordering::SeqCst),
        1,
        "no busy request reached the model"
    );
    // Stopping waits for the running request, which still answers.
    let stopping = tokio::spawn(bus.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !stopping.is_finished(),
        "stop waits for the running request"
    );
    gate.add_permits(1);
    let (status, _, v) = first.await.unwrap();
    assert_eq!(status, "200", "{v}");
    assert_eq!(v["final_answer"]["content"], "done", "{v}");
    tokio::time::timeout(Duration::from_secs(10), stopping)
        .await
        .expect("stop returns once the request answered")
        .unwrap();
    // Stopped: nobody serves the subject any more.
    let e = client
        .request(pc.subject.clone(), tiny_request().into())
        .await
        .expect_err("no responders after stop");
    assert_eq!(e.kind(), async_nats::RequestErrorKind::NoResponders, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_planner_section_is_refused_before_connecting() {
    let node = Builder::new(config()).in_memory().unwrap();
    for (tune, key) in [
        (
            Box::new(|c: &mut PlannerConfig| c.subject = "weft.*.react".into())
                as Box<dyn Fn(&mut PlannerConfig)>,
            "planner.subject",
        ),
        (
            Box::new(|c: &mut PlannerConfig| c.max_concurrent = 0),
            "planner.max_concurrent",
        ),
        (
            Box::new(|c: &mut PlannerConfig| c.nats_url = Some("::::".into())),
            "planner.nats_url",
        ),
    ] {
        let mut pc = PlannerConfig {
            nats_url: Some("nats://127.0.0.1:1".into()),
            ..PlannerConfig::default()
        };
        tune(&mut pc);
        let e = planner_bus::spawn(&pc, None, Arc::clone(node.outside_registry()))
            .await
            .expect_err("refused");
        assert_eq!(e.code(), "planner_unavailable");
        assert!(e.to_string().contains(key), "{e}");
    }
    // Unset `nats_url`: nothing to serve.
    let e = planner_bus::spawn(
        &PlannerConfig::default(),
        None,
        Arc::clone(node.outside_registry()),
    )
    .await
    .expect_err("refused");
    assert!(e.to_string().contains("planner.nats_url"), "{e}");
}

#[test]
fn weft_config_check_reports_a_bad_planner_section() {
    let env = |k: &str| match k {
        "WEFT_PLANNER_NATS_URL" => Some("nats://127.0.0.1:4222".to_string()),
        "WEFT_PLANNER_SUBJECT" => Some("weft.planner.>".to_string()),
        _ => None,
    };
    let loaded = weft_node::load_checked(
        &weft_node::Inputs {
            file: None,
            dir: std::env::temp_dir().join("weft-planner-no-such-dir"),
            env: &env,
            flags: Vec::new(),
        },
        &weft_node::Openers::default(),
    );
    let found: Vec<(&str, &str)> = loaded
        .findings
        .iter()
        .map(|f| (f.code.as_str(), f.pointer.as_str()))
        .collect();
    assert_eq!(
        found,
        [("C005", "/planner/subject")],
        "{:?}",
        loaded.findings
    );
    assert_eq!(
        loaded.config.planner.nats_url.as_deref(),
        Some("nats://127.0.0.1:4222")
    );
    // Unset `nats_url`: the section is not checked (nothing is served).
    let off = weft_node::load_checked(
        &weft_node::Inputs {
            file: None,
            dir: std::env::temp_dir().join("weft-planner-no-such-dir"),
            env: &|k: &str| (k == "WEFT_PLANNER_SUBJECT").then(|| "weft.>".to_string()),
            flags: Vec::new(),
        },
        &weft_node::Openers::default(),
    );
    assert!(off.findings.is_empty(), "{:?}", off.findings);
}
