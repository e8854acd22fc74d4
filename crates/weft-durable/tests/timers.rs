//! Durable timers and the durable key-value context, across a simulated crash: each
//! "process" runs in its own tokio runtime over the same store, with the engine's manual
//! clock; dropping the runtime ends every task of the first process (its timers die with
//! it, as they would with the process), and the second one recovers from the store alone.
//! Runs on SQLite (same file reopened) and PostgreSQL (same schema reopened; those tests are
//! ignored unless `WEFT_TEST_POSTGRES_URL` was set at build time).
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use weft_core::Status;
use weft_durable::{Durable, DurableConfig, Entry};
use weft_runtime::{EngineOptions, ManualClock};
use weft_store::Store;

/// A whole second, so cron occurrences fall on round numbers.
const T0: i64 = 1_700_000_000_000;

/// Where a "process" finds its store again.
#[derive(Clone)]
enum Place {
    Sqlite(std::path::PathBuf),
    Postgres(String, String),
}

impl Place {
    fn sqlite(tag: &str) -> Place {
        Place::Sqlite(temp_dir(tag).join("weft.db"))
    }

    fn postgres(tag: &str) -> Place {
        let url = postgres_url();
        let schema = format!(
            "durable_{tag}_{}_{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
                % 1_000_000_000
        );
        Place::Postgres(url, schema)
    }

    async fn open(&self) -> Arc<dyn Store> {
        match self {
            Place::Sqlite(p) => Arc::new(weft_store_sqlite::SqliteStore::open(p).await.unwrap()),
            Place::Postgres(url, schema) => Arc::new(
                weft_store_postgres::PgStore::open_in_schema(url, Some(schema))
                    .await
                    .unwrap(),
            ),
        }
    }
}

async fn durable_at(store: Arc<dyn Store>, clock: &ManualClock) -> Durable {
    let mut reg = registry(false);
    weft_builtins::timer::register(&mut reg);
    weft_builtins::context::register(&mut reg);
    Durable::open(
        store,
        EngineOptions {
            registry: Arc::new(reg),
            clock: Arc::new(clock.clone()),
            cron: Some(Arc::new(weft_builtins::timer::next_occurrence)),
            ..EngineOptions::default()
        },
        DurableConfig::default(),
    )
    .await
    .unwrap()
}

/// `arm` sets a 60 s timer on `wake` and emits `scheduled`; `finish` joins the two.
fn remind() -> Value {
    json!({"plan_name": "remind", "graph_type": "acyclic",
    "events": {"start": {}, "scheduled": {}, "wake": {"kind": "input"},
        "done": {"kind": "output"}},
    "steps": {
        "arm": {"on": ["start"], "action": "timer.after",
            "args": {"ms": 60000, "event": "wake", "data": {"n": 1}}, "emits": ["scheduled"]},
        "finish": {"on": ["scheduled", "wake"], "action": "echo", "args": {}, "emits": ["done"]}
    }})
}

/// Reactive: `arm` sets a cron timer (every second, 3 times) on `tick`; each tick runs
/// `echo` and stores the tick count in the context.
fn ticker() -> Value {
    json!({"plan_name": "ticker", "graph_type": "reactive",
    "events": {"start": {}, "tick": {"kind": "input"}, "out": {"kind": "output"}},
    "steps": {
        "arm": {"on": ["start"], "action": "timer.cron",
            "args": {"cron": "* * * * * *", "event": "tick", "data": {"t": 1}, "count": 3},
            "emits": []},
        "probe": {"on": ["tick"], "action": "echo", "args": {}, "emits": []}
    }})
}

/// Every journal entry of an instance.
async fn entries(store: &dyn Store, id: &str) -> Vec<Entry> {
    store
        .read(id, 1, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| Entry::from_record(r).unwrap())
        .collect()
}

fn fired(es: &[Entry]) -> Vec<(Option<i64>, Option<i64>)> {
    es.iter()
        .filter_map(|e| match e {
            Entry::Timer {
                lateness_ms,
                next_due_ms,
                ..
            } => Some((*lateness_ms, *next_due_ms)),
            _ => None,
        })
        .collect()
}

/// Polls until `pred` holds for the instance's journal.
async fn until_journal(store: &dyn Store, id: &str, what: &str, pred: impl Fn(&[Entry]) -> bool) {
    for _ in 0..1_000 {
        if store.head(id).await.unwrap().is_some() && pred(&entries(store, id).await) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!(
        "{id}: never {what}; journal: {:?}",
        entries(store, id).await
    );
}

fn kinds(es: &[Entry]) -> Vec<&'static str> {
    es.iter().map(Entry::kind).collect()
}

/// Process 1 starts `remind` and dies once the timer (and the step that set it) is
/// durable; returns the instance id.
fn start_remind(place: &Place) -> String {
    process(async {
        let store = place.open().await;
        let clock = ManualClock::new(T0);
        let d = durable_at(Arc::clone(&store), &clock).await;
        d.register("t", remind()).await.unwrap();
        let h = d.start("t", "remind", json!({})).unwrap();
        until_journal(store.as_ref(), h.id(), "set its timer durably", |es| {
            let k = kinds(es);
            k.contains(&"timer.set") && k.contains(&"action.result")
        })
        .await;
        // The timer table mirrors the pending timer.
        for _ in 0..200 {
            if !store.due_timers(i64::MAX, 10).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let rows = store.due_timers(i64::MAX, 10).await.unwrap();
        assert_eq!(rows.len(), 1, "{rows:?}");
        assert_eq!(rows[0].instance, h.id());
        assert_eq!(rows[0].due_ms, T0 + 60_000);
        assert_eq!(rows[0].payload["event"], "wake");
        assert_eq!(h.pending_timers(), 1);
        assert!(h.outcome_now().is_none(), "waiting for the timer");
        h.id().to_string()
    })
}

/// Process 2 recovers at `restart_at`, advances the clock by `advance` and checks the timer
/// fired exactly once with lateness `late`, and the instance completed.
fn recover_remind(place: &Place, id: &str, restart_at: i64, advance: u64, late: i64) {
    process(async {
        let store = place.open().await;
        let clock = ManualClock::new(restart_at);
        let d = durable_at(Arc::clone(&store), &clock).await;
        let rep = d.recover().await.unwrap();
        assert_eq!(rep.restored, 1, "{rep:?}");
        assert_eq!(rep.timers, 1, "{rep:?}");
        let h = rep.handles.into_iter().next().unwrap();
        assert_eq!(h.id(), id);
        if advance > 0 {
            // Not due yet: nothing happens until the clock passes the due time.
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(h.outcome_now().is_none());
            assert_eq!(fired(&entries(store.as_ref(), id).await).len(), 0);
            clock.advance(advance);
        }
        let o = tokio::time::timeout(Duration::from_secs(10), d.wait(&h))
            .await
            .expect("the timer never fired")
            .unwrap();
        assert_eq!(o.status, Status::Completed, "{o:?}");
        assert_eq!(o.results[0].payloads[0]["finish"], json!(1));
        let es = entries(store.as_ref(), id).await;
        assert_eq!(fired(&es), vec![(Some(late), None)], "{:?}", kinds(&es));
        // Fired exactly once: wait a moment longer and look again.
        clock.advance(600_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(fired(&entries(store.as_ref(), id).await).len(), 1);
        assert!(store.due_timers(i64::MAX, 10).await.unwrap().is_empty());
        assert!(weft_durable::verify(store.as_ref(), id).await.is_ok());
    });
}

fn timer_survives_restart(place: Place) {
    let id = start_remind(&place);
    // Restarted 1 s later; due 59 s after that; the clock passes it by 5 ms.
    recover_remind(&place, &id, T0 + 1_000, 59_005, 5);
}

fn late_timer_fires_at_once_with_its_lateness(place: Place) {
    let id = start_remind(&place);
    // Down for two minutes: due at T0 + 60 s, recovered at T0 + 120 s.
    recover_remind(&place, &id, T0 + 120_000, 0, 60_000);
}

#[test]
fn timer_survives_restart_sqlite() {
    timer_survives_restart(Place::sqlite("timer"));
}

#[test]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
fn timer_survives_restart_postgres() {
    timer_survives_restart(Place::postgres("timer"));
}

#[test]
fn late_timer_fires_at_once_with_its_lateness_sqlite() {
    late_timer_fires_at_once_with_its_lateness(Place::sqlite("late"));
}

#[test]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
fn late_timer_fires_at_once_with_its_lateness_postgres() {
    late_timer_fires_at_once_with_its_lateness(Place::postgres("late"));
}

/// A cron timer fires once, the process dies, and the recovered instance gets the two
/// remaining occurrences, each re-armed by its `timer.fired` record, and then no more.
fn cron_timer_rearms_across_restart(place: Place) {
    let id = process(async {
        let store = place.open().await;
        let clock = ManualClock::new(T0);
        let d = durable_at(Arc::clone(&store), &clock).await;
        d.register("t", ticker()).await.unwrap();
        let h = d.start("t", "ticker", json!({})).unwrap();
        until_journal(store.as_ref(), h.id(), "set its timer", |es| {
            kinds(es).contains(&"timer.set")
        })
        .await;
        clock.advance(1_000);
        until_journal(store.as_ref(), h.id(), "fired once", |es| {
            fired(es).len() == 1
        })
        .await;
        h.id().to_string()
    });
    process(async {
        let store = place.open().await;
        let clock = ManualClock::new(T0 + 1_000);
        let d = durable_at(Arc::clone(&store), &clock).await;
        let rep = d.recover().await.unwrap();
        assert_eq!((rep.restored, rep.timers), (1, 1), "{rep:?}");
        let rows = store.due_timers(i64::MAX, 10).await.unwrap();
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].due_ms, T0 + 2_000);
        for n in 2..=3 {
            clock.advance(1_000);
            until_journal(store.as_ref(), &id, "fired again", |es| {
                fired(es).len() == n
            })
            .await;
        }
        clock.advance(10_000);
        tokio::time::sleep(Duration::from_millis(50)).await;
        let es = entries(store.as_ref(), &id).await;
        assert_eq!(
            fired(&es),
            vec![
                (Some(0), Some(T0 + 2_000)),
                (Some(0), Some(T0 + 3_000)),
                (Some(0), None)
            ]
        );
        let h = d.engine().handle(&id).unwrap();
        assert_eq!(h.pending_timers(), 0);
        for _ in 0..200 {
            if store.due_timers(i64::MAX, 10).await.unwrap().is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(store.due_timers(i64::MAX, 10).await.unwrap().is_empty());
        // Every tick ran `probe`.
        assert_eq!(h.state().fired, 4, "{:?}", h.state());
    });
}

#[test]
fn cron_timer_rearms_across_restart_sqlite() {
    cron_timer_rearms_across_restart(Place::sqlite("cron"));
}

#[test]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
fn cron_timer_rearms_across_restart_postgres() {
    cron_timer_rearms_across_restart(Place::postgres("cron"));
}

/// `put` writes the context and the instance waits for `go`; `get` reads it back.
fn kv() -> Value {
    json!({"plan_name": "kv", "graph_type": "acyclic",
    "events": {"start": {}, "saved": {}, "go": {"kind": "input"}, "got": {"kind": "output"}},
    "steps": {
        "put": {"on": ["start"], "action": "context.put",
            "args": {"key": "k", "value": "${start.v}"}, "emits": ["saved"]},
        "get": {"on": ["saved", "go"], "action": "context.get", "args": {"key": "k"},
            "emits": ["got"]}
    }})
}

/// The key-value context survives a crash: its `context.put` record is folded back.
fn context_survives_restart(place: Place) {
    let id = process(async {
        let store = place.open().await;
        let clock = ManualClock::new(T0);
        let d = durable_at(Arc::clone(&store), &clock).await;
        d.register("t", kv()).await.unwrap();
        let h = d.start("t", "kv", json!({"v": {"deep": [1, 2]}})).unwrap();
        until_journal(store.as_ref(), h.id(), "wrote its context durably", |es| {
            let k = kinds(es);
            k.contains(&"context.put") && k.contains(&"action.result")
        })
        .await;
        h.id().to_string()
    });
    process(async {
        let store = place.open().await;
        let clock = ManualClock::new(T0 + 1_000);
        let d = durable_at(Arc::clone(&store), &clock).await;
        let f = d.folded(&id).await.unwrap();
        assert_eq!(f.extras.context.get("k"), Some(&json!({"deep": [1, 2]})));
        let rep = d.recover().await.unwrap();
        assert_eq!((rep.restored, rep.redispatched), (1, 0), "{rep:?}");
        let h = rep.handles.into_iter().next().unwrap();
        assert_eq!(h.context().get("k"), Some(&json!({"deep": [1, 2]})));
        d.engine()
            .ingest("t", "go", json!({}), None, Some(&id))
            .unwrap();
        let o = d.wait(&h).await.unwrap();
        assert_eq!(o.status, Status::Completed, "{o:?}");
        assert_eq!(
            o.results[0].payloads[0].as_ref(),
            &json!({"key": "k", "value": {"deep": [1, 2]}})
        );
    });
}

#[test]
fn context_survives_restart_sqlite() {
    context_survives_restart(Place::sqlite("kv"));
}

#[test]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
fn context_survives_restart_postgres() {
    context_survives_restart(Place::postgres("kv"));
}
