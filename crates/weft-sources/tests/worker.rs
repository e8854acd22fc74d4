//! The `worker` source against a real NATS server (`WEFT_TEST_NATS_URL`) and real Python
//! workers (`python/weft-worker`, run by the venv python of `WEFT_TEST_PYTHON`; both set by
//! `bash .ci/run`, the python by `scripts/python-env.sh`). A worker tool answers calls with the
//! call's context (tenant and tool names with dots stay one subject token each), two workers
//! share calls, a worker killed mid-call leaves the call to a retry with the same idempotency
//! key, no worker is a quick `worker_unavailable` naming the subject, and timeouts, malformed
//! replies and workers' errors map to their codes. Tests needing a service are ignored with the
//! reason when its variable was not set at build time (`build.rs`); each test uses a tenant of
//! its own, so runs never see each other's calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_sources::ToolDef;
use weft_tools::{Tool, ToolContext, ToolError};

static N: AtomicU32 = AtomicU32::new(0);

/// A tenant no other test or run uses (with a dot, so subjects must escape it).
fn tenant(tag: &str) -> String {
    format!(
        "{tag}.{}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .subsec_nanos()
    )
}

fn nats_url() -> String {
    match std::env::var("WEFT_TEST_NATS_URL") {
        Ok(u) if !u.is_empty() => u,
        _ => panic!(
            "this test needs NATS and WEFT_TEST_NATS_URL is not set (it was when the test was \
             built): export WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run starts it)"
        ),
    }
}

fn python() -> String {
    match std::env::var("WEFT_TEST_PYTHON") {
        Ok(p) if !p.is_empty() => p,
        _ => panic!(
            "this test needs Python workers and WEFT_TEST_PYTHON is not set (it was when the \
             test was built): export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)"
        ),
    }
}

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker/tests/fixtures/workers.py")
}

/// A Python worker serving `python/weft-worker/tests/fixtures/workers.py`, killed on drop.
struct PyWorker(Child);

impl PyWorker {
    /// Starts one for `tenant`, logging calls to `log`; returns once it has subscribed.
    fn start(tenant: &str, log: &Path) -> PyWorker {
        let mut child = Command::new(python())
            .args(["-m", "weft_worker", "serve"])
            .arg(fixtures())
            .args(["--url", &nats_url(), "--tenant", tenant])
            .env("WEFT_TEST_LOG", log)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a Python worker (WEFT_TEST_PYTHON)");
        let stderr = child.stderr.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let _ = tx.send(line.clone());
                eprintln!("worker: {line}");
            }
        });
        let mut seen = Vec::new();
        loop {
            match rx.recv_timeout(Duration::from_secs(30)) {
                Ok(l) if l.contains("weft-worker: serving") => break,
                Ok(l) => seen.push(l),
                Err(e) => panic!("the worker did not start ({e}): {seen:#?}"),
            }
        }
        PyWorker(child)
    }

    fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The calls the workers logged: one JSON object per line.
fn logged(log: &Path) -> Vec<Value> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn temp_log(tag: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!(
        "weft-worker-{tag}-{}-{}.jsonl",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&p);
    p
}

/// The declared worker tool `name` with `extra` definition fields.
fn worker_tool(name: &str, url: &str, extra: Value) -> Arc<dyn Tool> {
    let mut d = json!({"name": name, "effect": "read", "idempotent": true,
        "source": {"kind": "worker", "url": url}});
    for (k, v) in extra.as_object().unwrap() {
        if k == "source" {
            for (sk, sv) in v.as_object().unwrap() {
                d["source"][sk] = sv.clone();
            }
        } else {
            d[k] = v.clone();
        }
    }
    let def: ToolDef = serde_json::from_value(d).unwrap();
    weft_sources::build(&[def]).unwrap().remove(0)
}

fn ctx(tenant: &str, key: &str) -> ToolContext {
    let mut c = ToolContext::detached("extract");
    c.tenant = tenant.into();
    c.instance = "inst-1".into();
    c.plan = "facts".into();
    c.idempotency_key = key.into();
    c
}

async fn call(t: &Arc<dyn Tool>, tenant: &str, key: &str, args: Value) -> Result<Value, ToolError> {
    t.call(ctx(tenant, key), args).await
}

#[test]
fn worker_definitions_are_checked_when_built() {
    let def = |source: Value| -> Result<ToolDef, serde_json::Error> {
        serde_json::from_value(json!({"name": "facts.extract", "source": source}))
    };
    // Defaults: the local server, `weft.tool.<tenant>.<tool>`, the tool escaped.
    let d = def(json!({"kind": "worker"})).unwrap();
    assert_eq!(d.source.kind(), "worker");
    assert_eq!(
        weft_sources::declare(&d).unwrap().source(),
        "worker nats://127.0.0.1:4222/weft.tool.<tenant>.facts%2Eextract"
    );
    // A subject of one's own, with the tenant in it; a password is not shown.
    let d = def(json!({"kind": "worker", "url": "nats://u:secret@h:4222",
        "subject": "jobs.{tenant}.x"}))
    .unwrap();
    assert_eq!(
        weft_sources::declare(&d).unwrap().source(),
        "worker nats://u:***@h:4222/jobs.<tenant>.x"
    );
    // Refused: unknown fields, a wildcard subject, an empty token, a URL that is no NATS URL.
    assert!(def(json!({"kind": "worker", "queue": "q"})).is_err());
    for bad in [
        json!({"kind": "worker", "subject": "weft.*.x"}),
        json!({"kind": "worker", "subject": "weft.>"}),
        json!({"kind": "worker", "subject": "weft..x"}),
        json!({"kind": "worker", "url": "http://127.0.0.1:4222"}),
        json!({"kind": "worker", "request_timeout_ms": 0}),
    ] {
        let Err(e) = weft_sources::declare(&def(bad.clone()).unwrap()) else {
            panic!("{bad} was accepted");
        };
        assert!(e.to_string().contains("invalid_tool"), "{bad}: {e}");
    }
}

#[tokio::test]
async fn a_server_that_is_not_there_is_a_retryable_worker_unavailable() {
    // Port 1 on the loopback: nothing listens there, the connection is refused at once.
    let t = worker_tool("echo", "nats://127.0.0.1:1", json!({"timeout_ms": 20000}));
    let started = Instant::now();
    let e = call(&t, "local", "k1", json!({"text": "x"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "worker_unavailable", "{e}");
    assert!(e.retryable);
    assert!(
        e.message
            .contains("cannot connect to NATS at nats://127.0.0.1:1"),
        "{e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused, not waited for: {:?}",
        started.elapsed()
    );
}

#[tokio::test]
async fn a_step_past_its_deadline_sends_nothing() {
    let t = worker_tool("echo", "nats://127.0.0.1:1", json!({}));
    let mut c = ctx("local", "k1");
    c.deadline = Some(Instant::now());
    let e = t.call(c, json!({"text": "x"})).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("worker_timeout", true),
        "{e}"
    );
    assert!(e.message.contains("deadline passed"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs NATS and Python workers: set WEFT_TEST_NATS_URL and WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) (bash .ci/run does)"
)]
async fn a_worker_tool_answers_with_the_calls_context() {
    let tenant = tenant("acme.eu");
    let log = temp_log("answers");
    let _w = PyWorker::start(&tenant, &log);
    let url = nats_url();

    // A sync tool with a dotted name, for a dotted tenant.
    let t = worker_tool("facts.extract", &url, json!({}));
    let before = std::time::SystemTime::now();
    let r = call(
        &t,
        &tenant,
        "key-1",
        json!({"text": "Water is wet. Fire is hot."}),
    )
    .await
    .unwrap();
    assert_eq!(r["facts"], json!(["Water is wet", "Fire is hot"]));
    let calls = logged(&log);
    assert_eq!(calls.len(), 1, "{calls:?}");
    let c = &calls[0];
    assert_eq!(c["tool"], "facts.extract");
    assert_eq!(c["tenant"], tenant.as_str());
    assert_eq!(c["key"], "key-1");
    assert_eq!(c["attempt"], 1);
    assert_eq!(
        (&c["instance"], &c["plan"], &c["step"]),
        (&json!("inst-1"), &json!("facts"), &json!("extract"))
    );
    let now_ms = before
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let deadline = c["deadline_ms"].as_u64().unwrap();
    assert!(
        deadline > now_ms && deadline <= now_ms + 31_000,
        "the deadline is the request's: {deadline} vs now {now_ms}"
    );

    // The same tool for another tenant goes to another subject: nobody serves it.
    let e = call(&t, &format!("{tenant}x"), "key-2", json!({"text": "a"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "worker_unavailable", "{e}");

    // Workers' errors keep their code, message and retryability; args are checked there.
    let fail = worker_tool("fail", &url, json!({}));
    let e = call(&fail, &tenant, "key-3", json!({"kind": "retryable"}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("quota", true), "{e}");
    let e = call(&fail, &tenant, "key-4", json!({"kind": "fly"}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("tool_error", false), "{e}");
    assert_eq!(e.message, "cannot fly");
    let e = call(&fail, &tenant, "key-5", json!({"kind": 7}))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("args_invalid", false),
        "{e}"
    );
    let _ = std::fs::remove_file(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs NATS and Python workers: set WEFT_TEST_NATS_URL and WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) (bash .ci/run does)"
)]
async fn two_workers_share_the_calls() {
    let tenant = tenant("share");
    let log = temp_log("share");
    let a = PyWorker::start(&tenant, &log);
    let b = PyWorker::start(&tenant, &log);
    let t = worker_tool("echo", &nats_url(), json!({}));
    let calls = (0..20).map(|i| {
        let t = Arc::clone(&t);
        let tenant = tenant.clone();
        async move {
            call(
                &t,
                &tenant,
                &format!("k{i}"),
                json!({"text": format!("{i}")}),
            )
            .await
        }
    });
    let results = futures::future::join_all(calls).await;
    let mut texts: Vec<String> = results
        .into_iter()
        .map(|r| r.unwrap()["text"].as_str().unwrap().to_owned())
        .collect();
    texts.sort_by_key(|s| s.parse::<u32>().unwrap());
    assert_eq!(texts, (0..20).map(|i| i.to_string()).collect::<Vec<_>>());
    let calls = logged(&log);
    assert_eq!(calls.len(), 20, "each call reached one worker: {calls:?}");
    let by = |pid: u32| calls.iter().filter(|c| c["pid"] == pid).count();
    assert!(
        by(a.pid()) > 0 && by(b.pid()) > 0,
        "both workers served calls: {} and {}",
        by(a.pid()),
        by(b.pid())
    );
    assert_eq!(by(a.pid()) + by(b.pid()), 20);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs NATS and Python workers: set WEFT_TEST_NATS_URL and WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) (bash .ci/run does)"
)]
async fn a_worker_killed_mid_call_leaves_it_to_a_retry_with_the_same_key() {
    let tenant = tenant("kill");
    let log = temp_log("kill");
    let mut workers = vec![
        PyWorker::start(&tenant, &log),
        PyWorker::start(&tenant, &log),
    ];
    // `hang_once` hangs on a key's first call (whichever worker gets it) and answers a
    // repeated one. Each request waits 1.5 s; `retry` allows two more.
    let t = worker_tool(
        "hang_once",
        &nats_url(),
        json!({"effect": "write", "timeout_ms": 20000, "retry": {"max": 2, "backoff_ms": 10},
               "source": {"request_timeout_ms": 1500}}),
    );
    let pending = tokio::spawn({
        let tenant = tenant.clone();
        async move { call(&t, &tenant, "the-key", json!({"x": 7})).await }
    });
    // Wait for the first worker to receive the call, then kill it with SIGKILL.
    let first = loop {
        if let Some(c) = logged(&log).first() {
            break c["pid"].as_u64().unwrap() as u32;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    };
    let i = workers.iter().position(|w| w.pid() == first).unwrap();
    let mut killed = workers.remove(i);
    killed.0.kill().unwrap();
    killed.0.wait().unwrap();
    let survivor = workers[0].pid();

    let r = pending.await.unwrap().expect("the call completes");
    assert_eq!(r["x"], 7);
    assert_eq!(r["pid"], survivor, "the surviving worker answered");
    let calls = logged(&log);
    assert_eq!(
        calls.len(),
        2,
        "the first attempt and exactly one retry: {calls:?}"
    );
    assert!(calls.iter().all(|c| c["key"] == "the-key"), "{calls:?}");
    assert_eq!(calls[0]["pid"], first);
    assert_eq!(calls[1]["pid"], survivor);
    drop(killed);
    let _ = std::fs::remove_file(&log);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run starts it)"
)]
async fn no_worker_is_a_quick_worker_unavailable_naming_the_subject() {
    let tenant = tenant("nobody.home");
    let t = worker_tool("facts.extract", &nats_url(), json!({"timeout_ms": 30000}));
    let started = Instant::now();
    let e = call(&t, &tenant, "k", json!({"text": "x"}))
        .await
        .unwrap_err();
    let subject = weft_sources::default_subject(&tenant, "facts.extract");
    assert_eq!(e.code, "worker_unavailable", "{e}");
    assert!(e.retryable);
    assert!(
        e.message
            .contains(&format!("no worker serves subject `{subject}`")),
        "{e}"
    );
    assert!(
        e.message.contains("python -m weft_worker serve"),
        "says how to start one: {e}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "NATS said no responders; the 30 s timeout was not waited for: {:?}",
        started.elapsed()
    );
}

/// A raw responder on `subject`: replies `reply` to every request (or nothing when `None`).
/// It returns once the server routes requests from another connection to it: a flush only
/// writes the subscription to the socket, and the server may read a request from another
/// connection first (CI saw `no responders` that way). Readiness is probed with a request
/// the responder always answers.
async fn raw_responder(subject: String, reply: Option<&'static [u8]>) -> async_nats::Client {
    use futures::StreamExt;
    const PROBE: &[u8] = b"__ready__";
    let c = async_nats::connect(nats_url()).await.unwrap();
    let mut sub = c.subscribe(subject.clone()).await.unwrap();
    c.flush().await.unwrap();
    let c2 = c.clone();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let answer = if m.payload.as_ref() == PROBE {
                Some(PROBE)
            } else {
                reply
            };
            if let (Some(r), Some(to)) = (answer, m.reply) {
                c2.publish(to, r.into()).await.unwrap();
            }
        }
    });
    let other = async_nats::connect(nats_url()).await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match other.request(subject.clone(), PROBE.into()).await {
            Ok(m) if m.payload.as_ref() == PROBE => break,
            r => {
                assert!(
                    Instant::now() < deadline,
                    "the responder on {subject} never became routable: {r:?}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    }
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run starts it)"
)]
async fn malformed_replies_and_silence_map_to_their_codes() {
    let tenant = tenant("raw");
    let url = nats_url();
    let _bad = raw_responder(
        weft_sources::default_subject(&tenant, "garbled"),
        Some(b"<html>502 Bad Gateway</html>"),
    )
    .await;
    let t = worker_tool("garbled", &url, json!({}));
    let e = call(&t, &tenant, "k", json!({})).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("worker_bad_reply", false),
        "{e}"
    );
    assert!(
        e.message.contains("<html>502 Bad Gateway</html>"),
        "an excerpt: {e}"
    );

    let _mute = raw_responder(weft_sources::default_subject(&tenant, "mute"), None).await;
    let t = worker_tool("mute", &url, json!({"source": {"request_timeout_ms": 300}}));
    let started = Instant::now();
    let e = call(&t, &tenant, "k", json!({})).await.unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("worker_timeout", true),
        "{e}"
    );
    assert!(e.message.contains("300 ms"), "{e}");
    assert!(started.elapsed() >= Duration::from_millis(300));
}

/// Each runtime calls through a client of its own, so a call works after the runtime that
/// made the first call has ended (a client bound to a runtime that ended could not send),
/// and a reply reaches the runtime that asked.
#[test]
#[cfg_attr(
    not(weft_nats),
    ignore = "needs NATS: set WEFT_TEST_NATS_URL=nats://127.0.0.1:4222 (bash .ci/run starts it)"
)]
fn a_call_works_after_the_runtime_of_the_first_has_ended() {
    let tenant = tenant("rt");
    let url = nats_url();
    let subject = weft_sources::default_subject(&tenant, "fixed");
    let runtime = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap()
    };
    // The responder lives on a runtime of its own for the whole test.
    let responder_rt = runtime();
    let _responder =
        responder_rt.block_on(raw_responder(subject, Some(br#"{"result": {"ok": 1}}"#)));
    let t = worker_tool("fixed", &url, json!({}));
    for round in 0..3 {
        let rt = runtime();
        let v = rt.block_on(call(&t, &tenant, &format!("k{round}"), json!({})));
        assert_eq!(v.unwrap(), json!({"ok": 1}), "round {round}");
        drop(rt);
    }
}
