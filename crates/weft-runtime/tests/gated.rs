//! Immediate tools that wait for the journal (`Tool::waits_for_journal`): the runtime
//! records the dispatch through `Journal::gate`, calls the tool inline only once
//! `Journal::poll_durable` says the mark is durable, fails the action with
//! `journal_unavailable` when the journal says it never will be, and drops the waiting call
//! when the instance is stopped. The journal here is a test double whose durability the
//! test moves by hand; the durable engine's own gate is tested in `weft-durable`.

mod common;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::token::FiringId;
use weft_core::{Effect, Status, ToolSpec};
use weft_runtime::journal_hook::replay;
use weft_runtime::{Engine, EngineOptions, Input, InstanceHandle, Journal, MemoryJournal};
use weft_tools::{BoxFuture, Registry, Tool, ToolContext, ToolError};

/// A journal whose records become durable only when the test says so.
#[derive(Default)]
struct HeldJournal {
    inner: MemoryJournal,
    recorded: AtomicU64,
    durable: AtomicU64,
    /// `Some(why)`: nothing will become durable.
    failed: Mutex<Option<String>>,
    wakers: Mutex<Vec<Waker>>,
    /// (step, firing, idempotent) of each `gate` call.
    gates: Mutex<Vec<(String, FiringId, bool)>>,
}

impl HeldJournal {
    /// Makes everything recorded so far durable and wakes the waiting calls.
    fn release(&self) {
        self.durable
            .store(self.recorded.load(Ordering::SeqCst), Ordering::SeqCst);
        self.wake();
    }

    fn fail(&self, why: &str) {
        *self.failed.lock().expect("lock") = Some(why.to_string());
        self.wake();
    }

    fn wake(&self) {
        for w in self.wakers.lock().expect("lock").drain(..) {
            w.wake();
        }
    }
}

impl Journal for HeldJournal {
    fn record(&self, tenant: &str, instance: &str, input: &Input) {
        self.inner.record(tenant, instance, input);
        self.recorded.fetch_add(1, Ordering::SeqCst);
    }

    fn gate(
        &self,
        _tenant: &str,
        _instance: &str,
        step: &str,
        firing: FiringId,
        idempotent: bool,
    ) -> u64 {
        self.gates
            .lock()
            .expect("lock")
            .push((step.to_string(), firing, idempotent));
        self.recorded.load(Ordering::SeqCst)
    }

    fn poll_durable(
        &self,
        _instance: &str,
        mark: u64,
        cx: &mut Context<'_>,
    ) -> Poll<Result<(), String>> {
        if let Some(why) = self.failed.lock().expect("lock").clone() {
            return Poll::Ready(Err(why));
        }
        let mut w = self.wakers.lock().expect("lock");
        if self.durable.load(Ordering::SeqCst) >= mark {
            return Poll::Ready(Ok(()));
        }
        w.push(cx.waker().clone());
        Poll::Pending
    }
}

/// `t.add`: immediate, waits for the journal; adds 1 to its input's `n` and counts calls.
struct GatedAdd {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Tool for GatedAdd {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let r = self.call_now(ctx, args);
        Box::pin(async move { r })
    }
    // Not `is_immediate`: it is called inline only through the gate (the default
    // `call_inline` builds the context and calls `call_now`).
    fn waits_for_journal(&self) -> bool {
        true
    }
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let n = ctx
            .inputs
            .first()
            .and_then(|(_, p)| p.get("n"))
            .and_then(Value::as_i64)
            .unwrap_or(0);
        Ok(json!({"n": n + 1, "by": args.get("by").cloned().unwrap_or(Value::Null)}))
    }
}

fn setup() -> (Engine, Arc<HeldJournal>, Arc<AtomicUsize>) {
    let journal = Arc::new(HeldJournal::default());
    let calls = Arc::new(AtomicUsize::new(0));
    let mut reg = Registry::new();
    weft_builtins::builtin::register_pure(&mut reg);
    reg.register(Arc::new(GatedAdd {
        spec: common::spec("t.add", Effect::Pure),
        calls: Arc::clone(&calls),
    }));
    let engine = Engine::new(EngineOptions {
        registry: Arc::new(reg),
        journal: Some(Arc::clone(&journal) as Arc<dyn Journal>),
        ..EngineOptions::default()
    });
    (engine, journal, calls)
}

/// `a` (literal args) → `b` (rendered args), both `t.add`.
fn plan() -> Value {
    json!({"plan_name": "gated", "graph_type": "acyclic",
    "events": {"start": {}, "mid": {}, "done": {"kind": "output"}},
    "steps": {
        "a": {"on": ["start"], "action": "t.add", "args": {"by": "a"}, "emits": ["mid"]},
        "b": {"on": ["mid"], "action": "t.add", "args": {"by": "${mid.n}"}, "emits": ["done"]}
    }})
}

async fn until(h: &InstanceHandle, what: &str, pred: impl Fn(&InstanceHandle) -> bool) {
    for _ in 0..2_000 {
        if pred(h) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    panic!("never {what}: {:?}", h.state());
}

fn in_flight(h: &InstanceHandle) -> Vec<String> {
    h.state().in_flight.iter().map(|f| f.step.clone()).collect()
}

/// An engine with one instance of [`plan`] started on `{"n": 1}`, its `a` in flight.
async fn started() -> (
    Engine,
    Arc<HeldJournal>,
    Arc<AtomicUsize>,
    Arc<weft_runtime::CompiledPlan>,
    InstanceHandle,
) {
    let (engine, journal, calls) = setup();
    let p = engine.compile_value(plan()).expect("plan");
    let h = engine
        .start_with("t", &p, json!({"n": 1}), Default::default())
        .expect("the plan takes any input");
    until(&h, "a in flight", |h| in_flight(h) == ["a"]).await;
    (engine, journal, calls, p, h)
}

/// The live instance equals its journal replayed into the pure core.
fn agrees_with_journal(p: &weft_runtime::CompiledPlan, h: &InstanceHandle, j: &HeldJournal) {
    let live = h.core_instance().expect("started");
    let replayed = replay(&p.net, h.id(), &j.inner.inputs(h.id())).expect("replays");
    common::assert_same(&live, &replayed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gated_call_waits_until_its_records_are_durable() {
    // `a` fired and waits: dispatched through the gate, not called.
    let (_engine, journal, calls, p, h) = started().await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 0, "called before durable");
    assert_eq!(in_flight(&h), ["a"]);
    assert_eq!(
        *journal.gates.lock().expect("lock"),
        [("a".to_string(), 0, true)],
        "one gate per dispatch, with the tool's idempotency"
    );
    // The live in-flight firing still holds its tokens: live state and journal agree.
    agrees_with_journal(&p, &h, &journal);

    journal.release();
    until(&h, "b in flight", |h| in_flight(h) == ["b"]).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "a ran once; b waits");

    journal.release();
    let o = tokio::time::timeout(Duration::from_secs(10), h.wait())
        .await
        .expect("completes");
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(calls.load(Ordering::SeqCst), 2);
    assert_eq!(common::out(&o, "done"), [json!({"n": 3, "by": 2})]);
    agrees_with_journal(&p, &h, &journal);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_journal_that_cannot_be_written_fails_the_gated_call() {
    let (_engine, journal, calls, _, h) = started().await;
    journal.fail("disk on fire");
    let o = tokio::time::timeout(Duration::from_secs(10), h.wait())
        .await
        .expect("settles");
    assert_eq!(calls.load(Ordering::SeqCst), 0, "never called");
    let Status::Failed { reason } = &o.status else {
        panic!("expected a failure: {o:?}");
    };
    assert!(
        reason.contains("journal_unavailable") && reason.contains("disk on fire"),
        "{reason}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stopping_an_instance_drops_its_waiting_gated_call() {
    let (_engine, journal, calls, _, h) = started().await;
    h.stop();
    until(&h, "stopped", |h| h.state().status.is_terminal()).await;
    journal.release();
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        calls.load(Ordering::SeqCst),
        0,
        "a stopped instance calls nothing"
    );
}

/// Many instances at once: each call happens exactly once, after its own mark.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_instances_each_call_once_after_release() {
    let (engine, journal, calls) = setup();
    let p = engine.compile_value(plan()).expect("plan");
    let hs: Vec<_> = (0..200)
        .map(|i| {
            engine
                .start_with("t", &p, json!({"n": i}), Default::default())
                .expect("the plan takes any input")
        })
        .collect();
    for h in &hs {
        until(h, "a in flight", |h| in_flight(h) == ["a"]).await;
    }
    assert_eq!(calls.load(Ordering::SeqCst), 0);
    // Released over and over until all are done (each release covers what was recorded).
    for _ in 0..100 {
        journal.release();
        tokio::time::sleep(Duration::from_millis(5)).await;
        if hs.iter().all(|h| h.outcome_now().is_some()) {
            break;
        }
    }
    for (i, h) in hs.iter().enumerate() {
        let o = h.outcome_now().expect("done");
        assert_eq!(o.status, Status::Completed);
        assert_eq!(common::out(&o, "done"), [json!({"n": i + 2, "by": i + 1})]);
    }
    assert_eq!(calls.load(Ordering::SeqCst), 400);
}
