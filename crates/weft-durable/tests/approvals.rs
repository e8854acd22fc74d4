//! Human approvals on a durable engine, across a simulated crash: each "process" runs in
//! its own tokio runtime over the same SQLite file (dropping the runtime ends every task of
//! the first one, as a crash would), with the engine's manual clock. A step with an
//! `approval` waits before its tool is called; the request and the decision are journaled,
//! so the recovered instance waits for the same request (no second one) and a decision is
//! never asked twice. The tool behind it counts its calls: an approved effect runs once, a
//! denied one never. The budget of a plan's `limits` is journaled the same way and goes on
//! counting after the crash.
#![allow(clippy::unwrap_used)]

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::*;
use serde_json::{Value, json};
use weft_core::{Effect, Status, ToolSpec};
use weft_durable::{Durable, DurableConfig, Entry};
use weft_runtime::{EngineOptions, ManualClock};
use weft_store::Store;
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

const T0: i64 = 1_700_000_000_000;

/// A write tool that counts its calls (per test, by name).
struct Charge {
    spec: ToolSpec,
    calls: Arc<AtomicU32>,
}

impl Tool for Charge {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(json!({"charged": args["amount"]})) })
    }
}

async fn durable_at(
    path: &std::path::Path,
    clock: &ManualClock,
    calls: &Arc<AtomicU32>,
) -> Durable {
    let store: Arc<dyn Store> = Arc::new(weft_store_sqlite::SqliteStore::open(path).await.unwrap());
    let mut reg = registry(false);
    reg.register(Arc::new(Charge {
        spec: ToolSpec {
            name: "charge".into(),
            description: "charges a card".into(),
            args_schema: json!({}),
            effect: Effect::Write,
            idempotent: false,
            cost: None,
            llm: false,
        },
        calls: Arc::clone(calls),
    }));
    Durable::open(
        store,
        EngineOptions {
            registry: Arc::new(reg),
            clock: Arc::new(clock.clone()),
            ..EngineOptions::default()
        },
        DurableConfig::default(),
    )
    .await
    .unwrap()
}

/// `pay` charges 42 once a person approves; a denial goes to `refused` (`emit:`).
fn payment(approval: Value) -> Value {
    json!({"plan_name": "payment", "graph_type": "acyclic",
    "events": {"start": {}, "paid": {"kind": "output"}, "refused": {"kind": "output"}},
    "steps": {
        "pay": {"on": ["start"], "action": "charge", "args": {"amount": 42},
            "approval": approval, "emits": ["paid"], "on_fail": "emit:refused"}
    }})
}

async fn entries(store: &dyn Store, id: &str) -> Vec<Entry> {
    store
        .read(id, 1, 10_000)
        .await
        .unwrap()
        .iter()
        .map(|r| Entry::from_record(r).unwrap())
        .collect()
}

/// The instance's outcome, failing (not hanging) when it does not settle.
async fn settle(d: &Durable, h: &weft_runtime::InstanceHandle) -> weft_runtime::Outcome {
    tokio::time::timeout(Duration::from_secs(30), d.wait(h))
        .await
        .expect("the instance settles within 30 s")
        .unwrap()
}

fn count(es: &[Entry], kind: &str) -> usize {
    es.iter().filter(|e| e.kind() == kind).count()
}

/// Waits (at most 5 s) until `id`'s approval request is in the journal.
async fn until_requested(store: &dyn Store, id: &str) {
    for _ in 0..1_000 {
        if count(&entries(store, id).await, "approval.requested") == 1 {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Process 1: starts the plan and "crashes" once the approval request is durable; checks
/// that nothing was dispatched and the instance says `waiting_approval`.
fn start_and_crash(path: &std::path::Path, approval: Value, calls: &Arc<AtomicU32>) -> String {
    process(async {
        let clock = ManualClock::new(T0);
        let d = durable_at(path, &clock, calls).await;
        d.register("t", payment(approval)).await.unwrap();
        let h = d.start("t", "payment", json!({})).unwrap();
        let store = d.store();
        until_requested(store.as_ref(), h.id()).await;
        let es = entries(store.as_ref(), h.id()).await;
        assert_eq!(count(&es, "approval.requested"), 1, "{es:?}");
        assert_eq!(
            count(&es, "action.dispatched"),
            0,
            "nothing runs before the decision"
        );
        assert_eq!(h.state().status_name(), "waiting_approval");
        let pending = d.engine().approvals(h.id()).unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].step, "pay");
        assert!(pending[0].decision.is_none());
        assert_eq!(calls.load(Ordering::SeqCst), 0);
        h.id().to_string()
    })
}

#[test]
fn an_approval_survives_a_crash_and_its_grant_runs_the_effect_once() {
    let calls = Arc::new(AtomicU32::new(0));
    let path = temp_dir("approval-grant").join("weft.db");
    let id = start_and_crash(&path, json!({"reason": "charge 42 EUR?"}), &calls);
    process(async {
        let clock = ManualClock::new(T0 + 5_000);
        let d = durable_at(&path, &clock, &calls).await;
        let rep = d.recover().await.unwrap();
        assert_eq!(rep.restored, 1, "{rep:?}");
        let h = d.engine().handle(&id).unwrap();
        // The recovered call waits for the same request.
        let pending = d.engine().approvals(&id).unwrap();
        assert_eq!(pending.len(), 1, "{pending:?}");
        assert_eq!(pending[0].reasons, vec!["charge 42 EUR?".to_string()]);
        assert_eq!(
            pending[0].requested_ms, T0,
            "the request of the first process"
        );
        assert_eq!(h.state().status_name(), "waiting_approval");
        assert_eq!(calls.load(Ordering::SeqCst), 0);

        let view = d
            .engine()
            .decide_approval(&id, "pay", None, true, "ann", Some("ok".into()))
            .unwrap();
        assert!(view.decision.as_ref().unwrap().granted);
        let again = d
            .engine()
            .decide_approval(&id, "pay", None, false, "bob", None)
            .unwrap_err();
        assert_eq!(again.code(), "already_decided", "{again}");
        let o = settle(&d, &h).await;
        assert_eq!(o.status, Status::Completed, "{o:?}");
        assert_eq!(o.results_json()["paid"]["charged"], 42);
        let es = entries(d.store().as_ref(), &id).await;
        assert_eq!(count(&es, "approval.requested"), 1, "asked once: {es:?}");
        assert_eq!(count(&es, "approval.decided"), 1, "{es:?}");
        let decided = es
            .iter()
            .position(|e| e.kind() == "approval.decided")
            .unwrap();
        let dispatched = es
            .iter()
            .position(|e| e.kind() == "action.dispatched")
            .unwrap();
        assert!(decided < dispatched, "decided, then dispatched: {es:?}");
        match &es[decided] {
            Entry::ApprovalDecided {
                granted,
                principal,
                comment,
                ..
            } => {
                assert!(*granted);
                assert_eq!(principal, "ann");
                assert_eq!(comment.as_deref(), Some("ok"));
            }
            other => panic!("{other:?}"),
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the effect ran once");
}

#[test]
fn a_denial_never_runs_the_effect_and_follows_on_fail() {
    let calls = Arc::new(AtomicU32::new(0));
    let path = temp_dir("approval-deny").join("weft.db");
    process(async {
        let clock = ManualClock::new(T0);
        let d = durable_at(&path, &clock, &calls).await;
        d.register("t", payment(json!({}))).await.unwrap();
        let h = d.start("t", "payment", json!({})).unwrap();
        for _ in 0..1_000 {
            if d.engine().approvals(h.id()).is_some_and(|a| !a.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let no_such = d
            .engine()
            .decide_approval(h.id(), "nope", None, true, "ann", None)
            .unwrap_err();
        assert_eq!(no_such.code(), "no_approval");
        d.engine()
            .decide_approval(h.id(), "pay", None, false, "ann", Some("too much".into()))
            .unwrap();
        let o = settle(&d, &h).await;
        assert_eq!(o.status, Status::Completed, "{o:?}");
        let refused = &o.results_json()["refused"];
        assert_eq!(refused["error"]["code"], "approval_denied", "{refused}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("denied by ann: too much"),
            "{refused}"
        );
        let es = entries(d.store().as_ref(), h.id()).await;
        assert_eq!(count(&es, "action.dispatched"), 0, "{es:?}");
    });
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a denied effect never runs"
    );
}

#[test]
fn a_deadline_that_passed_while_down_applies_the_default() {
    let calls = Arc::new(AtomicU32::new(0));
    let path = temp_dir("approval-deadline").join("weft.db");
    let id = start_and_crash(
        &path,
        json!({"timeout_ms": 60_000, "default": "grant"}),
        &calls,
    );
    process(async {
        // Back two minutes later: the deadline passed while weft was down.
        let clock = ManualClock::new(T0 + 120_000);
        let d = durable_at(&path, &clock, &calls).await;
        d.recover().await.unwrap();
        // The default applies at once, so the instance may be done before a handle is taken:
        // read the outcome from the store.
        let mut es = Vec::new();
        for _ in 0..1_000 {
            es = entries(d.store().as_ref(), &id).await;
            if count(&es, "action.result") == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let charged = es.iter().find_map(|e| match e {
            Entry::Outcome { result: Ok(v), .. } => Some(v["charged"].clone()),
            _ => None,
        });
        assert_eq!(charged, Some(json!(42)), "{es:?}");
        let decided: Vec<&Entry> = es
            .iter()
            .filter(|e| e.kind() == "approval.decided")
            .collect();
        assert_eq!(decided.len(), 1, "{es:?}");
        match decided[0] {
            Entry::ApprovalDecided {
                granted, principal, ..
            } => {
                assert!(*granted, "the default");
                assert_eq!(principal, "weft:deadline");
            }
            other => panic!("{other:?}"),
        }
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
}

#[test]
fn a_deadline_counts_on_the_engine_clock() {
    let calls = Arc::new(AtomicU32::new(0));
    let path = temp_dir("approval-clock").join("weft.db");
    process(async {
        let clock = ManualClock::new(T0);
        let d = durable_at(&path, &clock, &calls).await;
        d.register("t", payment(json!({"timeout_ms": 1_000})))
            .await
            .unwrap();
        let h = d.start("t", "payment", json!({})).unwrap();
        for _ in 0..1_000 {
            if d.engine().approvals(h.id()).is_some_and(|a| !a.is_empty()) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        clock.advance(999);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(h.state().status_name(), "waiting_approval", "not yet due");
        clock.advance(1);
        let o = settle(&d, &h).await;
        let refused = &o.results_json()["refused"];
        assert_eq!(refused["error"]["code"], "approval_denied", "{o:?}");
        assert!(
            refused["error"]["message"]
                .as_str()
                .unwrap()
                .contains("weft:deadline"),
            "{refused}"
        );
    });
    assert_eq!(calls.load(Ordering::SeqCst), 0);
}

/// The budget stage across a crash: the count of a plan's `limits` is journaled with each
/// call, so the recovered instance goes on counting where the first process stopped. Three
/// charges against `max_tool_calls: 2`, the second waiting for an approval over the crash:
/// the third is refused (without the restored count it would run).
#[test]
fn a_budget_goes_on_counting_after_a_crash() {
    let calls = Arc::new(AtomicU32::new(0));
    let path = temp_dir("budget-crash").join("weft.db");
    let plan = json!({"plan_name": "thrice", "graph_type": "acyclic",
        "limits": {"max_tool_calls": 2},
        "events": {"start": {}, "a": {}, "b": {}, "done": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "charge", "emits": ["a"]},
            "two": {"on": ["a"], "action": "charge", "emits": ["b"], "approval": {}},
            "three": {"on": ["b"], "action": "charge", "emits": ["done"]}}});
    let id = process(async {
        let clock = ManualClock::new(T0);
        let d = durable_at(&path, &clock, &calls).await;
        d.register("t", plan.clone()).await.unwrap();
        let h = d.start("t", "thrice", json!({})).unwrap();
        let store = d.store();
        until_requested(store.as_ref(), h.id()).await;
        let es = entries(store.as_ref(), h.id()).await;
        assert_eq!(count(&es, "budget.charged"), 1, "{es:?}");
        assert_eq!(h.state().usage.unwrap().tool_calls, 1);
        h.id().to_string()
    });
    assert_eq!(calls.load(Ordering::SeqCst), 1);
    process(async {
        let clock = ManualClock::new(T0 + 1_000);
        let d = durable_at(&path, &clock, &calls).await;
        d.recover().await.unwrap();
        let h = d.engine().handle(&id).unwrap();
        assert_eq!(
            h.state().usage.unwrap().tool_calls,
            1,
            "the count was restored"
        );
        d.engine()
            .decide_approval(&id, "two", None, true, "ann", None)
            .unwrap();
        let o = settle(&d, &h).await;
        match &o.status {
            Status::Failed { reason } => assert!(reason.contains("max_tool_calls"), "{reason}"),
            other => panic!("{other:?}"),
        }
        let es = entries(d.store().as_ref(), &id).await;
        assert_eq!(count(&es, "budget.charged"), 2, "{es:?}");
    });
    assert_eq!(calls.load(Ordering::SeqCst), 2, "the third call never ran");
}
