//! When an instance's task starts: on a runtime of several threads, pending actions are
//! first polled with the cell's waker, so the task that polls them is started by their first
//! wake (a reply, a timer, a spawned write finishing), on the thread that wakes it; on one
//! thread, at dispatch. Whatever wakes them — another thread, the action itself during its
//! first poll, a finished spawned task — the call completes either way, and the task ends
//! with the last pending action.

mod common;

use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use common::{Harness, harness_with, registry, spec};
use serde_json::{Value, json};
use tokio::sync::oneshot;
use weft_core::{Effect, Status};
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError};

/// A tool whose calls wait for the test to answer them (through the senders it keeps).
struct Answered {
    spec: weft_core::ToolSpec,
    waiting: Arc<Mutex<Vec<oneshot::Sender<Value>>>>,
}

impl Tool for Answered {
    fn spec(&self) -> &weft_core::ToolSpec {
        &self.spec
    }
    fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (tx, rx) = oneshot::channel();
        self.waiting.lock().expect("lock").push(tx);
        Box::pin(async move { rx.await.map_err(|_| ToolError::fatal("gone", "no answer")) })
    }
}

/// A tool that wakes itself during its first poll and answers on the second.
struct WakesItself(weft_core::ToolSpec);

impl Tool for WakesItself {
    fn spec(&self) -> &weft_core::ToolSpec {
        &self.0
    }
    fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let mut polls = 0;
        Box::pin(std::future::poll_fn(move |cx| {
            polls += 1;
            if polls < 3 {
                cx.waker().wake_by_ref();
                Poll::Pending
            } else {
                Poll::Ready(Ok(json!({"polls": polls})))
            }
        }))
    }
}

type Waiting = Arc<Mutex<Vec<oneshot::Sender<Value>>>>;

/// The harness with `t.answered` (pure) and `t.write` (write: spawned) answered by the test,
/// and `t.self`, which wakes itself.
fn harness() -> (Harness, Waiting) {
    let waiting: Waiting = Arc::default();
    let mut reg = registry();
    reg.register(Arc::new(Answered {
        spec: spec("t.answered", Effect::Pure),
        waiting: Arc::clone(&waiting),
    }));
    reg.register(Arc::new(Answered {
        spec: spec("t.write", Effect::Write),
        waiting: Arc::clone(&waiting),
    }));
    reg.register(Arc::new(WakesItself(spec("t.self", Effect::Pure))));
    (harness_with(|o| o.registry = Arc::new(reg)), waiting)
}

fn one_step(h: &Harness, action: &str) -> String {
    h.plan(
        json!({"plan_name": format!("one-{action}"), "graph_type": "acyclic",
        "events": {"start": {}, "done": {"kind": "output"}},
        "steps": {"call": {"on": ["start"], "action": action, "args": {}, "emits": ["done"]}}}),
    )
}

fn alive() -> usize {
    tokio::runtime::Handle::current()
        .metrics()
        .num_alive_tasks()
}

/// Lets the runtime run what is ready until no task is alive (or gives up after a while).
async fn until_no_task() -> usize {
    for _ in 0..200 {
        if alive() == 0 {
            return 0;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    alive()
}

fn answer(waiting: &Waiting, v: Value) {
    let tx = waiting.lock().expect("lock").pop().expect("a call waits");
    tx.send(v).expect("the call listens");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_several_threads_a_pending_call_starts_no_task_until_it_wakes() {
    let (h, waiting) = harness();
    let p = one_step(&h, "t.answered");
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    for _ in 0..5 {
        tokio::task::yield_now().await;
    }
    assert_eq!(i.state().in_flight.len(), 1, "the call is in flight");
    assert_eq!(alive(), 0, "no task polls a call nothing has woken");
    answer(&waiting, json!({"x": 1}));
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "done"), vec![json!({"x": 1})]);
    assert_eq!(until_no_task().await, 0, "the task ends with the last call");
    h.check_replay(&i);
}

#[tokio::test]
async fn calls_answered_from_another_thread_complete() {
    answered_elsewhere().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_answered_from_another_thread_complete_on_several_threads() {
    answered_elsewhere().await;
}

async fn answered_elsewhere() {
    let (h, waiting) = harness();
    let p = one_step(&h, "t.answered");
    let w = one_step(&h, "t.write");
    for round in 0..200 {
        let plan = if round % 2 == 0 { &p } else { &w };
        let i = h.engine.start("t", plan, json!({})).expect("starts");
        let tx = waiting.lock().expect("lock").pop().expect("a call waits");
        // Answered from a thread outside the runtime, sometimes before the caller waits.
        let t = std::thread::spawn(move || {
            if round % 3 == 0 {
                std::thread::sleep(Duration::from_micros(200));
            }
            tx.send(json!(round)).expect("the call listens");
        });
        let o = tokio::time::timeout(Duration::from_secs(10), i.wait())
            .await
            .expect("the call completes");
        t.join().expect("joins");
        assert_eq!(o.status, Status::Completed);
        assert_eq!(common::out(&o, "done"), vec![json!(round)]);
    }
}

#[tokio::test]
async fn on_one_thread_a_pending_call_has_its_task_at_once() {
    let (h, waiting) = harness();
    let p = one_step(&h, "t.answered");
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    assert_eq!(alive(), 1, "the task is spawned at dispatch");
    answer(&waiting, json!({"x": 2}));
    let o = i.wait().await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "done"), vec![json!({"x": 2})]);
    assert_eq!(until_no_task().await, 0, "the task ends with the last call");
}

#[tokio::test]
async fn a_call_that_wakes_itself_while_polled_completes() {
    wakes_itself().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_that_wakes_itself_while_polled_completes_on_several_threads() {
    wakes_itself().await;
}

async fn wakes_itself() {
    let (h, _) = harness();
    let p = one_step(&h, "t.self");
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = tokio::time::timeout(Duration::from_secs(10), i.wait())
        .await
        .expect("the call completes");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "done"), vec![json!({"polls": 3})]);
    h.check_replay(&i);
}

#[tokio::test]
async fn calls_dispatched_while_the_task_runs_are_polled_by_it() {
    chain().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_dispatched_while_the_task_runs_are_polled_by_it_on_several_threads() {
    chain().await;
}

async fn chain() {
    let (h, waiting) = harness();
    // Two steps in sequence, then two in parallel: each later call is dispatched by the
    // task applying the earlier one's outcome.
    let p = h.plan(json!({"plan_name": "chain", "graph_type": "acyclic",
        "events": {"start": {}, "a": {}, "b": {}, "c": {"kind": "output"}, "d": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "t.answered", "args": {}, "emits": ["a"]},
            "two": {"on": ["a"], "action": "t.write", "args": {}, "emits": ["b"]},
            "three": {"on": ["b"], "action": "t.answered", "args": {}, "emits": ["c"]},
            "four": {"on": ["b"], "action": "t.self", "args": {}, "emits": ["d"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    for n in 0..3 {
        for _ in 0..100 {
            if !waiting.lock().expect("lock").is_empty() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        answer(&waiting, json!(n));
    }
    let o = tokio::time::timeout(Duration::from_secs(10), i.wait())
        .await
        .expect("completes");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "c"), vec![json!(2)]);
    assert_eq!(common::out(&o, "d"), vec![json!({"polls": 3})]);
    assert_eq!(until_no_task().await, 0);
    h.check_replay(&i);
}

/// A tool that answers after a short sleep: pending at dispatch, woken by the runtime's
/// timer.
struct Sleeps(weft_core::ToolSpec);

impl Tool for Sleeps {
    fn spec(&self) -> &weft_core::ToolSpec {
        &self.0
    }
    fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        Box::pin(async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Ok(json!({"slept": true}))
        })
    }
}

/// A tool that wakes itself once while first polled (so an instance's task starts on a
/// runtime of several threads), then waits for the test to answer it.
struct Nudged {
    spec: weft_core::ToolSpec,
    waiting: Waiting,
}

impl Tool for Nudged {
    fn spec(&self) -> &weft_core::ToolSpec {
        &self.spec
    }
    fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (tx, mut rx) = oneshot::channel();
        self.waiting.lock().expect("lock").push(tx);
        let mut first = true;
        Box::pin(std::future::poll_fn(move |cx| {
            if std::mem::take(&mut first) {
                cx.waker().wake_by_ref();
            }
            match std::pin::Pin::new(&mut rx).poll(cx) {
                Poll::Ready(r) => Poll::Ready(r.map_err(|_| ToolError::fatal("gone", "no answer"))),
                Poll::Pending => Poll::Pending,
            }
        }))
    }
}

#[tokio::test]
async fn a_call_dispatched_from_outside_while_the_task_waits_completes_on_its_own_wake() {
    dispatched_from_outside().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_dispatched_from_outside_while_the_task_waits_completes_on_its_own_wake_on_several_threads()
 {
    dispatched_from_outside().await;
}

/// One step waits for the test's answer while the instance's task runs; an event from outside
/// dispatches a second step, whose call finishes on a timer: it completes on that wake, not
/// only once the first call's answer wakes the task.
async fn dispatched_from_outside() {
    let waiting: Waiting = Arc::default();
    let mut reg = registry();
    reg.register(Arc::new(Nudged {
        spec: spec("t.nudged", Effect::Pure),
        waiting: Arc::clone(&waiting),
    }));
    reg.register(Arc::new(Sleeps(spec("t.sleeps", Effect::Pure))));
    let h = harness_with(|o| o.registry = Arc::new(reg));
    let p = h.plan(json!({"plan_name": "outside", "graph_type": "acyclic",
        "events": {"start": {}, "go": {"kind": "input"},
                   "a": {"kind": "output"}, "b": {"kind": "output"}},
        "steps": {
            "slow": {"on": ["start"], "action": "t.nudged", "args": {}, "emits": ["a"]},
            "quick": {"on": ["go"], "action": "t.sleeps", "args": {}, "emits": ["b"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    for _ in 0..100 {
        if alive() > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(alive(), 1, "the task polls the waiting call");
    // Long enough for the task to poll the call and wait.
    tokio::time::sleep(Duration::from_millis(20)).await;
    let n = h
        .engine
        .ingest("t", "go", json!({}), None, Some(i.id()))
        .expect("routes");
    assert_eq!(n, 1);
    assert_eq!(i.state().in_flight.len(), 2, "both calls are in flight");
    let mut done = false;
    for _ in 0..200 {
        let s = i.state();
        if s.in_flight.len() == 1 && s.in_flight[0].step == "slow" {
            done = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert!(
        done,
        "the second call completed while the first still waits: {:?}",
        i.state().in_flight
    );
    answer(&waiting, json!(1));
    let o = tokio::time::timeout(Duration::from_secs(10), i.wait())
        .await
        .expect("completes");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "b"), vec![json!({"slept": true})]);
    assert_eq!(until_no_task().await, 0);
    h.check_replay(&i);
}

/// A reader on another thread sees the core state machine and the live state of one moment:
/// never a completed status beside the call it finished still in flight, while the call is
/// answered from a third thread.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_core_and_the_state_are_read_at_one_moment() {
    let (h, waiting) = harness();
    let p = one_step(&h, "t.answered");
    let mut reads = 0u64;
    for round in 0..300 {
        let i = h.engine.start("t", &p, json!({})).expect("starts");
        let tx = waiting.lock().expect("lock").pop().expect("a call waits");
        let reader = {
            let i = i.clone();
            std::thread::spawn(move || {
                let mut n = 0u64;
                loop {
                    let (_, core, snap) = i.core_and_state();
                    n += 1;
                    let in_flight = core.as_ref().map_or(0, |c| c.in_flight.len());
                    if snap.status == Status::Completed {
                        return (n, in_flight);
                    }
                }
            })
        };
        std::thread::sleep(Duration::from_micros(50));
        tx.send(json!(round)).expect("the call listens");
        let (n, in_flight) = tokio::task::spawn_blocking(move || reader.join().expect("reads"))
            .await
            .expect("joins");
        reads += n;
        assert_eq!(
            in_flight, 0,
            "round {round}: completed with a call in flight"
        );
    }
    assert!(
        reads > 300,
        "the reader read while the calls ran ({reads} reads)"
    );
}

/// A tool answered by the test that notes which tokio task polled its future last (the one
/// that saw the answer).
struct PolledBy {
    spec: weft_core::ToolSpec,
    waiting: Waiting,
    by: Arc<Mutex<Option<tokio::task::Id>>>,
}

impl Tool for PolledBy {
    fn spec(&self) -> &weft_core::ToolSpec {
        &self.spec
    }
    fn call(&self, _: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let (tx, mut rx) = oneshot::channel();
        self.waiting.lock().expect("lock").push(tx);
        let by = Arc::clone(&self.by);
        Box::pin(std::future::poll_fn(move |cx| {
            *by.lock().expect("lock") = tokio::task::try_id();
            std::pin::Pin::new(&mut rx)
                .poll(cx)
                .map_err(|_| ToolError::fatal("gone", "no answer"))
        }))
    }
}

/// On several threads, whoever waits for the instance drives it while it has no task: the
/// answered call is polled, and its outcome applied, by the waiting task itself, not by a
/// task started for the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_several_threads_the_waiter_polls_the_call_itself() {
    let waiting: Waiting = Arc::default();
    let by = Arc::new(Mutex::new(None));
    let mut reg = registry();
    reg.register(Arc::new(PolledBy {
        spec: spec("t.polled", Effect::Pure),
        waiting: Arc::clone(&waiting),
        by: Arc::clone(&by),
    }));
    let h = harness_with(|o| o.registry = Arc::new(reg));
    let p = one_step(&h, "t.polled");
    for round in 0..20 {
        let i = h.engine.start("t", &p, json!({})).expect("starts");
        let tx = waiting.lock().expect("lock").pop().expect("a call waits");
        let (waits, waits_rx) = std::sync::mpsc::channel();
        // Answered from outside the runtime once the waiter waits.
        let answer = std::thread::spawn(move || {
            waits_rx.recv().expect("the waiter waits");
            tx.send(json!(round)).expect("the call listens");
        });
        let waiter = tokio::spawn(async move {
            let mut w = Box::pin(i.wait());
            assert!(poll_once(&mut w).await.is_pending(), "the call waits");
            waits.send(()).expect("the answer listens");
            (tokio::task::id(), w.await)
        });
        let (me, o) = waiter.await.expect("the waiter ends");
        answer.join().expect("joins");
        assert_eq!(o.status, Status::Completed);
        assert_eq!(common::out(&o, "done"), vec![json!(round)]);
        assert_eq!(
            *by.lock().expect("lock"),
            Some(me),
            "round {round}: the waiter polled the answered call"
        );
    }
    assert_eq!(until_no_task().await, 0);
}

/// Polls `w` once, here.
async fn poll_once<F: Future + Unpin>(w: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(std::pin::Pin::new(&mut *w).poll(cx))).await
}

/// Waits (without driving the instance) until it settles, for up to ten seconds.
async fn settles(i: &weft_runtime::InstanceHandle) -> Option<weft_runtime::Outcome> {
    for _ in 0..2000 {
        if let Some(o) = i.outcome_now() {
            return Some(o);
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    None
}

/// A waiter dropped while it drives the instance (a caller's timeout) hands it to a task:
/// the call's answer still completes the instance.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_while_it_drives_hands_the_instance_to_a_task() {
    let (h, waiting) = harness();
    let p = one_step(&h, "t.answered");
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let mut w = Box::pin(i.wait());
    assert!(poll_once(&mut w).await.is_pending(), "the call waits");
    drop(w);
    answer(&waiting, json!(7));
    let o = settles(&i)
        .await
        .expect("the instance completes without its waiter");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "done"), vec![json!(7)]);
    assert_eq!(until_no_task().await, 0);
}

/// A waiter dropped after a call's first wake came to it, before it took the call up,
/// starts the instance's task: the call is not left unpolled. The call is dispatched by a
/// timer after the waiter has offered to drive (the instance was waiting on the timer).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiter_dropped_after_a_wake_came_to_it_hands_the_instance_to_a_task() {
    let (h, waiting) = harness();
    let p = h.plan(json!({"plan_name": "later", "graph_type": "acyclic",
        "events": {"start": {}, "scheduled": {}, "due": {"kind": "input"},
                   "done": {"kind": "output"}},
        "steps": {
            "schedule": {"on": ["start"], "action": "timer.after",
                         "args": {"ms": 1000, "event": "due"}, "emits": ["scheduled"]},
            "call": {"on": ["scheduled", "due"], "action": "t.answered", "args": {},
                     "emits": ["done"]}}}));
    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let mut w = Box::pin(i.wait());
    assert!(poll_once(&mut w).await.is_pending(), "the timer is pending");
    h.advance(1000).await;
    for _ in 0..2000 {
        if !waiting.lock().expect("lock").is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    answer(&waiting, json!(8));
    // The answer's wake goes to the waiter, which is never polled again.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(i.outcome_now().is_none(), "nobody has polled the call yet");
    drop(w);
    let o = settles(&i)
        .await
        .expect("the instance completes without its waiter");
    assert_eq!(o.status, Status::Completed);
    assert_eq!(common::out(&o, "done"), vec![json!(8)]);
}
