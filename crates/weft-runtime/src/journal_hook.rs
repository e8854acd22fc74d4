//! The inputs of an instance, as one closed enum, and the [`Journal`] hook that sees each of
//! them before anything it enables is dispatched.
//!
//! Every change to an instance's marking is caused by exactly one [`Input`] applied by the
//! instance's loop, followed by "fire everything enabled" (deterministic in the core). So
//! the sequence of inputs is a complete history: replaying it into a fresh
//! `weft_core::Instance` (see [`replay`]) rebuilds the same marking. Two inputs change only
//! what the instance keeps beside its marking ([`Extras`]): `TimerSet`, `ContextPut` and the
//! approvals (`ApprovalRequested`, `ApprovalDecided`) are recorded by the engine's tool
//! services and its approval API while the tool runs (before its outcome), not applied by
//! the loop. [`fold`] is the one rule for both parts. The durability layer
//! implements [`Journal`] to persist these records; the default is no journal at all.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::instance::Completion;
use weft_core::token::FiringId;
use weft_core::{ActionError, EventId, Instance, Net};
use weft_tools::BoxFuture;
pub use weft_tools::Usage;

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
        /// How deep in `plan.run` children the instance is (0: started from outside).
        depth: u32,
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
        /// How late it fired (`now - due`; large after a restart).
        late_ms: i64,
        /// A repeating (cron) timer's next due time, if it fires again; `None` ends it.
        next_due_ms: Option<i64>,
    },
    /// An action's outcome for a firing.
    Outcome {
        /// The firing.
        firing: FiringId,
        /// Result (shared with the tokens it becomes) or error.
        result: Result<Arc<Value>, ActionError>,
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
    /// A tool set a timer (`timer.after` / `at` / `cron`). Recorded by the engine's tool
    /// services when the tool asks, before the tool returns (so before its outcome); it does
    /// not change the marking, only the pending timers of [`Extras`].
    TimerSet {
        /// Timer id (unique within the instance, also across restarts).
        id: u64,
        /// The event it puts a token on.
        event: EventId,
        /// Token payload.
        payload: Value,
        /// When it is due (epoch ms).
        due_ms: i64,
        /// Cron expression of a repeating timer.
        cron: Option<String>,
        /// How many more times a repeating timer fires at most.
        remaining: Option<u32>,
        /// Idempotency key of the firing that set it (a re-dispatch after a restart finds
        /// the timer already set instead of setting a second one).
        key: String,
        /// Clock time.
        now: i64,
    },
    /// A tool wrote a key of the instance's key-value context (`context.put`). Recorded
    /// before the tool returns; changes only the context of [`Extras`].
    ContextPut {
        /// Key.
        key: String,
        /// Value.
        value: Value,
        /// Clock time.
        now: i64,
    },
    /// A firing asks a person for approval before its tool is called (a step's `approval`,
    /// a policy's `require_approval`). Recorded by the engine's tool services once per
    /// firing, before the wait; changes only the approvals of [`Extras`].
    ApprovalRequested {
        /// Idempotency key of the firing (`<instance>/<step>/<firing>`).
        key: String,
        /// The step.
        step: String,
        /// The firing.
        firing: FiringId,
        /// What the approver is asked.
        reasons: Vec<String>,
        /// When the default decision applies (epoch ms), if the wait is bounded.
        deadline_ms: Option<i64>,
        /// The decision at the deadline.
        default_grant: bool,
        /// Clock time.
        now: i64,
    },
    /// A person (or the deadline) decided a requested approval. Changes only [`Extras`].
    ApprovalDecided {
        /// Idempotency key of the firing.
        key: String,
        /// Whether the call may go ahead.
        granted: bool,
        /// Who decided (`weft:deadline` for the default decision).
        principal: String,
        /// The decider's comment.
        comment: Option<String>,
        /// Clock time.
        now: i64,
    },
    /// A tool call of a plan with `limits` was counted against them, before it ran.
    /// Changes only [`Extras`] (its `usage`).
    Charged {
        /// Idempotency key of the firing.
        key: String,
        /// What the call counts for.
        charge: Usage,
        /// Clock time.
        now: i64,
    },
    /// A policy decided on a call before it ran. Changes nothing: the audit trail.
    PolicyDecided {
        /// Idempotency key of the firing.
        key: String,
        /// The attempt.
        attempt: u32,
        /// What the policy decided, and why.
        decision: weft_tools::PolicyDecision,
        /// Clock time.
        now: i64,
    },
    /// A repair: the instance moves onto a revised plan (see [`Repair`]).
    Repair(Box<Repair>),
    /// A repair could not be made (the repairer failed, the revised plan was invalid or
    /// would lose tokens, attempts ran out): the instance fails with `reason`.
    RepairFailed {
        /// Why, with a stable code in brackets (`[R001] …`, `[repair_attempts] …`).
        reason: String,
    },
}

/// A timer an instance has set that has not fired for the last time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingTimer {
    /// The event it puts a token on.
    pub event: EventId,
    /// Token payload.
    pub payload: Value,
    /// When it is next due (epoch ms).
    pub due_ms: i64,
    /// Cron expression of a repeating timer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cron: Option<String>,
    /// How many more times it fires at most (`None`: a one-shot fires once, a cron timer
    /// until the instance ends).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remaining: Option<u32>,
}

/// An approval a firing asked for, and its decision once there is one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PendingApproval {
    /// The step.
    pub step: String,
    /// The firing.
    pub firing: FiringId,
    /// What the approver is asked.
    pub reasons: Vec<String>,
    /// When it was asked (epoch ms).
    pub requested_ms: i64,
    /// When the default decision applies (epoch ms).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// The decision at the deadline.
    #[serde(default)]
    pub default_grant: bool,
    /// The decision, once made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decided>,
}

/// A recorded approval decision.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decided {
    /// Whether the call may go ahead.
    pub granted: bool,
    /// Who decided.
    pub principal: String,
    /// The decider's comment.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<String>,
    /// When (epoch ms).
    pub at_ms: i64,
}

/// What the fold keeps beside the core instance's marking: the timers that are set and
/// have not fired for the last time, and the key-value context. [`fold`] rebuilds it from
/// the inputs; `Engine::restore_with` makes it live again (timers re-armed, context back).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Extras {
    /// Pending timers by id.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub timers: BTreeMap<u64, PendingTimer>,
    /// The idempotency key of each firing that set a timer and has no outcome yet, with the
    /// timer id (so a re-dispatched `timer.*` step does not set a second timer).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub set_by: BTreeMap<String, u64>,
    /// The key-value context (`context.put`).
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub context: serde_json::Map<String, Value>,
    /// How deep in `plan.run` children the instance is, from its start (0: started from
    /// outside), so a recovered child keeps counting towards `limits.max_child_depth`.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub depth: u32,
    /// The approvals of firings that have no outcome yet, by idempotency key.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub approvals: BTreeMap<String, PendingApproval>,
    /// What the instance's tool calls have used of its plan's `limits` (counted only for
    /// plans that set some).
    #[serde(default, skip_serializing_if = "Usage::is_zero")]
    pub usage: Usage,
    /// When the instance started (epoch ms), for `limits.max_wall_ms`.
    #[serde(default)]
    pub started_ms: i64,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Extras {
    /// Applies the part of `input` that concerns timers and the context.
    fn apply(&mut self, input: &Input) {
        match input {
            Input::TimerSet {
                id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                key,
                ..
            } => {
                self.timers.insert(
                    *id,
                    PendingTimer {
                        event: *event,
                        payload: payload.clone(),
                        due_ms: *due_ms,
                        cron: cron.clone(),
                        remaining: *remaining,
                    },
                );
                self.set_by.insert(key.clone(), *id);
            }
            Input::Timer {
                id, next_due_ms, ..
            } => match (next_due_ms, self.timers.get_mut(id)) {
                (Some(due), Some(t)) => {
                    t.due_ms = *due;
                    t.remaining = t.remaining.map(|r| r.saturating_sub(1));
                }
                _ => {
                    self.timers.remove(id);
                }
            },
            Input::Outcome { firing, .. } if !self.set_by.is_empty() => {
                let suffix = format!("/{firing}");
                self.set_by.retain(|k, _| !k.ends_with(&suffix));
            }
            Input::ApprovalRequested {
                key,
                step,
                firing,
                reasons,
                deadline_ms,
                default_grant,
                now,
            } => {
                self.approvals
                    .entry(key.clone())
                    .or_insert_with(|| PendingApproval {
                        step: step.clone(),
                        firing: *firing,
                        reasons: reasons.clone(),
                        requested_ms: *now,
                        deadline_ms: *deadline_ms,
                        default_grant: *default_grant,
                        decision: None,
                    });
            }
            Input::ApprovalDecided {
                key,
                granted,
                principal,
                comment,
                now,
            } => {
                if let Some(a) = self.approvals.get_mut(key)
                    && a.decision.is_none()
                {
                    a.decision = Some(Decided {
                        granted: *granted,
                        principal: principal.clone(),
                        comment: comment.clone(),
                        at_ms: *now,
                    });
                }
            }
            Input::ContextPut { key, value, .. } => {
                self.context.insert(key.clone(), value.clone());
            }
            Input::Charged { charge, .. } => self.usage = self.usage.plus(*charge),
            Input::Start { depth, now, .. } => {
                self.depth = *depth;
                self.started_ms = *now;
            }
            _ => {}
        }
    }
}

/// A repair applied to an instance: the revised plan and what it did. The fold moves the
/// instance onto `net` with `weft_core::Instance::rebase`, which keeps every token and
/// in-flight firing by name; `marking` records the result for audits.
#[derive(Clone)]
pub struct Repair {
    /// The revised plan document.
    pub document: Arc<Value>,
    /// SHA-256 (hex) of the document's canonical JSON.
    pub hash: String,
    /// Repairs applied to this instance so far, this one included (1 for the first).
    pub version: u32,
    /// Tokens per event on the revised plan after the repair.
    pub marking: BTreeMap<String, usize>,
    /// The failure that asked for the repair.
    pub reason: String,
    /// Clock time.
    pub now: i64,
    /// The revised plan compiled (not part of equality: it follows from `document`).
    pub net: Arc<Net>,
}

impl Repair {
    /// SHA-256 (hex) of a plan document's JSON (object keys are sorted by `serde_json`).
    pub fn hash_of(document: &Value) -> String {
        use sha2::Digest;
        let bytes = serde_json::to_vec(document).unwrap_or_default();
        let d = sha2::Sha256::digest(&bytes);
        d.iter().map(|b| format!("{b:02x}")).collect()
    }
}

impl std::fmt::Debug for Repair {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Repair")
            .field("hash", &self.hash)
            .field("version", &self.version)
            .field("marking", &self.marking)
            .field("reason", &self.reason)
            .field("now", &self.now)
            .finish_non_exhaustive()
    }
}

impl PartialEq for Repair {
    fn eq(&self, o: &Self) -> bool {
        self.document == o.document
            && self.hash == o.hash
            && self.version == o.version
            && self.marking == o.marking
            && self.reason == o.reason
            && self.now == o.now
    }
}

/// Receives every input of every instance, in order, before its effects are dispatched.
pub trait Journal: Send + Sync {
    /// Records `input` for `instance` of `tenant`.
    fn record(&self, tenant: &str, instance: &str, input: &Input);

    /// The instance has nothing in flight after its loop's last turn (it waits for an
    /// event or a timer, or it has ended): no dispatch will follow that would make its
    /// records durable, so a durable journal should write them now. Default: nothing.
    fn idle(&self, _tenant: &str, _instance: &str) {}

    /// A firing of `step` (firing number `firing`) is about to call an immediate tool that
    /// waits for the journal ([`weft_tools::Tool::waits_for_journal`]): records its dispatch
    /// if this journal keeps such records (it may skip them for `idempotent` tools, which
    /// recovery dispatches again anyway) and returns the instance's *mark*, the number of
    /// records made for it so far. The call waits until [`Journal::poll_durable`] says the
    /// mark is durable. Default: 0 (nothing to wait for).
    fn gate(
        &self,
        _tenant: &str,
        _instance: &str,
        _step: &str,
        _firing: FiringId,
        _idempotent: bool,
    ) -> u64 {
        0
    }

    /// Whether the first `mark` records of `instance` are durable: `Ready(Ok(()))` if they
    /// are, `Ready(Err(why))` if they cannot become durable (the waiting call fails), or
    /// `Pending` after making sure they are being written, with `cx` woken when that
    /// changes. Stays `Pending` for good when another process took the instance over (its
    /// calls are the new owner's). Default: durable.
    fn poll_durable(
        &self,
        _instance: &str,
        _mark: u64,
        _cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Result<(), String>> {
        std::task::Poll::Ready(Ok(()))
    }

    /// The last (at most) `max` records of `instance`, as text, for a repair's context.
    /// `None` when this journal cannot say (the default).
    fn excerpt(
        &self,
        _tenant: &str,
        _instance: &str,
        _max: usize,
    ) -> BoxFuture<'static, Option<String>> {
        Box::pin(async { None })
    }
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

    fn excerpt(
        &self,
        _tenant: &str,
        instance: &str,
        max: usize,
    ) -> BoxFuture<'static, Option<String>> {
        let inputs = self.inputs(instance);
        let from = inputs.len().saturating_sub(max);
        let text = inputs[from..]
            .iter()
            .enumerate()
            .map(|(k, i)| format!("#{} {i:?}", from + k + 1))
            .collect::<Vec<_>>()
            .join("\n");
        Box::pin(async move { Some(text) })
    }
}

/// The fold of one input: [`apply`] for the marking, then the timers and context of
/// `extras`. Returns false when the input needs an instance and `inst` has none yet.
/// Replay and the durable fold both go through here, so they cannot drift from each other.
pub fn fold(
    net: &Net,
    id: &str,
    inst: &mut Option<Instance>,
    extras: &mut Extras,
    input: &Input,
) -> bool {
    if !apply(net, id, inst, input) {
        return false;
    }
    extras.apply(input);
    // An approval holds for every attempt of its firing: it goes with the last outcome.
    if let Input::Outcome { firing, .. } = input
        && !extras.approvals.is_empty()
        && !inst
            .as_ref()
            .is_some_and(|i| i.in_flight.contains_key(firing))
    {
        let suffix = format!("/{firing}");
        extras.approvals.retain(|k, _| !k.ends_with(&suffix));
    }
    true
}

/// Applies one input to the marking with the pure core exactly as the runtime's loop does:
/// apply it, then fire everything enabled (outcomes come from the journal, never from
/// running tools). Returns false when the input needs an instance and `inst` has none yet.
/// `TimerSet` and `ContextPut` leave the marking alone (see [`fold`]).
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
                Input::Start { .. }
                | Input::TimerSet { .. }
                | Input::ContextPut { .. }
                | Input::ApprovalRequested { .. }
                | Input::ApprovalDecided { .. }
                | Input::Charged { .. }
                | Input::PolicyDecided { .. } => {}
                Input::Repair(r) => {
                    if let Err(lost) = i.rebase(net, &r.net) {
                        i.fail_with(lost.to_string());
                    }
                }
                Input::RepairFailed { reason } => i.fail_with(reason.clone()),
            }
        }
    }
    // After a repair the instance lives on the revised plan's net.
    let net = match input {
        Input::Repair(r) => &*r.net,
        _ => net,
    };
    if let Some(i) = inst.as_mut()
        && !matches!(
            input,
            Input::Pause { .. }
                | Input::Stop { .. }
                | Input::TimerSet { .. }
                | Input::ContextPut { .. }
                | Input::ApprovalRequested { .. }
                | Input::ApprovalDecided { .. }
                | Input::Charged { .. }
                | Input::PolicyDecided { .. }
        )
    {
        while i.next(net).is_some() {}
    }
    true
}

/// Rebuilds an instance from its inputs with the pure core (see [`apply`]); the result
/// equals the live instance.
pub fn replay(net: &Net, id: &str, inputs: &[Input]) -> Option<Instance> {
    replay_with_extras(net, id, inputs).map(|(i, _)| i)
}

/// [`replay`], also returning the pending timers and context.
pub fn replay_with_extras(net: &Net, id: &str, inputs: &[Input]) -> Option<(Instance, Extras)> {
    let mut inst: Option<Instance> = None;
    let mut extras = Extras::default();
    let mut repaired: Option<Arc<Net>> = None;
    for input in inputs {
        let cur = repaired.as_deref().unwrap_or(net);
        if !fold(cur, id, &mut inst, &mut extras, input) {
            return None;
        }
        if let Input::Repair(r) = input {
            repaired = Some(Arc::clone(&r.net));
        }
    }
    let mut inst = inst?;
    inst.settle_with(
        repaired.as_deref().unwrap_or(net),
        !extras.timers.is_empty(),
    );
    Some((inst, extras))
}
