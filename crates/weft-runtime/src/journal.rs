//! The inputs of an instance, as one closed enum, and the [`Journal`] hook that sees each of
//! them before its effects are dispatched.
//!
//! Every change to an instance's marking is caused by exactly one [`Input`] applied by the
//! instance's loop, followed by "fire everything enabled" (deterministic in the core). So
//! the sequence of inputs is a complete history: replaying it into a fresh
//! `weft_core::Instance` (see [`replay`]) rebuilds the same marking. The durability layer
//! implements [`Journal`] to persist these records; the default is no journal at all.

use std::sync::{Arc, Mutex};

use serde_json::Value;
use weft_core::instance::Completion;
use weft_core::token::FiringId;
use weft_core::{ActionError, EventId, Instance, Net};

/// One input to an instance's loop.
#[derive(Debug, Clone, PartialEq)]
pub enum Input {
    /// The instance starts with `input` on its initial events.
    Start {
        /// Plan name.
        plan: Arc<str>,
        /// The instance input.
        input: Value,
        /// Clock time.
        now: i64,
    },
    /// A token from outside (an ingested event).
    Token {
        /// The event.
        event: EventId,
        /// Payload.
        payload: Value,
        /// Correlation, if the sender named one.
        correlation: Option<String>,
        /// Clock time.
        now: i64,
    },
    /// A timer came due: a token on `event`.
    Timer {
        /// Timer id.
        id: u64,
        /// The event.
        event: EventId,
        /// Payload.
        payload: Value,
        /// Clock time.
        now: i64,
    },
    /// An action's outcome for a firing.
    Outcome {
        /// The firing.
        firing: FiringId,
        /// Result or error.
        result: Result<Value, ActionError>,
        /// Clock time.
        now: i64,
    },
    /// Pause (firing-rate limit).
    Pause {
        /// Why.
        reason: String,
    },
    /// Resume a paused instance.
    Resume,
    /// Stop for good.
    Stop {
        /// Why (`stopped by request`, `idle for 60000 ms`).
        reason: String,
    },
}

/// Receives every input of every instance, in order, before its effects are dispatched.
pub trait Journal: Send + Sync {
    /// Records `input` for `instance` of `tenant`.
    fn record(&self, tenant: &str, instance: &str, input: &Input);
}

/// A journal in memory, for tests and replay checks.
#[derive(Debug, Default)]
pub struct MemoryJournal {
    records: Mutex<Vec<(String, String, Input)>>,
}

impl MemoryJournal {
    /// An empty journal.
    pub fn new() -> Self {
        Self::default()
    }
    /// The inputs recorded for `instance`, in order.
    pub fn inputs(&self, instance: &str) -> Vec<Input> {
        let recs = self.records.lock().unwrap_or_else(|e| e.into_inner());
        recs.iter()
            .filter(|(_, i, _)| i == instance)
            .map(|(_, _, inp)| inp.clone())
            .collect()
    }
    /// Instance ids that have records, in order of first appearance.
    pub fn instances(&self) -> Vec<String> {
        let recs = self.records.lock().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<String> = Vec::new();
        for (_, i, _) in recs.iter() {
            if !out.contains(i) {
                out.push(i.clone());
            }
        }
        out
    }
}

impl Journal for MemoryJournal {
    fn record(&self, tenant: &str, instance: &str, input: &Input) {
        self.records
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((tenant.to_string(), instance.to_string(), input.clone()));
    }
}

/// Applies one input with the pure core exactly as the runtime's loop does: apply it, then
/// fire everything enabled (outcomes come from the journal, never from running tools).
/// Returns false when the input needs an instance and `inst` has none yet. Replay and the
/// durable fold both go through here, so they cannot drift from each other.
pub fn apply(net: &Net, id: &str, inst: &mut Option<Instance>, input: &Input) -> bool {
    match input {
        Input::Start { input, now, .. } => {
            *inst = Some(Instance::start(net, id, input.clone(), *now));
        }
        other => {
            let Some(i) = inst.as_mut() else {
                return false;
            };
            match other {
                Input::Token {
                    event,
                    payload,
                    correlation,
                    now,
                } => {
                    let _ = i.add_token(net, *event, payload.clone(), correlation.as_deref(), *now);
                }
                Input::Timer {
                    event,
                    payload,
                    now,
                    ..
                } => {
                    let _ = i.add_token(net, *event, payload.clone(), None, *now);
                }
                Input::Outcome {
                    firing,
                    result,
                    now,
                } => {
                    let _: Completion = i.complete(net, *firing, result.clone(), *now);
                }
                Input::Pause { reason } => i.pause(reason.clone()),
                Input::Resume => i.resume(net),
                Input::Stop { .. } => i.stop(),
                Input::Start { .. } => {}
            }
        }
    }
    if let Some(i) = inst.as_mut()
        && !matches!(input, Input::Pause { .. } | Input::Stop { .. })
    {
        while i.next(net).is_some() {}
    }
    true
}

/// Rebuilds an instance from its inputs with the pure core (see [`apply`]); the result
/// equals the live instance.
pub fn replay(net: &Net, id: &str, inputs: &[Input]) -> Option<Instance> {
    let mut inst: Option<Instance> = None;
    for input in inputs {
        if !apply(net, id, &mut inst, input) {
            return None;
        }
    }
    if let Some(i) = inst.as_mut() {
        i.settle(net);
    }
    inst
}
