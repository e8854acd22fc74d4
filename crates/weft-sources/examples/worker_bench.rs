//! Throughput and latency of `worker` tool calls over NATS: N calls, C at a time, against W
//! Python workers (`python/weft-worker`, tool `bench_echo` of its test fixtures), made three
//! ways to separate the costs: (1) through a declared worker tool (weft's path: the CloudEvent,
//! the shared client, the reply mapping, the declared-tool rules), (2) the same request bytes
//! with a raw async-nats client (the workers' and NATS's share), (3) raw requests to a Rust
//! responder in this process (NATS alone, no Python).
//!
//! ```sh
//! export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)   # or python3 with nats-py installed
//! cargo run --profile perf -p weft-sources --example worker_bench -- [N] [C] [W]
//! ```
//! Defaults: N = 20000, C = 256, W = 2; NATS at `WEFT_TEST_NATS_URL` (default
//! `nats://127.0.0.1:4222`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt;
use serde_json::{Value, json};
use weft_tools::{Tool, ToolContext};

struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(python: &str, url: &str, tenant: &str) -> Worker {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker");
    let mut child = Command::new(python)
        .args(["-m", "weft_worker", "serve"])
        .arg(root.join("tests/fixtures/workers.py"))
        .args(["--url", url, "--tenant", tenant])
        // Without the venv the package is found from the checkout (nats-py must be there).
        .env("PYTHONPATH", &root)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start a Python worker");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        first.contains("serving"),
        "the worker did not start: {first}"
    );
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
    Worker(child)
}

/// Runs `n` calls of `f`, `c` at a time; prints calls/s and latency percentiles.
async fn run<F, Fut>(label: &str, n: usize, c: usize, f: F)
where
    F: Fn(usize) -> Fut,
    Fut: std::future::Future<Output = Result<(), String>>,
{
    let started = Instant::now();
    let mut lat: Vec<Duration> = futures::stream::iter(0..n)
        .map(|i| {
            let call = f(i);
            async move {
                let t = Instant::now();
                call.await
                    .unwrap_or_else(|e| panic!("{label}: call {i}: {e}"));
                t.elapsed()
            }
        })
        .buffer_unordered(c)
        .collect()
        .await;
    let total = started.elapsed();
    lat.sort();
    let p = |q: f64| lat[((lat.len() as f64 * q) as usize).min(lat.len() - 1)];
    println!(
        "{label:<34} {:>8.0} calls/s   p50 {:>7.2} ms   p99 {:>7.2} ms   ({n} calls, {c} at a time, {:.2} s)",
        n as f64 / total.as_secs_f64(),
        p(0.50).as_secs_f64() * 1e3,
        p(0.99).as_secs_f64() * 1e3,
        total.as_secs_f64()
    );
}

fn event(tenant: &str, i: usize) -> Vec<u8> {
    serde_json::to_vec(&json!({
        "specversion": "1.0", "type": "weft.tool.call", "source": "weft",
        "id": format!("raw-{i}:1"), "subject": "bench_echo",
        "datacontenttype": "application/json",
        "data": {"tool": "bench_echo", "tenant": tenant, "instance": "bench", "plan": "bench",
                 "step": "s", "idempotency_key": format!("raw-{i}"), "attempt": 1,
                 "deadline_ms": 0, "args": {"n": i}}
    }))
    .unwrap()
}

#[tokio::main]
async fn main() {
    let arg = |i: usize, d: usize| {
        std::env::args()
            .nth(i)
            .map_or(d, |s| s.parse().expect("a number"))
    };
    let (n, c, w) = (arg(1, 20_000), arg(2, 256), arg(3, 2));
    let url = std::env::var("WEFT_TEST_NATS_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let python = std::env::var("WEFT_TEST_PYTHON")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "python3".into());
    let tenant = format!("bench{}", std::process::id());
    let _workers: Vec<Worker> = (0..w)
        .map(|_| start_worker(&python, &url, &tenant))
        .collect();
    println!(
        "worker_bench: {w} Python workers, NATS {url}, {} cores",
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    // (1) weft's path: a declared worker tool.
    let def: weft_sources::ToolDef = serde_json::from_value(json!({
        "name": "bench_echo", "effect": "pure", "idempotent": true,
        "source": {"kind": "worker", "url": url}}))
    .unwrap();
    let tool: Arc<dyn Tool> = weft_sources::build(&[def]).unwrap().remove(0);
    let weft_call = |prefix: &'static str| {
        let tool = Arc::clone(&tool);
        let tenant = tenant.clone();
        move |i: usize| {
            let mut ctx = ToolContext::detached("s");
            ctx.tenant = tenant.as_str().into();
            ctx.idempotency_key = format!("{prefix}-{i}").into();
            let call = tool.call(ctx, json!({"n": i}));
            async move {
                let v = call.await.map_err(|e| e.to_string())?;
                (v["n"] == i)
                    .then_some(())
                    .ok_or(format!("wrong reply {v}"))
            }
        }
    };
    run("warm-up (weft)", 2000.min(n), c, weft_call("warm")).await;
    run("weft declared worker tool", n, c, weft_call("weft")).await;

    // (2) the same requests with a raw client.
    let raw = async_nats::connect(&*url).await.unwrap();
    let subject = weft_sources::default_subject(&tenant, "bench_echo");
    run("raw async-nats -> Python workers", n, c, |i| {
        let (raw, subject, body) = (raw.clone(), subject.clone(), event(&tenant, i));
        async move {
            let m = raw
                .request(subject, body.into())
                .await
                .map_err(|e| e.to_string())?;
            let v: Value = serde_json::from_slice(&m.payload).map_err(|e| e.to_string())?;
            (v["result"]["n"] == i)
                .then_some(())
                .ok_or(format!("wrong reply {v}"))
        }
    })
    .await;

    // (3) NATS alone: a Rust responder in this process answering the same shape.
    let echo_subject = format!("weft.bench.{tenant}.echo");
    let responder = async_nats::connect(&*url).await.unwrap();
    let mut sub = responder.subscribe(echo_subject.clone()).await.unwrap();
    responder.flush().await.unwrap();
    tokio::spawn(async move {
        while let Some(m) = sub.next().await {
            let v: Value = serde_json::from_slice(&m.payload).unwrap();
            let body = serde_json::to_vec(&json!({"result": v["data"]["args"]})).unwrap();
            if let Some(to) = m.reply {
                responder.publish(to, body.into()).await.unwrap();
            }
        }
    });
    run("raw async-nats -> Rust responder", n, c, |i| {
        let (raw, subject, body) = (raw.clone(), echo_subject.clone(), event(&tenant, i));
        async move {
            let m = raw
                .request(subject, body.into())
                .await
                .map_err(|e| e.to_string())?;
            let v: Value = serde_json::from_slice(&m.payload).map_err(|e| e.to_string())?;
            (v["result"]["n"] == i)
                .then_some(())
                .ok_or(format!("wrong reply {v}"))
        }
    })
    .await;
}
