//! What the engine offers tools ([`ToolServices`]): the clock, timers, the instance's
//! key-value context and child instances (`plan.run`). Each instance's [`Cell`] is the
//! services object for its own tool calls, so no lookup by id is needed.
//!
//! Architecture invariant: nothing here takes the instance's loop lock (tools run while the
//! loop holds it); the key-value context and the timer count live outside it. Setting a
//! timer and writing the context are journaled here (`Input::TimerSet`,
//! `Input::ContextPut`), while the tool runs, so they are recorded before the tool's
//! outcome and recovery rebuilds them.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde_json::Value;
use weft_core::Status;
use weft_tools::{
    ApprovalDecision, ApprovalRequest, BoxFuture, ChildPlan, TimerRequest, ToolContext, ToolError,
    ToolServices,
};

use crate::cell::{Cell, lock};
use crate::engine::{Engine, StartOptions};
use crate::journal_hook::{Input, PendingTimer};
use crate::timers::{TimerEntry, TimerKind};

/// Where `plan.run` finds a child plan by name for a tenant
/// ([`crate::EngineOptions::child_plans`]): the durable engine answers from its plan store
/// (tenant-scoped and versioned), so a server's stored plans run as children too. A name
/// it does not know falls back to the plans registered with the engine.
pub trait ChildPlans: Send + Sync {
    /// `tenant`'s plan `name` as a child starting now runs it (the durable engine: the
    /// latest stored version, compiled for the tenant), or `None` when the tenant has no
    /// such plan. `Err` is a message: the plan could not be read or compiled.
    fn resolve<'a>(
        &'a self,
        engine: &'a Engine,
        tenant: &'a str,
        name: &'a str,
    ) -> BoxFuture<'a, Result<Option<Arc<crate::CompiledPlan>>, String>>;

    /// A child instance was started (whatever plan it runs): the durable engine follows it
    /// so its instance record's status is written as it settles, as for instances started
    /// from outside. The default does nothing.
    fn started(&self, _child: &crate::InstanceHandle) {}
}

impl ToolServices for Cell {
    fn now_ms(&self) -> i64 {
        self.engine.clock.now_ms()
    }

    fn set_timer(&self, ctx: &ToolContext, timer: TimerRequest) -> Result<String, ToolError> {
        let Some(event) = self.event_id(&timer.event) else {
            return Err(ToolError::fatal(
                "unknown_event",
                format!("plan `{}` has no event `{}`", self.plan().name, timer.event),
            ));
        };
        let Some(cell) = self.me.upgrade() else {
            return Err(ToolError::fatal("instance_ended", "the instance has ended"));
        };
        // A step re-dispatched after a restart finds the timer its first dispatch set.
        let known = lock(&self.timer_keys).get(&*ctx.idempotency_key).copied();
        if let Some(id) = known {
            return Ok(format!("t{id}"));
        }
        let id = self.engine.timers.next_id();
        // Journaled before it is armed and before the tool returns, so the timer is durable
        // before the step's outcome is and recovery re-arms it.
        if let Some(j) = &self.engine.journal {
            j.record(
                &self.tenant,
                &self.name,
                &Input::TimerSet {
                    id,
                    event,
                    payload: timer.data.clone(),
                    due_ms: timer.due_ms,
                    cron: timer.cron.clone(),
                    remaining: timer.count,
                    key: ctx.idempotency_key.to_string(),
                    now: self.engine.clock.now_ms(),
                },
            );
        }
        cell.arm(
            id,
            timer.due_ms,
            PendingTimer {
                event,
                payload: timer.data,
                due_ms: timer.due_ms,
                cron: timer.cron,
                remaining: timer.count,
            },
        )
        .map_err(|e| ToolError::fatal("timer_unavailable", e))?;
        Ok(format!("t{id}"))
    }

    fn context_get(&self, _ctx: &ToolContext, key: &str) -> Option<Value> {
        lock(&self.kv).as_ref().and_then(|m| m.get(key).cloned())
    }

    fn context_put(&self, _ctx: &ToolContext, key: &str, value: Value) -> Result<(), ToolError> {
        // Journaled first, like every change, so the fold rebuilds the context.
        if let Some(j) = &self.engine.journal {
            j.record(
                &self.tenant,
                &self.name,
                &Input::ContextPut {
                    key: key.to_string(),
                    value: value.clone(),
                    now: self.engine.clock.now_ms(),
                },
            );
        }
        lock(&self.kv)
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value);
        Ok(())
    }

    fn record_decision(&self, ctx: &ToolContext, decision: weft_tools::PolicyDecision) {
        self.publish("policy.decided", || {
            serde_json::json!({"step": &*ctx.step, "attempt": ctx.attempt,
                "decision": decision.decision, "reasons": decision.reasons})
        });
        if let Some(j) = &self.engine.journal {
            j.record(
                &self.tenant,
                &self.name,
                &Input::PolicyDecided {
                    key: ctx.idempotency_key.to_string(),
                    attempt: ctx.attempt,
                    decision,
                    now: self.engine.clock.now_ms(),
                },
            );
        }
    }

    fn record_usage(&self, ctx: &ToolContext, used: weft_tools::Usage) {
        self.add_usage(ctx, used);
    }

    fn charge(&self, ctx: &ToolContext, charge: weft_tools::Usage) -> Result<(), ToolError> {
        self.charge_call(ctx, charge)
    }

    fn wait_budget(
        &self,
        _ctx: &ToolContext,
        refusal: &ToolError,
    ) -> Option<weft_tools::BoxFuture<'static, Result<(), ToolError>>> {
        self.budget_wait(refusal)
    }

    fn await_approval(
        &self,
        ctx: &ToolContext,
        request: ApprovalRequest,
    ) -> BoxFuture<'static, Result<ApprovalDecision, ToolError>> {
        self.approval_wait(ctx, request)
    }

    fn run_child(
        &self,
        _ctx: &ToolContext,
        plan: ChildPlan,
        input: Value,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        let engine = Engine::from_shared(Arc::clone(&self.engine));
        let tenant = Arc::clone(&self.tenant);
        let depth = self.depth.load(std::sync::atomic::Ordering::Relaxed) + 1;
        let max = self.engine.limits.max_child_depth;
        let source = self.engine.child_plans.clone();
        Box::pin(async move {
            if depth as usize > max {
                return Err(ToolError::fatal(
                    "child_depth",
                    format!(
                        "child plans nest {depth} deep, over the limit of {max} (limits.max_child_depth); does a plan run itself through `plan.run`?"
                    ),
                ));
            }
            // Never start the child inside the parent's turn: a chain of children would
            // otherwise nest their loops on one thread's stack. Yielding once makes the
            // parent's dispatch park this call and run it from its own task.
            tokio::task::yield_now().await;
            let compiled = match plan {
                ChildPlan::Named { name, .. } => {
                    let stored = match &source {
                        Some(source) => source
                            .resolve(&engine, &tenant, &name)
                            .await
                            .map_err(|e| ToolError::fatal("invalid_plan", e))?,
                        None => None,
                    };
                    match stored.or_else(|| engine.plan(&name)) {
                        Some(p) => p,
                        None => {
                            return Err(ToolError::fatal(
                                "unknown_plan",
                                format!(
                                    "no plan named `{name}` is stored for tenant `{tenant}` or registered; store it first (POST /v1/plans)"
                                ),
                            ));
                        }
                    }
                }
                ChildPlan::Inline(doc) => engine
                    .compile_value(doc)
                    .map_err(|e| ToolError::fatal("invalid_plan", e.to_string()))?,
            };
            let h = engine
                .start_with(
                    &tenant,
                    &compiled,
                    input,
                    StartOptions {
                        depth,
                        ..StartOptions::default()
                    },
                )
                .map_err(|e| ToolError::fatal(e.code(), e.to_string()))?;
            if let Some(source) = &source {
                source.started(&h);
            }
            let o = h.wait().await;
            drop(h);
            match o.status {
                Status::Completed => Ok(o.into_results_json()),
                Status::Waiting => Err(ToolError::fatal(
                    "child_waiting",
                    format!(
                        "child instance {} of `{}` waits for input events {}: `plan.run` needs a child that completes by itself",
                        o.instance,
                        compiled.name,
                        o.awaits
                            .as_ref()
                            .map(|a| a.events.join(", "))
                            .unwrap_or_default()
                    ),
                )),
                Status::Stuck => Err(ToolError::fatal(
                    "child_stuck",
                    format!(
                        "child instance {} of `{}` is stuck: {}",
                        o.instance,
                        compiled.name,
                        serde_json::to_string(&o.waiting).unwrap_or_default()
                    ),
                )),
                other => Err(ToolError::fatal(
                    "child_failed",
                    format!(
                        "child instance {} of `{}` ended {}{}",
                        o.instance,
                        compiled.name,
                        other.name(),
                        match &other {
                            Status::Failed { reason } | Status::Paused { reason } =>
                                format!(": {reason}"),
                            _ => String::new(),
                        }
                    ),
                )),
            }
        })
    }
}

impl Cell {
    /// Schedules timer `id` of this instance on the engine's timer service (a due time in
    /// the past fires at once, late).
    pub(crate) fn arm(
        self: &Arc<Self>,
        id: u64,
        due_ms: i64,
        t: PendingTimer,
    ) -> Result<(), String> {
        self.timers.fetch_add(1, Ordering::AcqRel);
        lock(&self.timer_due).insert(id, due_ms);
        let entry = TimerEntry {
            id,
            cell: Arc::downgrade(self),
            kind: TimerKind::Event {
                event: t.event,
                data: t.payload,
                cron: t.cron,
                remaining: t.remaining,
            },
        };
        if let Err(e) = self.engine.timers.add(&self.engine, due_ms, entry) {
            lock(&self.timer_due).remove(&id);
            self.timers.fetch_sub(1, Ordering::AcqRel);
            return Err(e);
        }
        Ok(())
    }

    /// Is the instance still able to take input?
    pub(crate) fn is_live(self: &Arc<Self>) -> bool {
        match self.core.try_lock() {
            Ok(g) => {
                let live = g.inst.as_ref().is_some_and(|i| !i.status.is_terminal());
                // Inputs that arrived while this held the lock are applied, not stranded.
                self.release(g);
                live
            }
            Err(_) => true,
        }
    }

    /// Idle-expiry check (from the timer service).
    pub(crate) fn check_idle(self: &Arc<Self>, now: i64) {
        let Some(expiry) = self.engine.idle_expiry_ms else {
            return;
        };
        let last = self.with_core(|g| match &g.inst {
            Some(i) if !i.status.is_terminal() => Some(g.last_activity),
            _ => None,
        });
        let Some(last) = last else {
            return;
        };
        let due = last.saturating_add(expiry as i64);
        if due <= now {
            self.submit(Input::Stop {
                reason: format!("idle for {expiry} ms (idle expiry)"),
            });
        } else {
            self.engine.schedule_expiry(self, due);
        }
    }
}
