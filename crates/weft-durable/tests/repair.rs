//! A repair on a durable engine (SQLite, and PostgreSQL: ignored unless
//! `WEFT_TEST_POSTGRES_URL` was set at build time): the revised plan is journaled as
//! `repair.applied`, the journal replays to the live state, and a process started after a
//! "crash" recovers the instance on its revised plan and finishes it.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use weft_core::{Plan, Status};
use weft_durable::{Durable, DurableConfig};
use weft_runtime::{EngineOptions, RepairContext, RepairError, Repairer};
use weft_store::Store;
use weft_tools::BoxFuture;

/// Always answers with the same revised plan.
struct Fixed(Value);

impl Repairer for Fixed {
    fn repair(&self, _ctx: RepairContext) -> BoxFuture<'static, Result<Plan, RepairError>> {
        let doc = self.0.clone();
        Box::pin(async move {
            weft_core::load::plan_from_value(doc, &Default::default())
                .map_err(|e| RepairError::new("decode", e.to_string()))
        })
    }
}

/// `a` → `b`, which fails and asks for a repair.
fn failing() -> Value {
    json!({"plan_name": "rp", "graph_type": "acyclic",
    "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "echo", "args": {}, "emits": ["mid"]},
        "b": {"on": ["mid"], "action": "fail", "args": {"message": "down"},
              "on_fail": "repair", "emits": ["done"]}
    }})
}

/// The revision: `b` is replaced by `b2` → `c` (which hangs in the first process).
fn revised() -> Value {
    json!({"plan_name": "rp", "graph_type": "acyclic",
    "events": {"start": {}, "mid": {}, "mid2": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "echo", "args": {}, "emits": ["mid"]},
        "b2": {"on": ["mid"], "action": "echo", "args": {}, "emits": ["mid2"]},
        "c": {"on": ["mid2"], "action": "hang_idem", "args": {}, "emits": ["done"]}
    }})
}

async fn open(store: Arc<dyn Store>, hang: bool, repairer: bool) -> Durable {
    Durable::open(
        store,
        EngineOptions {
            registry: Arc::new(registry(hang)),
            repairer: repairer.then(|| Arc::new(Fixed(revised())) as Arc<dyn Repairer>),
            ..EngineOptions::default()
        },
        DurableConfig::default(),
    )
    .await
    .unwrap()
}

async fn repaired_then_recovered(store: Arc<dyn Store>) {
    // Process 1: `b` fails, the repair swaps the plan in, `c` hangs.
    let d1 = open(Arc::clone(&store), true, true).await;
    d1.register("t", failing()).await.unwrap();
    let h = d1.start("t", "rp", json!({"x": 1})).unwrap();
    let id = h.id().to_string();
    let mut ins = None;
    for _ in 0..400 {
        if let Ok(i) = weft_durable::inspect(store.as_ref(), d1.engine(), &id, None).await
            && i.in_flight.iter().any(|a| a.step == "c")
        {
            ins = Some(i);
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let ins = ins.expect("c is durably in flight on the revised plan");
    let rec = ins
        .events
        .iter()
        .find(|e| e.kind == "repair.applied")
        .expect("the repair is journaled");
    assert_eq!(rec.body["version"], json!(1));
    assert_eq!(
        rec.body["document"]["steps"]["c"]["action"],
        json!("hang_idem")
    );
    assert!(
        rec.body["reason"].as_str().unwrap().contains("down"),
        "{rec:?}"
    );
    // Paused by the failure (the token back on `mid`), running again after the repair.
    let before = ins
        .events
        .iter()
        .find(|e| e.kind == "action.error")
        .unwrap();
    assert_eq!(before.status, "paused");
    assert_eq!(before.marking, vec![("mid".to_string(), 1)]);
    assert_eq!(rec.status, "running");
    // The journal replays to the live state.
    let live = h.core_instance().unwrap();
    let r = weft_durable::replay(store.as_ref(), d1.engine(), &id, Some(&live))
        .await
        .unwrap();
    assert!(r.matches, "{r:?}");

    // Process 2 ("after the crash", no repairer): recovers on the revised plan.
    let d2 = open(Arc::clone(&store), false, false).await;
    let rep = d2.recover().await.unwrap();
    assert_eq!(rep.restored, 1, "{rep:?}");
    assert_eq!(rep.redispatched, 1, "{rep:?}");
    let h2 = &rep.handles[0];
    assert_eq!(h2.id(), id);
    assert!(
        h2.plan().net.step_id("c").is_some(),
        "runs the revised plan"
    );
    assert_eq!(h2.repairs_used(), 1, "the attempt count survives recovery");
    let o = d2.wait(h2).await.unwrap();
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(
        o.results[0].payloads[0].as_ref(),
        &json!({"x": 1, "a": 1, "b2": 1, "c": 1})
    );
    let live = h2.core_instance().unwrap();
    let r = weft_durable::replay(store.as_ref(), d2.engine(), &id, Some(&live))
        .await
        .unwrap();
    assert!(r.matches, "{r:?}");
    assert_eq!(r.status, "completed");
    weft_durable::verify(store.as_ref(), &id).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repaired_then_recovered_sqlite() {
    repaired_then_recovered(sqlite("repair").await.0).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_postgres),
    ignore = "needs PostgreSQL: set WEFT_TEST_POSTGRES_URL (bash .ci/run starts it)"
)]
async fn repaired_then_recovered_postgres() {
    repaired_then_recovered(postgres("repair").await).await;
}
