//! The repair loop: when a step fails with `on_fail: repair` (or, opted in, when an acyclic
//! instance gets stuck) and a [`Repairer`] is installed, the engine asks it for a revised
//! plan off the instance's loop, validates and compiles it, checks that the instance's
//! tokens and in-flight firings map onto it by name (`weft_core::Instance::rebase`), and
//! swaps it in through one journaled [`Input::Repair`], so replay and recovery reproduce
//! it. Any failure (the repairer's, an invalid plan, a token that would be lost, attempts
//! exhausted) becomes one journaled [`Input::RepairFailed`]: the instance fails with the
//! reason. Without a repairer, `on_fail: repair` only pauses the instance (a resume tries
//! the step again).
//!
//! The engine never depends on a model: the LLM implementation (`weft_llm::LlmRepairer`)
//! lives in weft-llm; tests install scripted ones.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::Value;
use weft_core::instance::Waiting;
use weft_core::{Instance, Net, Plan, Status};
use weft_tools::BoxFuture;

use crate::Error;
use crate::cell::{Cell, Core, lock};
use crate::engine::{Engine, InstanceHandle};
use crate::journal_hook::{Input, Repair};
use crate::plans::CompiledPlan;

/// Journal records handed to a repairer as context.
pub(crate) const EXCERPT_RECORDS: usize = 20;

/// What a repairer is told.
#[derive(Debug, Clone)]
pub struct RepairContext {
    /// Tenant.
    pub tenant: String,
    /// Instance id.
    pub instance: String,
    /// The plan the instance runs.
    pub plan: Arc<Plan>,
    /// What went wrong, e.g. ``step `send` failed: [http_status] 503``.
    pub failure: String,
    /// The current marking: event name → token payloads (oldest first).
    pub marking: BTreeMap<String, Vec<Value>>,
    /// The last journal records (or the trace), as text.
    pub journal_excerpt: String,
    /// 1 for the instance's first repair.
    pub attempt: u32,
}

/// Why a repairer could not make a revised plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairError {
    /// Stable code (`R001` for a token that would be lost, `llm_…`, `planning_failed`, …).
    pub code: String,
    /// What went wrong.
    pub message: String,
}

impl RepairError {
    /// An error with a code.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        RepairError {
            code: code.into(),
            message: message.into(),
        }
    }
}

impl std::fmt::Display for RepairError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "[{}] {}", self.code, self.message)
    }
}

/// Makes revised plans for failed or stuck instances.
pub trait Repairer: Send + Sync {
    /// A revised plan for the instance described by `ctx`. The engine validates it, maps
    /// the marking onto it and swaps it in; the repairer need not do any of that (but may
    /// check it first, as the LLM repairer's critic loop does).
    fn repair(&self, ctx: RepairContext) -> BoxFuture<'static, Result<Plan, RepairError>>;
}

/// The failure text for a stuck instance: what each waiting step lacks.
pub(crate) fn stuck_failure(waiting: &[Waiting]) -> String {
    if waiting.is_empty() {
        return "the instance is stuck: nothing can fire and no output event holds a token"
            .to_string();
    }
    let parts: Vec<String> = waiting
        .iter()
        .map(|w| {
            if let Some(e) = &w.guard_error {
                format!(
                    "step `{}` has all its inputs but its guard fails to evaluate: {e}",
                    w.step
                )
            } else if w.guard_blocked {
                format!(
                    "step `{}` has all its inputs but no combination satisfies its guard",
                    w.step
                )
            } else {
                format!("step `{}` lacks {}", w.step, w.lacks.join(", "))
            }
        })
        .collect();
    format!("the instance is stuck: {}", parts.join("; "))
}

/// The marking as event name → payloads (a broadcast token counted once).
pub(crate) fn marking_of(inst: &Instance, net: &Net) -> BTreeMap<String, Vec<Value>> {
    let mut out = BTreeMap::new();
    for (e, ev) in net.events.iter().enumerate() {
        let mut toks: Vec<&weft_core::Token> = net.event_slots[e]
            .iter()
            .flat_map(|&sl| inst.marking.slots[sl as usize].tokens.iter())
            .collect();
        if toks.is_empty() {
            continue;
        }
        toks.sort_by_key(|t| t.id);
        toks.dedup_by_key(|t| t.id);
        out.insert(
            ev.name.clone(),
            toks.iter().map(|t| (*t.payload).clone()).collect(),
        );
    }
    out
}

fn counts(inst: &Instance, net: &Net) -> BTreeMap<String, usize> {
    marking_of(inst, net)
        .into_iter()
        .map(|(e, t)| (e, t.len()))
        .collect()
}

impl Cell {
    /// Asks the repairer for a revised plan (no-op without one: the instance stays paused).
    pub(crate) fn request_repair(self: &Arc<Self>, core: &mut Core, failure: String) {
        let Some(repairer) = self.engine.repairer.clone() else {
            return;
        };
        if core.repairing {
            return;
        }
        let Some(inst) = core.inst.as_ref() else {
            return;
        };
        if inst.status.is_terminal() {
            return;
        }
        let max = self.engine.max_repairs;
        if core.repairs >= max {
            let reason = format!(
                "[repair_attempts] {failure}; no repair attempt left ({max} of {max} used)"
            );
            self.apply(core, Input::RepairFailed { reason }, &mut VecDeque::new());
            return;
        }
        let Some(rt) = self.engine.runtime() else {
            let reason =
                format!("[repair_unavailable] {failure}; no tokio runtime to run the repair on");
            self.apply(core, Input::RepairFailed { reason }, &mut VecDeque::new());
            return;
        };
        core.repairs += 1;
        core.repairing = true;
        let fallback = match &core.trace {
            Some(t) => t
                .iter()
                .rev()
                .take(EXCERPT_RECORDS)
                .rev()
                .map(|e| {
                    format!(
                        "firing {} step `{}` outcome {:?}",
                        e.firing, e.step, e.outcome
                    )
                })
                .collect::<Vec<_>>()
                .join("\n"),
            None => "(no journal configured)".to_string(),
        };
        let ctx = RepairContext {
            tenant: self.tenant.to_string(),
            instance: self.name.to_string(),
            plan: Arc::clone(&core.plan.plan),
            failure: failure.clone(),
            marking: marking_of(inst, &core.plan.net),
            journal_excerpt: fallback,
            attempt: core.repairs,
        };
        self.publish(
            "plan.repair.started",
            || serde_json::json!({"failure": &failure, "attempt": ctx.attempt}),
        );
        let journal = self.engine.journal.clone();
        let cell = Arc::clone(self);
        rt.spawn(async move {
            let mut ctx = ctx;
            if let Some(j) = journal
                && let Some(e) = j.excerpt(&ctx.tenant, &ctx.instance, EXCERPT_RECORDS).await
            {
                ctx.journal_excerpt = e;
            }
            let result = repairer.repair(ctx).await;
            cell.finish_repair(result, failure);
        });
    }

    /// Validates the revised plan, checks the mapping and applies the repair (or its
    /// failure) through the loop.
    fn finish_repair(self: &Arc<Self>, result: Result<Plan, RepairError>, failure: String) {
        let compiled = match result {
            Err(e) => Err(format!("repair failed: {e} (after: {failure})")),
            Ok(plan) => Engine::from_shared(Arc::clone(&self.engine))
                .compile_for(&self.tenant, plan)
                .map_err(|e| {
                    format!(
                        "repair failed: [{}] the revised plan is invalid: {e} (after: {failure})",
                        e.code()
                    )
                }),
        };
        let mut g = lock(&self.core);
        let input = match compiled {
            Err(reason) => Input::RepairFailed { reason },
            Ok(c) => self.repair_input(&mut g, c, failure),
        };
        if let Some(input) = input_if_live(&g, input) {
            self.run(&mut g, input);
        }
        self.release(g);
    }

    /// The journaled input that swaps `plan` in, after a trial mapping; a
    /// `RepairFailed` when the mapping would lose tokens or in-flight firings.
    fn repair_input(
        self: &Arc<Self>,
        core: &mut Core,
        plan: Arc<CompiledPlan>,
        failure: String,
    ) -> Input {
        let old = Arc::clone(&core.plan);
        let Some(mut trial) = core.inst.clone() else {
            return Input::RepairFailed {
                reason: "repair failed: the instance has not started".into(),
            };
        };
        if let Err(lost) = trial.rebase(&old.net, &plan.net) {
            return Input::RepairFailed {
                reason: format!("repair failed: {lost} (after: {failure})"),
            };
        }
        let document = serde_json::to_value(&*plan.plan).unwrap_or(Value::Null);
        let r = Repair {
            hash: Repair::hash_of(&document),
            document: Arc::new(document),
            version: core.repairs,
            marking: counts(&trial, &plan.net),
            reason: failure,
            now: self.engine.clock.now_ms(),
            net: Arc::clone(&plan.net),
        };
        core.next_plan = Some(plan);
        Input::Repair(Box::new(r))
    }

    /// Applies a journaled repair: swaps the plan, moves the marking, re-routes.
    pub(crate) fn apply_repair(
        self: &Arc<Self>,
        core: &mut Core,
        old: &Arc<CompiledPlan>,
        r: &Repair,
    ) {
        core.repairing = false;
        let plan = match core.next_plan.take() {
            Some(p) if Arc::ptr_eq(&p.net, &r.net) => p,
            _ => {
                if let Some(i) = core.inst.as_mut() {
                    i.fail_with("[repair_internal] a repair arrived without its compiled plan");
                }
                return;
            }
        };
        core.reason = None;
        let registered = core.registered;
        if registered {
            self.engine.unregister(self, &core.plan);
        }
        self.set_plan(core, plan);
        if registered {
            self.engine.register_cell(self, &core.plan);
        }
        if let Some(i) = core.inst.as_mut()
            && let Err(lost) = i.rebase(&old.net, &r.net)
        {
            i.fail_with(lost.to_string());
        }
        self.publish(
            "plan.repaired",
            || serde_json::json!({"version": r.version, "hash": &r.hash, "marking": &r.marking}),
        );
    }
}

impl InstanceHandle {
    /// Repairs this instance has already used (recovery restores the count from the
    /// journal, so the cap holds across restarts).
    pub fn set_repairs_used(&self, n: u32) {
        let mut g = lock(&self.cell.core);
        g.repairs = g.repairs.max(n);
    }

    /// Repairs asked for so far.
    pub fn repairs_used(&self) -> u32 {
        lock(&self.cell.core).repairs
    }
}

/// `input`, unless the instance ended while the repair was being made.
fn input_if_live(core: &Core, input: Input) -> Option<Input> {
    let inst = core.inst.as_ref()?;
    (!inst.status.is_terminal()).then_some(input)
}

impl Engine {
    /// Asks the installed repairer to repair a live instance that is paused, stuck or
    /// running (`weft repair`). `failure` describes what is wrong (default: the paused
    /// reason or the stuck diagnosis). The repair runs in the background; wait on the
    /// handle for its outcome. Counts against the instance's repair attempts.
    pub fn repair(&self, instance: &str, failure: Option<String>) -> Result<InstanceHandle, Error> {
        if self.shared().repairer.is_none() {
            return Err(Error::NoRepairer);
        }
        let cell = self
            .handle(instance)
            .ok_or_else(|| Error::UnknownInstance(instance.to_string()))?
            .cell;
        {
            let mut g = lock(&cell.core);
            let plan = Arc::clone(&g.plan);
            let Some(inst) = g.inst.as_mut() else {
                return Err(Error::UnknownInstance(instance.to_string()));
            };
            let timer_pending = cell.timers.load(std::sync::atomic::Ordering::Acquire) > 0;
            let status = inst.settle_with(&plan.net, timer_pending).clone();
            let failure = match (failure, &status) {
                (Some(f), _) => f,
                (None, Status::Paused { reason }) => reason.clone(),
                (None, Status::Stuck) => stuck_failure(&inst.waiting(&plan.net)),
                (None, Status::Running | Status::Waiting) => "repair requested by hand".to_string(),
                (None, s) => {
                    return Err(Error::NotRepairable {
                        instance: instance.to_string(),
                        status: s.name(),
                    });
                }
            };
            if status.is_terminal() {
                return Err(Error::NotRepairable {
                    instance: instance.to_string(),
                    status: status.name(),
                });
            }
            g.reported = None;
            cell.request_repair(&mut g, failure);
            cell.after(&mut g);
            cell.release(g);
        }
        Ok(InstanceHandle { cell })
    }
}
