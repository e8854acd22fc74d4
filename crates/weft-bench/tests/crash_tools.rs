//! The crash test with external tools: runs the real `weft-crashtest-tools` binary (declared
//! `http` and `worker` tools on a durable SQLite node) against an HTTP server in this test
//! and a Python worker (`python/weft-worker`) over the real NATS server, `kill -9`s it while
//! calls to both are in flight (30 launches by default, `WEFT_CRASH_TOOLS_KILLS`; each is
//! killed at the first moment, after a random pause, that both peers are performing calls),
//! restarts it, lets the last run finish, and proves from the peers' own counts and the
//! journals: every run ends, completed or failed with `outcome_unknown` (a non-idempotent
//! call in flight at a kill); an idempotent tool is called again only with the same key and
//! gives the same outcome; no non-idempotent effect was performed twice; every completed
//! run's result is exactly what the peers performed under its keys.
//!
//! The worker runs with its duplicate memory off, so a repeated dispatch by weft would be
//! performed (and counted) again instead of being answered from the worker's memory.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::State;
use axum::http::HeaderMap;
use serde_json::Value;
use weft_store::{InstanceStatus, Page, Store};

/// One performance of a tool, as its peer counted it.
#[derive(Debug, Clone)]
struct Effect {
    key: String,
    tool: String,
    instance: String,
    step: String,
    outcome: String,
}

/// The HTTP peer: `/idem` and `/once`; every request is an effect from the moment it arrives.
#[derive(Default)]
struct Peer {
    effects: Mutex<Vec<Effect>>,
    in_flight: AtomicI64,
    counter: AtomicI64,
}

/// Decrements the in-flight gauge when the handler ends or is dropped (client gone).
struct Flight(Arc<Peer>);

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

fn fnv(s: &str) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in s.bytes() {
        h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

async fn perform(peer: Arc<Peer>, idempotent: bool, headers: HeaderMap, args: Value) -> Value {
    peer.in_flight.fetch_add(1, Ordering::SeqCst);
    let _flight = Flight(Arc::clone(&peer));
    let h = |n: &str| {
        headers
            .get(n)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_string()
    };
    let key = h("idempotency-key");
    let step = h("x-weft-step");
    let outcome = if idempotent {
        format!("i{:016x}", fnv(&key))
    } else {
        format!("o{}", peer.counter.fetch_add(1, Ordering::SeqCst))
    };
    peer.effects.lock().unwrap().push(Effect {
        key: key.clone(),
        tool: if idempotent { "h.idem" } else { "h.once" }.into(),
        instance: h("x-weft-instance"),
        step: step.clone(),
        outcome: outcome.clone(),
    });
    tokio::time::sleep(Duration::from_millis(2 + fnv(&key) % 14)).await;
    let mut m = match args {
        Value::Object(m) => m,
        _ => serde_json::Map::new(),
    };
    m.insert(step, Value::from(outcome));
    Value::Object(m)
}

/// Starts the HTTP peer on loopback; returns its base URL.
fn serve_http(rt: &tokio::runtime::Runtime, peer: Arc<Peer>) -> String {
    use axum::routing::post;
    let app = axum::Router::new()
        .route(
            "/idem",
            post(
                |State(p): State<Arc<Peer>>, h: HeaderMap, axum::Json(a): axum::Json<Value>| async move {
                    axum::Json(perform(p, true, h, a).await)
                },
            ),
        )
        .route(
            "/once",
            post(
                |State(p): State<Arc<Peer>>, h: HeaderMap, axum::Json(a): axum::Json<Value>| async move {
                    axum::Json(perform(p, false, h, a).await)
                },
            ),
        )
        .with_state(peer);
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    rt.spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

/// The Python worker; killed when dropped.
struct PyWorker(Child);

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_worker(python: &str, nats: &str, tenant: &str, log: &std::path::Path) -> PyWorker {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tools_worker.py");
    let lib = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker");
    let mut child = Command::new(python)
        .arg(script)
        .args([
            "--url", nats, "--tenant", tenant, "--mode", "crash", "--log",
        ])
        .arg(log)
        // Without the venv's install the package is found from the checkout.
        .env("PYTHONPATH", lib)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the Python worker");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().and_then(Result::ok).unwrap_or_default();
    assert!(
        first.contains("serving"),
        "the worker did not start: {first}"
    );
    std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
    PyWorker(child)
}

/// The worker's log, read as it grows: its performances (`begin` lines) and how many of them
/// have not ended yet.
struct WorkerLog {
    path: std::path::PathBuf,
    pos: u64,
    partial: String,
    open: i64,
    effects: Vec<Effect>,
}

impl WorkerLog {
    fn new(path: &std::path::Path) -> Self {
        WorkerLog {
            path: path.to_path_buf(),
            pos: 0,
            partial: String::new(),
            open: 0,
            effects: Vec::new(),
        }
    }

    /// Reads what was appended since the last poll (a line still being written waits).
    fn poll(&mut self) {
        use std::io::{Read, Seek, SeekFrom};
        let Ok(mut f) = std::fs::File::open(&self.path) else {
            return;
        };
        let mut new = String::new();
        if f.seek(SeekFrom::Start(self.pos)).is_err() || f.read_to_string(&mut new).is_err() {
            return;
        }
        self.pos += new.len() as u64;
        self.partial.push_str(&new);
        let complete = match self.partial.rfind('\n') {
            Some(i) => {
                let rest = self.partial.split_off(i + 1);
                std::mem::replace(&mut self.partial, rest)
            }
            None => return,
        };
        for line in complete.lines() {
            let v: Value = serde_json::from_str(line).expect("a worker log line");
            let s = |k: &str| v[k].as_str().unwrap_or("").to_string();
            match v["phase"].as_str() {
                Some("begin") => {
                    self.open += 1;
                    self.effects.push(Effect {
                        key: s("key"),
                        tool: s("tool"),
                        instance: s("instance"),
                        step: s("step"),
                        outcome: s("outcome"),
                    });
                }
                Some("end") => self.open -= 1,
                other => panic!("unexpected worker log line {other:?}: {line}"),
            }
        }
    }
}

fn temp_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("weft-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn env_num(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

#[test]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs a NATS server (WEFT_TEST_NATS_URL) and the Python venv of scripts/python-env.sh (WEFT_TEST_PYTHON)"
)]
fn kill_9_with_http_and_worker_calls_in_flight_repeats_no_effect() {
    let bin = env!("CARGO_BIN_EXE_weft-crashtest-tools");
    let python = std::env::var("WEFT_TEST_PYTHON").expect("WEFT_TEST_PYTHON");
    let nats = std::env::var("WEFT_TEST_NATS_URL")
        .ok()
        .filter(|s| !s.is_empty())
        .unwrap_or_else(|| "nats://127.0.0.1:4222".into());
    let dir = temp_dir("crash-tools");
    let db = dir.join("weft.db");
    let wlog_path = dir.join("worker.log");
    // A tenant of its own, so that no other test's worker shares the subjects.
    let tenant = format!("crash{}", std::process::id());
    let kills = env_num("WEFT_CRASH_TOOLS_KILLS", 30);
    let per_launch = env_num("WEFT_CRASH_TOOLS_RUNS_PER_LAUNCH", 100);
    let mut seed = env_num(
        "WEFT_CRASH_SEED",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64
            | 1,
    );
    let n = per_launch * (kills + 1);
    eprintln!(
        "crash test with tools: {kills} kills, {n} runs, seed {seed}, dir {}",
        dir.display()
    );

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let peer = Arc::new(Peer::default());
    let http = serve_http(&rt, Arc::clone(&peer));
    let _worker = start_worker(&python, &nats, &tenant, &wlog_path);

    let spawn = |n: u64| {
        Command::new(bin)
            .arg(&db)
            .args([&http, &nats, &tenant, &n.to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    // Each launch is killed at a random moment once both peers are performing calls of it
    // (or of a run it recovered): after a random pause, at the first moment an http and a
    // worker call are both in flight (or after 5 s, if that moment never comes).
    let mut wlog = WorkerLog::new(&wlog_path);
    let (mut killed, mut both_in_flight) = (0, 0);
    for i in 0..kills {
        let mut child = spawn(per_launch * (i + 1));
        std::thread::sleep(Duration::from_millis(xorshift(&mut seed) % 150));
        let give_up = std::time::Instant::now() + Duration::from_secs(5);
        let mut both = false;
        while child.try_wait().unwrap().is_none() && std::time::Instant::now() < give_up {
            wlog.poll();
            if peer.in_flight.load(Ordering::SeqCst) > 0 && wlog.open > 0 {
                both = true;
                break;
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        match child.try_wait().unwrap() {
            Some(status) => assert!(status.success(), "the workload failed: {status}"),
            None => {
                child.kill().unwrap(); // SIGKILL
                killed += 1;
                if both {
                    both_in_flight += 1;
                }
            }
        }
        let _ = child.wait();
    }
    let out = spawn(n).wait_with_output().unwrap();
    assert!(out.status.success(), "final run failed: {}", out.status);
    assert!(String::from_utf8_lossy(&out.stdout).contains("DONE"));
    eprintln!(
        "killed mid-run {killed} of {kills} times, {both_in_flight} with http and worker calls in flight"
    );
    assert!(
        both_in_flight > 0,
        "no kill landed while an http and a worker call were in flight"
    );

    // The peers' counts: every performance, by key and by (instance, step).
    // Calls of killed processes may still be finishing in the worker (a few ms each).
    let give_up = std::time::Instant::now() + Duration::from_secs(10);
    wlog.poll();
    while wlog.open > 0 && std::time::Instant::now() < give_up {
        std::thread::sleep(Duration::from_millis(10));
        wlog.poll();
    }
    assert_eq!(wlog.open, 0, "the worker is still performing calls");
    let mut effects = peer.effects.lock().unwrap().clone();
    effects.extend(wlog.effects.iter().cloned());
    let mut by_key: HashMap<&str, Vec<&Effect>> = HashMap::new();
    let mut by_step: HashMap<(String, String), Vec<&Effect>> = HashMap::new();
    for e in &effects {
        assert!(
            !e.key.is_empty(),
            "a call without an idempotency key: {e:?}"
        );
        by_key.entry(&e.key).or_default().push(e);
        by_step
            .entry((e.instance.clone(), e.step.clone()))
            .or_default()
            .push(e);
    }
    let mut repeated_idem = 0;
    for ((instance, step), v) in &by_step {
        let keys: HashSet<&str> = v.iter().map(|e| e.key.as_str()).collect();
        assert_eq!(
            keys.len(),
            1,
            "{instance}/{step} was called with different keys: {v:?}"
        );
        if v[0].tool.ends_with(".once") {
            assert_eq!(
                v.len(),
                1,
                "non-idempotent {instance}/{step} was performed {} times: {v:?}",
                v.len()
            );
        } else {
            assert!(
                v.iter().all(|e| e.outcome == v[0].outcome),
                "{instance}/{step}: different outcomes {v:?}"
            );
            if v.len() > 1 {
                repeated_idem += 1;
            }
        }
    }
    for (key, v) in &by_key {
        if v[0].tool.ends_with(".once") {
            assert_eq!(
                v.len(),
                1,
                "non-idempotent key {key} performed {} times",
                v.len()
            );
        }
    }

    // Every run ended; a completed one's result is what the peers performed under its keys.
    rt.block_on(async {
        let store: Arc<dyn Store> =
            Arc::new(weft_store_sqlite::SqliteStore::open(&db).await.unwrap());
        let mut by_k: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        let (mut completed, mut unknown_http, mut unknown_worker) = (0, 0, 0);
        let mut page = Page::first(10_000);
        loop {
            let recs = store
                .list_instances(&tenant, None, page.clone())
                .await
                .unwrap();
            let Some(last) = recs.last() else { break };
            page.after = Some(last.id.clone());
            for r in &recs {
                store.verify(&r.id).await.unwrap();
                let journal = store.read(&r.id, 1, 10_000).await.unwrap();
                let first: Value = journal[0].json().unwrap();
                let k = first.pointer("/input/k").and_then(Value::as_u64).unwrap();
                by_k.entry(k).or_default().push(r.id.clone());
                let performed = |step: &str| by_step.get(&(r.id.clone(), step.to_string()));
                // A non-idempotent dispatch is journaled with its key before the call: the
                // peer performed it (if at all) under exactly that key.
                for x in journal.iter().filter(|x| x.kind == "action.dispatched") {
                    let d: Value = x.json().unwrap();
                    let step = d["step"].as_str().unwrap();
                    if let Some(done) = performed(step) {
                        assert_eq!(Some(done[0].key.as_str()), d["key"].as_str(), "{}/{step}", r.id);
                    }
                }
                match r.status {
                    InstanceStatus::Completed => {
                        completed += 1;
                        let end: Value = journal.last().unwrap().json().unwrap();
                        let res = &end["result"];
                        assert_eq!(res["k"], k, "{}", r.id);
                        for step in ["a", "b", "c", "d"] {
                            let got = res[step].as_str().unwrap_or_default();
                            let done = performed(step)
                                .unwrap_or_else(|| panic!("{}/{step} never reached its peer", r.id));
                            assert_eq!(
                                got, done[0].outcome,
                                "{}/{step}: the result is not what the peer performed",
                                r.id
                            );
                        }
                    }
                    InstanceStatus::Failed => {
                        let reason = r.reason.clone().unwrap_or_default();
                        assert!(reason.contains("outcome_unknown"), "{}: {reason}", r.id);
                        // Which step's outcome is unknown: a non-idempotent one (b or d),
                        // performed at most once (checked above), never re-dispatched. The
                        // error names its firing; the firing's `action.dispatched` its step.
                        let records: Vec<Value> =
                            journal.iter().filter_map(|x| x.json::<Value>().ok()).collect();
                        let failed: Vec<String> = journal
                            .iter()
                            .zip(&records)
                            .filter(|(x, v)| {
                                x.kind == "action.error" && v.to_string().contains("outcome_unknown")
                            })
                            .map(|(_, v)| {
                                journal
                                    .iter()
                                    .zip(&records)
                                    .find(|(x, d)| {
                                        x.kind == "action.dispatched" && d["firing"] == v["firing"]
                                    })
                                    .and_then(|(_, d)| d["step"].as_str())
                                    .unwrap_or("<no action.dispatched>")
                                    .to_string()
                            })
                            .collect();
                        assert_eq!(failed.len(), 1, "{}: {failed:?}", r.id);
                        match failed[0].as_str() {
                            "b" => unknown_worker += 1,
                            "d" => unknown_http += 1,
                            s => panic!("{}: idempotent step {s} ended outcome_unknown", r.id),
                        }
                    }
                    other => panic!(
                        "{} ended {other:?}; its journal ends with {}",
                        r.id,
                        String::from_utf8_lossy(&journal.last().unwrap().body)
                    ),
                }
            }
            if recs.len() < 10_000 {
                break;
            }
        }
        eprintln!(
            "{completed} completed, outcome_unknown: {unknown_worker} worker (b), {unknown_http} http (d); \
             {repeated_idem} idempotent calls repeated with the same key and outcome; {} performances",
            effects.len()
        );
        assert_eq!(by_k.len() as u64, n, "every run exists");
        for (k, ids) in &by_k {
            assert_eq!(ids.len(), 1, "run {k} started twice: {ids:?}");
        }
        // Every performance belongs to a run of this test.
        let ids: HashSet<&str> = by_k.values().flatten().map(String::as_str).collect();
        for e in &effects {
            assert!(ids.contains(e.instance.as_str()), "effect of no run: {e:?}");
        }
    });
    let _ = std::fs::remove_dir_all(&dir);
}
