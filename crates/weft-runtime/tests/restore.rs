//! Restoring an instance with what its journal kept beside the marking
//! (`Engine::restore_with` + `journal::replay_with_extras`): pending timers are re-armed
//! under their ids, a step re-dispatched after the restart finds the timer its first
//! dispatch set instead of setting a second one, and the key-value context comes back.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::{Effect, Status, ToolSpec};
use weft_runtime::journal_hook::replay_with_extras;
use weft_runtime::{Engine, EngineOptions, ManualClock, MemoryJournal};
use weft_tools::{BoxFuture, Registry, TimerRequest, Tool, ToolContext, ToolError};

const T0: i64 = 1_700_000_000_000;

/// `t.arm`: writes the context, sets a 60 s timer on `wake`, then hangs (first process)
/// or returns the timer id (after the restart).
struct Arm {
    spec: ToolSpec,
    hang: bool,
}

impl Tool for Arm {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, ctx: ToolContext, _: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let hang = self.hang;
        Box::pin(async move {
            ctx.services.context_put(&ctx, "armed", json!(true))?;
            let due_ms = ctx.services.now_ms() + 60_000;
            let id = ctx.services.set_timer(
                &ctx,
                TimerRequest {
                    event: "wake".into(),
                    data: json!({"w": 1}),
                    due_ms,
                    cron: None,
                    count: None,
                },
            )?;
            if hang {
                std::future::pending::<()>().await;
            }
            Ok(json!({"timer_id": id}))
        })
    }
}

fn engine(clock: &ManualClock, journal: &Arc<MemoryJournal>, hang: bool) -> Engine {
    let mut reg = Registry::new();
    weft_builtins::builtin::register_pure(&mut reg);
    reg.register(Arc::new(Arm {
        spec: ToolSpec {
            name: "t.arm".into(),
            description: String::new(),
            args_schema: json!({}),
            effect: Effect::Write,
            idempotent: true,
            cost: None,
            llm: false,
        },
        hang,
    }));
    Engine::new(EngineOptions {
        registry: Arc::new(reg),
        clock: Arc::new(clock.clone()),
        journal: Some(Arc::clone(journal) as Arc<dyn weft_runtime::Journal>),
        ..EngineOptions::default()
    })
}

fn plan() -> Value {
    json!({"plan_name": "arm", "graph_type": "acyclic",
    "events": {"start": {}, "armed": {}, "wake": {"kind": "input"}, "done": {"kind": "output"}},
    "steps": {
        "arm": {"on": ["start"], "action": "t.arm", "args": {}, "emits": ["armed"]},
        "finish": {"on": ["armed", "wake"], "action": "noop", "args": {}, "emits": ["done"]}
    }})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redispatched_timer_step_finds_its_timer_and_context() {
    // Process 1: the step sets its timer, then hangs (its outcome is never recorded).
    let clock1 = ManualClock::new(T0);
    let j1 = Arc::new(MemoryJournal::new());
    let e1 = engine(&clock1, &j1, true);
    let p1 = e1.compile_value(plan()).expect("plan");
    let h1 = e1
        .start_with("t", &p1, json!({}), Default::default())
        .expect("the plan takes any input");
    for _ in 0..200 {
        if h1.pending_timers() == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(h1.pending_timers(), 1);
    let inputs = j1.inputs(h1.id());
    let (inst, extras) = replay_with_extras(&p1.net, h1.id(), &inputs).expect("replays");
    assert_eq!(inst.in_flight.len(), 1, "arm is in flight");
    assert_eq!(extras.timers.len(), 1);
    assert_eq!(extras.timers[&1].due_ms, T0 + 60_000);
    assert_eq!(extras.set_by.len(), 1);
    assert_eq!(extras.context.get("armed"), Some(&json!(true)));

    // Process 2, 10 s later: `arm` is dispatched again with the same key.
    let clock2 = ManualClock::new(T0 + 10_000);
    let j2 = Arc::new(MemoryJournal::new());
    let e2 = engine(&clock2, &j2, false);
    let p2 = e2.compile_value(plan()).expect("plan");
    let (h2, actions) = e2
        .restore_with("t", &p2, inst, &Default::default(), &extras)
        .expect("restores");
    assert_eq!(actions.len(), 1);
    assert_eq!(h2.context().get("armed"), Some(&json!(true)));
    for _ in 0..200 {
        if h2.state().in_flight.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Still one timer, the first one: due 60 s after the first dispatch, not the second.
    assert_eq!(h2.pending_timers(), 1);
    assert_eq!(e2.pending_timers(), 1);
    let new_sets = j2
        .inputs(h2.id())
        .iter()
        .filter(|i| matches!(i, weft_runtime::Input::TimerSet { .. }))
        .count();
    assert_eq!(new_sets, 0, "no second timer was set");
    clock2.advance(49_999);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(h2.outcome_now().is_none(), "not due yet");
    clock2.advance(1);
    let o = tokio::time::timeout(Duration::from_secs(10), h2.wait())
        .await
        .expect("fires");
    assert_eq!(o.status, Status::Completed, "{o:?}");
    let fired: Vec<(i64, Option<i64>)> = j2
        .inputs(h2.id())
        .iter()
        .filter_map(|i| match i {
            weft_runtime::Input::Timer {
                late_ms,
                next_due_ms,
                ..
            } => Some((*late_ms, *next_due_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(fired, vec![(0, None)]);
    assert_eq!(h2.pending_timers(), 0);
}
