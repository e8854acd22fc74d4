//! Measurement (not a test): journal append throughput under a W4-like load, on SQLite and
//! PostgreSQL. N instances × 5 steps, one record per step, each step's record awaited
//! (durable) before the instance's next step:
//! (a) `strict`: instances one after another: one durable commit per record;
//! (b) `concurrent`: all instances at once, sharing commits through group commit.
//! Prints one JSON line per (backend, mode) with records/s and commits (fsyncs) per record.
//!
//! `cargo run --profile perf -p weft-store-postgres --example append_throughput -- \
//!    [--instances N] [--strict-instances N] [--postgres URL]`
//! (it lives here because this crate may dev-depend on both backends.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::time::Instant;

use weft_store::{NewRecord, Store};
use weft_store_postgres::PgStore;
use weft_store_sqlite::SqliteStore;

const STEPS: u64 = 5;

fn step_record(run: u64, step: u64) -> NewRecord {
    let mut body = format!("{{\"run\":{run}");
    for i in 1..=step {
        body.push_str(&format!(",\"s{i}\":{i}"));
    }
    body.push('}');
    NewRecord {
        kind: "step.completed".into(),
        body: body.into_bytes(),
        at_ms: 0,
    }
}

async fn run_instance(store: Arc<dyn Store>, prefix: String, run: u64) {
    let inst = format!("{prefix}-{run}");
    for step in 1..=STEPS {
        store
            .append(&inst, vec![step_record(run, step)])
            .await
            .unwrap();
    }
}

async fn strict(store: Arc<dyn Store>, n: u64) -> f64 {
    let t = Instant::now();
    for run in 0..n {
        run_instance(store.clone(), "strict".into(), run).await;
    }
    t.elapsed().as_secs_f64()
}

async fn concurrent(store: Arc<dyn Store>, n: u64) -> f64 {
    let t = Instant::now();
    let tasks: Vec<_> = (0..n)
        .map(|run| tokio::spawn(run_instance(store.clone(), "conc".into(), run)))
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    t.elapsed().as_secs_f64()
}

fn report(backend: &str, mode: &str, instances: u64, secs: f64, commits: u64) {
    let records = instances * STEPS;
    println!(
        "{{\"backend\":\"{backend}\",\"mode\":\"{mode}\",\"instances\":{instances},\"records\":{records},\"seconds\":{secs:.3},\"records_per_second\":{:.0},\"commits\":{commits},\"commits_per_record\":{:.4}}}",
        records as f64 / secs,
        commits as f64 / records as f64
    );
}

fn arg(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    let n: u64 = arg(&args, "--instances").map_or(10_000, |s| s.parse().unwrap());
    let n_strict: u64 = arg(&args, "--strict-instances").map_or(n, |s| s.parse().unwrap());
    let pg_url = arg(&args, "--postgres").or_else(|| std::env::var("WEFT_TEST_POSTGRES_URL").ok());

    // SQLite: a fresh file.
    let dir = std::env::temp_dir().join(format!("weft-append-bench-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let sqlite = Arc::new(SqliteStore::open(dir.join("weft.db")).await.unwrap());
    let c0 = sqlite.writer_stats().commits;
    let secs = strict(sqlite.clone(), n_strict).await;
    let c1 = sqlite.writer_stats().commits;
    report("sqlite", "strict", n_strict, secs, c1 - c0);
    let secs = concurrent(sqlite.clone(), n).await;
    report(
        "sqlite",
        "concurrent",
        n,
        secs,
        sqlite.writer_stats().commits - c1,
    );
    drop(sqlite);
    let _ = std::fs::remove_dir_all(&dir);

    // PostgreSQL: a fresh schema, dropped afterwards.
    let Some(url) = pg_url else {
        eprintln!("postgres skipped: pass --postgres URL or set WEFT_TEST_POSTGRES_URL");
        return;
    };
    let schema = format!("weft_bench_{}", std::process::id());
    let pg = Arc::new(PgStore::open_in_schema(&url, Some(&schema)).await.unwrap());
    let c0 = pg.writer_stats().commits;
    let secs = strict(pg.clone(), n_strict).await;
    let c1 = pg.writer_stats().commits;
    report("postgres", "strict", n_strict, secs, c1 - c0);
    let secs = concurrent(pg.clone(), n).await;
    report(
        "postgres",
        "concurrent",
        n,
        secs,
        pg.writer_stats().commits - c1,
    );
    drop(pg);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute(&format!("DROP SCHEMA {schema} CASCADE"))
        .await
        .unwrap();
}
