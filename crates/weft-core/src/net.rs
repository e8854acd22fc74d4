//! The compiled net: a validated plan turned into indexed places and transitions with every
//! expression compiled, ready for the firing rule and the runtime.
//!
//! Plans name things with strings; the hot paths (binding search, firing, routing) use the
//! dense ids here instead. A [`Net`] only exists for a plan that validated without errors.

use std::collections::HashMap;
use std::sync::Arc;

use serde_json::Value;

use crate::expr::{Expr, Template};
use crate::plan::{Consume, EventKind, GraphType, Plan, Retry};
use crate::schema::{Mismatch, Schema};

/// Index of an event (place) in [`Net::events`].
pub type EventId = u32;
/// Index of a step (transition) in [`Net::steps`].
pub type StepId = u32;

/// A compiled event.
#[derive(Debug, Clone)]
pub struct EventNode {
    /// Event name.
    pub name: String,
    /// Effective kind: declared, or `output` when consumed by no step (and the plan declares
    /// no output), `input` for initial events, `internal` otherwise.
    pub kind: EventKind,
    /// Broadcast or exclusive.
    pub consume: Consume,
    /// Steps that list this event in `on`, in plan order.
    pub consumers: Vec<StepId>,
    /// Steps that may emit this event.
    pub producers: Vec<StepId>,
    /// Whether an output event: declared `kind: output`, or, when the plan declares none,
    /// consumed by nobody. An acyclic instance completes only with a token on one.
    pub is_output: bool,
    /// Declared `kind: input`: tokens may arrive from outside while the instance lives, so
    /// an instance that needs one is `waiting`, not `stuck` (an initial event that is not
    /// declared receives the instance's input only).
    pub external: bool,
    /// The payload's declared JSON Schema, compiled: every token put on the event matches it
    /// (the instance's input and events from outside are refused before they are queued, a
    /// step's emit that does not match fails the step).
    pub schema: Option<Arc<Schema>>,
}

/// What a step does when its action fails for good.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailPolicy {
    /// Fail the instance.
    Abort,
    /// Drop the failure.
    Continue,
    /// Pause and ask for a repaired plan.
    Repair,
    /// Put an error token on this event.
    Emit(EventId),
}

/// A compiled emit.
#[derive(Debug, Clone)]
pub struct EmitNode {
    /// Target event.
    pub event: EventId,
    /// Condition, if any.
    pub when: Option<Expr>,
    /// Payload template; `None` means the action's result.
    pub data: Option<Template>,
}

/// A compiled step.
#[derive(Debug, Clone)]
pub struct StepNode {
    /// Step name.
    pub name: String,
    /// Input events, in `on` order.
    pub inputs: Vec<EventId>,
    /// Tool name.
    pub action: String,
    /// Args template.
    pub args: Template,
    /// Outputs.
    pub emits: Vec<EmitNode>,
    /// Guard, if any.
    pub guard: Option<Expr>,
    /// Whether join inputs must share a correlation.
    pub correlate: bool,
    /// Retry policy.
    pub retry: Option<Retry>,
    /// Per-attempt deadline.
    pub timeout_ms: Option<u64>,
    /// Failure policy.
    pub on_fail: FailPolicy,
    /// The `<step>.failed` event, when the plan declares one.
    pub failed_event: Option<EventId>,
    /// The `<step>.denied` event, when the plan declares one: where a denial (a policy's
    /// `policy_denied`, a person's `approval_denied`) goes before `<step>.failed`.
    pub denied_event: Option<EventId>,
}

/// The error codes of denials, which a `<step>.denied` listener takes.
pub const DENIAL_CODES: [&str; 2] = ["policy_denied", "approval_denied"];

/// Index of a token slot: where the tokens of one event wait for one consumer.
///
/// A broadcast event with several consumers has one slot per consumer (each consumer gets
/// its own copy of every token); an exclusive event, or one with at most one consumer, has a
/// single shared slot.
pub type SlotId = u32;

/// A slot of the marking.
#[derive(Debug, Clone)]
pub struct SlotInfo {
    /// The event whose tokens wait here.
    pub event: EventId,
    /// The only consumer, for a per-consumer broadcast copy.
    pub consumer: Option<StepId>,
    /// Steps that take tokens from this slot.
    pub consumers: Vec<StepId>,
    /// Payload paths this slot is indexed on, for equality guards (channel passing).
    pub index_paths: Vec<Vec<String>>,
}

/// An equality conjunct of a guard between two inputs: `inputs[a].path_a == inputs[b].path_b`.
/// Binding search uses it to look the partner token up in an index instead of scanning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EqConstraint {
    /// Position of the first input in `on`.
    pub a: usize,
    /// Field path into the first input's payload.
    pub path_a: Vec<String>,
    /// Position of the second input in `on` (`b > a`).
    pub b: usize,
    /// Field path into the second input's payload.
    pub path_b: Vec<String>,
}

/// A compiled plan.
#[derive(Debug, Clone)]
pub struct Net {
    /// Plan name.
    pub plan_name: String,
    /// Acyclic or reactive.
    pub graph_type: GraphType,
    /// Places.
    pub events: Vec<EventNode>,
    /// Transitions.
    pub steps: Vec<StepNode>,
    /// Events that receive the instance input.
    pub initial: Vec<EventId>,
    /// The slots of the marking.
    pub slots: Vec<SlotInfo>,
    /// For each step, the slot of each input (parallel to `inputs`).
    pub input_slots: Vec<Vec<SlotId>>,
    /// For each event, the slots a new token is put on.
    pub event_slots: Vec<Vec<SlotId>>,
    /// For each step, the equality conjuncts of its guard.
    pub eq_constraints: Vec<Vec<EqConstraint>>,
    event_ids: HashMap<String, EventId>,
    step_ids: HashMap<String, StepId>,
    /// Per step: whether its args template calls `fresh()`.
    args_fresh: Vec<bool>,
    /// Per step: its args when they are a literal, shared by every firing (no copy per
    /// firing; see [`crate::instance::Args`]).
    literal_args: Vec<Option<Arc<Value>>>,
    /// Per step: whether anything reads the consumed tokens after the action ran
    /// (conditional or shaped emits, an error-token target, a retry policy).
    keeps_inputs: Vec<bool>,
    /// Per step: whether every emit is plain (no `when`, no `data`): a result goes to all
    /// of them as it is.
    plain_emits: Vec<bool>,
    /// The most steps one token can enable at once (its event's consumers), at least 1.
    width: usize,
}

impl Net {
    /// The most steps one new token can enable at once (the consumers of its event), at
    /// least 1 and at most 64: the size the per-instance queues of enabled steps, firings
    /// in flight and ready outcomes are given when they first allocate, so a fan-out does
    /// not grow them step by step.
    pub fn width(&self) -> usize {
        self.width
    }

    /// Looks an event up by name.
    pub fn event_id(&self, name: &str) -> Option<EventId> {
        self.event_ids.get(name).copied()
    }

    /// Looks a step up by name.
    pub fn step_id(&self, name: &str) -> Option<StepId> {
        self.step_ids.get(name).copied()
    }

    /// The event with this id.
    pub fn event(&self, id: EventId) -> &EventNode {
        &self.events[id as usize]
    }

    /// The step with this id.
    pub fn step(&self, id: StepId) -> &StepNode {
        &self.steps[id as usize]
    }

    /// The step's args when they are a literal (shared by every firing).
    pub fn literal_args(&self, step: StepId) -> Option<&Arc<Value>> {
        self.literal_args.get(step as usize)?.as_ref()
    }

    /// Does the step's args template call `fresh()`? (Firing skips building the channel id
    /// otherwise.)
    pub fn args_use_fresh(&self, step: StepId) -> bool {
        self.args_fresh.get(step as usize).copied().unwrap_or(true)
    }

    /// Does completing a firing of `step` read its consumed tokens (beyond their
    /// correlation)? True when an emit has `when` or `data` or goes on an event with a
    /// schema, when a failure can become an error token (a `<step>.failed` listener or
    /// `on_fail: {emit: …}`), when a failure hands the tokens back for a repair (`on_fail:
    /// repair`), or when the step retries. When false, the runtime may hand the tokens to
    /// the action ([`crate::Instance::detach_inputs`]).
    pub fn keeps_inputs(&self, step: StepId) -> bool {
        self.keeps_inputs
            .get(step as usize)
            .copied()
            .unwrap_or(true)
    }

    /// Checks a payload for `event` against the event's schema (none: anything matches).
    pub fn check_payload(&self, event: EventId, payload: &Value) -> Result<(), Mismatch> {
        match self
            .events
            .get(event as usize)
            .and_then(|e| e.schema.as_ref())
        {
            Some(schema) => schema.check(payload),
            None => Ok(()),
        }
    }

    /// Checks an instance's input against the schema of each event it is put on
    /// ([`Net::initial`]); the first that it does not match, with the reason.
    pub fn check_input(&self, input: &Value) -> Result<(), (EventId, Mismatch)> {
        for &e in &self.initial {
            self.check_payload(e, input).map_err(|m| (e, m))?;
        }
        Ok(())
    }

    /// Are all of the step's emits plain (no `when`, no `data`, no schema on the event), so
    /// a result is put on each as it is?
    pub fn plain_emits(&self, step: StepId) -> bool {
        self.plain_emits
            .get(step as usize)
            .copied()
            .unwrap_or(false)
    }

    /// Builds the net. Callers must only pass plans that validated without errors; names that
    /// do not resolve are skipped rather than panicking. `schemas` holds each event's
    /// compiled payload schema, in the plan's order of events.
    pub(crate) fn build(
        plan: &Plan,
        steps: Vec<StepNode>,
        mut schemas: Vec<Option<Arc<Schema>>>,
    ) -> Net {
        schemas.resize(plan.events.len(), None);
        let event_ids: HashMap<String, EventId> = plan
            .events
            .keys()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as EventId))
            .collect();
        let step_ids: HashMap<String, StepId> = plan
            .steps
            .keys()
            .enumerate()
            .map(|(i, n)| (n.clone(), i as StepId))
            .collect();
        let mut events: Vec<EventNode> = plan
            .events
            .iter()
            .zip(schemas)
            .map(|((name, def), schema)| EventNode {
                name: name.clone(),
                kind: def.kind.unwrap_or(EventKind::Internal),
                consume: def.consume,
                consumers: Vec::new(),
                producers: Vec::new(),
                is_output: def.kind == Some(EventKind::Output),
                external: def.kind == Some(EventKind::Input),
                schema,
            })
            .collect();
        for (sid, s) in steps.iter().enumerate() {
            for &e in &s.inputs {
                events[e as usize].consumers.push(sid as StepId);
            }
            for em in &s.emits {
                let p = &mut events[em.event as usize].producers;
                if !p.contains(&(sid as StepId)) {
                    p.push(sid as StepId);
                }
            }
            if let FailPolicy::Emit(e) = s.on_fail {
                events[e as usize].producers.push(sid as StepId);
            }
            if let Some(e) = s.failed_event {
                events[e as usize].producers.push(sid as StepId);
            }
            if let Some(e) = s.denied_event {
                events[e as usize].producers.push(sid as StepId);
            }
        }
        let initial: Vec<EventId> = plan
            .initial_events()
            .iter()
            .filter_map(|n| event_ids.get(*n).copied())
            .collect();
        // Outputs: the declared ones when the plan declares any, else every event no step
        // consumes (an undeclared dead end must not complete a plan that names its results).
        let declares_outputs = events.iter().any(|e| e.is_output);
        for e in &mut events {
            if e.consumers.is_empty() && !declares_outputs {
                e.is_output = true;
                if plan.events.get(&e.name).and_then(|d| d.kind).is_none() {
                    e.kind = EventKind::Output;
                }
            }
        }
        for &i in &initial {
            let e = &mut events[i as usize];
            if plan.events.get(&e.name).and_then(|d| d.kind).is_none() {
                e.kind = EventKind::Input;
            }
        }
        let (slots, input_slots, event_slots, eq_constraints) = layout(&events, &steps);
        let args_fresh = steps
            .iter()
            .map(|s| {
                let mut f = false;
                s.args.for_each_expr(&mut |e| f |= e.uses_fresh());
                f
            })
            .collect();
        let literal_args = steps
            .iter()
            .map(|s| match &s.args {
                Template::Literal(v) => Some(Arc::new(v.clone())),
                _ => None,
            })
            .collect();
        // A checked emit may fail the step, so it is never plain (a plain step's result goes
        // on its events unlooked at, and it may be taken).
        let checked = |e: &EmitNode| events[e.event as usize].schema.is_some();
        let plain_emits = steps
            .iter()
            .map(|s| {
                s.emits
                    .iter()
                    .all(|e| e.when.is_none() && e.data.is_none() && !checked(e))
            })
            .collect();
        let keeps_inputs = steps
            .iter()
            .map(|s| {
                s.retry.is_some()
                    || matches!(s.on_fail, FailPolicy::Emit(_) | FailPolicy::Repair)
                    || [s.failed_event, s.denied_event]
                        .into_iter()
                        .flatten()
                        .any(|e| !events[e as usize].consumers.is_empty())
                    || s.emits
                        .iter()
                        .any(|e| e.when.is_some() || e.data.is_some() || checked(e))
            })
            .collect();
        let width = events
            .iter()
            .map(|e| e.consumers.len())
            .max()
            .unwrap_or(1)
            .clamp(1, 64);
        Net {
            width,
            args_fresh,
            literal_args,
            keeps_inputs,
            plain_emits,
            slots,
            input_slots,
            event_slots,
            eq_constraints,
            plan_name: plan.plan_name.clone(),
            graph_type: plan.graph_type,
            events,
            steps,
            initial,
            event_ids,
            step_ids,
        }
    }
}

type Layout = (
    Vec<SlotInfo>,
    Vec<Vec<SlotId>>,
    Vec<Vec<SlotId>>,
    Vec<Vec<EqConstraint>>,
);

/// Lays the marking out in slots and extracts equality constraints for indexing.
fn layout(events: &[EventNode], steps: &[StepNode]) -> Layout {
    let mut slots: Vec<SlotInfo> = Vec::new();
    let mut event_slots: Vec<Vec<SlotId>> = Vec::with_capacity(events.len());
    // (event, consumer) -> slot, for per-consumer copies; event -> slot for shared ones.
    let mut per_consumer: HashMap<(EventId, StepId), SlotId> = HashMap::new();
    let mut shared: HashMap<EventId, SlotId> = HashMap::new();
    for (eid, e) in events.iter().enumerate() {
        let eid = eid as EventId;
        let mut mine = Vec::new();
        if e.consume == Consume::Exclusive || e.consumers.len() <= 1 {
            let id = slots.len() as SlotId;
            slots.push(SlotInfo {
                event: eid,
                consumer: None,
                consumers: e.consumers.clone(),
                index_paths: Vec::new(),
            });
            shared.insert(eid, id);
            mine.push(id);
        } else {
            for &c in &e.consumers {
                let id = slots.len() as SlotId;
                slots.push(SlotInfo {
                    event: eid,
                    consumer: Some(c),
                    consumers: vec![c],
                    index_paths: Vec::new(),
                });
                per_consumer.insert((eid, c), id);
                mine.push(id);
            }
        }
        event_slots.push(mine);
    }
    let mut input_slots = Vec::with_capacity(steps.len());
    let mut eq_constraints = Vec::with_capacity(steps.len());
    for (sid, s) in steps.iter().enumerate() {
        let sid = sid as StepId;
        let ins: Vec<SlotId> = s
            .inputs
            .iter()
            .map(|&e| {
                per_consumer
                    .get(&(e, sid))
                    .or_else(|| shared.get(&e))
                    .copied()
                    .unwrap_or(0)
            })
            .collect();
        let names: Vec<&str> = s
            .inputs
            .iter()
            .map(|&e| events[e as usize].name.as_str())
            .collect();
        let eqs = match &s.guard {
            Some(g) if s.inputs.len() > 1 => equality_constraints(g, &names),
            _ => Vec::new(),
        };
        for c in &eqs {
            let slot = &mut slots[ins[c.b] as usize];
            if !slot.index_paths.contains(&c.path_b) {
                slot.index_paths.push(c.path_b.clone());
            }
        }
        input_slots.push(ins);
        eq_constraints.push(eqs);
    }
    (slots, input_slots, event_slots, eq_constraints)
}

/// Finds the `x.f == y.g` conjuncts of a guard where `x` and `y` are two different inputs.
fn equality_constraints(guard: &Expr, names: &[&str]) -> Vec<EqConstraint> {
    use cel::common::ast::Expr as E;
    fn conjuncts<'a>(e: &'a E, out: &mut Vec<&'a E>) {
        if let E::Call(c) = e
            && c.func_name == "_&&_"
            && c.args.len() == 2
        {
            conjuncts(&c.args[0].expr, out);
            conjuncts(&c.args[1].expr, out);
        } else {
            out.push(e);
        }
    }
    /// `name.f1.f2` or `inputs["name"].f1` → (name, [f1, f2]).
    fn chain(e: &E) -> Option<(String, Vec<String>)> {
        match e {
            E::Select(s) if !s.test => {
                let (root, mut path) = chain(&s.operand.expr)?;
                path.push(s.field.clone());
                Some((root, path))
            }
            E::Ident(n) => Some((n.clone(), Vec::new())),
            E::Call(c) if c.func_name == "_[_]" && c.args.len() == 2 => {
                if let (E::Ident(m), E::Literal(cel::common::ast::LiteralValue::String(k))) =
                    (&c.args[0].expr, &c.args[1].expr)
                    && m == "inputs"
                {
                    return Some((str::to_string(k), Vec::new()));
                }
                None
            }
            _ => None,
        }
    }
    let mut parts = Vec::new();
    conjuncts(guard.ast(), &mut parts);
    let mut out = Vec::new();
    for p in parts {
        let E::Call(c) = p else { continue };
        if c.func_name != "_==_" || c.args.len() != 2 {
            continue;
        }
        let (Some((ra, pa)), Some((rb, pb))) = (chain(&c.args[0].expr), chain(&c.args[1].expr))
        else {
            continue;
        };
        let (Some(ia), Some(ib)) = (
            names.iter().position(|n| *n == ra),
            names.iter().position(|n| *n == rb),
        ) else {
            continue;
        };
        if ia == ib || pa.is_empty() || pb.is_empty() {
            continue;
        }
        let c = if ia < ib {
            EqConstraint {
                a: ia,
                path_a: pa,
                b: ib,
                path_b: pb,
            }
        } else {
            EqConstraint {
                a: ib,
                path_a: pb,
                b: ia,
                path_b: pa,
            }
        };
        if !out.contains(&c) {
            out.push(c);
        }
    }
    out
}
