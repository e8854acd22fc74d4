//! The load run: set up a reactive plan and N waiting instances, drive C closed-loop
//! connections for D seconds (after a warm-up) against `POST /v1/events` (events addressed by
//! `weftinstance`, round robin over the instances) or `GET /v1/instances/{id}`, then check the
//! journal: every accepted event must be journaled exactly once.
//!
//! The journal check survives compaction (reactive journals are snapshotted and truncated
//! every 100 records by default): before and after the load it reads each instance's
//! journal fold at its head (`GET /v1/instances/{id}/inspect`, the document `weft inspect
//! --json` prints, rebuilt from snapshot + journal) and requires its `fired` counter to
//! have grown by exactly the events accepted for that instance — the default plan fires one
//! step per `ping`, so the fold fires once per journaled `token.added`. The kept journal
//! tail is read too: no event number may appear in two `token.added` records, and each must
//! belong to that instance.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use hyper::StatusCode;
use serde::Serialize;
use serde_json::{Value, json};

use crate::http::{Conn, Target};

use crate::stats::{Latency, latency};

/// The default plan: a reactive instance that takes `ping` events forever (one `noop` firing
/// each, nothing accumulates in the marking).
pub const DEFAULT_PLAN: &str = r#"{
  "plan_name": "loadgen",
  "description": "weft-loadgen: a reactive instance that consumes every `ping` with one noop firing.",
  "graph_type": "reactive",
  "events": {"ping": {"kind": "input", "description": "One load event: {\"n\": <event number>}."}},
  "steps": {"handle": {"on": ["ping"], "action": "noop"}}
}"#;

/// What to drive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Mode {
    /// `POST /v1/events`.
    Events,
    /// `GET /v1/instances/{id}`.
    State,
}

/// A run's parameters.
#[derive(Debug, Clone)]
pub struct Config {
    /// The server.
    pub target: Target,
    /// What to drive.
    pub mode: Mode,
    /// Waiting instances to create.
    pub instances: usize,
    /// Concurrent connections (one closed-loop worker each).
    pub connections: usize,
    /// Measured duration.
    pub duration: Duration,
    /// Unmeasured warm-up before it.
    pub warmup: Duration,
    /// Events per request (1: `application/cloudevents+json`; more: a batch).
    pub batch: usize,
    /// The plan document (its input event must be `event_type`).
    pub plan: Value,
    /// The event type sent.
    pub event_type: String,
    /// Check the journal afterwards.
    pub verify: bool,
}

/// The result of a run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Mode.
    pub mode: Mode,
    /// Instances.
    pub instances: usize,
    /// Connections.
    pub connections: usize,
    /// Events per request.
    pub batch: usize,
    /// Measured seconds (wall clock of the measured window).
    pub seconds: f64,
    /// Requests completed in the measured window.
    pub requests: u64,
    /// Requests per second in the measured window.
    pub requests_per_s: f64,
    /// Events accepted (202) in the measured window.
    pub events_accepted: u64,
    /// Deliveries to instances reported by the server in the measured window.
    pub events_routed: u64,
    /// Accepted events per second in the measured window.
    pub events_per_s: f64,
    /// Failed requests (any phase), by status code or `io`.
    pub errors: BTreeMap<String, u64>,
    /// Latency of the measured requests.
    pub latency: Latency,
    /// Events accepted over warm-up and measurement (what the journal must hold).
    pub events_accepted_total: u64,
    /// The journal check (events mode with verification).
    pub verify: Option<Verify>,
}

/// The journal check.
#[derive(Debug, Serialize)]
pub struct Verify {
    /// Events the loadgen saw accepted (warm-up included).
    pub accepted: u64,
    /// Events the journals account for (`Σ fired_after − fired_before` of the journal folds).
    pub journaled: u64,
    /// `token.added` records read in the kept journal tails (all distinct event numbers).
    pub tail_tokens_checked: u64,
    /// Instances whose journal does not match what was accepted.
    pub mismatches: Vec<String>,
    /// `accepted == journaled` and no mismatch.
    pub ok: bool,
}

#[derive(Default)]
struct WorkerOut {
    micros: Vec<u32>,
    requests: u64,
    accepted: u64,
    routed: u64,
    accepted_total: u64,
    errors: BTreeMap<String, u64>,
}

/// This run's prefix of event ids: the server applies a CloudEvent (`source`, `id`) once, so a
/// second run against the same store must not repeat the first run's ids.
fn run_id() -> &'static str {
    static ID: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    ID.get_or_init(|| {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        format!("{:x}-{}", nanos, std::process::id())
    })
}

fn event(ty: &str, instance: &str, n: u64) -> String {
    let run = run_id();
    format!(
        r#"{{"specversion":"1.0","id":"lg-{run}-{n}","source":"weft-loadgen","type":"{ty}","weftinstance":"{instance}","data":{{"n":{n}}}}}"#
    )
}

/// The body of one request carrying events `n .. n + batch` (event `m` goes to instance
/// `m mod N`).
pub fn events_body(ty: &str, ids: &[String], n: u64, batch: usize) -> (String, &'static str) {
    let at = |m: u64| &ids[(m % ids.len() as u64) as usize];
    if batch <= 1 {
        return (event(ty, at(n), n), "application/cloudevents+json");
    }
    let mut s = String::with_capacity(batch * 140);
    s.push('[');
    for j in 0..batch as u64 {
        if j > 0 {
            s.push(',');
        }
        s.push_str(&event(ty, at(n + j), n + j));
    }
    s.push(']');
    (s, "application/cloudevents-batch+json")
}

fn number(v: &Value, k: &str) -> u64 {
    v.get(k).and_then(Value::as_u64).unwrap_or(0)
}

/// Creates the plan and `cfg.instances` instances of it (over up to 16 extra connections).
async fn setup(cfg: &Config, conn: &mut Conn) -> anyhow::Result<Vec<String>> {
    let r = conn
        .post("/v1/plans", "application/json", cfg.plan.to_string())
        .await?;
    ensure!(
        r.status == StatusCode::CREATED,
        "POST /v1/plans: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let name = r.json()?["name"]
        .as_str()
        .context("POST /v1/plans: no `name`")?
        .to_string();
    let body = json!({"plan": name}).to_string();
    let lanes = cfg.instances.min(16);
    let mut tasks = tokio::task::JoinSet::new();
    for lane in 0..lanes {
        let count = (lane..cfg.instances).step_by(lanes).count();
        let target = cfg.target.clone();
        let body = body.clone();
        tasks.spawn(async move {
            let mut conn = Conn::open(&target).await?;
            let mut ids = Vec::with_capacity(count);
            for _ in 0..count {
                let r = conn
                    .post("/v1/instances", "application/json", body.clone())
                    .await?;
                ensure!(
                    r.status == StatusCode::CREATED,
                    "POST /v1/instances: {} {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                );
                let id = r.json()?["id"]
                    .as_str()
                    .context("POST /v1/instances: no `id`")?
                    .to_string();
                ids.push(id);
            }
            Ok::<_, anyhow::Error>(ids)
        });
    }
    let mut ids = Vec::with_capacity(cfg.instances);
    while let Some(r) = tasks.join_next().await {
        ids.append(&mut r??);
    }
    ids.sort();
    Ok(ids)
}

/// The event numbers of the `token.added` records kept in a journal (compaction drops the
/// records behind a snapshot).
async fn read_tokens(conn: &mut Conn, id: &str) -> anyhow::Result<Vec<u64>> {
    let mut from = 1;
    let mut tokens = Vec::new();
    loop {
        let r = conn
            .get(&format!(
                "/v1/instances/{id}/journal?from={from}&limit=1000"
            ))
            .await?;
        ensure!(
            r.status == StatusCode::OK,
            "GET journal of {id}: {} {}",
            r.status,
            String::from_utf8_lossy(&r.body)
        );
        let page = r.json()?;
        for rec in page["records"].as_array().context("no `records`")? {
            if rec["kind"] == "token.added" {
                tokens.push(rec["body"]["payload"]["n"].as_u64().unwrap_or(u64::MAX));
            }
        }
        match page["next"].as_u64() {
            Some(n) => from = n,
            None => return Ok(tokens),
        }
    }
}

/// The journal fold at its head (`GET /v1/instances/{id}/inspect`, what `weft inspect --json`
/// prints): `(head, fired)`.
async fn inspect(conn: &mut Conn, id: &str) -> anyhow::Result<(u64, u64)> {
    let r = conn.get(&format!("/v1/instances/{id}/inspect")).await?;
    ensure!(
        r.status == StatusCode::OK,
        "GET /v1/instances/{id}/inspect: {} {}",
        r.status,
        String::from_utf8_lossy(&r.body)
    );
    let v = r.json()?;
    let fired = v["fired"].as_u64().context("inspect without `fired`")?;
    Ok((number(&v, "head"), fired))
}

/// Per instance: the journal fold's `(head, fired)`.
async fn census(conn: &mut Conn, ids: &[String]) -> anyhow::Result<Vec<(u64, u64)>> {
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        out.push(inspect(conn, id).await?);
    }
    Ok(out)
}

#[allow(clippy::too_many_arguments)]
async fn worker(
    mut conn: Conn,
    mode: Mode,
    ids: Arc<Vec<String>>,
    ty: Arc<str>,
    batch: usize,
    next: Arc<AtomicU64>,
    sent: Arc<Vec<AtomicU64>>,
    measure_from: Instant,
    deadline: Instant,
) -> WorkerOut {
    let mut out = WorkerOut::default();
    let n_ids = ids.len() as u64;
    loop {
        let t0 = Instant::now();
        if t0 >= deadline {
            break;
        }
        let n = next.fetch_add(batch as u64, Ordering::Relaxed);
        let res = match mode {
            Mode::Events => {
                let (body, ct) = events_body(&ty, &ids, n, batch);
                conn.post("/v1/events", ct, body).await
            }
            Mode::State => {
                let id = &ids[(n % n_ids) as usize];
                conn.get(&format!("/v1/instances/{id}")).await
            }
        };
        let us = u32::try_from(t0.elapsed().as_micros()).unwrap_or(u32::MAX);
        let measured = t0 >= measure_from;
        match res {
            Ok(r) if r.status.is_success() => {
                if mode == Mode::Events {
                    let v: Value = serde_json::from_slice(&r.body).unwrap_or(Value::Null);
                    let accepted = number(&v, "accepted");
                    if accepted == batch as u64 {
                        for j in 0..batch as u64 {
                            sent[((n + j) % n_ids) as usize].fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    out.accepted_total += accepted;
                    if measured {
                        out.accepted += accepted;
                        out.routed += number(&v, "routed");
                    }
                }
                if measured {
                    out.requests += 1;
                    out.micros.push(us);
                }
            }
            Ok(r) => {
                *out.errors.entry(r.status.as_str().to_string()).or_default() += 1;
                if measured {
                    out.requests += 1;
                    out.micros.push(us);
                }
            }
            Err(e) => {
                *out.errors.entry("io".to_string()).or_default() += 1;
                eprintln!("weft-loadgen: request failed: {e:#}");
                // Reconnect once; give up on this worker if that fails too.
                match Conn::open(conn.target()).await {
                    Ok(c) => conn = c,
                    Err(_) => break,
                }
            }
        }
    }
    out
}

/// Runs the whole thing: setup, warm-up, measurement, verification.
pub async fn run(cfg: Config) -> anyhow::Result<Report> {
    ensure!(cfg.instances > 0, "--instances must be at least 1");
    ensure!(cfg.connections > 0, "--connections must be at least 1");
    ensure!(cfg.batch > 0, "--batch must be at least 1");
    let mut conns = Vec::with_capacity(cfg.connections);
    for _ in 0..cfg.connections {
        conns.push(Conn::open(&cfg.target).await?);
    }
    eprintln!(
        "weft-loadgen: creating the plan and {} instance(s)…",
        cfg.instances
    );
    let ids = setup(&cfg, &mut conns[0]).await?;
    let verify = cfg.verify && cfg.mode == Mode::Events;
    let before = if verify {
        census(&mut conns[0], &ids).await?
    } else {
        Vec::new()
    };
    let ids = Arc::new(ids);
    let sent: Arc<Vec<AtomicU64>> = Arc::new((0..ids.len()).map(|_| AtomicU64::new(0)).collect());
    let next = Arc::new(AtomicU64::new(0));
    let ty: Arc<str> = Arc::from(cfg.event_type.as_str());
    let start = Instant::now();
    let measure_from = start + cfg.warmup;
    let deadline = measure_from + cfg.duration;
    eprintln!(
        "weft-loadgen: {:?} with {} connection(s), batch {}: {:?} warm-up + {:?}…",
        cfg.mode, cfg.connections, cfg.batch, cfg.warmup, cfg.duration
    );
    let mut tasks = tokio::task::JoinSet::new();
    for conn in conns {
        tasks.spawn(worker(
            conn,
            cfg.mode,
            Arc::clone(&ids),
            Arc::clone(&ty),
            cfg.batch,
            Arc::clone(&next),
            Arc::clone(&sent),
            measure_from,
            deadline,
        ));
    }
    let mut all = WorkerOut::default();
    while let Some(r) = tasks.join_next().await {
        let mut w = r?;
        all.micros.append(&mut w.micros);
        all.requests += w.requests;
        all.accepted += w.accepted;
        all.routed += w.routed;
        all.accepted_total += w.accepted_total;
        for (k, v) in w.errors {
            *all.errors.entry(k).or_default() += v;
        }
    }
    // Requests are counted when they start inside the measured window.
    let seconds = cfg.duration.as_secs_f64();
    let verify = if verify {
        eprintln!("weft-loadgen: checking the journals…");
        let mut conn = Conn::open(&cfg.target).await?;
        let after = census(&mut conn, &ids).await?;
        let mut mismatches = Vec::new();
        let mut journaled = 0;
        let mut tail = 0;
        for (i, id) in ids.iter().enumerate() {
            let fired = after[i].1.saturating_sub(before[i].1);
            let accepted = sent[i].load(Ordering::Relaxed);
            journaled += fired;
            if fired != accepted {
                mismatches.push(format!(
                    "{id}: {accepted} events accepted, the journal holds {fired}"
                ));
            }
            let mut seen = HashSet::new();
            for t in read_tokens(&mut conn, id).await? {
                tail += 1;
                if !seen.insert(t) {
                    mismatches.push(format!("{id}: event {t} journaled twice"));
                } else if t % ids.len() as u64 != i as u64 {
                    mismatches.push(format!("{id}: event {t} was meant for another instance"));
                }
            }
        }
        Some(Verify {
            accepted: all.accepted_total,
            journaled,
            tail_tokens_checked: tail,
            ok: mismatches.is_empty() && all.accepted_total == journaled,
            mismatches,
        })
    } else {
        None
    };
    Ok(Report {
        mode: cfg.mode,
        instances: ids.len(),
        connections: cfg.connections,
        batch: cfg.batch,
        seconds,
        requests: all.requests,
        requests_per_s: all.requests as f64 / seconds,
        events_accepted: all.accepted,
        events_routed: all.routed,
        events_per_s: all.accepted as f64 / seconds,
        errors: all.errors,
        latency: latency(&mut all.micros),
        events_accepted_total: all.accepted_total,
        verify,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_address_instances_round_robin() {
        let ids = vec!["a".to_string(), "b".to_string(), "c".to_string()];
        let (one, ct) = events_body("ping", &ids, 4, 1);
        assert_eq!(ct, "application/cloudevents+json");
        let v: Value = serde_json::from_str(&one).unwrap();
        assert_eq!(v["weftinstance"], "b");
        assert_eq!(v["data"]["n"], 4);
        assert_eq!(v["specversion"], "1.0");
        let (many, ct) = events_body("ping", &ids, 2, 4);
        assert_eq!(ct, "application/cloudevents-batch+json");
        let v: Value = serde_json::from_str(&many).unwrap();
        let to: Vec<&str> = v
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["weftinstance"].as_str().unwrap())
            .collect();
        assert_eq!(to, ["c", "a", "b", "c"]);
    }

    #[test]
    fn default_plan_is_reactive_with_input_ping() {
        let v: Value = serde_json::from_str(DEFAULT_PLAN).unwrap();
        assert_eq!(v["graph_type"], "reactive");
        assert_eq!(v["events"]["ping"]["kind"], "input");
    }
}
