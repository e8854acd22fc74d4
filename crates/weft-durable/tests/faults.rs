//! Faults between the engine and its store: lifecycle events wait until the records they
//! report are durable (a store whose writes are held publishes nothing), and a store that
//! refuses writes pauses the instance (`store_unavailable`) until writes succeed again.
//! Runs on SQLite and PostgreSQL (ignored unless `WEFT_TEST_POSTGRES_URL` was set at build
//! time).
#![allow(clippy::unwrap_used)]

mod common;
#[path = "common/fault.rs"]
mod fault;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use fault::FaultStore;
use serde_json::json;
use weft_core::Status;
use weft_durable::{DurableConfig, Entry};
use weft_runtime::{Delivery, Filter};
use weft_store::Store;

async fn kinds(store: &dyn Store, id: &str) -> Vec<&'static str> {
    store
        .read(id, 1, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| Entry::from_record(r).unwrap().kind())
        .collect()
}

async fn events_wait_for_durability(inner: Arc<dyn Store>) {
    let fs = FaultStore::new(Arc::clone(&inner));
    let d = durable(fs.clone(), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "echo")).await.unwrap();
    let mut sub = d.engine().subscribe(Filter::default());
    fs.hold();
    let h = d.start("t", "two", json!({"x": 1})).unwrap();
    // The start is recorded but not durable: nothing is published.
    let early = tokio::time::timeout(Duration::from_millis(300), sub.recv()).await;
    assert!(early.is_err(), "published before durable: {early:?}");
    assert_eq!(inner.head(h.id()).await.unwrap(), None);
    fs.release();
    let mut seen = Vec::new();
    let mut finished = 0;
    loop {
        let got = tokio::time::timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("events after the release")
            .unwrap();
        let Delivery::Event(ev) = got else { continue };
        // Whatever the event reports is already in the store.
        let k = kinds(inner.as_ref(), h.id()).await;
        match ev.ty.as_str() {
            "dev.weft.plan.started" | "dev.weft.plan.step.started" => {
                assert!(k.contains(&"instance.started"), "{}: {k:?}", ev.ty);
            }
            "dev.weft.plan.step.finished" => {
                finished += 1;
                let results = k.iter().filter(|x| **x == "action.result").count();
                assert!(results >= finished, "{} before its result: {k:?}", ev.ty);
            }
            "dev.weft.plan.completed" => {
                let results = k.iter().filter(|x| **x == "action.result").count();
                assert_eq!(results, 2, "completed before durable: {k:?}");
                seen.push(ev.ty.clone());
                break;
            }
            _ => {}
        }
        seen.push(ev.ty.clone());
    }
    assert_eq!(
        seen,
        [
            "dev.weft.plan.started",
            "dev.weft.plan.step.started",
            "dev.weft.plan.step.finished",
            "dev.weft.plan.step.started",
            "dev.weft.plan.step.finished",
            "dev.weft.plan.completed"
        ]
    );
    let o = d.wait(&h).await.unwrap();
    assert_eq!(o.status, Status::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lifecycle_events_wait_for_durability_sqlite() {
    events_wait_for_durability(sqlite("gate").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn lifecycle_events_wait_for_durability_postgres() {
    events_wait_for_durability(postgres("gate").await).await;
}

/// Polls the live status until `pred` holds.
async fn until_status(
    h: &weft_runtime::InstanceHandle,
    what: &str,
    pred: impl Fn(&Status) -> bool,
) -> Status {
    for _ in 0..2_000 {
        let st = h.state().status;
        if pred(&st) {
            return st;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("{}: never {what}: {:?}", h.id(), h.state());
}

fn store_paused(s: &Status) -> bool {
    matches!(s, Status::Paused { reason } if reason.starts_with("store_unavailable"))
}

/// After a store failure and its recovery: both steps' results journaled once, the pause
/// and the resume journaled, the chain whole.
async fn paused_once_each_result_once(store: &dyn Store, id: &str) {
    let k = kinds(store, id).await;
    assert_eq!(
        k.iter().filter(|x| **x == "action.result").count(),
        2,
        "{k:?}"
    );
    assert!(
        k.contains(&"instance.paused") && k.contains(&"instance.resumed"),
        "{k:?}"
    );
    weft_durable::verify(store, id).await.unwrap();
}

/// Journal writes fail: the instance pauses with `store_unavailable` and nothing is
/// dispatched; when writes succeed again it resumes by itself and completes, each step run
/// once, its journal whole.
async fn store_failure_pauses_then_resumes(inner: Arc<dyn Store>) {
    let fs = FaultStore::new(Arc::clone(&inner));
    let d = durable(fs.clone(), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "once")).await.unwrap();
    fs.fail_next(u32::MAX);
    let h = d.start("t", "two", json!({"x": 1})).unwrap();
    let st = until_status(&h, "paused", store_paused).await;
    let Status::Paused { reason } = st else {
        unreachable!()
    };
    assert!(reason.contains("injected fault"), "{reason}");
    // Retried with backoff, still refused; nothing journaled, nothing dispatched.
    for _ in 0..400 {
        if fs.failed.load(std::sync::atomic::Ordering::SeqCst) >= 3 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(fs.failed.load(std::sync::atomic::Ordering::SeqCst) >= 3);
    assert_eq!(inner.head(h.id()).await.unwrap(), None);
    let s = h.state();
    assert_eq!(s.in_flight.len(), 1, "{s:?}");
    assert_eq!(s.in_flight[0].step, "a");
    assert!(store_paused(&s.status));
    // The store comes back.
    fs.fail_next(0);
    until_status(&h, "completed", |s| *s == Status::Completed).await;
    let o = d.wait(&h).await.unwrap();
    assert_eq!(
        o.results[0].payloads[0].as_ref(),
        &json!({"x": 1, "a": 1, "b": 1}),
        "each step ran once, first attempt"
    );
    paused_once_each_result_once(inner.as_ref(), h.id()).await;
}

/// Store failure with gated immediate actions (`gate_pure_actions`: `noop` waits for the
/// journal in the instance's loop, with no task of its own): the instance pauses with
/// `store_unavailable`, `a` stays in flight and uncalled, and once writes succeed again it
/// resumes and completes, each step's result journaled once.
async fn store_failure_holds_gated_immediate_actions(inner: Arc<dyn Store>) {
    let fs = FaultStore::new(Arc::clone(&inner));
    let cfg = DurableConfig {
        gate_pure_actions: true,
        ..DurableConfig::default()
    };
    let d = durable(fs.clone(), false, cfg).await;
    d.register(
        "t",
        json!({"plan_name": "pp", "graph_type": "acyclic",
        "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
        "steps": {
            "a": {"on": ["start"], "action": "noop", "args": {}, "emits": ["mid"]},
            "b": {"on": ["mid"], "action": "noop", "args": {}, "emits": ["done"]}
        }}),
    )
    .await
    .unwrap();
    fs.fail_next(u32::MAX);
    let h = d.start("t", "pp", json!({"x": 1})).unwrap();
    until_status(&h, "paused", store_paused).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(inner.head(h.id()).await.unwrap(), None);
    let s = h.state();
    let steps: Vec<&str> = s.in_flight.iter().map(|f| f.step.as_str()).collect();
    assert_eq!(steps, ["a"], "{s:?}");
    fs.fail_next(0);
    until_status(&h, "completed", |s| *s == Status::Completed).await;
    d.wait(&h).await.unwrap();
    paused_once_each_result_once(inner.as_ref(), h.id()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failure_holds_gated_immediate_actions_sqlite() {
    store_failure_holds_gated_immediate_actions(sqlite("gfail").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn store_failure_holds_gated_immediate_actions_postgres() {
    store_failure_holds_gated_immediate_actions(postgres("gfail").await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_failure_pauses_then_resumes_sqlite() {
    store_failure_pauses_then_resumes(sqlite("fail").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn store_failure_pauses_then_resumes_postgres() {
    store_failure_pauses_then_resumes(postgres("fail").await).await;
}

/// A real full disk on SQLite (`PRAGMA max_page_count` caps the file): appends fail with
/// `disk full`, the instances pause with a clear reason, nothing committed is lost, and
/// they all complete once the cap is raised.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn full_disk_pauses_then_continues_sqlite() {
    let path = temp_dir("full").join("weft.db");
    let sq = Arc::new(weft_store_sqlite::SqliteStore::open(&path).await.unwrap());
    let d = durable(sq.clone(), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "once")).await.unwrap();
    // One run with room to spare.
    let first = d.start("t", "two", json!({"n": 0})).unwrap();
    assert_eq!(d.wait(&first).await.unwrap().status, Status::Completed);
    // The disk is full: not one more page.
    let pages = sq.page_count().await.unwrap();
    assert_eq!(sq.set_max_pages(pages).await.unwrap(), pages);
    let big = "x".repeat(64 * 1024);
    let hs: Vec<_> = (0..4)
        .map(|n| d.start("t", "two", json!({"n": n, "pad": big})).unwrap())
        .collect();
    for h in &hs {
        let st = until_status(h, "paused by the full disk", store_paused).await;
        let Status::Paused { reason } = st else {
            unreachable!()
        };
        assert!(reason.contains("disk full"), "{reason}");
    }
    // The first run's journal is intact.
    weft_durable::verify(sq.as_ref(), first.id()).await.unwrap();
    sq.set_max_pages(1 << 30).await.unwrap();
    for (n, h) in hs.iter().enumerate() {
        until_status(h, "completed", |s| *s == Status::Completed).await;
        let o = d.wait(h).await.unwrap();
        assert_eq!(o.results[0].payloads[0]["n"], json!(n));
        assert_eq!(o.results[0].payloads[0]["b"], json!(1));
        weft_durable::verify(sq.as_ref(), h.id()).await.unwrap();
    }
}

/// An instance whose journal ends paused by a store failure (the process died before the
/// retried write resumed it) is resumed by recovery: the store works again.
async fn store_pause_does_not_survive_recovery(store: Arc<dyn Store>) {
    let d1 = durable(Arc::clone(&store), true, DurableConfig::default()).await;
    d1.register("t", two_step("hangs", "hang_idem"))
        .await
        .unwrap();
    let h = d1.start("t", "hangs", json!({"x": 1})).unwrap();
    until_status(&h, "at b", |_| {
        h.state().in_flight.iter().any(|f| f.step == "b")
    })
    .await;
    d1.engine()
        .pause(h.id(), "store_unavailable: injected (test)")
        .unwrap();
    until_status(&h, "paused", store_paused).await;
    d1.journal().barrier(h.id()).await.unwrap();
    let id = h.id().to_string();
    // A second process over the same store: `b` is dispatched again and completes.
    let d2 = durable(Arc::clone(&store), false, DurableConfig::default()).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!(rep.restored, 1, "{rep:?}");
    let h2 = rep.handles.into_iter().find(|x| x.id() == id).unwrap();
    until_status(&h2, "completed", |s| *s == Status::Completed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_pause_does_not_survive_recovery_sqlite() {
    store_pause_does_not_survive_recovery(sqlite("repause").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn store_pause_does_not_survive_recovery_postgres() {
    store_pause_does_not_survive_recovery(postgres("repause").await).await;
}

/// `a` (`noop`: pure, idempotent, immediate) → `b` (`once`: a write, not idempotent).
fn pure_then_write() -> serde_json::Value {
    json!({"plan_name": "pw", "graph_type": "acyclic",
    "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "noop", "args": {}, "emits": ["mid"]},
        "b": {"on": ["mid"], "action": "once", "args": {}, "emits": ["done"]}
    }})
}

/// While journal writes are held, a pure immediate action runs at once (by default) but an
/// effectful one is not dispatched until everything before it is durable; with
/// `gate_pure_actions` the pure one waits too. Either way the run completes once writes go
/// through, with `a`'s result journaled before `b`'s dispatch.
async fn pure_actions_run_before_the_journal_is_durable(inner: Arc<dyn Store>) {
    for gate_pure in [false, true] {
        let fs = FaultStore::new(Arc::clone(&inner));
        let cfg = DurableConfig {
            gate_pure_actions: gate_pure,
            ..DurableConfig::default()
        };
        let d = durable(fs.clone(), false, cfg).await;
        d.register("t", pure_then_write()).await.unwrap();
        fs.hold();
        let h = d.start("t", "pw", json!({"x": 1})).unwrap();
        let waiting = if gate_pure { "a" } else { "b" };
        until_status(&h, &format!("{waiting} in flight"), |_| {
            h.state().in_flight.iter().any(|f| f.step == waiting)
        })
        .await;
        // Nothing is durable yet, and the write has not run: it waits at its gate (a
        // gated `a` would never let `b` fire).
        tokio::time::sleep(Duration::from_millis(100)).await;
        let st = h.state();
        assert_eq!(st.status, Status::Running, "{st:?}");
        assert!(
            st.in_flight.iter().all(|f| f.step == waiting),
            "gate_pure {gate_pure}: {st:?}"
        );
        assert_eq!(inner.head(h.id()).await.unwrap(), None);
        fs.release();
        let o = d.wait(&h).await.unwrap();
        assert_eq!(o.status, Status::Completed);
        let k = kinds(inner.as_ref(), h.id()).await;
        let a_result = k.iter().position(|x| *x == "action.result");
        let b_dispatch = k.iter().position(|x| *x == "action.dispatched");
        assert!(
            matches!((a_result, b_dispatch), (Some(r), Some(d)) if r < d),
            "gate_pure {gate_pure}: {k:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pure_actions_run_before_the_journal_is_durable_sqlite() {
    pure_actions_run_before_the_journal_is_durable(sqlite("pure").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn pure_actions_run_before_the_journal_is_durable_postgres() {
    pure_actions_run_before_the_journal_is_durable(postgres("pure").await).await;
}

/// The instance record's status lags the journal: `Durable::wait` returns once the records
/// are durable and queues the status for a later batch. When that batch is slow (here it
/// waits 1 s), a process that only sleeps a little before it exits (as `weft-crashtest`
/// did, 100 ms) leaves the finished instance `running` in the store; `Durable::flush` waits
/// until the status is written, and so does `Durable::shutdown`.
async fn statuses_are_written_by_flush_and_shutdown(inner: Arc<dyn Store>) {
    let fs = FaultStore::new(Arc::clone(&inner));
    let d = durable(fs.clone(), false, DurableConfig::default()).await;
    d.register("t", two_step("two", "once")).await.unwrap();
    fs.delay_statuses(1_000);
    let status = |id: String| {
        let inner = Arc::clone(&inner);
        async move { inner.get_instance(&id).await.unwrap().unwrap().status }
    };
    let h = d.start("t", "two", json!({"x": 1})).unwrap();
    assert!(matches!(
        d.wait(&h).await.unwrap().status,
        Status::Completed
    ));
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        status(h.id().to_string()).await,
        weft_store::InstanceStatus::Running,
        "the status batch is still being written"
    );
    d.flush().await.unwrap();
    assert_eq!(
        status(h.id().to_string()).await,
        weft_store::InstanceStatus::Completed
    );
    // Nothing queued: flush returns at once.
    tokio::time::timeout(Duration::from_millis(100), d.flush())
        .await
        .expect("nothing to wait for")
        .unwrap();
    // A graceful shutdown writes the statuses queued before it.
    let h2 = d.start("t", "two", json!({"x": 2})).unwrap();
    assert!(matches!(
        d.wait(&h2).await.unwrap().status,
        Status::Completed
    ));
    d.shutdown().await.unwrap();
    assert_eq!(
        status(h2.id().to_string()).await,
        weft_store::InstanceStatus::Completed
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn statuses_are_written_by_flush_and_shutdown_sqlite() {
    statuses_are_written_by_flush_and_shutdown(sqlite("status").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn statuses_are_written_by_flush_and_shutdown_postgres() {
    statuses_are_written_by_flush_and_shutdown(postgres("status").await).await;
}
