//! The repair loop (`on_fail: repair` with a [`Repairer`] installed): the revised plan is
//! swapped in through one journaled input and the instance completes under it; replaying
//! the journal from the original plan reproduces the live instance; a revision that would
//! lose a token, a repairer error and exhausted attempts fail the instance with a reason.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use common::{assert_same, harness_with, out};
use serde_json::{Value, json};
use weft_core::{Plan, Status};
use weft_runtime::journal_hook::replay;
use weft_runtime::{Input, RepairContext, RepairError, Repairer};
use weft_tools::BoxFuture;

/// Hands out fixed answers in order and records what it was told.
struct Fixed {
    answers: Vec<Result<Value, RepairError>>,
    calls: AtomicUsize,
    seen: std::sync::Mutex<Vec<RepairContext>>,
}

impl Fixed {
    fn new(answers: Vec<Result<Value, RepairError>>) -> Arc<Fixed> {
        Arc::new(Fixed {
            answers,
            calls: AtomicUsize::new(0),
            seen: std::sync::Mutex::new(Vec::new()),
        })
    }
}

impl Repairer for Fixed {
    fn repair(&self, ctx: RepairContext) -> BoxFuture<'static, Result<Plan, RepairError>> {
        let n = self.calls.fetch_add(1, Ordering::SeqCst);
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(ctx);
        let a = self
            .answers
            .get(n)
            .cloned()
            .unwrap_or_else(|| Err(RepairError::new("no_answer", "out of answers")));
        Box::pin(async move {
            tokio::task::yield_now().await;
            a.and_then(|doc| {
                weft_core::load::plan_from_value(doc, &Default::default())
                    .map_err(|e| RepairError::new("decode", e.to_string()))
            })
        })
    }
}

fn failing_plan() -> Value {
    json!({"plan_name":"ship","graph_type":"acyclic","initial":["order"],
        "events":{"order":{},"shipped":{"kind":"output"}},
        "steps":{"send":{"on":["order"],"action":"fail","args":{"message":"carrier down"},
                         "on_fail":"repair","emits":["shipped"]}}})
}

fn fixed_plan() -> Value {
    json!({"plan_name":"ship","graph_type":"acyclic","initial":["order"],
        "events":{"order":{},"shipped":{"kind":"output"}},
        "steps":{"send_other_carrier":{"on":["order"],"action":"echo",
                         "args":{"carrier":"B","order":"${order.id}"},"emits":["shipped"]}}})
}

async fn wait(h: &weft_runtime::InstanceHandle) -> weft_runtime::Outcome {
    tokio::time::timeout(std::time::Duration::from_secs(10), h.wait())
        .await
        .expect("settles")
}

#[tokio::test]
async fn a_failed_step_is_repaired_and_the_instance_completes_under_the_new_plan() {
    let rep = Fixed::new(vec![Ok(fixed_plan())]);
    let h = harness_with(|o| o.repairer = Some(rep.clone()));
    let original = h
        .engine
        .register(weft_core::load::plan_from_value(failing_plan(), &Default::default()).unwrap());
    let original = original.unwrap();
    let i = h.engine.start("t", "ship", json!({"id": 7})).unwrap();
    let o = wait(&i).await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(
        out(&o, "shipped"),
        vec![json!({"carrier": "B", "order": 7})]
    );
    // The repairer saw the failure, the marking (the failed firing's token is back on
    // `order`) and a journal excerpt.
    let seen = rep.seen.lock().unwrap();
    assert_eq!(seen.len(), 1);
    assert!(
        seen[0].failure.contains("carrier down"),
        "{}",
        seen[0].failure
    );
    assert_eq!(seen[0].marking.get("order"), Some(&vec![json!({"id": 7})]));
    assert!(
        seen[0].journal_excerpt.contains("Start"),
        "{}",
        seen[0].journal_excerpt
    );
    assert_eq!(seen[0].attempt, 1);
    // The journal holds exactly one repair, and replaying it from the original plan
    // reproduces the live instance.
    let inputs = h.journal.inputs(i.id());
    let repairs: Vec<_> = inputs
        .iter()
        .filter_map(|i| match i {
            Input::Repair(r) => Some(r),
            _ => None,
        })
        .collect();
    assert_eq!(repairs.len(), 1);
    assert_eq!(repairs[0].version, 1);
    assert_eq!(repairs[0].marking.get("order"), Some(&1));
    assert_eq!(repairs[0].hash.len(), 64);
    let replayed = replay(&original.net, i.id(), &inputs).expect("replays");
    assert_same(&i.core_instance().unwrap(), &replayed);
    assert_eq!(replayed.status, Status::Completed);
    assert!(i.plan().net.step_id("send_other_carrier").is_some());
}

#[tokio::test]
async fn a_revision_that_would_lose_a_token_fails_the_instance_with_r001() {
    let lossy = json!({"plan_name":"ship","graph_type":"acyclic",
        "events":{"start":{},"shipped":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"echo","emits":["shipped"]}}});
    let rep = Fixed::new(vec![Ok(lossy)]);
    let h = harness_with(|o| o.repairer = Some(rep.clone()));
    h.plan(failing_plan());
    let i = h.engine.start("t", "ship", json!({"id": 1})).unwrap();
    let o = wait(&i).await;
    match &o.status {
        Status::Failed { reason } => {
            assert!(reason.contains("R001"), "{reason}");
            assert!(reason.contains("`order`"), "{reason}");
        }
        s => panic!("expected failed, got {s:?}"),
    }
    assert!(
        h.journal
            .inputs(i.id())
            .iter()
            .any(|i| matches!(i, Input::RepairFailed { .. }))
    );
    h.check_replay(&i);
}

#[tokio::test]
async fn a_repairer_error_or_an_invalid_plan_fails_the_instance() {
    let rep = Fixed::new(vec![Err(RepairError::new("llm_http", "the model is down"))]);
    let h = harness_with(|o| o.repairer = Some(rep.clone()));
    h.plan(failing_plan());
    let i = h.engine.start("t", "ship", json!({"id": 1})).unwrap();
    match wait(&i).await.status {
        Status::Failed { reason } => {
            assert!(reason.contains("[llm_http] the model is down"), "{reason}");
            assert!(reason.contains("carrier down"), "{reason}");
        }
        s => panic!("expected failed, got {s:?}"),
    }
    h.check_replay(&i);

    let unknown_tool = json!({"plan_name":"ship","graph_type":"acyclic","initial":["order"],
        "events":{"order":{},"shipped":{"kind":"output"}},
        "steps":{"s":{"on":["order"],"action":"no.such.tool","emits":["shipped"]}}});
    let rep = Fixed::new(vec![Ok(unknown_tool)]);
    let h = harness_with(|o| o.repairer = Some(rep.clone()));
    h.plan(failing_plan());
    let i = h.engine.start("t", "ship", json!({"id": 1})).unwrap();
    match wait(&i).await.status {
        Status::Failed { reason } => assert!(reason.contains("invalid_plan"), "{reason}"),
        s => panic!("expected failed, got {s:?}"),
    }
}

#[tokio::test]
async fn repair_attempts_are_capped_per_instance() {
    // Every revision fails again with `on_fail: repair`.
    let mut again = failing_plan();
    again["steps"]["send"]["args"]["message"] = json!("still down");
    let rep = Fixed::new(vec![Ok(again.clone()), Ok(again.clone()), Ok(again)]);
    let h = harness_with(|o| {
        o.repairer = Some(rep.clone());
        o.max_repairs = 2;
    });
    h.plan(failing_plan());
    let i = h.engine.start("t", "ship", json!({"id": 1})).unwrap();
    match wait(&i).await.status {
        Status::Failed { reason } => {
            assert!(reason.contains("[repair_attempts]"), "{reason}");
            assert!(reason.contains("2 of 2"), "{reason}");
        }
        s => panic!("expected failed, got {s:?}"),
    }
    assert_eq!(
        rep.calls.load(Ordering::SeqCst),
        2,
        "asked twice, not three times"
    );
    let applied = h
        .journal
        .inputs(i.id())
        .iter()
        .filter(|i| matches!(i, Input::Repair(_)))
        .count();
    assert_eq!(applied, 2);
}

#[tokio::test]
async fn without_a_repairer_the_instance_pauses_with_its_tokens_back() {
    let h = harness_with(|_| {});
    h.plan(failing_plan());
    let i = h.engine.start("t", "ship", json!({"id": 3})).unwrap();
    let o = wait(&i).await;
    assert!(matches!(o.status, Status::Paused { .. }), "{o:?}");
    let st = i.state();
    let order = st.marking.iter().find(|(e, _)| e == "order").unwrap();
    assert_eq!(order.1, 1, "the failed firing's token is back on `order`");
    h.check_replay(&i);
    assert!(matches!(
        h.engine.repair(i.id(), None),
        Err(weft_runtime::Error::NoRepairer)
    ));
}

/// A waiting instance (its join lacks a declared input event) is not "stuck": the opt-in
/// does not repair it.
#[tokio::test]
async fn a_waiting_instance_is_not_repaired() {
    let waiting = json!({"plan_name":"wt","graph_type":"acyclic",
        "events":{"start":{},"approval":{"kind":"input"},"done":{"kind":"output"}},
        "steps":{"go":{"on":["start","approval"],"action":"echo","emits":["done"]}}});
    let rep = Fixed::new(vec![]);
    let h = harness_with(|o| {
        o.repairer = Some(rep.clone());
        o.repair_stuck = true;
    });
    h.engine
        .register(weft_core::load::plan_from_value(waiting, &Default::default()).unwrap())
        .unwrap();
    let i = h.engine.start("t", "wt", json!({"x": 1})).unwrap();
    let o = wait(&i).await;
    assert_eq!(o.status, Status::Waiting, "{o:?}");
    assert!(rep.seen.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_stuck_instance_is_repaired_when_opted_in() {
    // `approval` is internal and emitted only for a negative `x`: with `x: 1`, a real
    // deadlock.
    let stuck = json!({"plan_name":"st","graph_type":"acyclic",
        "events":{"start":{},"checked":{},"approval":{},"done":{"kind":"output"}},
        "steps":{"check":{"on":["start"],"action":"echo",
                "emits":["checked",{"event":"approval","when":"start.x < 0"}]},
            "go":{"on":["checked","approval"],"action":"echo","emits":["done"]}}});
    let fixed = json!({"plan_name":"st","graph_type":"acyclic",
        "events":{"start":{},"checked":{},"approval":{},"done":{"kind":"output"}},
        "steps":{"check":{"on":["start"],"action":"echo",
                "emits":["checked",{"event":"approval","when":"start.x < 0"}]},
            "go":{"on":["checked"],"action":"echo","emits":["done"]}}});
    let rep = Fixed::new(vec![Ok(fixed)]);
    let h = harness_with(|o| {
        o.repairer = Some(rep.clone());
        o.repair_stuck = true;
    });
    let original = h
        .engine
        .register(weft_core::load::plan_from_value(stuck, &Default::default()).unwrap())
        .unwrap();
    let i = h.engine.start("t", "st", json!({"x": 1})).unwrap();
    let o = wait(&i).await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    let seen = rep.seen.lock().unwrap();
    assert!(
        seen[0].failure.contains("step `go` lacks approval"),
        "{}",
        seen[0].failure
    );
    let replayed = replay(&original.net, i.id(), &h.journal.inputs(i.id())).unwrap();
    assert_same(&i.core_instance().unwrap(), &replayed);
}
