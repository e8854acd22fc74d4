//! The compiled net: a validated plan turned into indexed places and transitions with every
//! expression compiled, ready for the firing rule and the runtime.
//!
//! Plans name things with strings; the hot paths (binding search, firing, routing) use the
//! dense ids here instead. A [`Net`] only exists for a plan that validated without errors.

use std::collections::HashMap;

use crate::expr::{Expr, Template};
use crate::plan::{Consume, EventKind, GraphType, Plan, Retry};

/// Index of an event (place) in [`Net::events`].
pub type EventId = u32;
/// Index of a step (transition) in [`Net::steps`].
pub type StepId = u32;

/// A compiled event.
#[derive(Debug, Clone)]
pub struct EventNode {
    /// Event name.
    pub name: String,
    /// Effective kind: declared, or `output` when consumed by no step, `input` for initial
    /// events, `internal` otherwise.
    pub kind: EventKind,
    /// Broadcast or exclusive.
    pub consume: Consume,
    /// Steps that list this event in `on`, in plan order.
    pub consumers: Vec<StepId>,
    /// Steps that may emit this event.
    pub producers: Vec<StepId>,
    /// Whether an output event (declared, or consumed by nobody).
    pub is_output: bool,
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
    event_ids: HashMap<String, EventId>,
    step_ids: HashMap<String, StepId>,
}

impl Net {
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

    /// Builds the net. Callers must only pass plans that validated without errors; names that
    /// do not resolve are skipped rather than panicking.
    pub(crate) fn build(plan: &Plan, steps: Vec<StepNode>) -> Net {
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
            .map(|(name, def)| EventNode {
                name: name.clone(),
                kind: def.kind.unwrap_or(EventKind::Internal),
                consume: def.consume,
                consumers: Vec::new(),
                producers: Vec::new(),
                is_output: def.kind == Some(EventKind::Output),
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
        }
        let initial: Vec<EventId> = plan
            .initial_events()
            .iter()
            .filter_map(|n| event_ids.get(*n).copied())
            .collect();
        for e in &mut events {
            if e.consumers.is_empty() {
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
        Net {
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
