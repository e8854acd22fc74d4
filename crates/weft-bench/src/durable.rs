//! W4 (BENCHMARKS.md) and weft's durability measurements, one JSON line each in the format
//! of `crate::engine::run`:
//! - `durable` (W4-strict): W3 (`s1 → … → s5`, a new instance per run) on the durable store,
//!   runs one after another; each step's outcome is committed (fsync'd) before the next step
//!   starts and the final result before the run returns.
//! - `durable_concurrent` (W4-concurrent): all runs of a repetition started at once, same
//!   rule, commits shared (group commit).
//! - `durable_recovery`: time to rebuild and make live again N waiting instances.
//! - `durable_compaction`: journal rows and bytes kept for a reactive instance fed N events,
//!   with and without compaction.
//!
//! Backends: SQLite (a fresh file under the system temp dir, on disk) always; PostgreSQL too
//! when `WEFT_BENCH_POSTGRES_URL` is set (a fresh schema). `extra` reports commits (each one
//! fsync on SQLite) per step, journal records and bytes per step.
//!
//! Sizes default to BENCHMARKS.md's (10,000 runs per repetition, 5 repetitions, 50 warm-up
//! runs); [`W4Options::from_env`] reads `WEFT_W4_RUNS`, `WEFT_W4_REPS`,
//! `WEFT_W4_RECOVERY_INSTANCES` and `WEFT_W4_EVENTS` to shorten a run (the line then says
//! how many runs it timed).

use std::io::Write;
use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use weft_runtime::EngineOptions;
use weft_store::Store;
use weft_tools::Registry;

use weft_durable::{Durable, DurableConfig};

/// Workloads run when none are named.
pub const DEFAULT: &[&str] = &[
    "durable",
    "durable_concurrent",
    "durable_recovery",
    "durable_compaction",
];

/// Sizes.
#[derive(Debug, Clone)]
pub struct W4Options {
    /// Runs per repetition (BENCHMARKS.md: 10,000).
    pub runs: usize,
    /// Timed repetitions (5).
    pub reps: usize,
    /// Warm-up runs (50).
    pub warmup: usize,
    /// Live instances for `durable_recovery` (100,000).
    pub recovery_instances: usize,
    /// Events for `durable_compaction` (100,000).
    pub events: usize,
}

impl Default for W4Options {
    fn default() -> Self {
        W4Options {
            runs: 10_000,
            reps: 5,
            warmup: 50,
            recovery_instances: 100_000,
            events: 100_000,
        }
    }
}

impl W4Options {
    /// Defaults, overridden by the `WEFT_W4_*` variables.
    pub fn from_env() -> Self {
        let get = |k: &str, d: usize| {
            std::env::var(k)
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(d)
        };
        let d = W4Options::default();
        W4Options {
            runs: get("WEFT_W4_RUNS", d.runs),
            reps: get("WEFT_W4_REPS", d.reps).max(1),
            warmup: get("WEFT_W4_WARMUP", d.warmup),
            recovery_instances: get("WEFT_W4_RECOVERY_INSTANCES", d.recovery_instances),
            events: get("WEFT_W4_EVENTS", d.events),
        }
    }
}

/// Runs the named workloads (all of [`DEFAULT`] when empty) with [`W4Options::from_env`].
pub fn run_w4(workloads: &[String], out: &mut dyn Write) -> Result<(), String> {
    run_w4_with(workloads, &W4Options::from_env(), out)
}

/// [`run_w4`] with explicit sizes.
pub fn run_w4_with(
    workloads: &[String],
    opts: &W4Options,
    out: &mut dyn Write,
) -> Result<(), String> {
    let names: Vec<String> = if workloads.is_empty() {
        DEFAULT.iter().map(|s| s.to_string()).collect()
    } else {
        workloads.to_vec()
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start a tokio runtime: {e}"))?;
    for name in &names {
        for backend in backends() {
            eprintln!("weft bench: {name} on {backend} …");
            let line = rt.block_on(async {
                let b = Backend::open(&backend).await?;
                let line = match name.as_str() {
                    "durable" => w4(&b, opts, false).await,
                    "durable_concurrent" => w4(&b, opts, true).await,
                    "durable_recovery" => recovery(&b, opts).await,
                    "durable_compaction" => compaction(&b, opts).await,
                    other => Err(format!(
                        "unknown workload `{other}` (known: {})",
                        DEFAULT.join(", ")
                    )),
                };
                b.close().await;
                line
            })?;
            writeln!(out, "{line}").map_err(|e| e.to_string())?;
            let _ = out.flush();
        }
    }
    Ok(())
}

fn backends() -> Vec<String> {
    let mut v = vec!["sqlite".to_string()];
    if let Ok(url) = std::env::var("WEFT_BENCH_POSTGRES_URL") {
        v.push(url);
    }
    v
}

/// A store plus how to count its commits.
struct Backend {
    name: &'static str,
    store: Arc<dyn Store>,
    sqlite: Option<Arc<weft_store_sqlite::SqliteStore>>,
    pg: Option<Arc<weft_store_postgres::PgStore>>,
    dir: Option<std::path::PathBuf>,
    /// The PostgreSQL URL and the schema this run created (dropped by [`Backend::close`]).
    pg_schema: Option<(String, String)>,
}

impl Drop for Backend {
    fn drop(&mut self) {
        if let Some(d) = &self.dir {
            let _ = std::fs::remove_dir_all(d);
        }
    }
}

impl Backend {
    async fn open(which: &str) -> Result<Backend, String> {
        if which == "sqlite" {
            let dir = std::env::temp_dir().join(format!(
                "weft-w4-{}-{}",
                std::process::id(),
                weft_store::now_ms()
            ));
            std::fs::create_dir_all(&dir).map_err(|e| e.to_string())?;
            let s = Arc::new(
                weft_store_sqlite::SqliteStore::open(dir.join("weft.db"))
                    .await
                    .map_err(|e| e.to_string())?,
            );
            Ok(Backend {
                name: "sqlite",
                store: s.clone(),
                sqlite: Some(s),
                pg: None,
                dir: Some(dir),
                pg_schema: None,
            })
        } else {
            let schema = format!("w4_{}_{}", std::process::id(), weft_store::now_ms());
            let s = Arc::new(
                weft_store_postgres::PgStore::open_in_schema(which, Some(&schema))
                    .await
                    .map_err(|e| e.to_string())?,
            );
            Ok(Backend {
                name: "postgres",
                store: s.clone(),
                sqlite: None,
                pg: Some(s),
                dir: None,
                pg_schema: Some((which.to_string(), schema)),
            })
        }
    }

    /// Closes the store and removes what the run left behind: the SQLite directory (on
    /// drop) or the PostgreSQL schema, so repeated benchmarks do not pile up schemas.
    async fn close(self) {
        let pg_schema = self.pg_schema.clone();
        drop(self);
        let Some((url, schema)) = pg_schema else {
            return;
        };
        if let Err(e) = weft_store_postgres::PgStore::drop_schema(&url, &schema).await {
            eprintln!("weft bench: could not drop the PostgreSQL schema {schema}: {e}");
        }
    }

    /// Commits so far (SQLite: every write transaction, one fsync each; PostgreSQL: the
    /// journal writer's transactions only).
    fn commits(&self) -> u64 {
        if let Some(s) = &self.sqlite {
            return s.writer_stats().commits;
        }
        self.pg.as_ref().map_or(0, |p| p.writer_stats().commits)
    }
}

fn registry() -> Registry {
    let mut r = Registry::new();
    weft_builtins::builtin::register_pure(&mut r);
    r.register(crate::engine::tool::tool());
    r
}

async fn open_durable(b: &Backend, cfg: DurableConfig) -> Result<Durable, String> {
    Durable::open(
        Arc::clone(&b.store),
        EngineOptions {
            registry: Arc::new(registry()),
            max_firings_per_sec: None,
            ..EngineOptions::default()
        },
        cfg,
    )
    .await
    .map_err(|e| e.to_string())
}

fn line(workload: &str, metric: &str, value: f64, unit: &str, extra: Value) -> Value {
    json!({
        "peer": "weft",
        "version": env!("CARGO_PKG_VERSION"),
        "workload": workload,
        "metric": metric,
        "value": round(value),
        "unit": unit,
        "extra": extra,
    })
}

/// `x` rounded to three decimals.
fn round(x: f64) -> f64 {
    round_to(x, 1e3)
}

/// `x` rounded to `1 / scale`.
fn round_to(x: f64, scale: f64) -> f64 {
    (x * scale).round() / scale
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn expected(r: usize) -> Value {
    let mut m = serde_json::Map::new();
    m.insert("run".into(), json!(r));
    for i in 1..=5 {
        m.insert(format!("s{i}"), json!(i));
    }
    Value::Object(m)
}

/// Result of a finished run, live and read back from the store.
async fn check(
    d: &Durable,
    id: &str,
    live: &weft_runtime::Outcome,
    r: usize,
) -> Result<(), String> {
    let want = expected(r);
    let got = live
        .results
        .first()
        .and_then(|t| t.payloads.first())
        .map(|p| (**p).clone());
    if got.as_ref() != Some(&want) {
        return Err(format!("run {r}: expected {want}, got {got:?}"));
    }
    let f = d.folded(id).await.map_err(|e| e.to_string())?;
    let plan = d
        .engine()
        .plan("durable")
        .ok_or("the plan is not registered")?;
    let stored = f
        .instance
        .as_ref()
        .and_then(|i| i.results(&plan.net).into_iter().next())
        .and_then(|(_, toks)| toks.into_iter().next())
        .map(|t| (*t.payload).clone());
    if stored.as_ref() != Some(&want) {
        return Err(format!(
            "run {r}: the store holds {stored:?}, expected {want}"
        ));
    }
    Ok(())
}

async fn one_rep(
    d: &Durable,
    runs: usize,
    concurrent: bool,
) -> Result<(String, weft_runtime::Outcome), String> {
    let err = |e: weft_durable::DurableError| e.to_string();
    if concurrent {
        let mut hs = Vec::with_capacity(runs);
        for r in 0..runs {
            hs.push(
                d.start("bench", "durable", json!({"run": r}))
                    .map_err(err)?,
            );
        }
        let outs = futures::future::join_all(hs.iter().map(|h| d.wait(h))).await;
        let mut last = None;
        for (h, o) in hs.iter().zip(outs) {
            let o = o.map_err(err)?;
            // Read each run's result (the protocol's "reading each run's result").
            let _ = o.results.first().map(|t| t.payloads.len());
            last = Some((h.id().to_string(), o));
        }
        last.ok_or_else(|| "no runs".to_string())
    } else {
        let mut last = None;
        for r in 0..runs {
            let h = d
                .start("bench", "durable", json!({"run": r}))
                .map_err(err)?;
            let o = d.wait(&h).await.map_err(err)?;
            let _ = o.results.first().map(|t| t.payloads.len());
            last = Some((h.id().to_string(), o));
        }
        last.ok_or_else(|| "no runs".to_string())
    }
}

async fn w4(b: &Backend, opts: &W4Options, concurrent: bool) -> Result<Value, String> {
    // W4's contract: every step's result is committed before the next step starts, so
    // even the pure `bench.add` waits for the journal.
    let cfg = DurableConfig {
        gate_pure_actions: true,
        ..DurableConfig::default()
    };
    let d = open_durable(b, cfg).await?;
    d.register("bench", crate::engine::workloads::chain_plan("durable", 5))
        .await
        .map_err(|e| e.to_string())?;
    let (id, o) = one_rep(&d, opts.warmup.max(1), concurrent).await?;
    check(&d, &id, &o, opts.warmup.max(1) - 1).await?;
    let mut reps = Vec::new();
    let (c0, j0) = (b.commits(), d.journal().stats());
    let mut last = None;
    for _ in 0..opts.reps {
        let t = Instant::now();
        last = Some(one_rep(&d, opts.runs, concurrent).await?);
        reps.push(t.elapsed().as_secs_f64());
    }
    let (c1, j1) = (b.commits(), d.journal().stats());
    if let Some((id, o)) = last {
        check(&d, &id, &o, opts.runs - 1).await?;
    }
    let steps = (opts.runs * 5 * opts.reps) as f64;
    let med = median(&reps);
    let sps = (opts.runs * 5) as f64 / med;
    let commits = (c1 - c0) as f64;
    let workload = if concurrent {
        "durable_concurrent"
    } else {
        "durable"
    };
    Ok(line(
        workload,
        "steps_per_second",
        sps,
        "steps/s",
        json!({
            "backend": b.name,
            "runs_per_rep": opts.runs,
            "rep_seconds": reps.iter().map(|x| round(*x)).collect::<Vec<_>>(),
            "median_rep_seconds": round(med),
            "us_per_step": round(med * 1e6 / (opts.runs * 5) as f64),
            "runs_per_second": round(opts.runs as f64 / med),
            // Six decimals: W4-concurrent shares a commit among ~1,000 steps, which three
            // decimals showed as 0.001 (or 0.0).
            "fsyncs_per_step": if b.sqlite.is_some() { json!(round_to(commits / steps, 1e6)) } else { Value::Null },
            "commits_per_step": round_to(commits / steps, 1e6),
            "commits_per_rep": round(commits / opts.reps as f64),
            "journal_records_per_step": round((j1.records - j0.records) as f64 / steps),
            "journal_bytes_per_step": round((j1.bytes - j0.bytes) as f64 / steps),
            "appends_per_step": round((j1.appends - j0.appends) as f64 / steps),
        }),
    ))
}

/// N instances waiting for an event, durably started; then a new engine recovers them all.
async fn recovery(b: &Backend, opts: &W4Options) -> Result<Value, String> {
    let plan = json!({"plan_name": "waiter", "graph_type": "acyclic",
        "events": {"start": {}, "go": {"kind": "input"}, "done": {"kind": "output"}},
        "steps": {"s": {"on": ["start", "go"], "action": "bench.add",
            "args": {"key": "s", "value": 1}, "emits": ["done"]}}});
    let n = opts.recovery_instances;
    {
        let d = open_durable(b, DurableConfig::default()).await?;
        d.register("bench", plan.clone())
            .await
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        for chunk in (0..n).collect::<Vec<_>>().chunks(10_000) {
            let mut ids = Vec::with_capacity(chunk.len());
            for r in chunk {
                let h = d
                    .start("bench", "waiter", json!({"run": r}))
                    .map_err(|e| e.to_string())?;
                ids.push(h.id().to_string());
            }
            let j = d.journal();
            for res in futures::future::join_all(ids.iter().map(|id| j.barrier(id))).await {
                res.map_err(|e| e.to_string())?;
            }
        }
        eprintln!(
            "  {n} waiting instances written in {:.2} s",
            t.elapsed().as_secs_f64()
        );
    }
    let d = open_durable(b, DurableConfig::default()).await?;
    let t = Instant::now();
    let rep = d.recover().await.map_err(|e| e.to_string())?;
    let secs = t.elapsed().as_secs_f64();
    if rep.restored != n || !rep.errors.is_empty() {
        return Err(format!(
            "recovered {} of {n} ({} errors, first: {:?})",
            rep.restored,
            rep.errors.len(),
            rep.errors.first()
        ));
    }
    // They are live: finish one through its input event.
    let h = rep.handles.last().ok_or("nothing recovered")?;
    d.engine()
        .ingest("bench", "go", json!({}), None, Some(h.id()))
        .map_err(|e| e.to_string())?;
    let o = d.wait(h).await.map_err(|e| e.to_string())?;
    if o.status != weft_core::Status::Completed {
        return Err(format!("a recovered instance did not complete: {o:?}"));
    }
    Ok(line(
        "durable_recovery",
        "seconds",
        secs,
        "s",
        json!({"backend": b.name, "instances": n,
            "instances_per_second": round(n as f64 / secs)}),
    ))
}

/// A reactive instance fed N events, with and without compaction: journal rows and bytes
/// kept at the end.
async fn compaction(b: &Backend, opts: &W4Options) -> Result<Value, String> {
    let plan = json!({"plan_name": "sink", "graph_type": "reactive",
        "events": {"start": {}, "ping": {"kind": "input"}},
        "steps": {"probe": {"on": ["ping"], "action": "bench.add",
            "args": {"key": "seen", "value": 1}, "emits": []}}});
    let mut results = serde_json::Map::new();
    for (label, every) in [
        ("compacted", DurableConfig::default().snapshot_every),
        ("uncompacted", None),
    ] {
        let d = open_durable(
            b,
            DurableConfig {
                snapshot_every: every,
                ..DurableConfig::default()
            },
        )
        .await?;
        d.register("bench", plan.clone())
            .await
            .map_err(|e| e.to_string())?;
        let h = d
            .start("bench", "sink", json!({}))
            .map_err(|e| e.to_string())?;
        let t = Instant::now();
        for i in 0..opts.events {
            d.engine()
                .ingest("bench", "ping", json!({"i": i}), None, Some(h.id()))
                .map_err(|e| e.to_string())?;
            if i % 1_000 == 999 {
                d.journal()
                    .barrier(h.id())
                    .await
                    .map_err(|e| e.to_string())?;
            }
        }
        // Let the last actions finish and flush.
        for _ in 0..1_000 {
            if h.core_instance().is_some_and(|i| i.in_flight.is_empty()) {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        }
        d.journal()
            .barrier(h.id())
            .await
            .map_err(|e| e.to_string())?;
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let secs = t.elapsed().as_secs_f64();
        let store = d.store();
        let (base, _) = store.chain_base(h.id()).await.map_err(|e| e.to_string())?;
        let mut rows = 0u64;
        let mut bytes = 0u64;
        let mut from = base + 1;
        loop {
            let page = store
                .read(h.id(), from, 10_000)
                .await
                .map_err(|e| e.to_string())?;
            let Some(last) = page.last() else { break };
            from = last.seq + 1;
            rows += page.len() as u64;
            bytes += page.iter().map(|r| r.body.len() as u64).sum::<u64>();
        }
        let snap = store
            .latest_snapshot(h.id())
            .await
            .map_err(|e| e.to_string())?
            .map_or(0, |s| s.state.len() as u64);
        let head = store.last_seq(h.id()).await.map_err(|e| e.to_string())?;
        results.insert(
            label.to_string(),
            json!({"journal_rows": rows, "journal_bytes": bytes, "snapshot_bytes": snap,
                "records_written": head, "events_per_second": round(opts.events as f64 / secs),
                "snapshot_every": every}),
        );
    }
    let kept = results
        .get("compacted")
        .and_then(|v| v["journal_rows"].as_u64())
        .unwrap_or(0);
    Ok(line(
        "durable_compaction",
        "journal_rows_kept",
        kept as f64,
        "rows",
        json!({"backend": b.name, "events": opts.events, "runs": results}),
    ))
}
