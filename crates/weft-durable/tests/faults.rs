//! Faults between the engine and its store: lifecycle events wait until the records they
//! report are durable (a store whose writes are held publishes nothing), and a store that
//! refuses writes pauses the instance (`store_unavailable`) until writes succeed again.
//! Runs on SQLite and PostgreSQL (skipped with a message without `WEFT_TEST_POSTGRES_URL`).
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
            "plan.started" | "plan.step.started" => {
                assert!(k.contains(&"instance.started"), "{}: {k:?}", ev.ty);
            }
            "plan.step.finished" => {
                finished += 1;
                let results = k.iter().filter(|x| **x == "action.result").count();
                assert!(results >= finished, "{} before its result: {k:?}", ev.ty);
            }
            "plan.completed" => {
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
            "plan.started",
            "plan.step.started",
            "plan.step.finished",
            "plan.step.started",
            "plan.step.finished",
            "plan.completed"
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
async fn lifecycle_events_wait_for_durability_postgres() {
    if let Some(s) = postgres("gate").await {
        events_wait_for_durability(s).await;
    }
}
