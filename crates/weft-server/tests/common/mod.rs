//! Shared helpers of the router tests: a server state over a real store (temp SQLite, or
//! PostgreSQL in its own schema), requests sent in-process with `oneshot`, bodies read back
//! as JSON.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, Response, StatusCode};
use serde_json::{Value, json};
use tower::ServiceExt as _;
use weft_server::{AppState, ServerConfig};
use weft_store::Store;

pub(crate) const TOK_A: &str = "tok-a";
pub(crate) const TOK_B: &str = "tok-b";

/// A test server: the router, its state and the temp dir holding the store.
pub(crate) struct Srv {
    pub app: Router,
    pub state: AppState,
    _dir: Option<tempfile::TempDir>,
}

pub(crate) fn two_tenants() -> ServerConfig {
    ServerConfig {
        tokens: HashMap::from([
            (TOK_A.to_string(), "tenant-a".to_string()),
            (TOK_B.to_string(), "tenant-b".to_string()),
        ]),
        ..ServerConfig::default()
    }
}

pub(crate) async fn sqlite(config: ServerConfig) -> Srv {
    sqlite_with(weft_node::Config::default(), config).await
}

/// [`sqlite`] with a node configuration of the test's own (declared tools, …).
pub(crate) async fn sqlite_with(node: weft_node::Config, config: ServerConfig) -> Srv {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weft.db");
    let store: Arc<dyn Store> = weft_store_sqlite::open(path.to_str().expect("utf-8 path"))
        .await
        .expect("open sqlite");
    let (state, _) = AppState::open(weft_node::Builder::new(node), Some(store), config)
        .await
        .expect("state");
    Srv {
        app: weft_server::app(state.clone()),
        state,
        _dir: Some(dir),
    }
}

/// A server over the SQLite file at `path` (kept by the caller: a second call is a restart).
pub(crate) async fn sqlite_at(path: &std::path::Path, config: ServerConfig) -> Srv {
    let store: Arc<dyn Store> = weft_store_sqlite::open(path.to_str().expect("utf-8 path"))
        .await
        .expect("open sqlite");
    on_store(store, config).await
}

/// A server over `store` (a wrapper injecting faults, say).
pub(crate) async fn on_store(store: Arc<dyn Store>, config: ServerConfig) -> Srv {
    on_node(weft_node::Config::default(), store, config).await
}

/// A server over `store` whose node has the configuration `node` (`weft.toml`).
pub(crate) async fn on_node(
    node: weft_node::Config,
    store: Arc<dyn Store>,
    config: ServerConfig,
) -> Srv {
    let (state, _) = AppState::open(weft_node::Builder::new(node), Some(store), config)
        .await
        .expect("state");
    Srv {
        app: weft_server::app(state.clone()),
        state,
        _dir: None,
    }
}

/// A PostgreSQL-backed server in a fresh schema at `WEFT_TEST_POSTGRES_URL`. The tests
/// calling this are ignored unless the variable was set at build time (`cfg(weft_postgres)`,
/// see `build.rs`), so a missing variable here is a failure with a hint, never a skip.
pub(crate) async fn postgres(config: ServerConfig, test: &str) -> Srv {
    let url = match std::env::var("WEFT_TEST_POSTGRES_URL") {
        Ok(url) if !url.is_empty() => url,
        _ => panic!(
            "{test} needs PostgreSQL and WEFT_TEST_POSTGRES_URL is not set (it was when the \
             test was built): export WEFT_TEST_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test \
             (bash .ci/run starts the server)"
        ),
    };
    let schema = format!(
        "weft_server_{}_{}",
        test.replace(|c: char| !c.is_ascii_alphanumeric(), "_"),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() % 1_000_000_000_000)
            .unwrap_or_default()
    );
    postgres_in(config, &url, &schema).await
}

/// A PostgreSQL-backed server in `schema` (a second call with the same schema is a restart).
pub(crate) async fn postgres_in(config: ServerConfig, url: &str, schema: &str) -> Srv {
    let store: Arc<dyn Store> = Arc::new(
        weft_store_postgres::PgStore::open_in_schema(url, Some(schema))
            .await
            .expect("open postgres"),
    );
    let (state, _) = AppState::open(
        weft_node::Builder::new(weft_node::Config::default()),
        Some(store),
        config,
    )
    .await
    .expect("state");
    Srv {
        app: weft_server::app(state.clone()),
        state,
        _dir: None,
    }
}

/// A request builder with an optional bearer token.
pub(crate) fn req(method: &str, uri: &str, token: Option<&str>) -> axum::http::request::Builder {
    let mut b = Request::builder().method(method).uri(uri);
    if let Some(t) = token {
        b = b.header("authorization", format!("Bearer {t}"));
    }
    b
}

impl Srv {
    /// A server over an already opened state (tests that reopen a store).
    pub(crate) fn from_state(state: AppState) -> Srv {
        Srv {
            app: weft_server::app(state.clone()),
            state,
            _dir: None,
        }
    }

    pub(crate) async fn send(&self, r: Request<Body>) -> Response<Body> {
        self.app.clone().oneshot(r).await.expect("infallible")
    }

    /// Sends and returns (status, JSON body or the text as a JSON string, content type).
    pub(crate) async fn call(&self, r: Request<Body>) -> (StatusCode, Value, String) {
        let res = self.send(r).await;
        let status = res.status();
        let ct = res
            .headers()
            .get("content-type")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_string();
        let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
            .await
            .expect("body");
        let v = serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
        (status, v, ct)
    }

    pub(crate) async fn get(&self, uri: &str, token: Option<&str>) -> (StatusCode, Value) {
        let (s, v, _) = self
            .call(req("GET", uri, token).body(Body::empty()).expect("request"))
            .await;
        (s, v)
    }

    pub(crate) async fn post(
        &self,
        uri: &str,
        token: Option<&str>,
        body: &Value,
    ) -> (StatusCode, Value) {
        let (s, v, _) = self
            .call(
                req("POST", uri, token)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))
                    .expect("request"),
            )
            .await;
        (s, v)
    }

    /// Creates a plan from `examples/<file>`.
    pub(crate) async fn create_example(&self, file: &str, token: Option<&str>) -> Value {
        let doc: Value = serde_json::from_str(
            &std::fs::read_to_string(format!(
                "{}/../../examples/{file}",
                env!("CARGO_MANIFEST_DIR")
            ))
            .expect("example"),
        )
        .expect("json");
        let (s, v) = self.post("/v1/plans", token, &doc).await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        v
    }

    /// Polls an instance until its status is `want` (or fails after 10 s).
    pub(crate) async fn wait_status(&self, id: &str, token: Option<&str>, want: &str) -> Value {
        for _ in 0..500 {
            let (s, v) = self.get(&format!("/v1/instances/{id}"), token).await;
            assert_eq!(s, StatusCode::OK, "{v}");
            if v["status"] == want {
                return v;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        panic!("instance {id} never reached {want}");
    }
}

/// A reactive plan: every `tick` event is echoed to the output `seen`.
pub(crate) fn ticker() -> Value {
    json!({
        "plan_name": "ticker",
        "graph_type": "reactive",
        "events": {
            "tick": {"kind": "input"},
            "seen": {"kind": "output"}
        },
        "steps": {
            "count": {"on": ["tick"], "action": "echo", "args": {"n": "${tick.n}"}, "emits": ["seen"]}
        }
    })
}

pub(crate) fn cloud_event(ty: &str, n: u64, instance: Option<&str>) -> Value {
    // Unique ids: the server applies an event's `source` + `id` once (deduplication).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut e = json!({"specversion": "1.0", "id": format!("e-{n}-{k}"), "source": "/test", "type": ty, "data": {"n": n}});
    if let Some(i) = instance {
        e["weftinstance"] = json!(i);
    }
    e
}
