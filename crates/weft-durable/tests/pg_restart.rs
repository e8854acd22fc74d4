//! PostgreSQL goes away in the middle of durable runs: the engine pauses the instances
//! whose journal writes fail (`store_unavailable`), retries with backoff, reconnects
//! (the pool replaces dead connections) and resumes them; every run then completes with
//! nothing committed lost and every non-idempotent step run exactly once.
//!
//! Two tests in their own binary, so a real server restart disturbs no other test binary;
//! a lock keeps the two from overlapping. One ends every connection of its own with
//! `pg_terminate_backend` (needs `WEFT_TEST_POSTGRES_URL`); the other restarts the server
//! for real with `WEFT_TEST_PG_RESTART_CMD` (e.g. `pg_ctlcluster 15 main restart`, as
//! `.ci/run` sets it; needs both variables). Each is ignored unless its variables were set
//! at build time (`build.rs`).
#![allow(clippy::unwrap_used)]

mod common;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::registry;
use serde_json::{Value, json};
use weft_core::{Effect, Status, ToolSpec};
use weft_durable::{Durable, DurableConfig, Entry};
use weft_runtime::EngineOptions;
use weft_store::Store;
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

const STEPS: usize = 6;
const RUNS: usize = 16;

/// A non-idempotent tool that counts its calls per (instance, step) and takes a while,
/// so runs are in the middle of their steps when the server goes away.
struct Counted {
    spec: ToolSpec,
    calls: Arc<Mutex<HashMap<(String, String), u32>>>,
}

impl Tool for Counted {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, _args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        *self
            .calls
            .lock()
            .unwrap()
            .entry((ctx.instance.to_string(), ctx.step.to_string()))
            .or_default() += 1;
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(40)).await;
            Ok(json!({"step": ctx.step.to_string()}))
        })
    }
}

fn chain() -> Value {
    let mut events = serde_json::Map::new();
    let mut steps = serde_json::Map::new();
    let event = |i: usize| {
        if i == 0 {
            "start".to_string()
        } else {
            format!("e{i}")
        }
    };
    events.insert("start".into(), json!({}));
    for i in 1..=STEPS {
        let kind = if i == STEPS { "output" } else { "internal" };
        events.insert(event(i), json!({"kind": kind}));
        steps.insert(
            format!("s{i}"),
            json!({"on": [event(i - 1)], "action": "counted", "args": {},
                   "emits": [event(i)]}),
        );
    }
    json!({"plan_name": "chain", "graph_type": "acyclic", "events": events, "steps": steps})
}

/// How the server goes away.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Disruption {
    /// `pg_terminate_backend` on every connection of the test.
    EndConnections,
    /// A real restart with `WEFT_TEST_PG_RESTART_CMD`.
    Restart,
}

/// The two tests run one at a time (a restart would also end the other's connections).
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Restarts the server with the configured command, or ends this test's connections.
async fn disrupt(how: Disruption, url: &str, app: &str) -> String {
    if how == Disruption::Restart {
        let cmd = match std::env::var("WEFT_TEST_PG_RESTART_CMD") {
            Ok(cmd) if !cmd.trim().is_empty() => cmd,
            _ => panic!(
                "this test restarts PostgreSQL and WEFT_TEST_PG_RESTART_CMD is not set (it was \
                 when the test was built): export WEFT_TEST_PG_RESTART_CMD='pg_ctlcluster \
                 --skip-systemctl-redirect 15 main restart' (bash .ci/run sets it)"
            ),
        };
        let out = tokio::process::Command::new("sh")
            .arg("-c")
            .arg(&cmd)
            .output()
            .await
            .unwrap();
        assert!(
            out.status.success(),
            "`{cmd}` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        return format!("restarted the server with `{cmd}`");
    }
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    let task = tokio::spawn(conn);
    let rows = client
        .query(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity
             WHERE application_name = $1 AND pid <> pg_backend_pid()",
            &[&app],
        )
        .await
        .unwrap();
    drop(client);
    let _ = task.await;
    assert!(!rows.is_empty(), "no connection of the test was found");
    format!("ended {} connections with pg_terminate_backend", rows.len())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn postgres_connections_ended_mid_run_every_run_finishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    runs_survive(Disruption::EndConnections, "ended").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_postgres, weft_pg_restart)),
    ignore = "needs a PostgreSQL restart command: set WEFT_TEST_POSTGRES_URL and \
              WEFT_TEST_PG_RESTART_CMD (bash .ci/run sets both)"
)]
async fn postgres_restart_mid_run_pauses_then_finishes() {
    let _one = ONE_AT_A_TIME.lock().await;
    runs_survive(Disruption::Restart, "restart").await;
}

/// `RUNS` chains under way when the server goes away (`how`): each completes, its history
/// before the disruption unchanged, its chain whole, every step called exactly once.
async fn runs_survive(how: Disruption, tag: &str) {
    let base = common::postgres_url();
    let app = format!("weft_{tag}_{}", std::process::id());
    let sep = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{sep}application_name={app}");
    let schema = format!("durable_{tag}_{}", std::process::id());
    let store: Arc<dyn Store> = Arc::new(
        weft_store_postgres::PgStore::open_in_schema(&url, Some(&schema))
            .await
            .unwrap(),
    );
    let calls = Arc::new(Mutex::new(HashMap::new()));
    let mut reg = registry(false);
    reg.register(Arc::new(Counted {
        spec: ToolSpec {
            name: "counted".into(),
            description: "counts its calls".into(),
            args_schema: json!({}),
            effect: Effect::Write,
            idempotent: false,
            cost: None,
            llm: false,
        },
        calls: Arc::clone(&calls),
    }));
    let d = Durable::open(
        Arc::clone(&store),
        EngineOptions {
            registry: Arc::new(reg),
            ..EngineOptions::default()
        },
        DurableConfig::default(),
    )
    .await
    .unwrap();
    d.register("t", chain()).await.unwrap();
    let hs: Vec<_> = (0..RUNS)
        .map(|n| d.start("t", "chain", json!({"n": n})).unwrap())
        .collect();
    // Wait until every run is under way (its start and first steps committed).
    for _ in 0..2_000 {
        if calls.lock().unwrap().len() >= RUNS * 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let mut before = HashMap::new();
    for h in &hs {
        d.journal().barrier(h.id()).await.unwrap();
        before.insert(
            h.id().to_string(),
            store.read(h.id(), 1, 10_000).await.unwrap(),
        );
    }
    let what = disrupt(how, &url, &app).await;
    eprintln!("pg_restart: {what}");
    // A run paused by the outage settles as paused; it resumes by itself once a retried
    // write succeeds. Wait for each to complete.
    for h in &hs {
        let mut done = false;
        for _ in 0..2_400 {
            if h.state().status == Status::Completed {
                done = true;
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        assert!(done, "{} never completed: {:?}", h.id(), h.state());
        let o = d.wait(h).await.unwrap();
        assert_eq!(o.status, Status::Completed, "{}: {o:?}", h.id());
    }
    let mut paused = 0;
    for h in &hs {
        let recs = store.read(h.id(), 1, 10_000).await.unwrap();
        // Nothing committed before the disruption was lost or changed.
        let old = &before[h.id()];
        assert_eq!(&recs[..old.len()], &old[..], "{}: history changed", h.id());
        weft_durable::verify(store.as_ref(), h.id()).await.unwrap();
        let kinds: Vec<&str> = recs
            .iter()
            .map(|r| Entry::from_record(r).unwrap().kind())
            .collect();
        let results = kinds.iter().filter(|k| **k == "action.result").count();
        assert_eq!(results, STEPS, "{}: {kinds:?}", h.id());
        if kinds.contains(&"instance.paused") {
            assert!(kinds.contains(&"instance.resumed"), "{kinds:?}");
            paused += 1;
        }
    }
    // Every step of every run called its tool exactly once.
    let calls = calls.lock().unwrap();
    assert_eq!(calls.len(), RUNS * STEPS);
    for (k, n) in calls.iter() {
        assert_eq!(*n, 1, "{k:?} ran {n} times");
    }
    eprintln!("pg_restart: {paused} of {RUNS} runs paused (store_unavailable) and resumed");
    if how == Disruption::Restart {
        assert!(paused > 0, "the server restarted but no run paused");
    }
}
