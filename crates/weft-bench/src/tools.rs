//! `weft bench tools`: what weft adds to a call of each kind of declared tool (issue #24's goal:
//! under 50 µs p99 added by weft itself), and the throughput of `command` calls and of
//! `worker` calls over NATS.
//!
//! For each kind the same endpoint is called three ways, one call at a time, the ways taking
//! turns within each sample (their order rotating, so drift hits them alike):
//! - **direct**: the same client library and protocol as the source, without weft — `http`:
//!   reqwest POSTs the JSON args (with the same headers) to an axum endpoint on loopback in this
//!   process that echoes them; `command`: tokio starts `/bin/cat` (no shell), writes the args to
//!   its stdin and parses its stdout; `worker`: async-nats sends the same CloudEvent to two
//!   Python workers (`fixtures/tools_worker.py`, `python/weft-worker`) and parses the reply;
//!   `worker_rust`: the same against a worker written in Rust in this process (an async-nats
//!   queue subscriber on a thread and runtime of its own that answers at once), a peer
//!   without Python's tail, so that the p99 difference is weft's rather than the worker's;
//!   `mcp` (stdio) and `mcp_http` (streamable HTTP): an `rmcp` client (the official Rust SDK,
//!   with the transports and features of weft's `mcp` source) calls `add` with `{"a": n, "b":
//!   0}` on its own instance of the MCP test server (`python/mcp-test-server/server.py`, the
//!   official Python SDK) and parses the one text item of the result;
//! - **tool**: the declared tool alone (its source and the declared-tool wrapper), outside
//!   the engine — for `mcp`, the tool `weft_sources::discover` finds on another instance of
//!   the server;
//! - **weft**: a one-step instance whose step calls the tool, declared as a
//!   `[[tools.declared]]` entry (`mcp`: discovered from a `[[tools.mcp]]` entry, on a server
//!   instance of the node's own; `WEFT_BENCH_TOOLS_MCP_ONE_SERVER=1` has every `mcp_http`
//!   way call one server instance), on a node `weft-node` assembles (registry, tool-call
//!   chain, engine dispatch, the declared-tool wrapper: timeout, output rules), from `start`
//!   until `wait` returns the checked result — in memory, and on the durable SQLite journal
//!   as a second figure (which includes the fsync'd commits the durability contract
//!   requires).
//!
//! The measuring code runs as a task of a two-worker runtime, as a server's handlers do.
//!
//! A `fixed` tool (no I/O) gives weft's own cost of such a step alone. Two in-process tools
//! without a peer take the engine's path of a pending call, as the I/O kinds do: `yield` (woken at once)
//! and `sleep` (a timer of 2 ms, about an MCP peer's latency here; `WEFT_BENCH_TOOLS_SLEEP_MS`).
//! Their own times differ only by the wait: what an idle core's cold caches do to the same
//! engine path, with no peer sharing the machine. `tools_idle_reference` does the same for code
//! that is not weft's: a computation, a read of 512 KiB in order and 300 loads that each
//! wait for the one before, warm and after the same sleep (`WEFT_BENCH_TOOLS_IDLE` samples,
//! 0 skips it), how much of a slow one's time was the thread's CPU time rather than the
//! host's steal, and the same loads after waits from 0.1 to 10 ms.
//! `WEFT_BENCH_TOOLS_EVICT_MIB` empties the caches before each call of the engine way (for
//! counting the cold path's misses under callgrind). The reported
//! difference is p50(weft) − p50(direct) and p99(weft) − p99(direct). Beside it, call by
//! call, weft's **own** time: each engine-way call's round trip less the tool call inside
//! it, as a `Stopwatch` timer at the chain's metrics stage times it (`own_p50_us`,
//! `own_p99_us`, also p90, p99.9 and the largest; `own_before_*` until the tool is called,
//! `own_after_*` from its result to `wait`; `own_over_goal`, the share of calls whose own time
//! is over the goal of 50 µs, which a p99 under the goal keeps under 1%;
//! `WEFT_BENCH_TOOLS_OWN_SAMPLES=<dir>` writes each call's two parts to `<dir>/<kind>.txt`).
//! It does not move with the peer's tail, which a difference of two p99s does (a Python
//! server's tail swings that by ±130 µs); the source's own part, the tool alone
//! against the direct client, is `source_added_p50_us`. Worker throughput:
//! 20,000 calls, 256 in flight, through the engine (one instance per call), through the
//! declared tool alone and with a raw async-nats client, all against the same two workers.
//! Command throughput: 2,000 calls (`WEFT_BENCH_TOOLS_COMMAND_THROUGHPUT`; 0 skips it), 16 in
//! flight, the same three ways as the latency figures.
//!
//! The worker parts need NATS (`WEFT_TEST_NATS_URL`, default `nats://127.0.0.1:4222`) and the
//! Python venv of `scripts/python-env.sh` (`WEFT_TEST_PYTHON`); the `mcp` kinds the venv of
//! `scripts/mcp-test-env.sh` (`WEFT_TEST_MCP_PYTHON`). Without them they are skipped with a
//! message on stderr. Figures: `docs/performance.md`.

use std::future::Future;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use rmcp::ServiceExt;
use rmcp::model::CallToolRequestParams;
use rmcp::service::{RoleClient, RunningService};
use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;
use rmcp::transport::{StreamableHttpClientTransport, TokioChildProcess};
use serde_json::{Value, json};
use weft_durable::Durable;
use weft_runtime::{CompiledPlan, Engine, StartOptions};
use weft_tools::{Tool, ToolContext};

use crate::engine::{line, round};

/// The workload names this module runs.
pub const DEFAULT: &[&str] = &["tools"];

/// Set: every `mcp_http` way calls one server instance.
const ONE_SERVER_VAR: &str = "WEFT_BENCH_TOOLS_MCP_ONE_SERVER";

/// The tenant of every call: one of this process's own (`bench<pid>`), so that no other
/// process's workers share its NATS subjects.
fn tenant() -> &'static str {
    static T: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    T.get_or_init(|| format!("bench{}", std::process::id()))
}

/// The count `WEFT_BENCH_TOOLS_<name>` sets, else `default`.
fn count(name: &str, default: usize) -> usize {
    std::env::var(format!("WEFT_BENCH_TOOLS_{name}"))
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Samples per kind (direct and weft each), after a tenth as many untimed.
fn samples(kind: &str) -> usize {
    let default = match kind {
        "fixed" => 20_000,
        "command" => 1_000,
        "sleep" => 2_000,
        _ => 5_000,
    };
    count(&kind.to_ascii_uppercase(), default)
}

/// Samples of the durable figure (each has fsync'd commits).
fn durable_samples() -> usize {
    count("DURABLE", 500)
}

/// Runs `tools`: one JSON line per kind and one for worker throughput, on `out`.
pub fn run(out: &mut dyn Write) -> Result<(), String> {
    // Two runtime workers, as `weft serve` has on this machine (`WEFT_BENCH_TOOLS_THREADS`
    // changes it, to see what moving between threads costs).
    let threads = std::env::var("WEFT_BENCH_TOOLS_THREADS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    // The measuring task is a runtime task, as a server's request handler is (not the
    // `block_on` thread); its lines come back over a channel.
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Value>();
    let task = rt.spawn(run_all(tx));
    rt.block_on(async {
        while let Some(v) = rx.recv().await {
            emit(out, &v)?;
        }
        task.await
            .map_err(|e| format!("the benchmark task failed: {e}"))?
    })
}

/// The NATS URL and Python interpreter for the worker parts, or why they are skipped.
async fn worker_env() -> Result<(String, String, PathBuf), String> {
    let url = std::env::var("WEFT_TEST_NATS_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| weft_sources::worker::DEFAULT_URL.into());
    let python = std::env::var("WEFT_TEST_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or("WEFT_TEST_PYTHON is not set (the venv python of scripts/python-env.sh)")?;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools_worker.py");
    if !script.exists() {
        return Err(format!(
            "{} is not here (run from a checkout)",
            script.display()
        ));
    }
    let probe = tokio::time::timeout(Duration::from_secs(2), async_nats::connect(&*url)).await;
    match probe {
        Ok(Ok(_)) => Ok((url, python, script)),
        Ok(Err(e)) => Err(format!("no NATS server at {url}: {e}")),
        Err(_) => Err(format!("no NATS server at {url} (connect timed out)")),
    }
}

/// A Python process (a worker, an MCP server over HTTP); killed when dropped.
struct PyWorker(Child);

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(python: &str, script: &Path, url: &str, tenant: &str) -> Result<PyWorker, String> {
    let lib = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker");
    let mut child = Command::new(python)
        .arg(script)
        .args(["--url", url, "--tenant", tenant, "--mode", "bench"])
        .env("PYTHONPATH", lib)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start {python}: {e}"))?;
    let mut lines = BufReader::new(child.stderr.take().ok_or("no stderr")?).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    let w = PyWorker(child);
    if !first.contains("serving") {
        return Err(format!("the Python worker did not start: {first}"));
    }
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
    Ok(w)
}

/// A worker written in Rust for the `worker_rust` kind: an async-nats queue subscriber on a
/// thread and current-thread runtime of its own (as a separate process would be) that
/// answers each call with `{"result": args}` at once. A peer without Python's tail, so that
/// the p99 difference shows weft's share rather than the worker's. Stops when the returned
/// sender is dropped.
async fn start_rust_worker(
    url: &str,
    subject: &str,
) -> Result<tokio::sync::oneshot::Sender<()>, String> {
    let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
    let (ready, is_ready) = tokio::sync::oneshot::channel::<Result<(), String>>();
    let (url, subject) = (url.to_string(), subject.to_string());
    std::thread::Builder::new()
        .name("bench-rust-worker".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => rt,
                Err(e) => return drop(ready.send(Err(e.to_string()))),
            };
            rt.block_on(async move {
                let subscribed = async {
                    let c = async_nats::connect(&*url)
                        .await
                        .map_err(|e| e.to_string())?;
                    let sub = c
                        .queue_subscribe(subject, "weft".into())
                        .await
                        .map_err(|e| e.to_string())?;
                    c.flush().await.map_err(|e| e.to_string())?;
                    Ok::<_, String>((c, sub))
                };
                let (c, mut sub) = match subscribed.await {
                    Ok(x) => x,
                    Err(e) => return drop(ready.send(Err(e))),
                };
                let _ = ready.send(Ok(()));
                loop {
                    let m = tokio::select! {
                        _ = &mut stopped => break,
                        m = sub.next() => match m { Some(m) => m, None => break },
                    };
                    let Some(reply) = m.reply else { continue };
                    let args = serde_json::from_slice::<Value>(&m.payload)
                        .map(|mut v| v["data"]["args"].take())
                        .unwrap_or(Value::Null);
                    let body = serde_json::to_vec(&json!({ "result": args })).unwrap_or_default();
                    let _ = c.publish(reply, body.into()).await;
                }
            });
        })
        .map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(10), is_ready).await {
        Ok(Ok(Ok(()))) => Ok(stop),
        Ok(Ok(Err(e))) => Err(format!("the Rust worker could not subscribe: {e}")),
        Ok(Err(_)) => Err("the Rust worker's thread ended before subscribing".into()),
        Err(_) => Err("the Rust worker did not subscribe within 10 s".into()),
    }
}

/// The MCP test server (`python/mcp-test-server/server.py`) and the venv python that runs it
/// (`WEFT_TEST_MCP_PYTHON`), or why the `mcp` kinds are skipped.
fn mcp_env() -> Result<(String, PathBuf), String> {
    let python = std::env::var("WEFT_TEST_MCP_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or("WEFT_TEST_MCP_PYTHON is not set (the venv python of scripts/mcp-test-env.sh)")?;
    if !Path::new(&python).exists() {
        return Err(format!("WEFT_TEST_MCP_PYTHON: {python} is not here"));
    }
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/mcp-test-server/server.py");
    let script = script
        .canonicalize()
        .map_err(|e| format!("{}: {e} (run from a checkout)", script.display()))?;
    Ok((python, script))
}

/// The MCP test server over streamable HTTP on a free loopback port (its output discarded),
/// once it accepts connections; with its URL.
async fn mcp_http_server(python: &str, script: &Path) -> Result<(PyWorker, String), String> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let child = Command::new(python)
        .arg(script)
        .args(["--http", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("cannot start {python}: {e}"))?;
    let mut server = PyWorker(child);
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = server.0.try_wait() {
            return Err(format!("the MCP test server exited: {status}"));
        }
        if Instant::now() > deadline {
            return Err(format!("the MCP test server is not listening on {port}"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok((server, format!("http://127.0.0.1:{port}/mcp")))
}

/// The `[[tools.mcp]]` entry of a server named `name`: over stdio when `url` is `None` (weft
/// starts it, with nothing of its environment), else over streamable HTTP.
fn mcp_def(
    name: &str,
    python: &str,
    script: &Path,
    url: Option<&str>,
) -> Result<weft_sources::McpServerDef, String> {
    let def = match url {
        None => json!({"name": name, "command": [python, script]}),
        Some(url) => json!({"name": name, "url": url}),
    };
    serde_json::from_value(def).map_err(|e| e.to_string())
}

/// A plain rmcp client of an MCP server.
type McpClient = RunningService<RoleClient, ()>;

/// A client connected as the `mcp` source connects: over stdio it starts its own server
/// (cleared environment, stderr inherited), over HTTP it speaks streamable HTTP through
/// reqwest.
async fn mcp_client(python: &str, script: &Path, url: Option<&str>) -> Result<McpClient, String> {
    match url {
        None => {
            let mut cmd = tokio::process::Command::new(python);
            cmd.arg(script).env_clear();
            let (transport, _) = TokioChildProcess::builder(cmd)
                .stderr(Stdio::inherit())
                .spawn()
                .map_err(|e| format!("cannot start {python}: {e}"))?;
            ().serve(transport).await.map_err(|e| e.to_string())
        }
        Some(url) => {
            let transport = StreamableHttpClientTransport::with_client(
                crate_http_client()?,
                StreamableHttpClientTransportConfig::with_uri(url),
            );
            ().serve(transport).await.map_err(|e| e.to_string())
        }
    }
}

/// One MCP kind's own ways: the direct client and the discovered tool, each on a server
/// instance of its own.
struct McpWays {
    kind: &'static str,
    client: McpClient,
    tool: Arc<dyn Tool>,
}

/// `tools/call` of `add` with call `i`'s args, as an rmcp user writes it: the one text item
/// of the result, parsed as JSON, must be `i`.
async fn direct_mcp(client: &McpClient, i: usize) -> Result<(), String> {
    let mut params = CallToolRequestParams::new("add");
    if let Value::Object(m) = Shape::Add.args(i) {
        params.arguments = Some(m);
    }
    let r = client
        .peer()
        .call_tool(params)
        .await
        .map_err(|e| e.to_string())?;
    let text = r
        .content
        .first()
        .and_then(|c| c.as_text())
        .ok_or("no text in the result")?;
    let v: Value = serde_json::from_str(&text.text).map_err(|e| e.to_string())?;
    Shape::Add
        .holds(&v, i)
        .then_some(())
        .ok_or(format!("wrong reply {v}"))
}

/// The echo endpoint on loopback, a task of the measuring runtime (so its requests and the
/// calls share the runtime's two worker threads, and most calls move between them in every
/// way: docs/performance.md, tool sources); returns its URL.
async fn http_echo() -> Result<String, String> {
    let app = axum::Router::new().route(
        "/echo",
        axum::routing::post(|axum::Json(v): axum::Json<Value>| async move { axum::Json(v) }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(format!("http://{addr}/echo"))
}

/// The `command` source: sandboxed as by default (no network, Landlock on the filesystem), or
/// as `WEFT_BENCH_TOOLS_SANDBOX` says (what each part of the sandbox costs per call): `off`
/// (neither), `fs` (the filesystem only: the network given), `net` (the network cut only:
/// everything writable).
fn command_source() -> serde_json::Value {
    match std::env::var("WEFT_BENCH_TOOLS_SANDBOX").as_deref() {
        Ok("off") => json!({"kind": "command", "program": "/bin/cat", "network": true,
            "write_paths": ["/"]}),
        Ok("fs") => json!({"kind": "command", "program": "/bin/cat", "network": true}),
        Ok("net") => json!({"kind": "command", "program": "/bin/cat", "write_paths": ["/"]}),
        _ => json!({"kind": "command", "program": "/bin/cat"}),
    }
}

/// The declared tools, as `[[tools.declared]]` entries.
fn defs(http: &str, nats: Option<&str>) -> Result<Vec<weft_sources::ToolDef>, String> {
    let mut v = vec![
        json!({"name": "t.fixed", "effect": "pure", "idempotent": true,
            "source": {"kind": "fixed", "result": {"n": 0}}}),
        json!({"name": "t.http", "effect": "read", "idempotent": true,
            "source": {"kind": "http", "url": http}}),
        json!({"name": "t.command", "effect": "pure", "idempotent": true,
            "source": command_source()}),
    ];
    if let Some(url) = nats {
        for name in ["bench.echo", "bench.echo_rs"] {
            v.push(json!({"name": name, "effect": "pure", "idempotent": true,
                "source": {"kind": "worker", "url": url}}));
        }
    }
    v.into_iter()
        .map(|d| serde_json::from_value(d).map_err(|e| e.to_string()))
        .collect()
}

fn config(
    defs: Vec<weft_sources::ToolDef>,
    mcp: Vec<weft_sources::McpServerDef>,
) -> weft_node::Config {
    let mut c = weft_node::Config::default();
    c.tools.declared = defs;
    c.tools.mcp = mcp;
    c
}

/// What a kind's calls send and get back: the echoes (`http`, `command`, `worker`) return
/// their args `{"n": i}`, the `fixed` tool `{"n": 0}`; the MCP test server's `add` (read-only,
/// idempotent, a plain text result) is called with `{"a": i, "b": 0}` and answers `i`.
#[derive(Clone, Copy)]
enum Shape {
    Echo,
    Fixed,
    Add,
}

impl Shape {
    fn of(kind: &str) -> Shape {
        match kind {
            "fixed" => Shape::Fixed,
            k if k.starts_with("mcp") => Shape::Add,
            _ => Shape::Echo,
        }
    }

    /// The args of call `i`, and the step's template of them (the input is `{"n": i}`).
    fn args(self, i: usize) -> Value {
        match self {
            Shape::Add => json!({"a": i, "b": 0}),
            Shape::Echo | Shape::Fixed => json!({"n": i}),
        }
    }

    fn template(self) -> Value {
        match self {
            Shape::Add => json!({"a": "${start.n}", "b": 0}),
            Shape::Echo | Shape::Fixed => json!({"n": "${start.n}"}),
        }
    }

    /// Whether `v` is the result of call `i`.
    fn holds(self, v: &Value, i: usize) -> bool {
        match self {
            Shape::Echo => v["n"] == i,
            Shape::Fixed => v["n"] == 0,
            Shape::Add => *v == i,
        }
    }
}

fn plan(kind: &str, action: &str) -> Value {
    json!({"plan_name": format!("tools_{kind}"), "graph_type": "acyclic",
        "events": {"start": {}, "done": {"kind": "output"}},
        "steps": {"s": {"on": ["start"], "action": action, "args": Shape::of(kind).template(),
            "emits": ["done"]}}})
}

/// Latencies in µs, sorted.
struct Dist(Vec<f64>);

impl Dist {
    fn new(mut v: Vec<f64>) -> Dist {
        v.sort_by(f64::total_cmp);
        Dist(v)
    }
    fn p(&self, q: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let k = ((self.0.len() as f64 - 1.0) * q).round() as usize;
        self.0[k.min(self.0.len() - 1)]
    }

    /// The share of samples above `limit`, rounded to four places.
    fn over(&self, limit: f64) -> f64 {
        if self.0.is_empty() {
            return 0.0;
        }
        let above = self.0.len() - self.0.partition_point(|&x| x <= limit);
        (above as f64 / self.0.len() as f64 * 1e4).round() / 1e4
    }
}

/// The goal of issue #24 for weft's own time of a call: 50 µs at p99.
const OWN_GOAL_US: f64 = 50.0;

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One way of making call `i`.
type Way<'a> = Box<dyn Fn(usize) -> BoxFuture<'a, Result<(), String>> + Send + Sync + 'a>;

/// `n` samples of each way, the ways taking turns within a sample (their order rotating from
/// one sample to the next, so drift and caches hit them alike), after `n / 10` untimed rounds.
/// With `watch` = (the engine way's index, the node's [`Stopwatch`]), also weft's own time of
/// each call of that way: its round trip less the tool call inside it. With
/// `WEFT_BENCH_TOOLS_OWN_SAMPLES=<dir>`, the two parts of each own time, call by call in the
/// order made, go to `<dir>/<label>.txt` ("before after" in µs, a line per call).
async fn rounds(
    label: &str,
    n: usize,
    ways: &[Way<'_>],
    watch: (usize, &Stopwatch),
) -> Result<(Vec<Dist>, Own), String> {
    let warm = n / 10;
    let mut d: Vec<Vec<f64>> = ways.iter().map(|_| Vec::with_capacity(n)).collect();
    let mut own = [(); 3].map(|()| Vec::with_capacity(n));
    for i in 0..warm + n {
        for j in 0..ways.len() {
            let w = (i + j) % ways.len();
            watch.1.take();
            if w == watch.0 {
                evict();
            }
            let t = Instant::now();
            ways[w](i).await?;
            let took = us(t.elapsed());
            let inner = watch.1.take();
            if i < warm {
                continue;
            }
            d[w].push(took);
            if w == watch.0 {
                let (at, inner) =
                    inner.ok_or(format!("call {i}: the stopwatch saw no tool call"))?;
                let before = us(at.saturating_duration_since(t));
                let all = took - us(inner);
                own[0].push(all);
                own[1].push(before);
                own[2].push(all - before);
            }
        }
    }
    if let Ok(dir) = std::env::var("WEFT_BENCH_TOOLS_OWN_SAMPLES") {
        let text: String = own[1]
            .iter()
            .zip(&own[2])
            .map(|(b, a)| format!("{b:.2} {a:.2}\n"))
            .collect();
        let path = std::path::Path::new(&dir).join(format!("{label}.txt"));
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    let [all, before, after] = own.map(Dist::new);
    Ok((
        d.into_iter().map(Dist::new).collect(),
        Own { all, before, after },
    ))
}

/// Empties the caches of what the last calls used, before each call of the engine way, when
/// `WEFT_BENCH_TOOLS_EVICT_MIB` is set (0 or unset: never): writes one byte in every 64-byte
/// line of a buffer of that many MiB. The call then starts with caches that hold nothing of
/// its path, whatever the machine did meanwhile (an idle wait also costs it the core's other
/// state, such as its branch predictors'). Under `valgrind --tool=callgrind --cache-sim=yes` with
/// a last-level cache smaller than the buffer, the misses it counts in the call are every line
/// of code and data weft's path touches: a measure of the cold path that, unlike its time,
/// does not drift with the machine (`docs/performance.md`).
#[inline(never)]
fn evict() {
    static BUF: std::sync::OnceLock<Option<Mutex<Vec<u8>>>> = std::sync::OnceLock::new();
    let buf = BUF.get_or_init(|| match count("EVICT_MIB", 0) {
        0 => None,
        mib => Some(Mutex::new(vec![0u8; mib << 20])),
    });
    if let Some(buf) = buf {
        sweep(&mut buf.lock().unwrap_or_else(|e| e.into_inner()));
    }
}

/// Writes the first byte of every 64-byte line of `buf` (each write takes the line into the
/// caches, in place of what they held).
fn sweep(buf: &mut [u8]) {
    for line in buf.chunks_mut(64) {
        line[0] = line[0].wrapping_add(1);
    }
    std::hint::black_box(&*buf);
}

/// weft's own time of each call through the engine: its round trip less the tool call
/// inside it ([`Stopwatch`]), and its two parts.
struct Own {
    all: Dist,
    /// From the call (`start`) until the tool is called: a new instance, its first firing,
    /// the args rendered and checked, the chain.
    before: Dist,
    /// From the tool's result until `wait` returns it: the outcome applied, the instance
    /// settled and ended, its waiter woken.
    after: Dist,
}

/// The timer of the innermost link of the in-memory node's chain ([`weft_tools::TimeCalls`]
/// at [`weft_tools::Stage::Metrics`], where `weft serve` times tools for its metrics, with
/// the same wrapper): each tool call is timed from `call` until its future is ready (inline
/// calls: until they return), so that a call's round trip through the engine less that time
/// is weft's own part of it, call by call, whatever the peer's latency was. The measuring
/// loop makes one call at a time and reads the last call's start and duration
/// ([`Stopwatch::take`]).
#[derive(Default)]
struct Stopwatch(Mutex<Option<(Instant, Duration)>>);

impl Stopwatch {
    /// When the last call timed since the last `take` started, and how long it took.
    fn take(&self) -> Option<(Instant, Duration)> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).take()
    }
}

impl weft_tools::CallTimer for Stopwatch {
    fn describe(&self) -> String {
        "bench stopwatch (times each tool call)".into()
    }

    fn ended(&self, since: Instant) {
        let took = since.elapsed();
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some((since, took));
    }
}

/// How long `t.sleep` waits: `WEFT_BENCH_TOOLS_SLEEP_MS`, default 2 ms (about what an MCP
/// peer takes here).
fn sleep_for() -> Duration {
    Duration::from_millis(count("SLEEP_MS", 2) as u64)
}

/// Waits as a [`Waits`] tool does: `None` yields once (woken at once), `Some(d)` sleeps `d`
/// on the runtime's timer.
async fn wait(d: Option<Duration>) {
    match d {
        None => tokio::task::yield_now().await,
        Some(d) => tokio::time::sleep(d).await,
    }
}

/// An in-process tool that echoes its args after [`wait`]ing: `t.yield` (`None`) and
/// `t.sleep`. No peer and no I/O: their own time against `fixed`'s, on the same engine
/// path, is what the wait alone does to it (the idle machine's cold caches).
struct Waits(weft_tools::ToolSpec, Option<Duration>);

impl Waits {
    fn tool(d: Option<Duration>) -> Arc<dyn Tool> {
        let name = if d.is_some() { "t.sleep" } else { "t.yield" };
        Arc::new(Waits(
            weft_tools::ToolSpec::new(name, weft_tools::Effect::Pure, true),
            d,
        ))
    }
}

impl Tool for Waits {
    fn spec(&self) -> &weft_tools::ToolSpec {
        &self.0
    }
    fn call(
        &self,
        _: ToolContext,
        args: Value,
    ) -> BoxFuture<'static, Result<Value, weft_tools::ToolError>> {
        let d = self.1;
        Box::pin(async move {
            wait(d).await;
            Ok(args)
        })
    }
}

/// Call `i` the [`Waits`] way without weft: the same wait, the same echo checked.
async fn direct_wait(d: Option<Duration>, i: usize) -> Result<(), String> {
    let args = std::hint::black_box(Shape::Echo.args(i));
    wait(d).await;
    check(&json!({ "done": args }), i, Shape::Echo)
}

/// Call `i` of the declared tool itself, outside any instance and the engine (its source
/// and the declared-tool wrapper only); checks the result as [`check`] does.
async fn via_tool(tool: &Arc<dyn Tool>, i: usize, shape: Shape) -> Result<(), String> {
    let mut ctx = ToolContext::detached("s");
    ctx.tenant = tenant().into();
    ctx.idempotency_key = format!("tool/{i}").into();
    let v = tool
        .call(ctx, shape.args(i))
        .await
        .map_err(|e| e.to_string())?;
    check(&json!({ "done": v }), i, shape)
}

/// One instance of `plan` with input `{"n": i}`; checks its result is call `i`'s.
async fn via_engine(
    engine: &Engine,
    plan: &Arc<CompiledPlan>,
    i: usize,
    shape: Shape,
) -> Result<(), String> {
    let h = engine
        .start_with(tenant(), plan, json!({"n": i}), StartOptions::default())
        .map_err(|e| e.to_string())?;
    let o = h.wait().await;
    drop(h);
    check(&o.into_results_json(), i, shape)
}

fn check(results: &Value, i: usize, shape: Shape) -> Result<(), String> {
    if shape.holds(&results["done"], i) {
        Ok(())
    } else {
        Err(format!("call {i}: wrong result {results}"))
    }
}

async fn via_durable(d: &Durable, plan: &str, i: usize, shape: Shape) -> Result<(), String> {
    let h = d
        .start(tenant(), plan, json!({"n": i}))
        .map_err(|e| e.to_string())?;
    let o = d.wait(&h).await.map_err(|e| e.to_string())?;
    check(&o.results_json(), i, shape)
}

/// The same request the `http` source sends: JSON args, the same headers.
async fn direct_http(client: &reqwest::Client, url: &str, i: usize) -> Result<(), String> {
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .header("idempotency-key", format!("direct/{i}"))
        .header("x-weft-instance", "direct")
        .header("x-weft-step", "s")
        .header("x-weft-attempt", "1")
        .body(serde_json::to_vec(&json!({"n": i})).map_err(|e| e.to_string())?)
        .send()
        .await
        .map_err(|e| e.to_string())?;
    if !resp.status().is_success() {
        return Err(format!("status {}", resp.status()));
    }
    let body = resp.bytes().await.map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&body).map_err(|e| e.to_string())?;
    (v["n"] == i)
        .then_some(())
        .ok_or(format!("wrong reply {v}"))
}

/// What the `command` source does, without weft: start the program in a process group of
/// its own with a cleared environment, args on stdin, one JSON value on stdout.
async fn direct_command(i: usize) -> Result<(), String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut cmd = tokio::process::Command::new("/bin/cat");
    cmd.env_clear()
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    #[cfg(unix)]
    cmd.process_group(0);
    let mut child = cmd.spawn().map_err(|e| e.to_string())?;
    let input = serde_json::to_vec(&json!({"n": i})).map_err(|e| e.to_string())?;
    let mut stdin = child.stdin.take().ok_or("no stdin")?;
    stdin.write_all(&input).await.map_err(|e| e.to_string())?;
    drop(stdin);
    let mut stdout = child.stdout.take().ok_or("no stdout")?;
    let mut buf = Vec::new();
    stdout
        .read_to_end(&mut buf)
        .await
        .map_err(|e| e.to_string())?;
    let status = child.wait().await.map_err(|e| e.to_string())?;
    if !status.success() {
        return Err(format!("cat exited {status}"));
    }
    let v: Value = serde_json::from_slice(&buf).map_err(|e| e.to_string())?;
    (v["n"] == i)
        .then_some(())
        .ok_or(format!("wrong reply {v}"))
}

/// The CloudEvent the `worker` source sends for call `i` of `tool`, as a direct client would
/// write it: serialized from a typed value (as the source does), not built as a JSON tree.
fn event(tenant: &str, tool: &str, i: usize) -> Vec<u8> {
    #[derive(serde::Serialize)]
    struct Event<'a> {
        specversion: &'static str,
        #[serde(rename = "type")]
        ty: &'static str,
        source: &'static str,
        id: String,
        subject: &'a str,
        datacontenttype: &'static str,
        data: Data<'a>,
    }
    #[derive(serde::Serialize)]
    struct Data<'a> {
        tool: &'a str,
        tenant: &'a str,
        instance: &'static str,
        plan: &'static str,
        step: &'static str,
        idempotency_key: String,
        attempt: u32,
        deadline_ms: u64,
        args: Args,
    }
    #[derive(serde::Serialize)]
    struct Args {
        n: usize,
    }
    serde_json::to_vec(&Event {
        specversion: "1.0",
        ty: "dev.weft.tool.call",
        source: "weft",
        id: format!("direct-{i}:1"),
        subject: tool,
        datacontenttype: "application/json",
        data: Data {
            tool,
            tenant,
            instance: "direct",
            plan: "direct",
            step: "s",
            idempotency_key: format!("direct-{i}"),
            attempt: 1,
            deadline_ms: 0,
            args: Args { n: i },
        },
    })
    .unwrap_or_default()
}

async fn direct_worker(
    client: &async_nats::Client,
    subject: &str,
    tenant: &str,
    tool: &str,
    i: usize,
) -> Result<(), String> {
    let m = client
        .request(subject.to_string(), event(tenant, tool, i).into())
        .await
        .map_err(|e| e.to_string())?;
    let v: Value = serde_json::from_slice(&m.payload).map_err(|e| e.to_string())?;
    (v["result"]["n"] == i)
        .then_some(())
        .ok_or(format!("wrong reply {v}"))
}

/// A kind's samples, by way.
struct Ways<'a> {
    direct: Option<&'a Dist>,
    tool: &'a Dist,
    mem: &'a Dist,
    /// weft's own time of each call through the engine (in memory).
    own: &'a Own,
    durable: Option<&'a Dist>,
}

/// One output line of a kind.
fn kind_line(kind: &str, w: &Ways<'_>) -> Value {
    let (tool, mem) = (w.tool, w.mem);
    let (d50, d99) = w.direct.map_or((0.0, 0.0), |d| (d.p(0.5), d.p(0.99)));
    let added99 = mem.p(0.99) - d99;
    let mut extra = json!({
        "samples": mem.0.len(),
        "direct_p50_us": round(d50),
        "direct_p99_us": round(d99),
        "tool_p50_us": round(tool.p(0.5)),
        "tool_p99_us": round(tool.p(0.99)),
        "weft_p50_us": round(mem.p(0.5)),
        "weft_p99_us": round(mem.p(0.99)),
        "added_p50_us": round(mem.p(0.5) - d50),
        "added_p99_us": round(added99),
        "own_p50_us": round(w.own.all.p(0.5)),
        "own_p99_us": round(w.own.all.p(0.99)),
        "own_p90_us": round(w.own.all.p(0.9)),
        "own_p999_us": round(w.own.all.p(0.999)),
        "own_max_us": round(w.own.all.p(1.0)),
        "own_over_goal": w.own.all.over(OWN_GOAL_US),
        "own_before_p50_us": round(w.own.before.p(0.5)),
        "own_before_p99_us": round(w.own.before.p(0.99)),
        "own_after_p50_us": round(w.own.after.p(0.5)),
        "own_after_p99_us": round(w.own.after.p(0.99)),
    });
    if w.direct.is_some() {
        extra["source_added_p50_us"] = json!(round(tool.p(0.5) - d50));
    }
    if let Some(d) = w.durable.filter(|d| !d.0.is_empty()) {
        extra["durable_samples"] = json!(d.0.len());
        extra["durable_p50_us"] = json!(round(d.p(0.5)));
        extra["durable_p99_us"] = json!(round(d.p(0.99)));
        extra["durable_added_p50_us"] = json!(round(d.p(0.5) - d50));
        extra["durable_added_p99_us"] = json!(round(d.p(0.99) - d99));
    }
    line(
        &format!("tools_{kind}"),
        "added_p99_us",
        added99,
        "µs",
        extra,
    )
}

/// Up to `n` samples of the durable figure for `kind` (after a tenth as many untimed).
async fn durable_dist(d: &Durable, kind: &str, n: usize) -> Result<Dist, String> {
    let name = format!("tools_{kind}");
    let mut v = Vec::with_capacity(n);
    for i in 0..n + n / 10 {
        let t = Instant::now();
        via_durable(d, &name, i, Shape::of(kind)).await?;
        if i >= n / 10 {
            v.push(us(t.elapsed()));
        }
    }
    Ok(Dist::new(v))
}

fn send(out: &tokio::sync::mpsc::UnboundedSender<Value>, v: Value) -> Result<(), String> {
    out.send(v).map_err(|_| "the output is gone".to_string())
}

fn emit(out: &mut dyn Write, v: &Value) -> Result<(), String> {
    writeln!(out, "{v}").map_err(|e| e.to_string())?;
    let _ = out.flush();
    Ok(())
}

async fn run_all(out: tokio::sync::mpsc::UnboundedSender<Value>) -> Result<(), String> {
    let http = http_echo().await?;
    let worker = match worker_env().await {
        Ok(w) => Some(w),
        Err(why) => {
            eprintln!("weft bench tools: skipping the worker kind and its throughput: {why}");
            None
        }
    };
    let mut workers = Vec::new();
    if let Some((url, python, script)) = &worker {
        for _ in 0..2 {
            workers.push(start_worker(python, script, url, tenant())?);
        }
    }
    let nats = worker.as_ref().map(|(u, _, _)| u.as_str());
    let defs = defs(&http, nats)?;
    let mut kinds = vec![
        ("fixed", "t.fixed"),
        ("yield", "t.yield"),
        ("sleep", "t.sleep"),
        ("http", "t.http"),
        ("command", "t.command"),
    ];
    let mut rust_worker = None;
    if let Some((url, _, _)) = &worker {
        kinds.push(("worker", "bench.echo"));
        let subject = weft_sources::default_subject(tenant(), "bench.echo_rs");
        rust_worker = Some(start_rust_worker(url, &subject).await?);
        kinds.push(("worker_rust", "bench.echo_rs"));
    }
    let mcp = match mcp_env() {
        Ok(m) => Some(m),
        Err(why) => {
            eprintln!("weft bench tools: skipping the mcp kinds: {why}");
            None
        }
    };
    // Each way has a server instance of its own: over stdio each connection starts one; over
    // HTTP four servers run (direct, tool, the in-memory node, the durable node), or with
    // `WEFT_BENCH_TOOLS_MCP_ONE_SERVER` set every way calls the first (the ways then differ
    // by the client side alone, not by which server process answers).
    let one_server = std::env::var_os(ONE_SERVER_VAR).is_some_and(|v| !v.is_empty());
    let mut mcp_http = Vec::new();
    let (mut mem_mcp, mut dur_mcp) = (Vec::new(), Vec::new());
    let mut mcp_ways = Vec::new();
    if let Some((python, script)) = &mcp {
        for _ in 0..4 {
            mcp_http.push(mcp_http_server(python, script).await?);
        }
        let url = |k: usize| mcp_http[if one_server { 0 } else { k }].1.as_str();
        for (kind, name, urls) in [
            ("mcp", "mcp", None),
            (
                "mcp_http",
                "mcphttp",
                Some([url(0), url(1), url(2), url(3)]),
            ),
        ] {
            let at = |k: usize| urls.map(|u| u[k]);
            let client = mcp_client(python, script, at(0)).await?;
            let found = weft_sources::discover(&[mcp_def(name, python, script, at(1))?])
                .await
                .map_err(|e| e.to_string())?;
            let tool = found
                .into_iter()
                .find(|t| t.spec().name == format!("{name}.add"))
                .ok_or(format!("the MCP test server has no `add` ({kind})"))?;
            mcp_ways.push(McpWays { kind, client, tool });
            mem_mcp.push(mcp_def(name, python, script, at(2))?);
            dur_mcp.push(mcp_def(name, python, script, at(3))?);
        }
        kinds.push(("mcp", "mcp.add"));
        kinds.push(("mcp_http", "mcphttp.add"));
    }

    // Read once, for both nodes and the direct way (not on its measured path).
    let sleep = sleep_for();
    // In memory.
    let watch = Arc::new(Stopwatch::default());
    let node = weft_node::Builder::new(config(defs.clone(), mem_mcp))
        .llm(None)
        .tool(Waits::tool(None))
        .tool(Waits::tool(Some(sleep)))
        .link(
            weft_tools::Stage::Metrics,
            Arc::new(weft_tools::TimeCalls(Arc::clone(&watch))),
        )
        .discover_mcp()
        .await
        .map_err(|e| e.to_string())?
        .in_memory()
        .map_err(|e| e.to_string())?;
    let engine = node.engine().clone();
    // Durable, on a fresh SQLite file.
    let dir = std::env::temp_dir().join(format!("weft-bench-tools-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
    let store: Arc<dyn weft_store::Store> = Arc::new(
        weft_store_sqlite::SqliteStore::open(dir.join("weft.db"))
            .await
            .map_err(|e| e.to_string())?,
    );
    let dnode = weft_node::Builder::new(config(defs.clone(), dur_mcp))
        .llm(None)
        .tool(Waits::tool(None))
        .tool(Waits::tool(Some(sleep)))
        .open_on(store)
        .await
        .map_err(|e| e.to_string())?;
    let durable = dnode.durable().ok_or("the node is not durable")?.clone();

    let client = crate_http_client()?;
    let nats_client = match nats {
        Some(url) => Some(async_nats::connect(url).await.map_err(|e| e.to_string())?),
        None => None,
    };
    let subject = weft_sources::default_subject(tenant(), "bench.echo");

    for (kind, action) in &kinds {
        eprintln!("weft bench tools: {kind} …");
        let compiled = engine
            .compile_value(plan(kind, action))
            .map_err(|e| e.to_string())?;
        durable
            .register(tenant(), plan(kind, action))
            .await
            .map_err(|e| e.to_string())?;
        let fixed = *kind == "fixed";
        let shape = Shape::of(kind);
        let n = samples(kind);
        let mcp_way = mcp_ways.iter().find(|w| w.kind == *kind);
        let tool = match mcp_way {
            Some(w) => Arc::clone(&w.tool),
            None => node
                .registry()
                .get(action)
                .cloned()
                .ok_or(format!("{action} is not registered"))?,
        };
        // A worker kind's subject: its tool's, as the source derives it.
        let tool_subject = weft_sources::default_subject(tenant(), action);
        let direct: Way<'_> = match (*kind, mcp_way) {
            (_, Some(w)) => Box::new(move |i| Box::pin(direct_mcp(&w.client, i))),
            ("fixed", _) => Box::new(|_| Box::pin(async { Ok(()) })),
            ("http", _) => Box::new(|i| Box::pin(direct_http(&client, &http, i))),
            ("command", _) => Box::new(|i| Box::pin(direct_command(i))),
            ("yield", _) => Box::new(|i| Box::pin(direct_wait(None, i))),
            ("sleep", _) => Box::new(move |i| Box::pin(direct_wait(Some(sleep), i))),
            _ => {
                let c = nats_client.as_ref().ok_or("no NATS client")?;
                let (subject, tool): (&str, &str) = (&tool_subject, action);
                Box::new(move |i| Box::pin(direct_worker(c, subject, tenant(), tool, i)))
            }
        };
        let ways: Vec<Way<'_>> = vec![
            direct,
            Box::new(|i| Box::pin(via_tool(&tool, i, shape))),
            Box::new(|i| Box::pin(via_engine(&engine, &compiled, i, shape))),
        ];
        let (d, own) = rounds(kind, n, &ways, (2, &watch)).await?;
        let mut d = d.into_iter();
        let (dd, td, md) = (d.next(), d.next(), d.next());
        let (Some(dd), Some(td), Some(md)) = (dd, td, md) else {
            return Err("missing samples".into());
        };
        let direct = (!fixed).then_some(dd);
        let dn = durable_samples().min(n);
        let dur = durable_dist(&durable, kind, dn).await?;
        let ways = Ways {
            direct: direct.as_ref(),
            tool: &td,
            mem: &md,
            own: &own,
            durable: Some(&dur),
        };
        send(&out, kind_line(kind, &ways))?;
    }

    let n = count("IDLE", 2_000);
    if n > 0 {
        eprintln!("weft bench tools: idle reference …");
        send(&out, idle_reference(n).await)?;
    }

    let n = count("COMMAND_THROUGHPUT", 2_000);
    if n > 0 {
        eprintln!("weft bench tools: command throughput …");
        let tool = node
            .registry()
            .get("t.command")
            .cloned()
            .ok_or("t.command is not registered")?;
        send(&out, command_throughput(&engine, tool, n).await?)?;
    }
    if let Some(c) = &nats_client {
        eprintln!("weft bench tools: worker throughput …");
        let tool = node
            .registry()
            .get("bench.echo")
            .cloned()
            .ok_or("bench.echo is not registered")?;
        let v = throughput(&engine, c, &subject, tool).await?;
        send(&out, v)?;
    }
    drop(workers);
    drop(rust_worker);
    // The MCP connections (and their stdio servers) before the HTTP servers they talk to.
    for w in mcp_ways {
        let _ = w.client.cancel().await;
    }
    drop((node, engine, dnode, durable));
    drop(mcp_http);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The HTTP client for direct calls: reqwest as the `http` source builds it (rustls with ring,
/// no proxy, no redirects).
fn crate_http_client() -> Result<reqwest::Client, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(rustls::RootCertStore::empty())
        .with_no_client_auth();
    reqwest::Client::builder()
        .tls_backend_preconfigured(tls)
        .no_proxy()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| e.to_string())
}

/// Runs `n` calls of `f`, `c` at a time; returns calls/s.
async fn rate<F, Fut>(n: usize, c: usize, f: F) -> Result<f64, String>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let t = Instant::now();
    let results: Vec<Result<(), String>> = futures::stream::iter(0..n)
        .map(f)
        .buffer_unordered(c)
        .collect()
        .await;
    let secs = t.elapsed().as_secs_f64();
    results.into_iter().collect::<Result<Vec<()>, String>>()?;
    Ok(n as f64 / secs)
}

/// The JSON line `name` of calls per second of `kind`'s tool `action`, `n` calls, `c` at a
/// time: through the engine (an instance of the one-step plan per call, after a tenth as many
/// untimed), through `tool` alone, and the direct way `direct` (reported under its key), with
/// `extra`'s fields added.
async fn rates_line<F, Fut>(
    engine: &Engine,
    name: &str,
    (kind, action): (&str, &str),
    tool: &Arc<dyn Tool>,
    (n, c): (usize, usize),
    (direct_key, direct): (&str, F),
    extra: Value,
) -> Result<Value, String>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), String>>,
{
    let compiled = engine
        .compile_value(plan(kind, action))
        .map_err(|e| e.to_string())?;
    let compiled = &compiled;
    let shape = Shape::of(kind);
    let via_engine = |i: usize| {
        let (engine, compiled) = (engine.clone(), Arc::clone(compiled));
        async move { via_engine(&engine, &compiled, i, shape).await }
    };
    let via_tool = |i: usize| {
        let tool = Arc::clone(tool);
        async move { via_tool(&tool, i, shape).await }
    };
    rate(n / 10, c, via_engine).await?;
    let engine_rate = rate(n, c, via_engine).await?;
    let tool_rate = rate(n, c, via_tool).await?;
    let direct_rate = rate(n, c, direct).await?;
    let mut fields = json!({
        "calls": n,
        "in_flight": c,
        "engine_calls_per_second": round(engine_rate),
        "declared_tool_calls_per_second": round(tool_rate),
        direct_key: round(direct_rate),
    });
    if let (Some(f), Value::Object(more)) = (fields.as_object_mut(), extra) {
        f.extend(more);
    }
    Ok(line(
        name,
        "calls_per_second",
        engine_rate,
        "calls/s",
        fields,
    ))
}

/// Bytes read by [`idle_reference`]'s memory part: one byte per 64-byte line.
const TOUCH: usize = 512 * 1024;

/// Lines [`idle_reference`]'s chase loads, one after the other.
const CHASE_LINES: usize = 300;
/// The span they are spread over (64 MiB: one 4 KiB page each, as a path through a heap and
/// a binary's code touches many pages).
const CHASE_SPAN: usize = 64 << 20;

/// The waits, in µs, after which `tools_idle_reference` times the chase again.
const SWEEP_US: [u64; 4] = [100, 500, 2_000, 10_000];

/// The CPU time the calling thread has had, as the kernel counts it. On a KVM guest with a
/// steal clock (this machine's `/proc/stat` counts steal), that count leaves out the time
/// the host ran something else on the virtual CPU.
fn thread_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(
        u64::try_from(t.tv_sec).unwrap_or(0),
        u32::try_from(t.tv_nsec).unwrap_or(0),
    )
}

/// What the same wait as `t.sleep`'s does to code that is not weft's: `n` samples each of a
/// fixed computation (no memory), of reading [`TOUCH`] bytes of a buffer in order, and of
/// [`CHASE_LINES`] loads each of which needs the one before (the address of the next line is
/// in the last: a miss costs its whole latency, as an instruction fetch or a pointer
/// followed does), right after the same code ran (warm) and right after a [`sleep_for`] on
/// the runtime's timer. Of the chases after that sleep that take over [`OWN_GOAL_US`], the
/// median share of their time the kernel counts as the thread's CPU time, which leaves out
/// the time the host ran something else on the virtual CPU (KVM's steal clock): near 1, the
/// thread was running and slow (misses), not stopped. Then `n / 4` chases after each of
/// [`SWEEP_US`]'s waits, slept by the thread itself (the runtime's timer is not finer than
/// 1 ms), to show how the cost of the same loads grows with the wait before them.
async fn idle_reference(n: usize) -> Value {
    let buf: Vec<u8> = (0..TOUCH).map(|i| i as u8).collect();
    // A cycle through `CHASE_LINES` lines in a scrambled order (a fixed LCG): word `l * 16`
    // of line `l` holds the word index of the next line.
    let mut links = vec![0u32; CHASE_SPAN / 4];
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let lines: Vec<usize> = (0..CHASE_LINES)
        .map(|_| {
            x = x
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((x >> 33) as usize % (CHASE_SPAN / 64)) * 16
        })
        .collect();
    for (k, &w) in lines.iter().enumerate() {
        links[w] = lines[(k + 1) % CHASE_LINES] as u32;
    }
    let chase = || {
        let mut w = lines[0];
        for _ in 0..CHASE_LINES {
            w = links[w] as usize;
        }
        std::hint::black_box(w);
    };
    let compute = || {
        let mut x = 1u64;
        for j in 0..20_000u64 {
            x = x.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(j);
        }
        std::hint::black_box(x);
    };
    let touch = || {
        let sum: u64 = buf.iter().step_by(64).map(|&b| u64::from(b)).sum();
        std::hint::black_box(sum);
    };
    let sleep = sleep_for();
    let mut d: [Vec<f64>; 6] = Default::default();
    // Of the chases after the sleep over the goal: CPU time / wall time.
    let mut stalls_cpu = Vec::new();
    for i in 0..n + n / 10 {
        for (k, idle) in [(0, false), (1, true)] {
            for (part, f) in [
                (0, &compute as &(dyn Fn() + Sync)),
                (2, &touch),
                (4, &chase),
            ] {
                if idle {
                    tokio::time::sleep(sleep).await;
                } else {
                    // Warm: right after the same code ran.
                    f();
                }
                let cpu = thread_cpu();
                let t = Instant::now();
                f();
                let wall = us(t.elapsed());
                let cpu = us(thread_cpu().saturating_sub(cpu));
                if i >= n / 10 {
                    d[part + k].push(wall);
                    if part + k == 5 && wall > OWN_GOAL_US {
                        stalls_cpu.push(cpu / wall);
                    }
                }
            }
        }
    }
    let stalls_cpu =
        (!stalls_cpu.is_empty()).then(|| (Dist::new(stalls_cpu).p(0.5) * 100.0).round() / 100.0);
    let mut sweep = serde_json::Map::new();
    for wait in SWEEP_US {
        let mut v = Vec::new();
        for i in 0..(n / 4).max(1) + n / 40 {
            // Blocks this worker thread, as nothing else runs on the runtime meanwhile.
            std::thread::sleep(Duration::from_micros(wait));
            let t = Instant::now();
            chase();
            if i >= n / 40 {
                v.push(us(t.elapsed()));
            }
        }
        let v = Dist::new(v);
        sweep.insert(
            wait.to_string(),
            json!([round(v.p(0.5)), round(v.p(0.99)), v.over(OWN_GOAL_US)]),
        );
    }
    let [cw, ci, tw, ti, hw, hi] = d.map(Dist::new);
    let q = |d: &Dist| json!([round(d.p(0.5)), round(d.p(0.99))]);
    let tail = |d: &Dist| json!([round(d.p(0.9)), round(d.p(0.999)), round(d.p(1.0))]);
    line(
        "tools_idle_reference",
        "touch_after_sleep_p50_us",
        ti.p(0.5),
        "µs",
        json!({
            "samples": n,
            "sleep_ms": sleep.as_millis() as u64,
            "touch_kib": TOUCH / 1024,
            "compute_warm_p50_p99_us": q(&cw),
            "compute_after_sleep_p50_p99_us": q(&ci),
            "touch_warm_p50_p99_us": q(&tw),
            "touch_after_sleep_p50_p99_us": q(&ti),
            "chase_lines": CHASE_LINES,
            "chase_span_mib": CHASE_SPAN >> 20,
            "chase_warm_p50_p99_us": q(&hw),
            "chase_after_sleep_p50_p99_us": q(&hi),
            "chase_after_sleep_p90_p999_max_us": tail(&hi),
            "chase_after_sleep_over_goal": hi.over(OWN_GOAL_US),
            "chase_after_sleep_over_goal_cpu_of_wall": stalls_cpu,
            "chase_after_thread_sleep_us_p50_p99_over_goal": sweep,
        }),
    )
}

/// `command` calls per second, 16 at a time (so children and the runtime's threads contend
/// for the cores): through the engine (an instance per call), through the declared tool
/// alone, and as tokio's `Command` (the direct way).
async fn command_throughput(
    engine: &Engine,
    tool: Arc<dyn Tool>,
    n: usize,
) -> Result<Value, String> {
    rates_line(
        engine,
        "tools_command_throughput",
        ("command", "t.command"),
        &tool,
        (n, 16),
        ("direct_calls_per_second", direct_command),
        json!({}),
    )
    .await
}

/// Worker calls per second with two Python workers: through the engine (an instance per
/// call), through the declared tool alone, and with a raw async-nats client.
async fn throughput(
    engine: &Engine,
    raw: &async_nats::Client,
    subject: &str,
    tool: Arc<dyn Tool>,
) -> Result<Value, String> {
    let via_raw = |i: usize| direct_worker(raw, subject, tenant(), "bench.echo", i);
    rates_line(
        engine,
        "tools_worker_throughput",
        ("worker", "bench.echo"),
        &tool,
        (count("THROUGHPUT", 20_000), 256),
        ("raw_async_nats_calls_per_second", via_raw),
        json!({"python_workers": 2}),
    )
    .await
}

#[cfg(test)]
mod tests {
    use weft_core::{Effect, ToolSpec};
    use weft_runtime::EngineOptions;
    use weft_tools::{Chain, Registry, Stage, ToolError};

    use super::*;

    #[test]
    fn the_share_over_the_goal_counts_samples_strictly_above_it() {
        let d = Dist::new(vec![100.0, 10.0, 50.0, 50.1, 3.0, 49.9, 7.0, 80.0]);
        assert_eq!(d.over(50.0), 0.375);
        assert_eq!(d.over(1_000.0), 0.0);
        assert_eq!(d.over(0.0), 1.0);
        assert_eq!(Dist::new(Vec::new()).over(50.0), 0.0);
        assert_eq!(d.p(1.0), 100.0);
    }

    #[test]
    fn the_thread_cpu_clock_counts_running_and_not_sleeping() {
        let c = thread_cpu();
        let t = Instant::now();
        let mut x = 1u64;
        while t.elapsed() < Duration::from_millis(20) {
            x = std::hint::black_box(x.wrapping_mul(3).wrapping_add(1));
        }
        let busy = thread_cpu() - c;
        let c = thread_cpu();
        std::thread::sleep(Duration::from_millis(50));
        let asleep = thread_cpu() - c;
        // Busy: close to the 20 ms unless the thread was preempted for most of them.
        assert!(busy >= Duration::from_millis(5), "busy {busy:?}");
        assert!(asleep < Duration::from_millis(10), "asleep {asleep:?}");
    }

    /// `t.slow` answers after `self.1`; `t.now` is immediate (the inline path).
    struct Slow(ToolSpec, Duration, bool);

    impl Tool for Slow {
        fn spec(&self) -> &ToolSpec {
            &self.0
        }
        fn call(
            &self,
            _: ToolContext,
            args: Value,
        ) -> BoxFuture<'static, Result<Value, ToolError>> {
            let d = self.1;
            Box::pin(async move {
                tokio::time::sleep(d).await;
                Ok(args)
            })
        }
        fn is_immediate(&self) -> bool {
            self.2
        }
        fn call_now(&self, _: ToolContext, args: Value) -> Result<Value, ToolError> {
            std::thread::sleep(self.1);
            Ok(args)
        }
    }

    /// The stopwatch times the tool inside each call, on the spawned and the inline path
    /// alike, so that a call's own time is its round trip less the tool's: a 40 ms tool in a
    /// one-step instance leaves weft's own part far under 40 ms, while the round trip is
    /// over it; a path the stopwatch missed would be an error (the next test).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn own_time_is_the_round_trip_less_the_tool_call() {
        let tool = Duration::from_millis(40);
        let mut reg = Registry::new();
        reg.register(Arc::new(Slow(
            ToolSpec::new("t.slow", Effect::Pure, true),
            tool,
            false,
        )));
        reg.register(Arc::new(Slow(
            ToolSpec::new("t.now", Effect::Pure, true),
            tool,
            true,
        )));
        let watch = Arc::new(Stopwatch::default());
        let engine = Engine::new(EngineOptions {
            registry: Arc::new(reg),
            chain: Chain::new().with(
                Stage::Metrics,
                Arc::new(weft_tools::TimeCalls(Arc::clone(&watch))),
            ),
            ..EngineOptions::default()
        });
        let ms = |d: f64| d / 1000.0;
        for (kind, action) in [("slow", "t.slow"), ("now", "t.now")] {
            let wrapped = engine.registry_for("t");
            let found = wrapped.get(action).expect("registered");
            assert_eq!(found.is_immediate(), action == "t.now", "{action}");
            let compiled = engine.compile_value(plan(kind, action)).expect("plan");
            let ways: Vec<Way<'_>> = vec![
                Box::new(|_| Box::pin(async { Ok(()) })),
                Box::new(|i| Box::pin(via_engine(&engine, &compiled, i, Shape::Echo))),
            ];
            let (d, own) = rounds("test", 5, &ways, (1, &watch)).await.expect("rounds");
            for part in [&own.before, &own.after] {
                assert!(part.p(0.0) > 0.0, "{action}: a part {}", part.p(0.0));
                assert!(ms(part.p(1.0)) < 20.0, "{action}: a part {}", part.p(1.0));
            }
            let own = own.all;
            assert_eq!(own.0.len(), 5, "{action}");
            assert!(
                ms(d[1].p(0.5)) >= 40.0,
                "{action}: round trip {}",
                d[1].p(0.5)
            );
            assert!(ms(own.p(1.0)) < 20.0, "{action}: own {}", own.p(1.0));
            assert!(own.p(0.0) > 0.0, "{action}: own {}", own.p(0.0));
        }
        assert_eq!(watch.take(), None, "every call's time was read");
    }

    #[test]
    fn a_sweep_writes_one_byte_in_every_line() {
        let mut buf = vec![0u8; 64 * 3 + 10];
        sweep(&mut buf);
        let written: Vec<usize> = (0..buf.len()).filter(|&k| buf[k] != 0).collect();
        assert_eq!(written, vec![0, 64, 128, 192]);
    }

    /// A way that calls no tool through the watched engine is an error, not a figure.
    #[tokio::test]
    async fn a_call_the_stopwatch_did_not_see_is_an_error() {
        let watch = Stopwatch::default();
        let ways: Vec<Way<'_>> = vec![Box::new(|_| Box::pin(async { Ok(()) }))];
        let err = rounds("test", 1, &ways, (0, &watch)).await.err();
        assert!(
            err.is_some_and(|e| e.contains("saw no tool call")),
            "a missing figure is an error"
        );
    }
}
