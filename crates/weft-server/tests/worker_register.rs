//! A Python worker (`python/weft-worker`) declares its tools to a running weft on start
//! (`python -m weft_worker serve … --register URL --token TOKEN`): the tool appears in the
//! token's tenant's `/v1/tools` only, and that tenant's plans validate against the schema
//! derived from the function's type hints and call the worker over the real NATS server.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;

use common::*;

/// The worker process, killed on drop.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn env(var: &str, hint: &str) -> String {
    match std::env::var(var) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("this test needs {var} (it was set when the test was built): {hint}"),
    }
}

const MODULE: &str = r#"
from weft_worker import tool

@tool(effect="read", idempotent=True)
def shout(text: str, times: int = 1) -> dict:
    """Upper-cases a text."""
    return {"loud": text.upper() * times}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs NATS and Python workers: set WEFT_TEST_NATS_URL and WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) (bash .ci/run does)"
)]
async fn a_worker_registers_its_tools_with_a_running_weft() {
    let nats = env(
        "WEFT_TEST_NATS_URL",
        "export WEFT_TEST_NATS_URL=nats://127.0.0.1:4222",
    );
    let python = env(
        "WEFT_TEST_PYTHON",
        "export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)",
    );
    let mut node = weft_node::Config::default();
    node.tools.worker_url = nats.clone();
    let s = sqlite_with(node, two_tenants()).await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = s.app.clone();
    tokio::spawn(async move { axum::serve(listener, app).await });

    let dir = tempfile::tempdir().unwrap();
    let module = dir.path().join("loud_tools.py");
    std::fs::write(&module, MODULE).unwrap();
    let mut child = Command::new(python)
        .args(["-m", "weft_worker", "serve"])
        .arg(&module)
        .args(["--url", &nats, "--tenant", "tenant-a"])
        .args(["--register", &format!("http://{addr}"), "--token", TOK_A])
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python worker");
    let stderr = child.stderr.take().unwrap();
    let _worker = Worker(child);
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            eprintln!("worker: {line}");
        }
    });

    // It declares `shout` once it serves it.
    let mut found = None;
    for _ in 0..300 {
        let (st, v) = s.get("/v1/tools/shout", Some(TOK_A)).await;
        if st == StatusCode::OK {
            found = Some(v);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let tool = found.expect("the worker never registered `shout`");
    assert_eq!(tool["source"], "api", "{tool}");
    assert_eq!(tool["definition"]["source"]["kind"], "worker", "{tool}");
    assert_eq!(tool["input_schema"]["required"], json!(["text"]), "{tool}");
    assert_eq!(
        s.get("/v1/tools/shout", Some(TOK_B)).await.0,
        StatusCode::NOT_FOUND
    );

    // The schema from the type hints checks the tenant's plans; a good plan runs the worker.
    let plan = |args: serde_json::Value| {
        json!({
            "plan_name": "loud",
            "graph_type": "acyclic",
            "events": {"start": {}, "done": {}},
            "steps": {"say": {"on": ["start"], "action": "shout", "args": args, "emits": ["done"]}}
        })
    };
    let (st, v) = s
        .post("/v1/validate", Some(TOK_A), &plan(json!({"text": 3})))
        .await;
    assert_eq!(
        (st, v["ok"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    let (st, v) = s
        .post(
            "/v1/plans",
            Some(TOK_A),
            &plan(json!({"text": "hey", "times": 2})),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s
        .post(
            "/v1/instances",
            Some(TOK_A),
            &json!({"plan": "loud", "input": {}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let done = s.wait_status(&id, Some(TOK_A), "completed").await;
    assert!(done.to_string().contains("HEYHEY"), "{done}");
}
