//! Declared `http` tools through a whole node: a `weft.toml` declares two tools backed by a
//! real HTTP server (an axum app in the test process), the node loads it, a durable instance
//! on a SQLite file calls both, and the journal holds their results — never the secret the
//! tools send.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use weft_core::Status;
use weft_node::{Builder, Inputs, Openers, load_checked};

const SECRET: &str = "n0de-level-s3cret-4711";
const SECRET_VAR: &str = "WEFT_TEST_DECLARED_HTTP_KEY";

#[derive(Debug, Clone)]
struct Seen {
    path: String,
    headers: HashMap<String, String>,
    body: Value,
}

#[derive(Default)]
struct Peer {
    seen: Mutex<Vec<Seen>>,
    publish_calls: AtomicU32,
}

async fn handle(
    State(peer): State<Arc<Peer>>,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let headers: HashMap<String, String> = headers
        .iter()
        .map(|(k, v)| {
            (
                k.as_str().to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    peer.seen.lock().unwrap().push(Seen {
        path: uri.path().to_string(),
        headers: headers.clone(),
        body: body.clone(),
    });
    match uri.path() {
        "/extract" => {
            let text = body["text"].as_str().unwrap_or_default();
            let facts: Vec<&str> = text.split_whitespace().collect();
            axum::Json(json!({"facts": facts})).into_response()
        }
        // Unavailable once, then accepts: the tool's retry repeats the call.
        "/publish" => {
            if peer.publish_calls.fetch_add(1, Ordering::SeqCst) == 0 {
                (StatusCode::SERVICE_UNAVAILABLE, "warming up").into_response()
            } else {
                let n = body["facts"].as_array().map_or(0, Vec::len);
                axum::Json(json!({"published": n})).into_response()
            }
        }
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Runs in a child process of this test binary that has the secret in its environment (a
/// test cannot set variables in its own process).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declared_http_tools_run_through_a_durable_node() {
    if std::env::var_os(SECRET_VAR).is_none() {
        let out = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "declared_http_tools_run_through_a_durable_node",
                "--exact",
                "--nocapture",
            ])
            .env(SECRET_VAR, SECRET)
            .output()
            .await
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }

    let peer = Arc::new(Peer::default());
    let app = Router::new().fallback(handle).with_state(Arc::clone(&peer));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });

    let dir = std::env::temp_dir().join(format!("weft-node-declared-http-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let toml = format!(
        r#"
[store]
url = "{db}"

[[tools.declared]]
name = "extract_facts"
description = "Extract facts from a text"
effect = "read"
idempotent = true
timeout_ms = 5000
input_schema = {{ type = "object", required = ["text"], properties = {{ text = {{ type = "string" }} }} }}
output_schema = {{ type = "object", required = ["facts"] }}
[tools.declared.source]
kind = "http"
url = "{base}/extract"
headers = {{ "X-Api-Key" = "env:{SECRET_VAR}" }}

[[tools.declared]]
name = "publish_facts"
description = "Publish facts"
effect = "write"
idempotent = true
timeout_ms = 5000
retry = {{ max = 2, backoff_ms = 10 }}
source = {{ kind = "http", url = "{base}/publish", bearer_env = "{SECRET_VAR}" }}
"#,
        db = dir.join("weft.db").display()
    );
    let file = dir.join("weft.toml");
    std::fs::write(&file, toml).unwrap();
    let no_env = |_: &str| None;
    let loaded = load_checked(
        &Inputs {
            file: Some(file),
            dir: dir.clone(),
            env: &no_env,
            flags: Vec::new(),
        },
        &Openers::default(),
    );
    assert!(!loaded.has_errors(), "{:?}", loaded.findings);
    assert_eq!(loaded.config.tools.declared.len(), 2);

    let node = Builder::new(loaded.config).open().await.unwrap();
    let spec = node.registry().get("publish_facts").unwrap().spec().clone();
    assert_eq!(spec.effect, weft_core::Effect::Write);
    let d = node.durable().unwrap();
    d.register(
        "local",
        json!({"plan_name": "facts", "graph_type": "acyclic",
        "events": {"start": {}, "extracted": {}, "done": {"kind": "output"}},
        "steps": {
            "extract": {"on": ["start"], "action": "extract_facts",
                "args": {"text": "${start.text}"}, "emits": ["extracted"]},
            "publish": {"on": ["extracted"], "action": "publish_facts",
                "args": {"facts": "${extracted.facts}"}, "emits": ["done"]}
        }}),
    )
    .await
    .unwrap();
    let h = d
        .start("local", "facts", json!({"text": "Ada wrote programs"}))
        .unwrap();
    let id = h.id().to_string();
    let outcome = tokio::time::timeout(Duration::from_secs(30), d.wait(&h))
        .await
        .expect("the instance settles")
        .unwrap();
    assert_eq!(outcome.status, Status::Completed, "{outcome:?}");
    assert_eq!(outcome.results_json(), json!({"done": {"published": 3}}));

    // What the endpoint saw: the args, the secret headers, the call's identity; the retry
    // of the write carries the same idempotency key.
    let seen = peer.seen.lock().unwrap().clone();
    let extract: Vec<&Seen> = seen.iter().filter(|s| s.path == "/extract").collect();
    let publish: Vec<&Seen> = seen.iter().filter(|s| s.path == "/publish").collect();
    assert_eq!(extract.len(), 1, "{seen:?}");
    assert_eq!(publish.len(), 2, "a 503, then the retry: {seen:?}");
    assert_eq!(extract[0].body, json!({"text": "Ada wrote programs"}));
    assert_eq!(extract[0].headers["x-api-key"], SECRET);
    assert_eq!(extract[0].headers["x-weft-instance"], id);
    assert_eq!(extract[0].headers["x-weft-step"], "extract");
    assert_eq!(
        publish[0].body,
        json!({"facts": ["Ada", "wrote", "programs"]})
    );
    assert_eq!(
        publish[0].headers["authorization"],
        format!("Bearer {SECRET}")
    );
    assert_eq!(publish[0].headers["x-weft-step"], "publish");
    let key = &publish[0].headers["idempotency-key"];
    assert!(!key.is_empty());
    assert_eq!(&publish[1].headers["idempotency-key"], key);
    assert_ne!(&extract[0].headers["idempotency-key"], key);

    // The journal: both results recorded, the chain intact, and no trace of the secret.
    d.flush().await.unwrap();
    let store = node.store().unwrap();
    let seen = weft_durable::inspect(&**store, node.engine(), &id, None)
        .await
        .unwrap();
    let results: Vec<&Value> = seen
        .events
        .iter()
        .filter(|e| e.kind == "action.result")
        .map(|e| &e.body)
        .collect();
    assert_eq!(results.len(), 2, "{:#?}", seen.events);
    let journal = serde_json::to_string(&seen.events).unwrap();
    assert!(journal.contains("programs"), "{journal}");
    assert!(journal.contains("\"published\":3"), "{journal}");
    assert!(!journal.contains(SECRET), "the secret is in the journal");
    let report = weft_durable::verify(&**store, &id).await.unwrap();
    assert_eq!(report.records, seen.head, "{report:?}");

    d.shutdown().await.unwrap();
    drop(h);
    drop(node);
    let _ = std::fs::remove_dir_all(&dir);
}
