//! End-to-end tests of `weft serve`: the real binary listens on a free loopback port
//! with a temporary SQLite store and is driven over HTTP like any client would — the sample plan
//! runs to completion, a reactive plan takes 1,000 events exactly once, the SSE stream carries a
//! run's lifecycle in order, two tenants see nothing of each other, bad input gets a 4xx problem
//! with a stable code, SIGTERM leaves a waiting instance that the next start continues, and
//! `--otlp-endpoint` exports request and step spans to a real OTLP/HTTP receiver, and a step's
//! approval waits across kill -9 and is decided with `weft approve` / `weft deny`.
//! The in-process router tests live in crates/weft-server/tests; these exercise the binary.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead as _, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt as _, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::header::{AUTHORIZATION, CONTENT_TYPE, HOST, HeaderValue};
use hyper::{HeaderMap, Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::{Value, json};

type Body = BoxBody<Bytes, std::io::Error>;

const TOKENS: &str = "tA=a,tB=b";

/// A reactive plan: every `ping` is echoed into the output `seen` (so the marking shows what
/// was processed).
fn reactive_plan(name: &str) -> Value {
    json!({
        "plan_name": name,
        "graph_type": "reactive",
        "events": {"ping": {"kind": "input"}, "seen": {"kind": "output"}},
        "steps": {"see": {"on": ["ping"], "action": "echo", "args": {"n": "${ping.n}"}, "emits": ["seen"]}}
    })
}

/// An acyclic two-step chain.
fn chain_plan(name: &str) -> Value {
    json!({
        "plan_name": name,
        "graph_type": "acyclic",
        "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "echo", "args": {"step": 1}, "emits": ["mid"]},
            "two": {"on": ["mid"], "action": "echo", "args": {"step": 2}, "emits": ["done"]}
        }
    })
}

fn cloud_event(n: u64, ty: &str, instance: Option<&str>) -> Value {
    // Unique ids: the server applies an event's `source` + `id` once (deduplication).
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let k = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let mut e = json!({"specversion": "1.0", "id": format!("e-{n}-{k}"), "source": "serve-e2e", "type": ty, "data": {"n": n}});
    if let Some(i) = instance {
        e["weftinstance"] = json!(i);
    }
    e
}

// --- the server process -------------------------------------------------------------------------

/// A running `weft serve`; killed on drop.
struct Server {
    child: Option<Child>,
    addr: SocketAddr,
    log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts `weft serve --listen 127.0.0.1:0 --store DIR/weft.db` in `dir` and reads the bound
    /// address from its stderr.
    fn start(dir: &Path, tokens: Option<&str>) -> Server {
        Server::start_with(dir, tokens, &[])
    }

    /// [`Server::start`] with more `weft serve` arguments.
    fn start_with(dir: &Path, tokens: Option<&str>, extra: &[&str]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
        cmd.args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(dir.join("weft.db"))
            .args(extra)
            .env_remove("OTEL_EXPORTER_OTLP_ENDPOINT")
            .env_remove("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .current_dir(dir)
            .env("NO_COLOR", "1")
            .env("RUST_LOG", "error")
            .env_remove("WEFT_LLM_BASE_URL")
            .env_remove("WEFT_LLM_MODEL")
            .env_remove("WEFT_LLM_API_KEY")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        match tokens {
            Some(t) => cmd.env("WEFT_API_TOKENS", t),
            None => cmd.env_remove("WEFT_API_TOKENS"),
        };
        let mut child = cmd.spawn().expect("spawn weft serve");
        let stderr = child.stderr.take().expect("stderr");
        let log = Arc::new(Mutex::new(String::new()));
        let (tx, rx) = mpsc::channel();
        let sink = Arc::clone(&log);
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { break };
                if let Some(a) = line.strip_prefix("weft: listening on http://") {
                    let _ = tx.send(a.trim().to_string());
                }
                let mut l = sink.lock().expect("log");
                l.push_str(&line);
                l.push('\n');
            }
        });
        let mut server = Server {
            child: Some(child),
            addr: SocketAddr::from(([127, 0, 0, 1], 0)),
            log,
        };
        let addr = rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("weft serve printed no address; stderr:\n{}", server.log()));
        server.addr = addr.parse().expect("bound address");
        server
    }

    fn log(&self) -> String {
        self.log.lock().expect("log").clone()
    }

    fn api(&self, token: Option<&str>) -> Api {
        Api {
            addr: self.addr,
            token: token.map(str::to_string),
        }
    }

    /// SIGTERM, then the exit status (fails after 60 s).
    fn terminate(mut self) -> ExitStatus {
        let mut child = self.child.take().expect("running");
        let ok = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(ok.success(), "kill -TERM failed");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().expect("wait") {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!(
                    "weft serve did not exit within 60 s of SIGTERM; stderr:\n{}",
                    self.log()
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

// --- a bare HTTP/1.1 client ---------------------------------------------------------------------

struct Resp {
    status: StatusCode,
    headers: HeaderMap,
    body: Bytes,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "{} body is not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    fn expect(self, status: u16, what: &str) -> Value {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{what}: {}",
            String::from_utf8_lossy(&self.body)
        );
        self.json()
    }

    /// Asserts a problem+json answer with this status and code.
    fn problem(&self, status: u16, code: &str, what: &str) {
        assert_eq!(
            self.status.as_u16(),
            status,
            "{what}: {}",
            String::from_utf8_lossy(&self.body)
        );
        assert!(
            self.content_type().starts_with("application/problem+json"),
            "{what}: content type `{}`",
            self.content_type()
        );
        let p = self.json();
        assert_eq!(p["code"], code, "{what}: {p}");
        assert_eq!(p["status"], status, "{what}: {p}");
        assert_eq!(
            p["type"],
            format!("https://weft.dev/problems/{code}"),
            "{what}"
        );
        assert!(
            p["title"].is_string() && p["detail"].is_string(),
            "{what}: {p}"
        );
        assert!(
            self.headers.contains_key("x-request-id") && p["request_id"].is_string(),
            "{what}: no request id"
        );
    }
}

fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|e| match e {}).boxed()
}

#[derive(Clone)]
struct Api {
    addr: SocketAddr,
    token: Option<String>,
}

impl Api {
    async fn connect(&self) -> hyper::client::conn::http1::SendRequest<Body> {
        let tcp = tokio::net::TcpStream::connect(self.addr)
            .await
            .expect("connect");
        let (send, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tcp))
            .await
            .expect("handshake");
        tokio::spawn(async move {
            let _ = conn.await;
        });
        send
    }

    fn request(&self, method: Method, path: &str, ct: Option<&str>, body: Body) -> Request<Body> {
        let mut b = Request::builder()
            .method(method)
            .uri(path)
            .header(HOST, self.addr.to_string());
        if let Some(t) = &self.token {
            b = b.header(AUTHORIZATION, format!("Bearer {t}"));
        }
        if let Some(ct) = ct {
            b = b.header(
                CONTENT_TYPE,
                HeaderValue::from_str(ct).expect("content type"),
            );
        }
        b.body(body).expect("request")
    }

    /// One request on a fresh connection (so a connection the server closes after a 413
    /// never affects the next request).
    async fn send(&self, method: Method, path: &str, ct: Option<&str>, body: Body) -> Resp {
        let mut send = self.connect().await;
        let res = send
            .send_request(self.request(method, path, ct, body))
            .await
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        let status = res.status();
        let headers = res.headers().clone();
        let body = res.into_body().collect().await.expect("body").to_bytes();
        Resp {
            status,
            headers,
            body,
        }
    }

    async fn get(&self, path: &str) -> Resp {
        self.send(Method::GET, path, None, full(Bytes::new())).await
    }

    async fn post(&self, path: &str, ct: &str, body: impl Into<Bytes>) -> Resp {
        self.send(Method::POST, path, Some(ct), full(body)).await
    }

    async fn post_json(&self, path: &str, v: &Value) -> Resp {
        self.post(path, "application/json", v.to_string()).await
    }

    async fn post_empty(&self, path: &str) -> Resp {
        self.send(Method::POST, path, None, full(Bytes::new()))
            .await
    }

    async fn create_plan(&self, plan: &Value) -> Value {
        self.post_json("/v1/plans", plan)
            .await
            .expect(201, "POST /v1/plans")
    }

    async fn start(&self, plan: &str) -> String {
        let v = self
            .post_json("/v1/instances", &json!({"plan": plan}))
            .await
            .expect(201, "POST /v1/instances");
        v["id"].as_str().expect("id").to_string()
    }

    async fn state(&self, id: &str) -> Value {
        self.get(&format!("/v1/instances/{id}"))
            .await
            .expect(200, "GET instance")
    }

    /// Polls the state of `id` until `done` holds (60 s at most).
    async fn wait_state(&self, id: &str, what: &str, done: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let s = self.state(id).await;
            if done(&s) {
                return s;
            }
            assert!(Instant::now() < deadline, "{what}: instance {id} is {s}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    async fn event(&self, e: &Value) -> Resp {
        self.post("/v1/events", "application/cloudevents+json", e.to_string())
            .await
    }

    async fn events(&self, batch: &[Value]) -> Resp {
        self.post(
            "/v1/events",
            "application/cloudevents-batch+json",
            Value::from(batch.to_vec()).to_string(),
        )
        .await
    }

    /// Every journal record of `id`, paging through `?from=&limit=`.
    async fn journal(&self, id: &str) -> Vec<Value> {
        let mut out = Vec::new();
        let mut from = 1;
        loop {
            let page = self
                .get(&format!(
                    "/v1/instances/{id}/journal?from={from}&limit=1000"
                ))
                .await
                .expect(200, "GET journal");
            out.extend(page["records"].as_array().expect("records").iter().cloned());
            match page["next"].as_u64() {
                Some(n) => from = n,
                None => return out,
            }
        }
    }

    async fn stream(&self, query: &str) -> Sse {
        let mut send = self.connect().await;
        let res = send
            .send_request(self.request(
                Method::GET,
                &format!("/v1/events/stream{query}"),
                None,
                full(Bytes::new()),
            ))
            .await
            .expect("stream request");
        assert_eq!(res.status(), StatusCode::OK, "GET /v1/events/stream{query}");
        let ct = res
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string();
        assert!(
            ct.starts_with("text/event-stream"),
            "stream content type {ct}"
        );
        Sse {
            body: res.into_body(),
            buf: String::new(),
        }
    }
}

/// One Server-Sent Event.
#[derive(Debug)]
struct Msg {
    id: String,
    event: String,
    data: Value,
}

/// A Server-Sent Events response read incrementally.
struct Sse {
    body: Incoming,
    buf: String,
}

impl Sse {
    /// The next event (comments and keep-alives skipped); `None` when nothing arrives within
    /// `wait` or the stream ends.
    async fn next(&mut self, wait: Duration) -> Option<Msg> {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(pos) = self.buf.find("\n\n") {
                let block: String = self.buf.drain(..pos + 2).collect();
                let (mut id, mut event, mut data) = (String::new(), String::new(), String::new());
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = v.trim_start().to_string();
                    } else if let Some(v) = line.strip_prefix("event:") {
                        event = v.trim_start().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !event.is_empty() || !data.is_empty() {
                    let data = serde_json::from_str(&data)
                        .unwrap_or_else(|e| panic!("SSE data is not JSON ({e}): {data}"));
                    return Some(Msg { id, event, data });
                }
            }
            let frame = tokio::time::timeout_at(deadline, self.body.frame()).await;
            match frame {
                Ok(Some(Ok(f))) => {
                    if let Ok(d) = f.into_data() {
                        self.buf.push_str(&String::from_utf8_lossy(&d));
                    }
                }
                Ok(Some(Err(_)) | None) | Err(_) => return None,
            }
        }
    }
}

fn dir(name: &str) -> PathBuf {
    common::temp_dir(&format!("serve-e2e-{name}"))
}

// --- tests --------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_plan_completes() {
    let d = dir("sample");
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    assert_eq!(
        api.get("/healthz").await.expect(200, "healthz"),
        json!({"status": "ok"})
    );
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("examples/sample.json")).expect("sample"),
    )
    .expect("sample.json");
    let created = api.create_plan(&doc).await;
    assert_eq!(created["name"], "sample");
    assert_eq!(created["version"], 1);
    let expected: Value = serde_json::from_str(
        &std::fs::read_to_string(common::root().join("examples/expected.json")).expect("expected"),
    )
    .expect("expected.json");
    let outcome = expected["sample.json"]["run"]["outcome"]
        .as_str()
        .expect("outcome");
    assert_eq!(outcome, "completed");
    let id = api.start("sample").await;
    let s = api
        .wait_state(&id, "sample run", |s| s["status"] != "running")
        .await;
    assert_eq!(s["status"], outcome, "{s}");
    let results = s["results"].as_array().expect("results");
    assert_eq!(results.len(), 1, "{s}");
    assert_eq!(results[0]["event"], "done");
    assert_eq!(results[0]["data"]["delivered"], "outbox");
    let trace = api
        .get(&format!("/v1/instances/{id}/trace"))
        .await
        .expect(200, "trace");
    let steps = trace["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 1, "{trace}");
    assert_eq!(steps[0]["step"], "first");
    assert_eq!(steps[0]["outcome"], "ok");
    let kinds: Vec<String> = api
        .journal(&id)
        .await
        .iter()
        .map(|r| r["kind"].as_str().unwrap_or_default().to_string())
        .collect();
    assert_eq!(kinds.first().map(String::as_str), Some("instance.started"));
    assert!(kinds.iter().any(|k| k == "action.result"), "{kinds:?}");
    // The list reads instance records, whose status follows with the next group commit.
    let has = |listed: &Value| {
        listed["instances"]
            .as_array()
            .expect("instances")
            .iter()
            .any(|i| i["id"] == id.as_str())
    };
    let mut listed = Value::Null;
    for _ in 0..250 {
        listed = api
            .get("/v1/instances?status=completed")
            .await
            .expect(200, "list");
        if has(&listed) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(has(&listed), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reactive_plan_takes_1000_events_exactly_once() {
    const EVENTS: u64 = 1000;
    // Compaction off (`--snapshot-every 0`: a busy reactive instance is otherwise
    // compacted every 100 records), so every `token.added` record can be read back.
    const INSTANCES: usize = 4;
    let d = dir("reactive");
    let server = Server::start_with(&d, Some(TOKENS), &["--snapshot-every", "0"]);
    let api = server.api(Some("tA"));
    api.create_plan(&reactive_plan("counter")).await;
    let mut ids = Vec::new();
    for _ in 0..INSTANCES {
        ids.push(api.start("counter").await);
    }
    let target = |n: u64| ids[(n % INSTANCES as u64) as usize].as_str();
    // Singles and batches of growing size, alternating.
    let (mut n, mut accepted, mut routed, mut size) = (0u64, 0u64, 0u64, 1u64);
    let mut single = true;
    while n < EVENTS {
        let r = if single {
            let r = api.event(&cloud_event(n, "ping", Some(target(n)))).await;
            n += 1;
            r
        } else {
            let end = (n + size).min(EVENTS);
            let batch: Vec<Value> = (n..end)
                .map(|m| cloud_event(m, "ping", Some(target(m))))
                .collect();
            n = end;
            size = size * 2 % 97 + 1;
            api.events(&batch).await
        };
        single = !single;
        let v = r.expect(202, "POST /v1/events");
        accepted += v["accepted"].as_u64().expect("accepted");
        routed += v["routed"].as_u64().expect("routed");
    }
    assert_eq!(accepted, EVENTS);
    assert_eq!(routed, EVENTS, "each event goes to exactly one instance");
    for (k, id) in ids.iter().enumerate() {
        let want: BTreeSet<u64> = (0..EVENTS)
            .filter(|m| (m % INSTANCES as u64) as usize == k)
            .collect();
        let s = api
            .wait_state(id, "1,000 events", |s| {
                s["fired"].as_u64() == Some(want.len() as u64)
                    && s["marking"]["seen"].as_array().map(Vec::len) == Some(want.len())
            })
            .await;
        assert_eq!(s["status"], "running", "{id} keeps waiting for more");
        let mut seen = BTreeMap::new();
        for t in s["marking"]["seen"].as_array().expect("seen") {
            let n = t["data"]["n"]
                .as_u64()
                .or_else(|| t["data"]["n"].as_str().and_then(|x| x.parse().ok()))
                .unwrap_or_else(|| panic!("token {t}"));
            *seen.entry(n).or_insert(0) += 1;
        }
        assert!(
            seen.values().all(|&c| c == 1),
            "{id}: an event processed twice"
        );
        assert_eq!(seen.keys().copied().collect::<BTreeSet<_>>(), want, "{id}");
        // The journal: one `token.added` per accepted event, no more, no less.
        let journal = api.journal(id).await;
        assert_eq!(journal[0]["kind"], "instance.started", "{id}: uncompacted");
        let tokens: Vec<u64> = journal
            .iter()
            .filter(|r| r["kind"] == "token.added")
            .map(|r| r["body"]["payload"]["n"].as_u64().expect("n"))
            .collect();
        assert_eq!(tokens.len(), want.len(), "{id}: journaled events");
        assert_eq!(
            tokens.iter().copied().collect::<BTreeSet<_>>(),
            want,
            "{id}"
        );
        let seqs: Vec<u64> = journal
            .iter()
            .map(|r| r["seq"].as_u64().expect("seq"))
            .collect();
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "{id}: gapless seqs"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_delivers_the_lifecycle_in_order() {
    let d = dir("sse");
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.create_plan(&chain_plan("chain")).await;
    // Subscribed before the start (the response head arrives once the subscription exists).
    let mut all = api.stream("").await;
    let mut only_done = api.stream("?type=plan.completed").await;
    let id = api.start("chain").await;
    let mut seen: Vec<(String, Option<String>)> = Vec::new();
    let mut ids = BTreeSet::new();
    loop {
        let m = all
            .next(Duration::from_secs(30))
            .await
            .unwrap_or_else(|| panic!("stream stalled after {seen:?}"));
        assert_eq!(m.data["weftinstance"], id.as_str(), "{m:?}");
        assert_eq!(m.data["type"], m.event.as_str());
        assert_eq!(m.data["wefttenant"], "a");
        assert!(ids.insert(m.id.clone()), "duplicate event id {}", m.id);
        let step = m.data["data"]["step"].as_str().map(str::to_string);
        let done = m.event == "dev.weft.plan.completed";
        seen.push((m.event, step));
        if done {
            break;
        }
    }
    let want: Vec<(String, Option<String>)> = [
        ("dev.weft.plan.started", None),
        ("dev.weft.plan.step.started", Some("one")),
        ("dev.weft.plan.step.finished", Some("one")),
        ("dev.weft.plan.step.started", Some("two")),
        ("dev.weft.plan.step.finished", Some("two")),
        ("dev.weft.plan.completed", None),
    ]
    .iter()
    .map(|(e, s)| (e.to_string(), s.map(str::to_string)))
    .collect();
    let lifecycle: Vec<(String, Option<String>)> = seen
        .iter()
        .filter(|(e, _)| e.starts_with("dev.weft.plan."))
        .map(|(e, s)| {
            let s = if e.starts_with("dev.weft.plan.step.") {
                s.clone()
            } else {
                None
            };
            (e.clone(), s)
        })
        .collect();
    assert_eq!(lifecycle, want, "all events: {seen:?}");
    let m = only_done
        .next(Duration::from_secs(30))
        .await
        .expect("the filtered stream");
    assert_eq!(m.event, "dev.weft.plan.completed");
    assert_eq!(m.data["weftinstance"], id.as_str());
    // The instance filter and the `access_token` query (EventSource cannot set headers).
    let b = server.api(None);
    let mut by_query = b
        .stream("?access_token=tA&type=plan.started,plan.completed")
        .await;
    let id2 = api.start("chain").await;
    let first = by_query.next(Duration::from_secs(30)).await.expect("event");
    assert_eq!(
        (first.event.as_str(), &first.data["weftinstance"]),
        ("dev.weft.plan.started", &json!(id2))
    );
    let second = by_query.next(Duration::from_secs(30)).await.expect("event");
    assert_eq!(second.event, "dev.weft.plan.completed");
}

/// Asserts that tenant B sees nothing of tenant A's `plan` and `id`: every endpoint answers as
/// if they did not exist.
async fn assert_invisible(b: &Api, plan: &str, id: &str) {
    let none = "i-does-not-exist";
    for path in [
        format!("/v1/plans/{plan}"),
        format!("/v1/plans/{plan}/versions/1"),
        format!("/v1/plans/{plan}/net"),
        format!("/v1/instances/{id}"),
        format!("/v1/instances/{id}/trace"),
        format!("/v1/instances/{id}/journal"),
        format!("/v1/instances/{id}/inspect?at=1"),
        format!("/v1/events/stream?instance={id}"),
    ] {
        b.get(&path)
            .await
            .problem(404, "not_found", &format!("B: GET {path}"));
    }
    for action in ["stop", "resume", "checkpoint", "repair"] {
        let theirs = b.post_empty(&format!("/v1/instances/{id}/{action}")).await;
        let missing = b
            .post_empty(&format!("/v1/instances/{none}/{action}"))
            .await;
        // The answer must not tell A's instance from one that does not exist.
        assert_eq!(
            theirs.status, missing.status,
            "B: POST {action} on A's instance"
        );
        assert_eq!(theirs.json()["code"], missing.json()["code"], "B: {action}");
        assert!(
            theirs.status.is_client_error() || theirs.status == StatusCode::SERVICE_UNAVAILABLE
        );
    }
    b.post_json("/v1/instances", &json!({"plan": plan}))
        .await
        .problem(404, "not_found", "B: start A's plan");
    b.post_json("/v1/explain", &json!({"name": plan}))
        .await
        .problem(404, "not_found", "B: explain A's plan");
    b.event(&cloud_event(1, "ping", Some(id))).await.problem(
        404,
        "not_found",
        "B: event to A's instance",
    );
    let listed = b.get("/v1/plans").await.expect(200, "B: plans");
    assert!(
        !listed["plans"]
            .as_array()
            .expect("plans")
            .iter()
            .any(|p| p["name"] == plan),
        "B lists A's plan: {listed}"
    );
    let listed = b.get("/v1/instances").await.expect(200, "B: instances");
    assert!(
        !listed["instances"]
            .as_array()
            .expect("instances")
            .iter()
            .any(|i| i["id"] == id),
        "B lists A's instance: {listed}"
    );
    let listed = b
        .get(&format!("/v1/instances?plan={plan}"))
        .await
        .expect(200, "B: instances of A's plan");
    assert_eq!(listed["instances"], json!([]), "{listed}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_see_nothing_of_each_other() {
    let d = dir("tenants");
    let server = Server::start(&d, Some(TOKENS));
    let a = server.api(Some("tA"));
    let b = server.api(Some("tB"));
    a.create_plan(&reactive_plan("iso")).await;
    a.create_plan(&chain_plan("iso-chain")).await;
    let id = a.start("iso").await;
    a.event(&cloud_event(1, "ping", Some(&id)))
        .await
        .expect(202, "A: event");
    a.post_empty(&format!("/v1/instances/{id}/checkpoint"))
        .await
        .expect(200, "A: checkpoint");
    // A sees its own.
    a.get("/v1/plans/iso").await.expect(200, "A: plan");
    a.get(&format!("/v1/instances/{id}/journal"))
        .await
        .expect(200, "A: journal");
    // B's stream is open while A works; B must get none of A's events.
    let mut b_stream = b.stream("").await;
    let mut a_stream = a.stream("?type=plan.completed").await;
    assert_invisible(&b, "iso", &id).await;
    // The query token is scoped the same way.
    b.get(&format!("/v1/instances/{id}?access_token=tB"))
        .await
        .problem(404, "not_found", "B by query token");
    // A broadcast of type `ping` by B routes to none of A's instances.
    let r = b
        .event(&cloud_event(2, "ping", None))
        .await
        .expect(202, "B: broadcast");
    assert_eq!(r["routed"], 0, "{r}");
    let fired = a.state(&id).await["fired"].clone();
    assert_eq!(fired, 1, "A's instance took B's broadcast");
    let ac = a.start("iso-chain").await;
    let done = a_stream
        .next(Duration::from_secs(30))
        .await
        .expect("A's event");
    assert_eq!(done.data["weftinstance"], ac.as_str());
    // B uses the same plan name: its own version 1, A's stays untouched.
    let mine = b.create_plan(&chain_plan("iso")).await;
    assert_eq!(mine["version"], 1, "B's versions start at 1: {mine}");
    assert_eq!(
        a.get("/v1/plans/iso").await.expect(200, "A")["plan"]["graph_type"],
        "reactive"
    );
    let bc = b.start("iso").await;
    // B's stream shows B's run and nothing of A's.
    loop {
        let m = b_stream
            .next(Duration::from_secs(30))
            .await
            .expect("B's own events");
        assert_eq!(m.data["wefttenant"], "b", "B saw {m:?}");
        assert_eq!(m.data["weftinstance"], bc.as_str(), "B saw {m:?}");
        if m.event == "dev.weft.plan.completed" {
            break;
        }
    }
    // And A sees nothing of B's.
    assert_invisible(&a, "does-not-exist", &bc).await;
    let a_list = a.get("/v1/instances").await.expect(200, "A: instances");
    assert!(
        !a_list["instances"]
            .as_array()
            .expect("list")
            .iter()
            .any(|i| i["id"] == bc.as_str()),
        "{a_list}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_is_a_4xx_problem_and_the_server_stays_up() {
    let d = dir("bad-input");
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.create_plan(&reactive_plan("r")).await;
    // Malformed JSON, wrong content type.
    api.post("/v1/plans", "application/json", r#"{"plan_name":"#)
        .await
        .problem(400, "invalid_json", "malformed plan");
    api.post("/v1/events", "application/cloudevents+json", "{not json")
        .await
        .problem(400, "invalid_json", "malformed event");
    api.post("/v1/plans", "text/plain", "{}").await.problem(
        415,
        "unsupported_media_type",
        "plan as text/plain",
    );
    api.post(
        "/v1/events",
        "text/plain",
        cloud_event(1, "ping", None).to_string(),
    )
    .await
    .problem(415, "unsupported_media_type", "event as text/plain");
    // A 100 MB body, streamed without a length, and one announced by Content-Length.
    let chunks = futures::stream::iter(
        (0..100).map(|_| Ok::<_, std::io::Error>(Frame::data(Bytes::from(vec![b' '; 1 << 20])))),
    );
    // The server answers 413 once the cap is passed and closes the connection without reading
    // the rest; the client may then fail writing before it reads that answer (a reset can drop
    // it), so a response, when one arrives, must be the 413 problem, and either way the server
    // must still answer afterwards. The in-process router tests assert the 413 body itself.
    let mut send = api.connect().await;
    let streamed = send
        .send_request(api.request(
            Method::POST,
            "/v1/events",
            Some("application/cloudevents+json"),
            StreamBody::new(chunks).boxed(),
        ))
        .await;
    if let Ok(res) = streamed {
        assert_eq!(
            res.status(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "100 MB streamed"
        );
        let body = res.into_body().collect().await.expect("body").to_bytes();
        let problem: Value = serde_json::from_slice(&body).expect("problem json");
        assert_eq!(problem["code"], "payload_too_large", "{problem}");
    }
    let mut send = api.connect().await;
    let mut req = api.request(
        Method::POST,
        "/v1/plans",
        Some("application/json"),
        full(Bytes::new()),
    );
    req.headers_mut()
        .insert("content-length", HeaderValue::from_static("104857600"));
    // The server answers before the (never sent) body; the request may fail after that.
    if let Ok(res) = send.send_request(req).await {
        assert_eq!(res.status(), StatusCode::PAYLOAD_TOO_LARGE);
    }
    api.get("/healthz")
        .await
        .expect(200, "healthz after 100 MB");
    // Unknown plan, event for a stopped instance.
    api.post_json("/v1/instances", &json!({"plan": "nope"}))
        .await
        .problem(404, "not_found", "unknown plan");
    let id = api.start("r").await;
    api.post_empty(&format!("/v1/instances/{id}/stop"))
        .await
        .expect(200, "stop");
    api.event(&cloud_event(1, "ping", Some(&id))).await.problem(
        409,
        "instance_terminal",
        "event for a stopped instance",
    );
    api.post_empty(&format!("/v1/instances/{id}/stop"))
        .await
        .problem(409, "instance_terminal", "stop twice");
    // Invalid CloudEvents.
    let live = api.start("r").await;
    let good = cloud_event(1, "ping", Some(&live));
    let mut cases: Vec<(&str, Value)> = Vec::new();
    for (what, field, value) in [
        ("no specversion", "specversion", Value::Null),
        ("specversion 0.3", "specversion", json!("0.3")),
        ("no id", "id", Value::Null),
        ("empty source", "source", json!("")),
        ("type not a string", "type", json!(7)),
        ("data_base64", "data_base64", json!("AA==")),
        ("bad weftinstance", "weftinstance", json!("../etc")),
    ] {
        let mut e = good.clone();
        if value.is_null() {
            e.as_object_mut().expect("object").remove(field);
        } else {
            e[field] = value;
        }
        cases.push((what, e));
    }
    cases.push(("not an object", json!(["x"])));
    for (what, e) in &cases {
        api.event(e)
            .await
            .problem(400, "invalid_cloudevent", &format!("CloudEvent: {what}"));
    }
    api.post(
        "/v1/events",
        "application/cloudevents-batch+json",
        good.to_string(),
    )
    .await
    .problem(400, "invalid_cloudevent", "batch that is an object");
    api.events(&[good.clone(), cases[0].1.clone()])
        .await
        .problem(400, "invalid_cloudevent", "batch with an invalid event");
    // A batch whose later event names a missing or stopped instance is refused whole.
    api.events(&[good.clone(), cloud_event(2, "ping", Some("i-missing"))])
        .await
        .problem(404, "not_found", "batch with an unknown instance");
    api.events(&[good.clone(), cloud_event(3, "ping", Some(&id))])
        .await
        .problem(409, "instance_terminal", "batch with a stopped instance");
    assert_eq!(
        api.state(&live).await["fired"],
        0,
        "a rejected batch delivered nothing"
    );
    assert!(
        !api.journal(&live)
            .await
            .iter()
            .any(|r| r["kind"] == "token.added"),
        "a rejected batch journaled an event"
    );
    // Missing and wrong tokens.
    let anon = server.api(None);
    let wrong = server.api(Some("nope"));
    for (who, c) in [("no token", &anon), ("wrong token", &wrong)] {
        c.get("/v1/plans").await.problem(401, "unauthorized", who);
        c.get(&format!("/v1/instances/{live}"))
            .await
            .problem(401, "unauthorized", who);
        c.event(&good).await.problem(401, "unauthorized", who);
        c.get("/v1/events/stream")
            .await
            .problem(401, "unauthorized", who);
    }
    anon.get("/v1/plans?access_token=nope")
        .await
        .problem(401, "unauthorized", "wrong query token");
    // Path traversal in names.
    for path in [
        "/v1/plans/..%2F..%2Fetc%2Fpasswd",
        "/v1/plans/%2e%2e",
        "/v1/plans/r/versions/..%2F1",
        "/v1/instances/..%2Fi1",
        "/v1/instances/..%2F..%2Fweft.db/journal",
        "/v1/events/stream?instance=..%2Fx",
    ] {
        let r = api.get(path).await;
        assert!(r.status.is_client_error(), "{path}: {}", r.status);
        let code = r.json()["code"].as_str().unwrap_or_default().to_string();
        assert!(
            ["invalid_name", "not_found", "invalid_request"].contains(&code.as_str()),
            "{path}: {code}"
        );
        r.problem(r.status.as_u16(), &code, path);
    }
    for path in [
        "/v1/plans/../../etc/passwd",
        "/ui/../../Cargo.toml",
        "/ui/..%2F..%2FCargo.toml",
    ] {
        api.get(path).await.problem(404, "not_found", path);
    }
    api.post_json("/v1/instances", &json!({"plan": "../r"}))
        .await
        .problem(400, "invalid_name", "start ../r");
    let mut evil = reactive_plan("r");
    evil["plan_name"] = json!("../../evil");
    api.post_json("/v1/plans", &evil)
        .await
        .problem(422, "invalid_plan", "plan_name ../../evil");
    assert!(!d.join("../evil").exists() && !d.join("../../evil").exists());
    // Still up and still serving.
    api.get("/healthz").await.expect(200, "healthz at the end");
    api.event(&good)
        .await
        .expect(202, "a good event at the end");
    assert!(
        !server.log().contains("panicked"),
        "the server panicked:\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_keeps_a_waiting_instance_for_the_next_start() {
    let d = dir("sigterm");
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.create_plan(&reactive_plan("waiter")).await;
    let id = api.start("waiter").await;
    for n in 0..3 {
        api.event(&cloud_event(n, "ping", Some(&id)))
            .await
            .expect(202, "event");
    }
    api.wait_state(&id, "three events", |s| s["fired"] == 3)
        .await;
    let log = server.log.clone();
    let status = server.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "exit after SIGTERM; stderr:\n{}",
        log.lock().expect("log")
    );
    // The instance's lease was released on the way out (the next process need not wait
    // for it to expire).
    // (The stderr reader thread may still be draining the pipe of the exited process.)
    let released = "released 1 instance lease(s)";
    for _ in 0..100 {
        if log.lock().expect("log").contains(released) {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let stderr = log.lock().expect("log").clone();
    assert!(stderr.contains(released), "stderr:\n{stderr}");
    // Restart on the same store: the instance is there and keeps going.
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    let s = api.state(&id).await;
    assert_eq!(s["status"], "running", "{s}");
    assert_eq!(s["fired"], 3, "{s}");
    assert_eq!(
        s["marking"]["seen"].as_array().map(Vec::len),
        Some(3),
        "{s}"
    );
    for n in 3..5 {
        let r = api
            .event(&cloud_event(n, "ping", Some(&id)))
            .await
            .expect(202, "event after restart");
        assert_eq!(r["routed"], 1, "{r}");
    }
    let s = api
        .wait_state(&id, "five events", |s| {
            s["marking"]["seen"].as_array().map(Vec::len) == Some(5)
        })
        .await;
    assert_eq!(s["fired"], 5, "{s}");
    let tokens = api
        .journal(&id)
        .await
        .iter()
        .filter(|r| r["kind"] == "token.added")
        .count();
    assert_eq!(tokens, 5, "journaled events across the restart");
    let status = server.terminate();
    assert_eq!(status.code(), Some(0));
}

// --- human approvals ----------------------------------------------------------------------------

/// `notify` sends an email once a person approves; a denial goes to `refused`.
fn approval_plan() -> Value {
    json!({"plan_name": "notify", "graph_type": "acyclic",
        "events": {"start": {}, "sent": {"kind": "output"}, "refused": {"kind": "output"}},
        "steps": {"mail": {"on": ["start"], "action": "send_email",
            "args": {"to": "ann@example.com", "subject": "hi", "body": "hello"},
            "approval": {"reason": "email ann?"},
            "emits": ["sent"], "on_fail": "emit:refused"}}})
}

fn outbox(d: &Path) -> usize {
    std::fs::read_dir(d.join(".weft/outbox")).map_or(0, |r| r.count())
}

/// `weft approve` / `weft deny` against the server at `addr`.
fn decide(addr: SocketAddr, verb: &str, id: &str, step: Option<&str>) -> std::process::Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.args([verb, id])
        .args(step)
        .args(["--server", &format!("http://{addr}"), "--token", "tA"])
        .args(["--as", "ann", "--comment", "checked"])
        .env("NO_COLOR", "1");
    cmd.output().expect("run weft approve")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_approval_waits_across_kill_9_and_its_effect_runs_once() {
    let d = dir("approval");
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.create_plan(&approval_plan()).await;
    let id = api.start("notify").await;
    let s = api
        .wait_state(&id, "waiting for its approval", |s| {
            s["status"] == "waiting_approval"
        })
        .await;
    assert_eq!(s["approvals"][0]["step"], "mail", "{s}");
    assert_eq!(s["approvals"][0]["reasons"][0], "email ann?", "{s}");
    assert_eq!(outbox(&d), 0, "nothing is sent before the decision");
    // Another tenant sees nothing of it.
    server
        .api(Some("tB"))
        .post_json(
            &format!("/v1/instances/{id}/approvals/mail"),
            &json!({"decision": "grant"}),
        )
        .await
        .problem(404, "not_found", "another tenant's approval");

    // kill -9, then a new process on the same store: the same request still waits.
    drop(server);
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    let s = api
        .wait_state(&id, "waiting again after kill -9", |s| {
            s["status"] == "waiting_approval"
        })
        .await;
    assert_eq!(s["approvals"].as_array().map(Vec::len), Some(1), "{s}");
    let listed = decide(server.addr, "approve", &id, None);
    assert!(listed.status.success(), "{listed:?}");
    let text = String::from_utf8_lossy(&listed.stdout);
    assert!(
        text.contains("mail (firing 0): waiting") && text.contains("email ann?"),
        "{text}"
    );
    // Bad decisions are problems, not decisions.
    api.post_json(
        &format!("/v1/instances/{id}/approvals/mail"),
        &json!({"decision": "maybe"}),
    )
    .await
    .problem(400, "invalid_request", "an unknown decision");
    api.post_json(
        &format!("/v1/instances/{id}/approvals/nope"),
        &json!({"decision": "grant"}),
    )
    .await
    .problem(404, "no_approval", "a step that waits for nothing");

    let granted = decide(server.addr, "approve", &id, Some("mail"));
    assert!(granted.status.success(), "{granted:?}");
    let s = api
        .wait_state(&id, "completed", |s| s["status"] == "completed")
        .await;
    assert!(s["results"].to_string().contains("sent"), "{s}");
    assert_eq!(outbox(&d), 1, "the approved email is sent once");
    let again = decide(server.addr, "deny", &id, Some("mail"));
    assert!(!again.status.success(), "nothing waits any more");
    let journal = api.journal(&id).await;
    let kinds: Vec<&str> = journal
        .iter()
        .filter_map(|r| r["kind"].as_str())
        .filter(|k| k.starts_with("approval."))
        .collect();
    assert_eq!(
        kinds,
        ["approval.requested", "approval.decided"],
        "{journal:?}"
    );
    let decided = journal
        .iter()
        .find(|r| r["kind"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["body"]["principal"], "ann", "{decided}");
    assert_eq!(decided["body"]["comment"], "checked", "{decided}");

    // A denial: the email is never sent and the step's `on_fail` takes the error.
    let id2 = api.start("notify").await;
    api.wait_state(&id2, "waiting", |s| s["status"] == "waiting_approval")
        .await;
    let denied = decide(server.addr, "deny", &id2, Some("mail"));
    assert!(denied.status.success(), "{denied:?}");
    let s = api
        .wait_state(&id2, "completed", |s| s["status"] == "completed")
        .await;
    assert!(s["results"].to_string().contains("approval_denied"), "{s}");
    assert_eq!(outbox(&d), 1, "a denied email is never sent");
}

// --- OTLP export --------------------------------------------------------------------------------

/// Spans received by the test's OTLP/HTTP receiver: (service name, span name, attributes);
/// the span's trace id and parent span id (hex) are in the attributes as `@trace_id` and
/// `@parent_span_id`.
type Received = Arc<Mutex<Vec<(String, String, BTreeMap<String, String>)>>>;

/// An OTLP/HTTP traces receiver on a free loopback port (`POST /v1/traces`, protobuf).
async fn otlp_receiver() -> (SocketAddr, Received) {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
    use prost::Message as _;
    let got: Received = Arc::default();
    let sink = Arc::clone(&got);
    let text = |v: &Option<opentelemetry_proto::tonic::common::v1::AnyValue>| match v
        .as_ref()
        .and_then(|v| v.value.as_ref())
    {
        Some(Any::StringValue(s)) => s.clone(),
        Some(Any::IntValue(i)) => i.to_string(),
        Some(other) => format!("{other:?}"),
        None => String::new(),
    };
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let sink = Arc::clone(&sink);
            async move {
                let Ok(req) = ExportTraceServiceRequest::decode(body) else {
                    return (axum::http::StatusCode::BAD_REQUEST, Vec::new());
                };
                let mut out = sink.lock().expect("received");
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .map(|a| text(&a.value))
                        .unwrap_or_default();
                    for span in rs.scope_spans.into_iter().flat_map(|s| s.spans) {
                        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect();
                        let mut attrs: BTreeMap<String, String> = span
                            .attributes
                            .iter()
                            .map(|a| (a.key.clone(), text(&a.value)))
                            .collect();
                        attrs.insert("@trace_id".into(), hex(&span.trace_id));
                        attrs.insert("@parent_span_id".into(), hex(&span.parent_span_id));
                        out.push((service.clone(), span.name, attrs));
                    }
                }
                (axum::http::StatusCode::OK, Vec::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind receiver");
    let addr = listener.local_addr().expect("receiver address");
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr, got)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn otlp_endpoint_exports_request_and_step_spans() {
    let (receiver, got) = otlp_receiver().await;
    let d = dir("otlp");
    let server = Server::start_with(
        &d,
        Some(TOKENS),
        &["--otlp-endpoint", &format!("http://{receiver}")],
    );
    let api = server.api(Some("tA"));
    api.create_plan(&reactive_plan("traced")).await;
    let id = api.start("traced").await;
    // The event comes from a caller's trace (W3C `traceparent`): its request span continues it.
    let (caller_trace, caller_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let mut req = api.request(
        Method::POST,
        "/v1/events",
        Some("application/cloudevents+json"),
        full(cloud_event(1, "ping", Some(&id)).to_string()),
    );
    req.headers_mut().insert(
        "traceparent",
        HeaderValue::from_str(&format!("00-{caller_trace}-{caller_span}-01")).expect("header"),
    );
    let res = api.connect().await.send_request(req).await.expect("event");
    let r = Resp {
        status: res.status(),
        headers: res.headers().clone(),
        body: res.into_body().collect().await.expect("body").to_bytes(),
    };
    let request_id = r
        .headers
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .expect("request id")
        .to_string();
    r.expect(202, "event");
    api.wait_state(&id, "one event", |s| s["fired"] == 1).await;
    let log = server.log.clone();
    // Shutdown flushes the exporter: everything is at the receiver once the process is gone.
    let status = server.terminate();
    assert_eq!(
        status.code(),
        Some(0),
        "stderr:\n{}",
        log.lock().expect("log")
    );
    let spans = got.lock().expect("received").clone();
    let request = spans
        .iter()
        .find(|(_, name, a)| name == "http.request" && a.get("request_id") == Some(&request_id));
    let Some((service, _, attrs)) = request else {
        panic!("no request span with id {request_id}: {spans:#?}");
    };
    assert_eq!(service, "weft");
    assert_eq!(attrs.get("path").map(String::as_str), Some("/v1/events"));
    assert_eq!(attrs.get("tenant").map(String::as_str), Some("a"));
    assert_eq!(
        (
            attrs.get("@trace_id").map(String::as_str),
            attrs.get("@parent_span_id").map(String::as_str)
        ),
        (Some(caller_trace), Some(caller_span)),
        "the request span continues the caller's trace"
    );
    // A request without `traceparent` starts a trace of its own.
    let own = spans
        .iter()
        .find(|(_, name, a)| {
            name == "http.request" && a.get("path").is_some_and(|p| p == "/v1/plans")
        })
        .unwrap_or_else(|| panic!("no span of POST /v1/plans: {spans:#?}"));
    assert_ne!(
        own.2.get("@trace_id").map(String::as_str),
        Some(caller_trace)
    );
    assert_eq!(own.2.get("@parent_span_id").map(String::as_str), Some(""));
    let step = spans
        .iter()
        .find(|(_, name, a)| name == "weft.step" && a.get("instance") == Some(&id))
        .unwrap_or_else(|| panic!("no step span of {id}: {spans:#?}"));
    assert_eq!(step.2.get("step").map(String::as_str), Some("see"));
    assert_eq!(step.2.get("outcome").map(String::as_str), Some("ok"));
    assert_eq!(step.2.get("tenant").map(String::as_str), Some("a"));
}

/// Governance survives kill -9: an instance waiting for an event is killed with its server; a
/// new process on the same store loads the same `[policy]` bundle from `weft.toml`, the
/// allowed email is sent once, the denied one never (its `<step>.denied` listener takes it),
/// and both decisions are in the instance's journal, whose hash chain verifies.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_decisions_hold_across_kill_9() {
    let d = dir("policy-kill");
    std::fs::create_dir_all(d.join("policies")).unwrap();
    std::fs::write(
        d.join("policies/weft.rego"),
        "package weft\n\ndeny contains msg if {\n    input.tool.name == \"send_email\"\n    not endswith(input.args.to, \"@example.com\")\n    msg := sprintf(\"%s is outside example.com\", [input.args.to])\n}\n",
    )
    .unwrap();
    std::fs::write(d.join("weft.toml"), "[policy]\nbundles = [\"policies\"]\n").unwrap();
    let mail = |to: &str, out: &str| {
        json!({"on": ["go"], "action": "send_email",
            "args": {"to": to, "subject": "hi", "body": "hello"}, "emits": [out]})
    };
    let plan = json!({"plan_name": "two-mails", "graph_type": "acyclic",
        "events": {"start": {}, "go": {"kind": "input", "consume": "broadcast"},
                   "ok.sent": {"kind": "output"}, "bad.sent": {"kind": "output"},
                   "bad.denied": {}, "refused": {"kind": "output"}, "ready": {}},
        "steps": {
            "arm": {"on": ["start"], "action": "noop", "emits": ["ready"]},
            "ok": mail("ann@example.com", "ok.sent"),
            "bad": mail("eve@evil.test", "bad.sent"),
            "note": {"on": ["bad.denied"], "action": "echo",
                "args": {"code": "${inputs[\"bad.denied\"].error.code}"}, "emits": ["refused"]},
            "idle": {"on": ["ready"], "action": "noop"}}});
    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.create_plan(&plan).await;
    let id = api.start("two-mails").await;
    api.wait_state(&id, "waiting for `go`", |s| s["status"] == "waiting")
        .await;
    drop(server);

    let server = Server::start(&d, Some(TOKENS));
    let api = server.api(Some("tA"));
    api.event(&cloud_event(1, "go", Some(&id)))
        .await
        .expect(202, "the go event");
    let s = api
        .wait_state(&id, "completed", |s| s["status"] == "completed")
        .await;
    assert!(s["results"].to_string().contains("policy_denied"), "{s}");
    assert_eq!(
        outbox(&d),
        1,
        "the allowed email once, the denied one never"
    );
    let journal = api.journal(&id).await;
    // Every call is decided (`arm`, `idle` and `note` too); the two emails' decisions:
    let decided = |step: &str| -> Vec<String> {
        journal
            .iter()
            .filter(|r| {
                r["kind"] == "policy.decided"
                    && r["body"]["key"]
                        .as_str()
                        .is_some_and(|k| k.contains(&format!("/{step}/")))
            })
            .map(|r| {
                r["body"]["decision"]["decision"]
                    .as_str()
                    .unwrap_or("")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(decided("ok"), ["allow"], "{journal:?}");
    assert_eq!(decided("bad"), ["deny"], "{journal:?}");
    drop(server);
    let verify = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["journal", "verify", &id, "--store"])
        .arg(d.join("weft.db"))
        .current_dir(&d)
        .env("NO_COLOR", "1")
        .output()
        .expect("weft journal verify");
    assert!(verify.status.success(), "{verify:?}");
}
