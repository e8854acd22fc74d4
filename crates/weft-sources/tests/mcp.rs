//! The `mcp` source against a real MCP server: `python/mcp-test-server/server.py` on the
//! official MCP Python SDK, run by the venv python of `WEFT_TEST_MCP_PYTHON`
//! (`scripts/mcp-test-env.sh`; read at build time by `build.rs`, the tests are ignored
//! without it). Discovery (prefixed names, schemas, effect classes from the annotations),
//! calls over stdio and streamable HTTP, structured and text results, `isError` results,
//! and a server that dies mid-call: the call fails at once with `mcp_unavailable` and the
//! server is restarted (stdio: respawned; HTTP: reconnected) so later calls succeed.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_core::Effect;
use weft_sources::{McpServerDef, discover};
use weft_tools::{Tool, ToolContext, ToolError};

fn python() -> String {
    match std::env::var("WEFT_TEST_MCP_PYTHON") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "this test needs the MCP test server and WEFT_TEST_MCP_PYTHON is not set (it was \
             when the test was built): export WEFT_TEST_MCP_PYTHON=$(bash scripts/mcp-test-env.sh)"
        ),
    }
}

fn server_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/mcp-test-server/server.py")
}

fn stdio_def(name: &str) -> McpServerDef {
    serde_json::from_value(json!({
        "name": name,
        "command": [python(), server_py()],
        "timeout_ms": 20_000,
    }))
    .unwrap()
}

fn http_def(name: &str, port: u16) -> McpServerDef {
    serde_json::from_value(json!({
        "name": name,
        "url": format!("http://127.0.0.1:{port}/mcp"),
        "timeout_ms": 20_000,
    }))
    .unwrap()
}

fn find(tools: &[Arc<dyn Tool>], name: &str) -> Arc<dyn Tool> {
    tools
        .iter()
        .find(|t| t.spec().name == name)
        .cloned()
        .unwrap_or_else(|| panic!("no tool `{name}`"))
}

async fn call(tools: &[Arc<dyn Tool>], name: &str, args: Value) -> Result<Value, ToolError> {
    find(tools, name)
        .call(ToolContext::detached("mcp-test"), args)
        .await
}

/// The server over streamable HTTP on a free port, killed on drop.
struct HttpServer {
    child: Child,
    port: u16,
}

impl HttpServer {
    fn start(port: Option<u16>) -> HttpServer {
        let port = port.unwrap_or_else(|| {
            std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap()
                .port()
        });
        let child = Command::new(python())
            .arg(server_py())
            .args(["--http", &port.to_string()])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("start the MCP test server");
        // Ready when it accepts connections.
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "the HTTP server did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        HttpServer { child, port }
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Calls `name` until it succeeds (the server is back), failing after `within`; every
/// failure meanwhile must be a retryable `mcp_unavailable`.
async fn until_back(tools: &[Arc<dyn Tool>], name: &str, args: Value, within: Duration) -> Value {
    let deadline = Instant::now() + within;
    loop {
        match call(tools, name, args.clone()).await {
            Ok(v) => return v,
            Err(e) => {
                assert_eq!(e.code, "mcp_unavailable", "{e:?}");
                assert!(e.retryable, "{e:?}");
                assert!(
                    Instant::now() < deadline,
                    "the server did not come back: {e:?}"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn the_tools_are_listed_with_prefixed_names_schemas_and_effects() {
    let tools = discover(&[stdio_def("notes")]).await.unwrap();
    let mut names: Vec<&str> = tools.iter().map(|t| t.spec().name.as_str()).collect();
    names.sort_unstable();
    assert_eq!(
        names,
        [
            "notes.add",
            "notes.die",
            "notes.fail",
            "notes.getenv",
            "notes.liar",
            "notes.pid",
            "notes.sleep",
            "notes.slug",
            "notes.structured",
            "notes.typed",
            "notes.write_note"
        ]
    );

    // readOnlyHint + idempotentHint: read, idempotent; the inputSchema is the args schema.
    let add = find(&tools, "notes.add");
    let spec = add.spec();
    assert_eq!((spec.effect, spec.idempotent), (Effect::Read, true));
    assert_eq!(spec.description, "Add two integers");
    assert_eq!(spec.args_schema["type"], "object");
    assert_eq!(spec.args_schema["required"], json!(["a", "b"]));
    assert_eq!(spec.args_schema["properties"]["a"]["type"], "integer");
    // destructiveHint: write, not idempotent.
    let note = find(&tools, "notes.write_note");
    assert_eq!(
        (note.spec().effect, note.spec().idempotent),
        (Effect::Write, false)
    );
    assert_eq!(
        note.spec().args_schema["properties"]["text"]["type"],
        "string"
    );
    // No annotations: assume the worst.
    let s = find(&tools, "notes.structured");
    assert_eq!(
        (s.spec().effect, s.spec().idempotent),
        (Effect::Write, false)
    );

    // A published input schema weft cannot check in linear time (a lookahead) keeps the
    // tool, its schema shown as published, its args unchecked here.
    let slug = find(&tools, "notes.slug");
    assert_eq!(
        slug.spec().args_schema["properties"]["name"]["pattern"],
        "^(?!-)[a-z-]+$"
    );
    assert!(weft_core::schema::compile(&slug.spec().args_schema).is_err());
    let echoed = call(&tools, "notes.slug", json!({"name": "-not-checked"}))
        .await
        .expect("the slug call");
    assert_eq!(echoed, json!("-not-checked"));

    // A second server gets its own prefix.
    let two = discover(&[stdio_def("a"), stdio_def("b")]).await.unwrap();
    assert!(two.iter().any(|t| t.spec().name == "a.add"));
    assert!(two.iter().any(|t| t.spec().name == "b.add"));
    assert_eq!(two.len(), 2 * names.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn calls_over_stdio_return_text_and_structured_content() {
    let tools = discover(&[stdio_def("t")]).await.unwrap();
    // One text item "5": parsed as JSON.
    assert_eq!(
        call(&tools, "t.add", json!({"a": 2, "b": 3}))
            .await
            .unwrap(),
        json!(5)
    );
    // One text item that is not JSON: the string.
    assert_eq!(
        call(&tools, "t.write_note", json!({"text": "hello"}))
            .await
            .unwrap(),
        json!("noted 1: hello")
    );
    // Structured content wins over the text rendering of it.
    assert_eq!(
        call(&tools, "t.structured", json!({})).await.unwrap(),
        json!({"city": "Lyon", "population": 522250, "tags": ["rhone", "saone"]})
    );
    // Wrong arguments are the server's refusal or its tool error: never a success.
    let e = call(&tools, "t.add", json!({"a": "x"})).await.unwrap_err();
    assert!(!e.retryable, "{e:?}");
    // A published outputSchema checks every result: one that keeps it passes, one that
    // breaks it is a step failure, never a silent pass.
    assert_eq!(
        call(&tools, "t.typed", json!({"city": "Lyon"}))
            .await
            .unwrap()["city"],
        "Lyon"
    );
    let e = call(&tools, "t.liar", json!({})).await.unwrap_err();
    assert_eq!(e.code, "output_invalid", "{e:?}");
    assert!(e.message.contains("output_schema"), "{e:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn a_stdio_server_gets_only_the_listed_environment_and_its_cwd() {
    // A relative script against `cwd`; `cargo test` sets CARGO_PKG_NAME and
    // CARGO_MANIFEST_DIR in this process: only the listed one reaches the server.
    let dir = server_py().parent().unwrap().canonicalize().unwrap();
    let def: McpServerDef = serde_json::from_value(json!({
        "name": "envy",
        "command": [python(), "server.py"],
        "cwd": dir,
        "env": ["CARGO_PKG_NAME"],
    }))
    .unwrap();
    let tools = discover(&[def]).await.unwrap();
    let get = |name: &str| call(&tools, "envy.getenv", json!({ "name": name }));
    assert_eq!(get("CARGO_PKG_NAME").await.unwrap(), json!("weft-sources"));
    assert!(std::env::var_os("CARGO_MANIFEST_DIR").is_some());
    assert_eq!(get("CARGO_MANIFEST_DIR").await.unwrap(), json!(""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn an_error_result_is_a_fatal_mcp_tool_error_with_the_text() {
    let tools = discover(&[stdio_def("t")]).await.unwrap();
    let e = call(&tools, "t.fail", json!({})).await.unwrap_err();
    assert_eq!(e.code, "mcp_tool_error", "{e:?}");
    assert!(!e.retryable, "{e:?}");
    assert!(
        e.message.contains("the fail tool failed on purpose"),
        "{e:?}"
    );
    assert!(e.message.contains("t.fail"), "{e:?}");
    // The server is still fine.
    assert_eq!(
        call(&tools, "t.add", json!({"a": 1, "b": 1}))
            .await
            .unwrap(),
        json!(2)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn a_stdio_server_that_dies_mid_call_fails_the_call_at_once_and_is_respawned() {
    let tools = discover(&[stdio_def("srv")]).await.unwrap();
    let first = call(&tools, "srv.pid", json!({})).await.unwrap();
    assert!(first.is_u64(), "{first}");

    // A slow call in flight, then a call that kills the server.
    let slow = {
        let tools = tools.clone();
        tokio::spawn(async move { call(&tools, "srv.sleep", json!({"ms": 15_000})).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    let e = call(&tools, "srv.die", json!({})).await.unwrap_err();
    assert_eq!(e.code, "mcp_unavailable", "{e:?}");
    assert!(e.retryable, "{e:?}");
    assert!(e.message.contains("`srv`"), "names the server: {e:?}");
    // At once: not after the tool's 20 s timeout, nor the slow call's 15 s.
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let e = tokio::time::timeout(Duration::from_secs(5), slow)
        .await
        .expect("the call in flight fails at once too")
        .unwrap()
        .unwrap_err();
    assert_eq!(e.code, "mcp_unavailable", "{e:?}");

    // Restarted in the background: a new process answers.
    let again = until_back(&tools, "srv.pid", json!({}), Duration::from_secs(20)).await;
    assert!(again.is_u64(), "{again}");
    assert_ne!(again, first, "a new server process");
    assert_eq!(
        call(&tools, "srv.add", json!({"a": 20, "b": 22}))
            .await
            .unwrap(),
        json!(42)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn calls_over_streamable_http_and_a_reconnect_after_the_server_restarts() {
    let mut server = HttpServer::start(None);
    let tools = discover(&[http_def("web", server.port)]).await.unwrap();
    let add = find(&tools, "web.add");
    assert_eq!(
        (add.spec().effect, add.spec().idempotent),
        (Effect::Read, true)
    );
    assert_eq!(
        call(&tools, "web.add", json!({"a": 40, "b": 2}))
            .await
            .unwrap(),
        json!(42)
    );
    assert_eq!(
        call(&tools, "web.structured", json!({})).await.unwrap()["city"],
        "Lyon"
    );
    let e = call(&tools, "web.fail", json!({})).await.unwrap_err();
    assert_eq!(e.code, "mcp_tool_error", "{e:?}");
    let first = call(&tools, "web.pid", json!({})).await.unwrap();

    // The server goes away: calls fail at once, retryably, naming it.
    server.kill();
    let started = Instant::now();
    let e = call(&tools, "web.add", json!({"a": 1, "b": 2}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "mcp_unavailable", "{e:?}");
    assert!(e.retryable, "{e:?}");
    assert!(e.message.contains("`web`"), "{e:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );

    // It comes back on the same port: the source reconnects.
    let _server = HttpServer::start(Some(server.port));
    let again = until_back(&tools, "web.pid", json!({}), Duration::from_secs(30)).await;
    assert_ne!(again, first, "the new server answered");
    assert_eq!(
        call(&tools, "web.add", json!({"a": 1, "b": 2}))
            .await
            .unwrap(),
        json!(3)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_definitions_and_unreachable_servers_fail_discovery() {
    async fn discover_err(defs: &[McpServerDef]) -> String {
        match discover(defs).await {
            Ok(tools) => panic!("discovered {} tools", tools.len()),
            Err(e) => e.to_string(),
        }
    }
    let parse = |v: Value| serde_json::from_value::<McpServerDef>(v);
    // Unknown keys are errors.
    assert!(parse(json!({"name": "x", "url": "http://127.0.0.1:1/mcp", "bogus": 1})).is_err());
    // Neither or both of command/url.
    let neither = parse(json!({"name": "x"})).unwrap();
    let e = discover_err(&[neither]).await;
    assert!(e.contains("`command`"), "{e}");
    let both =
        parse(json!({"name": "x", "url": "http://127.0.0.1:1/mcp", "command": ["true"]})).unwrap();
    assert!(discover(&[both]).await.is_err());
    // A program that does not exist.
    let missing = parse(json!({"name": "x", "command": ["/nonexistent/weft-mcp-server"]})).unwrap();
    let e = discover_err(&[missing]).await;
    assert!(e.contains("mcp_unavailable") && e.contains("`x`"), "{e}");
    // Nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody =
        parse(json!({"name": "y", "url": format!("http://127.0.0.1:{port}/mcp")})).unwrap();
    let e = tokio::time::timeout(Duration::from_secs(30), discover_err(&[nobody]))
        .await
        .expect("fails, does not hang");
    assert!(e.contains("mcp_unavailable") && e.contains("`y`"), "{e}");
}
