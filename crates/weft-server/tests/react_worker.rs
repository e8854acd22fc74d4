//! Seed 004 end to end with a real `extract_facts`: the seed's sample request, unchanged, runs
//! through `POST /plan/react` and through the NATS planner subject (`[planner]`, served as
//! `weft serve` serves it: `weft_node::planner_bus::spawn_node` on the server's node), and in
//! both the tool is the Python worker `python/weft-worker/examples/extract_facts.py`, declared
//! in `weft.toml` exactly as `python -m weft_worker describe` prints it, serving over the real
//! NATS server and asking the real LLM server (`$WEFT_TEST_LLM_URL`) for the facts. The ReAct
//! planner's own model is scripted (the 135M test model cannot follow the ReAct contract), so
//! what the test checks is the tool: its observation carries the LLM server's completion id
//! and token count, the call went through the node's chain (metrics), and the bus answer is
//! the route's JSON. Ignored unless `WEFT_TEST_NATS_URL`, `WEFT_TEST_PYTHON` and
//! `WEFT_TEST_LLM_URL` were set at build time (`build.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;
use weft_llm::{ScriptedExchange, ScriptedProvider};
use weft_node::{Inputs, Openers, load_checked};
use weft_server::{AppState, ServerConfig};

/// The seed's sample request (seed 004 §7), byte for byte (weft-llm's seed fixture).
const SEED_REQUEST: &str = include_str!("../../weft-llm/tests/fixtures/seed004-request.json");

fn var(name: &str, hint: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("this test needs {name} (it was set when the test was built): {hint}"),
    }
}

fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker/examples/extract_facts.py")
}

/// The example worker for `tenant`, asking the LLM server at `llm`; killed on drop.
struct PyWorker(Child);

impl PyWorker {
    fn start(python: &str, nats: &str, tenant: &str, llm: &str) -> PyWorker {
        let mut child = Command::new(python)
            .args(["-m", "weft_worker", "serve"])
            .arg(example())
            .args(["--url", nats, "--tenant", tenant])
            .env("WEFT_LLM_BASE_URL", llm)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start the extract_facts worker");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(
            first.contains("weft-worker: serving"),
            "the worker did not start: {first}"
        );
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
        PyWorker(child)
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn step(v: Value) -> ScriptedExchange {
    ScriptedExchange::content(v.to_string()).with_usage(40, 10)
}

/// The planner's two steps for one request: call `extract_facts`, then finish.
fn plan_steps() -> [ScriptedExchange; 2] {
    [
        step(json!({"thought": "Extract the facts first.", "finish": false,
            "action": {"tool_id": "extract_facts",
                       "input": {"text": "Alice lives in Paris, works at Acme Corp, and her manager is Bob."}},
            "final_answer": null})),
        step(json!({"thought": "Summarize.", "finish": true, "action": null,
            "final_answer": {"content": "- Alice lives in Paris\n- Alice works at Acme Corp\n- Bob is her manager",
                             "structured": {}}}))
        .when_last("Observation for step 0"),
    ]
}

/// What both answers must show: the real worker's observation, produced by the LLM server.
fn check_answer(v: &Value, via: &str) {
    assert!(
        v["final_answer"]["content"]
            .as_str()
            .unwrap_or_default()
            .contains("Bob is her manager"),
        "{via}: {v}"
    );
    assert_eq!(v["usage"]["stop_reason"], "finish", "{via}: {v}");
    assert_eq!(v["usage"]["tool_calls"], 1, "{via}: {v}");
    assert!(v.get("error").is_none(), "{via}: {v}");
    let trace = v["trace"].as_array().unwrap();
    assert_eq!(trace.len(), 2, "{via}: {v}");
    assert_eq!(trace[0]["action"]["tool_id"], "extract_facts");
    let obs = &trace[0]["observation"];
    assert_eq!(
        obs["step_meta"]["ok"], true,
        "{via}: the worker answered: {obs}"
    );
    let result = &obs["raw_cortex"];
    // The LLM server's own completion: its id and tokens (no scripted reply has them).
    assert!(
        result["llm"]["id"]
            .as_str()
            .is_some_and(|id| id.starts_with("chatcmpl")),
        "{via}: {result}"
    );
    assert!(
        result["llm"]["completion_tokens"].as_u64().unwrap_or(0) > 0,
        "{via}: {result}"
    );
    assert!(result["facts"].is_array(), "{via}: {result}");
    assert!(result["llm_output"].is_string(), "{via}: {result}");
}

/// `v` without what differs between two runs (durations, the tool's LLM output).
fn stable(v: &Value) -> Value {
    let mut v = v.clone();
    v["usage"]["duration_ms"] = Value::Null;
    v["trace"][0]["observation"] = Value::Null;
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python, weft_llm)),
    ignore = "needs NATS, the Python worker venv and the local LLM server: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222, WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) and WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start)"
)]
async fn the_seed_request_runs_with_a_real_extract_facts_worker_over_http_and_nats() {
    let nats = var(
        "WEFT_TEST_NATS_URL",
        "export WEFT_TEST_NATS_URL=nats://127.0.0.1:4222",
    );
    let python = var(
        "WEFT_TEST_PYTHON",
        "export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)",
    );
    let llm = var(
        "WEFT_TEST_LLM_URL",
        "export WEFT_TEST_LLM_URL=$(bash scripts/llm-server.sh start)",
    );
    let pid = std::process::id();
    // A tenant (and so worker subjects) and a planner subject of this process only.
    let tenant = format!("react-{pid}");
    let subject = format!("weft.test.planner.{pid}.seed");
    let dir = std::env::temp_dir().join(format!("weft-server-react-worker-{pid}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let _worker = PyWorker::start(&python, &nats, &tenant, &llm);

    // weft.toml: a store, the planner subject, and the tool as `describe` prints it.
    let described = Command::new(&python)
        .args(["-m", "weft_worker", "describe"])
        .arg(example())
        .args(["--url", &nats])
        .output()
        .unwrap();
    assert!(described.status.success(), "{described:?}");
    let toml = format!(
        "[store]\nurl = \"{}\"\n\n[planner]\nnats_url = \"{nats}\"\nsubject = \"{subject}\"\n\
         tenant = \"{tenant}\"\nmax_concurrent = 4\n\n{}",
        dir.join("weft.db").display(),
        String::from_utf8(described.stdout).unwrap()
    );
    std::fs::write(dir.join("weft.toml"), &toml).unwrap();
    let loaded = load_checked(
        &Inputs {
            file: Some(dir.join("weft.toml")),
            dir: dir.clone(),
            env: &|_| None,
            flags: Vec::new(),
        },
        &Openers::default(),
    );
    assert!(!loaded.has_errors(), "{:?}\n{toml}", loaded.findings);
    let config = loaded.config;
    assert_eq!(config.planner.subject, subject);

    let mut script = Vec::new();
    script.extend(plan_steps());
    script.extend(plan_steps());
    let builder =
        weft_node::Builder::new(config.clone()).llm(Some(Arc::new(ScriptedProvider::new(script))));
    let server = ServerConfig {
        tokens: [("tok-r".to_string(), tenant.clone())].into(),
        ..ServerConfig::default()
    };
    let (state, _) = AppState::open(builder, None, server).await.unwrap();
    // As `weft serve` does with `[planner] nats_url` set.
    let bus = weft_node::planner_bus::spawn_node(&config.planner, state.node())
        .await
        .unwrap();
    let app = weft_server::app(state);

    // Over HTTP.
    let res = app
        .clone()
        .oneshot(
            Request::post("/plan/react")
                .header("content-type", "application/json")
                .header("authorization", "Bearer tok-r")
                .body(Body::from(SEED_REQUEST))
                .unwrap(),
        )
        .await
        .unwrap();
    let status = res.status();
    let body = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .unwrap();
    let http: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(status, StatusCode::OK, "{http}");
    check_answer(&http, "http");

    // Over NATS: the same request on the planner subject, answered on its reply subject.
    let client = async_nats::connect(nats.as_str()).await.unwrap();
    let m = tokio::time::timeout(
        Duration::from_secs(120),
        client.request(subject.clone(), SEED_REQUEST.as_bytes().to_vec().into()),
    )
    .await
    .expect("an answer in time")
    .expect("an answer");
    let headers = m.headers.clone().unwrap_or_default();
    assert_eq!(
        headers
            .get(weft_node::planner_bus::STATUS_HEADER)
            .map(|h| h.as_str().to_string())
            .as_deref(),
        Some("200")
    );
    let bus_answer: Value = serde_json::from_slice(&m.payload).unwrap();
    check_answer(&bus_answer, "nats");
    // The same JSON as the route's, but for what differs between any two runs.
    assert_eq!(stable(&bus_answer), stable(&http));

    // Both calls went through the node's tool-call chain (its metrics stage counted them).
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
    assert!(fired.ends_with(" 2"), "{fired}\n{text}");

    bus.stop().await;
    let _ = std::fs::remove_dir_all(&dir);
}
