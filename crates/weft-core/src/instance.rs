//! The firing rule as a deterministic state machine: one [`Instance`] per running plan.
//!
//! The runtime owns an `Instance` and drives it with three kinds of input: tokens from
//! outside ([`Instance::add_token`]), "give me the next firing" ([`Instance::next`], which
//! searches a binding, consumes it and returns the action to run as a [`Fired`] command), and
//! an action's outcome ([`Instance::complete`], which emits output tokens, asks for a retry or
//! applies the failure policy). Nothing here does I/O or reads a clock (`now` is passed in),
//! so the same sequence of inputs always gives the same marking: that is what makes journal
//! replay and time travel exact.

use std::collections::VecDeque;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::expr::Scope;
pub use crate::inflight::InFlightMap;
use crate::marking::{Marking, key_at};
use crate::net::{EventId, FailPolicy, Net, SlotId, StepId};
use crate::plan::GraphType;
use crate::token::{FiringId, Origin, Token, TokenId};

/// Most guard evaluations one binding search may spend before giving up (hostile plans and
/// huge markings must not stall the instance loop).
pub const MAX_GUARD_EVALS: usize = 100_000;

/// Where an instance is in its life.
///
/// Once nothing is enabled and nothing is in flight, an acyclic instance settles
/// ([`Instance::settle_with`]) into exactly one of three statuses, a pure function of the net,
/// the marking and whether a timer it set is pending:
/// - `completed`: an output event holds a token;
/// - `waiting`: no output token, but something from outside can still move it: a timer it
///   set is pending, or a token on an event the plan declares `kind: input` could enable a
///   step (a step that consumes such an event and whose other inputs are each such an
///   event or hold a token). [`Instance::awaited_events`] names those events; the runtime
///   adds the timers' deadlines;
/// - `stuck`: neither: nothing can ever happen again (short of a repair). Initial events
///   that are not declared `kind: input` receive the instance's input only and do not count.
///
/// Reactive instances live until stopped: `running` (idle ones wait for their input events).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Status {
    /// Steps may still fire or actions are in flight (reactive: alive until stopped).
    Running,
    /// Acyclic: nothing enabled or in flight and an output event holds a token.
    Completed,
    /// Acyclic: nothing enabled or in flight, no output token, and an input event or a
    /// pending timer can still enable a step.
    Waiting,
    /// Acyclic: nothing enabled or in flight, no output token, and nothing can ever enable a
    /// step again.
    Stuck,
    /// A step failed with `on_fail: abort` (or an unrecoverable error).
    Failed {
        /// Why.
        reason: String,
    },
    /// Paused: waiting for a repair, or stopped by the firing-rate limit.
    Paused {
        /// Why.
        reason: String,
    },
    /// Stopped from outside.
    Stopped,
}

impl Status {
    /// Will the instance never fire again?
    pub fn is_terminal(&self) -> bool {
        matches!(
            self,
            Status::Completed | Status::Failed { .. } | Status::Stopped
        )
    }
    /// Lower-case name.
    pub fn name(&self) -> &'static str {
        match self {
            Status::Running => "running",
            Status::Completed => "completed",
            Status::Waiting => "waiting",
            Status::Stuck => "stuck",
            Status::Failed { .. } => "failed",
            Status::Paused { .. } => "paused",
            Status::Stopped => "stopped",
        }
    }
}

/// A firing whose action has been dispatched and has no outcome yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct InFlight {
    /// The step.
    pub step: StepId,
    /// The consumed binding (empty once handed to the action with
    /// [`Instance::detach_inputs`]).
    pub tokens: Vec<Token>,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// The rendered args, kept for steps with a retry policy (`null` otherwise:
    /// [`Instance::args`] renders them again from `tokens`, with the same result).
    pub args: Value,
    /// The binding's correlation, once `tokens` were handed to the action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<Arc<str>>,
}

/// The key a firing's action gets for deduplication: `<instance>/<step>/<firing>`, the same
/// across retries and recovery.
pub fn idempotency_key(instance: &str, step: &str, firing: FiringId) -> String {
    let mut k = String::with_capacity(instance.len() + step.len() + 22);
    push_idempotency_key(&mut k, instance, step, firing);
    k
}

/// Appends the [`idempotency_key`] to `buf`.
fn push_idempotency_key(buf: &mut String, instance: &str, step: &str, firing: FiringId) {
    buf.push_str(instance);
    buf.push('/');
    buf.push_str(step);
    buf.push('/');
    push_u64(buf, firing);
}

/// The channel id `fresh()` returns in a firing: `<instance>.<firing>`.
fn fresh_id(instance: &str, firing: FiringId) -> String {
    let mut k = String::with_capacity(instance.len() + 21);
    k.push_str(instance);
    k.push('.');
    push_u64(&mut k, firing);
    k
}

/// Appends `n` in decimal (without the formatting machinery: this runs once per firing).
fn push_u64(s: &mut String, mut n: u64) {
    let mut buf = [0u8; 20];
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    match std::str::from_utf8(&buf[i..]) {
        Ok(digits) => s.push_str(digits),
        Err(_) => s.extend(buf[i..].iter().map(|&b| b as char)),
    }
}

/// The args of a firing: rendered for this firing, or the step's literal args, shared by
/// every firing of the step (not copied per firing).
#[derive(Debug, Clone, PartialEq)]
pub enum Args {
    /// Rendered from a template for this firing.
    Owned(Value),
    /// The step's literal args.
    Shared(Arc<Value>),
}

impl Args {
    /// The args.
    pub fn as_value(&self) -> &Value {
        match self {
            Args::Owned(v) => v,
            Args::Shared(v) => v,
        }
    }

    /// The args, owned (literal args are copied).
    pub fn into_value(self) -> Value {
        match self {
            Args::Owned(v) => v,
            Args::Shared(v) => Arc::unwrap_or_clone(v),
        }
    }
}

/// The consumed tokens of an in-flight firing handed to its action
/// ([`Instance::detach_inputs`]): `(event, payload)` per token, in binding order.
#[derive(Debug)]
pub struct Detached<'a> {
    first: Option<(EventId, Arc<Value>)>,
    rest: std::vec::Drain<'a, Token>,
}

impl Iterator for Detached<'_> {
    type Item = (EventId, Arc<Value>);

    fn next(&mut self) -> Option<Self::Item> {
        match self.first.take() {
            Some(f) => Some(f),
            None => self.rest.next().map(|t| (t.event, t.payload)),
        }
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.first.is_some()) + self.rest.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Detached<'_> {}

/// The command of a firing: call `action` with `args`. The tokens it consumed are in the
/// firing's [`InFlight`] record; its idempotency key is [`idempotency_key`] of the instance,
/// the step's name and `firing` (built by whoever needs it, not per firing).
#[derive(Debug, Clone, PartialEq)]
pub struct Fired {
    /// Firing number.
    pub firing: FiringId,
    /// The step that fired.
    pub step: StepId,
    /// Rendered args, or why they could not be rendered. `Ok(None)`: the step's args are a
    /// literal, [`Net::literal_args`], not copied or reference-counted per firing (the
    /// runtime lends them to the tool).
    pub args: Result<Option<Args>, String>,
}

impl Fired {
    /// The firing's args as a value (a literal copied out of the net).
    pub fn args_value(&self, net: &Net) -> Result<Value, String> {
        match &self.args {
            Ok(Some(a)) => Ok(a.as_value().clone()),
            Ok(None) => Ok(net
                .literal_args(self.step)
                .map(|v| (**v).clone())
                .unwrap_or(Value::Null)),
            Err(e) => Err(e.clone()),
        }
    }
}

/// Why an action failed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ActionError {
    /// Stable code, e.g. `timeout`, `tool_error`, `args_invalid`, `outcome_unknown`.
    pub code: String,
    /// Human message.
    pub message: String,
    /// Whether the retry policy applies.
    pub retryable: bool,
}

impl ActionError {
    /// A retryable error.
    pub fn new(code: impl Into<String>, message: impl Into<String>) -> Self {
        ActionError {
            code: code.into(),
            message: message.into(),
            retryable: true,
        }
    }
    /// An error that retrying cannot fix.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        ActionError {
            code: code.into(),
            message: message.into(),
            retryable: false,
        }
    }
}

/// A firing from [`Instance::next_taking`]: consumed and numbered, but not recorded as in flight;
/// its action is the caller's to run before anything else looks at the instance.
#[derive(Debug)]
pub struct Taken {
    /// Firing number.
    pub firing: FiringId,
    /// The step that fired.
    pub step: StepId,
    /// The consumed binding, in binding order (give the emptied vector back with
    /// [`Instance::recycle`]).
    pub tokens: Vec<Token>,
    /// As [`Fired::args`].
    pub args: Result<Option<Args>, String>,
}

/// What [`Instance::next_taking`] fired.
#[derive(Debug)]
pub enum Next {
    /// Recorded as in flight, as [`Instance::next`] fires.
    Fired(Fired),
    /// Handed over: its action is the caller's to run.
    Taken(Taken),
}

/// What completing a firing did.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion {
    /// The action succeeded; these tokens were emitted (their ids are consecutive: one
    /// range, no list to allocate per firing).
    Emitted(std::ops::Range<TokenId>),
    /// Run the action again after `delay_ms` (the firing stays in flight).
    Retry {
        /// The attempt about to run.
        attempt: u32,
        /// How long to wait first.
        delay_ms: u64,
    },
    /// The failure became an error token on `event`.
    ErrorToken {
        /// The event.
        event: EventId,
        /// The token.
        token: TokenId,
    },
    /// `on_fail: continue`: the failure was dropped.
    Dropped,
    /// `on_fail: repair`: the instance is paused for a repair.
    Repair(ActionError),
    /// `on_fail: abort`: the instance failed.
    Failed(ActionError),
    /// No such firing is in flight (a duplicate or late outcome); nothing changed.
    Unknown,
}

/// What a repair would lose: events that hold tokens and steps with an action in flight
/// that the revised plan no longer has (code `R001`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RebaseError {
    /// Events holding tokens, missing from the revised plan.
    pub events: Vec<String>,
    /// Steps with an action in flight, missing from the revised plan.
    pub steps: Vec<String>,
}

impl std::fmt::Display for RebaseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |v: &[String]| {
            v.iter()
                .map(|n| format!("`{n}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        write!(f, "[R001] the revised plan would lose state:")?;
        if !self.events.is_empty() {
            write!(
                f,
                " event(s) {} hold tokens but were removed",
                names(&self.events)
            )?;
        }
        if !self.steps.is_empty() {
            if !self.events.is_empty() {
                write!(f, ";")?;
            }
            write!(
                f,
                " step(s) {} have an action in flight but were removed",
                names(&self.steps)
            )?;
        }
        write!(f, " (keep them, under the same names)")
    }
}

impl std::error::Error for RebaseError {}

/// A step that holds some but not all of what it needs, for stuck diagnoses.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Waiting {
    /// The step.
    pub step: String,
    /// Input events that hold tokens.
    pub has: Vec<String>,
    /// Input events with no token.
    pub lacks: Vec<String>,
    /// All inputs hold tokens, but no combination satisfies the guard / correlation.
    pub guard_blocked: bool,
    /// When guard-blocked: the error the guard raised on the oldest token of each input
    /// (`Division by zero`, …), which "not enabled" would otherwise hide.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_error: Option<String>,
}

/// The state of one plan instance: marking, in-flight firings and counters.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Instance {
    /// Instance id.
    pub id: Arc<str>,
    /// Tokens.
    pub marking: Marking,
    /// Dispatched firings without an outcome.
    pub in_flight: InFlightMap,
    /// Lifecycle status.
    pub status: Status,
    /// Firings so far.
    pub fired: u64,
    next_token: TokenId,
    next_firing: FiringId,
    root: Arc<str>,
    dirty: VecDeque<StepId>,
    is_dirty: Vec<bool>,
    #[serde(skip)]
    spare: SpareTokens,
}

/// The emptied binding vector of a completed firing, reused by the next firing (a chain
/// then allocates none per step). Not part of the state: clones and snapshots start empty.
#[derive(Default)]
struct SpareTokens(Option<Vec<Token>>);

impl SpareTokens {
    fn take(&mut self) -> Vec<Token> {
        self.0.take().unwrap_or_default()
    }

    fn keep(&mut self, mut v: Vec<Token>) {
        if self.0.is_none() && v.capacity() > 0 {
            v.clear();
            self.0 = Some(v);
        }
    }
}

impl Clone for SpareTokens {
    fn clone(&self) -> Self {
        SpareTokens::default()
    }
}

impl std::fmt::Debug for SpareTokens {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("..")
    }
}

impl Instance {
    /// A new instance whose input is put on the plan's initial events.
    pub fn start(net: &Net, id: &str, input: Value, now: i64) -> Instance {
        let id: Arc<str> = Arc::from(id);
        let mut inst = Instance {
            root: Arc::clone(&id),
            id,
            marking: Marking::new(net),
            in_flight: InFlightMap::new(),
            status: Status::Running,
            fired: 0,
            next_token: 0,
            next_firing: 0,
            dirty: VecDeque::with_capacity(net.width()),
            is_dirty: vec![false; net.steps.len()],
            spare: SpareTokens::default(),
        };
        let payload = Arc::new(input);
        let root = Arc::clone(&inst.root);
        for &e in &net.initial {
            inst.put(
                net,
                e,
                Arc::clone(&payload),
                Arc::clone(&root),
                Origin::Input,
                now,
            );
        }
        inst
    }

    /// The correlation given to tokens that do not name one.
    pub fn root_correlation(&self) -> &Arc<str> {
        &self.root
    }

    /// Puts a token from outside on `event`. Refused once the instance has ended.
    pub fn add_token(
        &mut self,
        net: &Net,
        event: EventId,
        payload: Value,
        correlation: Option<&str>,
        now: i64,
    ) -> Result<TokenId, String> {
        if self.status.is_terminal() {
            return Err(format!("instance {} is {}", self.id, self.status.name()));
        }
        if event as usize >= net.events.len() {
            return Err(format!("event {event} does not exist"));
        }
        let corr = match correlation {
            Some(c) if *c != *self.root => Arc::from(c),
            _ => Arc::clone(&self.root),
        };
        if matches!(self.status, Status::Stuck | Status::Waiting) {
            self.status = Status::Running;
        }
        Ok(self.put(net, event, Arc::new(payload), corr, Origin::External, now))
    }

    fn put(
        &mut self,
        net: &Net,
        event: EventId,
        payload: Arc<Value>,
        correlation: Arc<str>,
        origin: Origin,
        now: i64,
    ) -> TokenId {
        let id = self.next_token;
        self.next_token += 1;
        if let [slot] = net.event_slots[event as usize][..] {
            // One slot (the usual case): the payload and correlation move in.
            let token = Token {
                id,
                event,
                payload,
                correlation,
                origin,
                created_at: now,
            };
            self.marking.push(net, slot, token);
            for &c in &net.slots[slot as usize].consumers {
                self.mark_dirty(c);
            }
            return id;
        }
        for &slot in &net.event_slots[event as usize] {
            let token = Token {
                id,
                event,
                payload: Arc::clone(&payload),
                correlation: Arc::clone(&correlation),
                origin: origin.clone(),
                created_at: now,
            };
            self.marking.push(net, slot, token);
            for &c in &net.slots[slot as usize].consumers {
                self.mark_dirty(c);
            }
        }
        id
    }

    fn mark_dirty(&mut self, step: StepId) {
        if let Some(d) = self.is_dirty.get_mut(step as usize)
            && !*d
        {
            *d = true;
            self.dirty.push_back(step);
        }
    }

    /// Marks every step for re-examination (after a resume or a repair).
    pub fn touch_all(&mut self, net: &Net) {
        self.is_dirty = vec![false; net.steps.len()];
        self.dirty.clear();
        for s in 0..net.steps.len() {
            self.mark_dirty(s as StepId);
        }
    }

    /// Finds a binding for `step`: one token per input slot (same correlation unless the step
    /// says otherwise) for which the guard holds. Returns `(slot, position)` per input.
    pub fn bind(&self, net: &Net, step: StepId) -> Option<Vec<(SlotId, usize)>> {
        let s = net.step(step);
        let slots = &net.input_slots[step as usize];
        if slots.iter().any(|&sl| self.marking.len(sl) == 0) {
            return None;
        }
        if slots.len() == 1 && s.guard.is_none() {
            return Some(vec![(slots[0], 0)]);
        }
        if s.guard.is_none() {
            // The search tries at most `inputs × Π tokens per input` candidates; below the
            // budget it cannot give up, and the linear pass finds what it would find.
            let mut tries = slots.len();
            for &sl in slots {
                tries = tries.saturating_mul(self.marking.len(sl));
            }
            if tries <= MAX_GUARD_EVALS {
                return self.bind_unguarded(s.correlate, slots);
            }
        }
        let mut chosen = Vec::with_capacity(slots.len());
        let mut budget = MAX_GUARD_EVALS;
        if self.search(net, step, &mut chosen, &mut budget) {
            Some(chosen)
        } else {
            None
        }
    }

    /// [`Instance::search`] for a step without a guard, in one pass per candidate of the
    /// first input: without a guard, the other inputs only have to share the first one's
    /// correlation (when the step correlates), independently of each other, so the search's
    /// binding is the first candidate for which every other input holds such a token, with
    /// the oldest such token of each.
    fn bind_unguarded(&self, correlate: bool, slots: &[SlotId]) -> Option<Vec<(SlotId, usize)>> {
        let (&first, rest) = slots.split_first()?;
        if !correlate {
            return Some(slots.iter().map(|&sl| (sl, 0)).collect());
        }
        let mut chosen = Vec::with_capacity(slots.len());
        'candidate: for (p0, t0) in self.marking.slots[first as usize].tokens.iter().enumerate() {
            let corr = &t0.correlation;
            chosen.clear();
            chosen.push((first, p0));
            for &sl in rest {
                let found = self.marking.slots[sl as usize]
                    .tokens
                    .iter()
                    .position(|t| Arc::ptr_eq(&t.correlation, corr) || t.correlation == *corr);
                match found {
                    Some(p) => chosen.push((sl, p)),
                    None => continue 'candidate,
                }
            }
            return Some(chosen);
        }
        None
    }

    fn token(&self, slot: SlotId, pos: usize) -> &Token {
        &self.marking.slots[slot as usize].tokens[pos]
    }

    fn search(
        &self,
        net: &Net,
        step: StepId,
        chosen: &mut Vec<(SlotId, usize)>,
        budget: &mut usize,
    ) -> bool {
        let s = net.step(step);
        let slots = &net.input_slots[step as usize];
        let depth = chosen.len();
        if depth == slots.len() {
            return match &s.guard {
                None => true,
                Some(g) => {
                    let inputs: Vec<(&str, &Value)> = chosen
                        .iter()
                        .zip(&s.inputs)
                        .map(|(&(sl, p), &e)| {
                            (net.event(e).name.as_str(), &*self.token(sl, p).payload)
                        })
                        .collect();
                    let fresh = String::new();
                    let scope = Scope {
                        inputs: &inputs,
                        result: None,
                        instance: &self.id,
                        plan: &net.plan_name,
                        fresh: &fresh,
                    };
                    g.eval_bool(&scope).unwrap_or(false)
                }
            };
        }
        let slot = slots[depth];
        // Candidate positions: from an equality index when a guard conjunct links this input
        // to one already chosen, else every token in the slot.
        let indexed = net.eq_constraints[step as usize].iter().find_map(|c| {
            if c.b != depth {
                return None;
            }
            let k = net.slots[slot as usize]
                .index_paths
                .iter()
                .position(|p| *p == c.path_b)?;
            let (asl, apos) = chosen[c.a];
            Some((k, key_at(&self.token(asl, apos).payload, &c.path_a)))
        });
        let first_corr = chosen
            .first()
            .map(|&(sl, p)| Arc::clone(&self.token(sl, p).correlation));
        let try_pos =
            |pos: usize, chosen: &mut Vec<(SlotId, usize)>, budget: &mut usize| -> Option<bool> {
                if *budget == 0 {
                    return Some(false);
                }
                *budget -= 1;
                if s.correlate
                    && let Some(c) = &first_corr
                    && *self.token(slot, pos).correlation != **c
                {
                    return None;
                }
                chosen.push((slot, pos));
                if self.search(net, step, chosen, budget) {
                    return Some(true);
                }
                chosen.pop();
                None
            };
        match indexed {
            Some((_, None)) => false,
            Some((k, Some(key))) => {
                let Some(ids) = self.marking.lookup(slot, k, &key) else {
                    return false;
                };
                for &id in ids {
                    let Some(pos) = self.marking.position(slot, id) else {
                        continue;
                    };
                    if let Some(r) = try_pos(pos, chosen, budget) {
                        return r;
                    }
                }
                false
            }
            None => {
                for pos in 0..self.marking.len(slot) {
                    if let Some(r) = try_pos(pos, chosen, budget) {
                        return r;
                    }
                }
                false
            }
        }
    }

    /// Fires `step` with `binding` (from [`Instance::bind`]): consumes the tokens, renders the
    /// args and records the firing as in flight.
    pub fn fire(&mut self, net: &Net, step: StepId, binding: &[(SlotId, usize)]) -> Fired {
        let (firing, tokens, args) = self.consume(net, step, binding);
        let kept_args = match (&net.step(step).retry, &args) {
            (Some(_), Ok(Some(a))) => a.as_value().clone(),
            _ => Value::Null,
        };
        if self.in_flight.is_empty() {
            // Room for a whole fan-out at once (a no-op once it has it).
            self.in_flight.reserve(net.width());
        }
        self.in_flight.insert(
            firing,
            InFlight {
                step,
                tokens,
                attempt: 1,
                args: kept_args,
                correlation: None,
            },
        );
        Fired { firing, step, args }
    }

    /// Fires `step` with `binding` as [`Instance::fire`] does, but hands the consumed tokens
    /// to the caller instead of recording the firing as in flight: the caller runs the
    /// action at once and, before anything else looks at the instance, either puts its
    /// result with [`Instance::emit_taken`] or records the firing with
    /// [`Instance::keep_in_flight`] and completes it as usual. Only for steps whose
    /// completion never reads the inputs (`!`[`Net::keeps_inputs`]), so the two ways reach
    /// the same marking, ids and counters.
    fn take(&mut self, net: &Net, step: StepId, binding: &[(SlotId, usize)]) -> Taken {
        let (firing, tokens, args) = self.consume(net, step, binding);
        Taken {
            firing,
            step,
            tokens,
            args,
        }
    }

    /// The part of a firing that [`Instance::fire`] and [`Instance::take`] share: consumes
    /// the binding's tokens, numbers the firing and renders its args.
    #[allow(clippy::type_complexity)]
    fn consume(
        &mut self,
        net: &Net,
        step: StepId,
        binding: &[(SlotId, usize)],
    ) -> (FiringId, Vec<Token>, Result<Option<Args>, String>) {
        let mut tokens = self.spare.take();
        if let [(slot, pos)] = *binding {
            self.marking.take_into(net, slot, pos, &mut tokens);
        } else if binding
            .iter()
            .enumerate()
            .all(|(i, (sl, _))| binding[..i].iter().all(|(o, _)| o != sl))
        {
            // One token per slot: taking one leaves the others' positions as they were.
            tokens.reserve(binding.len());
            for &(slot, pos) in binding {
                self.marking.take_into(net, slot, pos, &mut tokens);
            }
        } else {
            // Take tokens highest position first per slot so earlier positions stay valid.
            let mut order: Vec<usize> = (0..binding.len()).collect();
            order.sort_by_key(|&i| std::cmp::Reverse((binding[i].0, binding[i].1)));
            let mut taken: Vec<Option<Token>> = vec![None; binding.len()];
            for i in order {
                let (slot, pos) = binding[i];
                taken[i] = self.marking.take(net, slot, pos);
            }
            tokens.extend(taken.into_iter().flatten());
        }
        let firing = self.next_firing;
        self.next_firing += 1;
        self.fired += 1;
        // Literal args are left in the net (no reference counted per firing).
        let args = if net.literal_args(step).is_some() {
            Ok(None)
        } else {
            self.render_args(net, step, firing, &tokens).map(Some)
        };
        // More bindings may exist for the same step.
        self.mark_dirty(step);
        (firing, tokens, args)
    }

    /// Records a [`Taken`] firing as in flight, exactly as
    /// [`Instance::fire`] would have (with `correlation` once its tokens went to the action,
    /// as [`Instance::detach_inputs`] leaves it), so that its outcome can be completed with
    /// [`Instance::complete`] (an error, say).
    pub fn keep_in_flight(
        &mut self,
        firing: FiringId,
        step: StepId,
        tokens: Vec<Token>,
        correlation: Option<Arc<str>>,
    ) {
        self.in_flight.insert(
            firing,
            InFlight {
                step,
                tokens,
                attempt: 1,
                args: Value::Null,
                correlation,
            },
        );
    }

    /// Puts the result of a [`Taken`] firing on the step's emits, as
    /// [`Instance::complete`] does for a successful outcome: `correlation` is the binding's
    /// (its first token's). Only steps [`Instance::next_taking`] takes have plain emits, so
    /// the result goes to each as it is.
    pub fn emit_taken(
        &mut self,
        net: &Net,
        firing: FiringId,
        step: StepId,
        correlation: Arc<str>,
        result: Arc<Value>,
        now: i64,
    ) -> std::ops::Range<TokenId> {
        debug_assert!(net.plain_emits(step), "a taken step has plain emits");
        self.emit_plain(net, firing, step, correlation, result, now)
    }

    /// Gives the emptied token vector of a [`Taken`] back for reuse by later firings.
    pub fn recycle(&mut self, tokens: Vec<Token>) {
        self.spare.keep(tokens);
    }

    /// The args of an in-flight firing (for a retry or a re-dispatch after recovery): the
    /// kept copy, or rendered again from the consumed tokens (rendering is deterministic, so
    /// this equals what [`Instance::fire`] returned).
    pub fn args(&self, net: &Net, firing: FiringId) -> Option<Result<Value, String>> {
        let inf = self.in_flight.get(&firing)?;
        let s = net.step(inf.step);
        if s.retry.is_some() && !inf.args.is_null() {
            return Some(Ok(inf.args.clone()));
        }
        Some(
            self.render_args(net, inf.step, firing, &inf.tokens)
                .map(Args::into_value),
        )
    }

    /// Renders a step's args against the consumed tokens of one firing (literal args are
    /// cloned without building a scope). Deterministic: same tokens, same firing, same args.
    fn render_args(
        &self,
        net: &Net,
        step: StepId,
        firing: FiringId,
        tokens: &[Token],
    ) -> Result<Args, String> {
        let s = net.step(step);
        if let Some(v) = net.literal_args(step) {
            return Ok(Args::Shared(Arc::clone(v)));
        }
        let fresh = if net.args_use_fresh(step) {
            fresh_id(&self.id, firing)
        } else {
            String::new()
        };
        let inputs: Vec<(&str, &Value)> = tokens
            .iter()
            .map(|t| (net.event(t.event).name.as_str(), &*t.payload))
            .collect();
        let scope = Scope {
            inputs: &inputs,
            result: None,
            instance: &self.id,
            plan: &net.plan_name,
            fresh: &fresh,
        };
        s.args
            .render(&scope)
            .map(Args::Owned)
            .map_err(|e| e.message)
    }

    /// Hands the consumed tokens of an in-flight firing to its action, when completing the
    /// firing will not read them ([`Net::keeps_inputs`] is false: plain emits, no error
    /// token, no retry): yields each token's event and payload, in binding order. The
    /// binding's correlation (the first token's) moves into the record, so nothing is
    /// counted up or down for it. `None` (and nothing changes) when the tokens are still
    /// needed or the firing is not in flight. The record's emptied vector is reused by a
    /// later firing.
    pub fn detach_inputs(&mut self, net: &Net, firing: FiringId) -> Option<Detached<'_>> {
        let inf = self.in_flight.get_mut(&firing)?;
        if net.keeps_inputs(inf.step) || inf.correlation.is_some() {
            return None;
        }
        let mut rest = inf.tokens.drain(..);
        let first = match rest.next() {
            Some(t) => {
                inf.correlation = Some(t.correlation);
                Some((t.event, t.payload))
            }
            None => {
                inf.correlation = Some(Arc::clone(&self.root));
                None
            }
        };
        Some(Detached { first, rest })
    }

    /// The next firing, if any step is enabled: searches dirty steps for a binding and fires
    /// the first one found.
    pub fn next(&mut self, net: &Net) -> Option<Fired> {
        self.next_with(net, |i, step, binding| i.fire(net, step, binding))
    }

    /// [`Instance::next`], except that a step marked in `take` (indexed by step id) whose
    /// completion never reads its inputs is *taken*: the same firing, in the same order,
    /// handed to the caller as [`Next::Taken`] instead of recorded as in flight.
    pub fn next_taking(&mut self, net: &Net, take: &[bool]) -> Option<Next> {
        self.next_with(net, |i, step, binding| {
            if take.get(step as usize).copied().unwrap_or(false) && !net.keeps_inputs(step) {
                Next::Taken(i.take(net, step, binding))
            } else {
                Next::Fired(i.fire(net, step, binding))
            }
        })
    }

    /// Searches dirty steps for a binding and fires the first one found with `fire`.
    #[inline]
    fn next_with<R>(
        &mut self,
        net: &Net,
        mut fire: impl FnMut(&mut Self, StepId, &[(SlotId, usize)]) -> R,
    ) -> Option<R> {
        if !matches!(
            self.status,
            Status::Running | Status::Waiting | Status::Stuck
        ) {
            return None;
        }
        while let Some(step) = self.dirty.pop_front() {
            self.is_dirty[step as usize] = false;
            // One input, no guard: the oldest token, without building a binding.
            if let [slot] = net.input_slots[step as usize][..]
                && net.step(step).guard.is_none()
            {
                if self.marking.len(slot) > 0 {
                    return Some(fire(self, step, &[(slot, 0)]));
                }
                continue;
            }
            if let Some(b) = self.bind(net, step) {
                return Some(fire(self, step, &b));
            }
        }
        None
    }

    /// Applies an action's outcome to the firing it belongs to. The result comes as an
    /// `Arc`: the runtime wraps a tool's result once, where it is produced, and the emitted
    /// tokens share it, instead of moving the value (80 bytes) through every hop from the
    /// tool to here.
    pub fn complete(
        &mut self,
        net: &Net,
        firing: FiringId,
        outcome: Result<Arc<Value>, ActionError>,
        now: i64,
    ) -> Completion {
        let Some(inf) = self.in_flight.get_mut(&firing) else {
            return Completion::Unknown;
        };
        let step = inf.step;
        let s = net.step(step);
        let err = match outcome {
            Ok(result) => match self.emit(net, firing, step, result, now) {
                Ok(ids) => return Completion::Emitted(ids),
                Err(e) => e,
            },
            Err(e) => {
                if e.retryable
                    && let Some(r) = &s.retry
                    && inf.attempt <= r.max
                {
                    let exp = r
                        .multiplier
                        .powi(inf.attempt.saturating_sub(1).min(64) as i32);
                    let delay = (r.backoff_ms as f64 * exp).min(3_600_000.0) as u64;
                    inf.attempt += 1;
                    return Completion::Retry {
                        attempt: inf.attempt,
                        delay_ms: delay,
                    };
                }
                e
            }
        };
        self.fail(net, firing, err, now)
    }

    /// Puts the result tokens of a successful firing of `step` (in flight).
    fn emit(
        &mut self,
        net: &Net,
        firing: FiringId,
        step: StepId,
        result: Arc<Value>,
        now: i64,
    ) -> Result<std::ops::Range<TokenId>, ActionError> {
        let s = net.step(step);
        // Fast path: plain emits need no expression scope and no staging.
        if net.plain_emits(step) {
            let Some(mut inf) = self.in_flight.remove(&firing) else {
                return Ok(self.next_token..self.next_token);
            };
            // Moved out of the record, which is done with (no count up and down).
            let correlation = match inf.correlation.take() {
                Some(c) => c,
                None => Self::correlation_of(&inf, &self.root),
            };
            self.spare.keep(inf.tokens);
            return Ok(self.emit_plain(net, firing, step, correlation, result, now));
        }
        let Some(inf) = self.in_flight.get(&firing) else {
            return Ok(self.next_token..self.next_token);
        };
        let correlation = Self::correlation_of(inf, &self.root);
        let mut outs: Vec<(EventId, Arc<Value>)> = Vec::with_capacity(s.emits.len());
        {
            let fresh = fresh_id(&self.id, firing);
            let inputs: Vec<(&str, &Value)> = inf
                .tokens
                .iter()
                .map(|t| (net.event(t.event).name.as_str(), &*t.payload))
                .collect();
            let scope = Scope {
                inputs: &inputs,
                result: Some(&result),
                instance: &self.id,
                plan: &net.plan_name,
                fresh: &fresh,
            };
            for e in &s.emits {
                if let Some(w) = &e.when
                    && !w.eval_bool(&scope).unwrap_or(false)
                {
                    continue;
                }
                let payload = match &e.data {
                    None => Arc::clone(&result),
                    Some(t) => Arc::new(t.render(&scope).map_err(|err| {
                        ActionError::fatal(
                            "emit_data",
                            format!(
                                "the data for `{}` could not be rendered: {}",
                                net.event(e.event).name,
                                err.message
                            ),
                        )
                    })?),
                };
                if let Err(m) = net.check_payload(e.event, &payload) {
                    return Err(ActionError::fatal(
                        "emit_invalid",
                        format!(
                            "the payload for `{}` does not match the event's schema: {m} (at `{}`)",
                            net.event(e.event).name,
                            m.at(),
                        ),
                    ));
                }
                outs.push((e.event, payload));
            }
        }
        if let Some(inf) = self.in_flight.remove(&firing) {
            self.spare.keep(inf.tokens);
        }
        let first = self.next_token;
        for (ev, payload) in outs {
            self.put(
                net,
                ev,
                payload,
                Arc::clone(&correlation),
                Origin::Step { step, firing },
                now,
            );
        }
        Ok(first..self.next_token)
    }

    /// Puts `result` on every emit of `step` (plain emits: no `when`, no `data`).
    fn emit_plain(
        &mut self,
        net: &Net,
        firing: FiringId,
        step: StepId,
        correlation: Arc<str>,
        result: Arc<Value>,
        now: i64,
    ) -> std::ops::Range<TokenId> {
        let first = self.next_token;
        match &net.step(step).emits[..] {
            [e] => {
                self.put(
                    net,
                    e.event,
                    result,
                    correlation,
                    Origin::Step { step, firing },
                    now,
                );
            }
            emits => {
                for e in emits {
                    self.put(
                        net,
                        e.event,
                        Arc::clone(&result),
                        Arc::clone(&correlation),
                        Origin::Step { step, firing },
                        now,
                    );
                }
            }
        }
        first..self.next_token
    }

    /// The correlation the outputs of an in-flight firing get: its binding's.
    fn correlation_of(inf: &InFlight, root: &Arc<str>) -> Arc<str> {
        match &inf.correlation {
            Some(c) => Arc::clone(c),
            None => inf
                .tokens
                .first()
                .map(|t| Arc::clone(&t.correlation))
                .unwrap_or_else(|| Arc::clone(root)),
        }
    }

    /// Applies the failure policy after retries are exhausted.
    fn fail(&mut self, net: &Net, firing: FiringId, err: ActionError, now: i64) -> Completion {
        let Some(inf) = self.in_flight.remove(&firing) else {
            return Completion::Unknown;
        };
        let s = net.step(inf.step);
        let consumed = |e: &EventId| !net.event(*e).consumers.is_empty();
        let denied = s
            .denied_event
            .filter(consumed)
            .filter(|_| crate::net::DENIAL_CODES.contains(&err.code.as_str()));
        let listener = denied.or(s.failed_event.filter(consumed));
        let target = listener.or(match s.on_fail {
            FailPolicy::Emit(e) => Some(e),
            _ => None,
        });
        if let Some(event) = target {
            let inputs: serde_json::Map<String, Value> = inf
                .tokens
                .iter()
                .map(|t| (net.event(t.event).name.clone(), (*t.payload).clone()))
                .collect();
            let payload = json!({
                "step": s.name,
                "error": {"code": err.code, "message": err.message},
                "attempts": inf.attempt,
                "inputs": inputs,
            });
            let corr = Self::correlation_of(&inf, &self.root);
            let token = self.put(
                net,
                event,
                Arc::new(payload),
                corr,
                Origin::Failure {
                    step: inf.step,
                    firing,
                },
                now,
            );
            return Completion::ErrorToken { event, token };
        }
        match s.on_fail {
            FailPolicy::Continue => Completion::Dropped,
            FailPolicy::Repair => {
                // The firing is rolled back: its tokens go back where they were taken from,
                // so a revised plan (or a resume, which tries the step again) can use them.
                let slots = &net.input_slots[inf.step as usize];
                for (k, t) in inf.tokens.into_iter().enumerate() {
                    if let Some(&slot) = slots.get(k) {
                        self.marking.restore(net, slot, t);
                    }
                }
                self.status = Status::Paused {
                    reason: format!(
                        "step `{}` failed and awaits repair: {}",
                        s.name, err.message
                    ),
                };
                Completion::Repair(err)
            }
            _ => {
                self.status = Status::Failed {
                    reason: format!("step `{}` failed: [{}] {}", s.name, err.code, err.message),
                };
                Completion::Failed(err)
            }
        }
    }

    /// [`Instance::settle_with`] for an instance with no pending timer.
    pub fn settle(&mut self, net: &Net) -> &Status {
        self.settle_with(net, false)
    }

    /// Decides the status once nothing more can fire right now (see [`Status`]): acyclic
    /// instances with nothing in flight end `completed`, or settle `waiting` (a declared
    /// input event could enable a step, or `timer_pending`) or `stuck`; reactive ones keep
    /// running. A pure function of the net, the marking and `timer_pending`.
    pub fn settle_with(&mut self, net: &Net, timer_pending: bool) -> &Status {
        if matches!(
            self.status,
            Status::Running | Status::Waiting | Status::Stuck
        ) && self.in_flight.is_empty()
            && self.dirty.is_empty()
            && net.graph_type == GraphType::Acyclic
        {
            let done = net.events.iter().enumerate().any(|(e, ev)| {
                ev.is_output
                    && net.event_slots[e]
                        .iter()
                        .any(|&sl| self.marking.len(sl) > 0)
            });
            self.status = if done {
                Status::Completed
            } else if timer_pending || self.can_await(net) {
                Status::Waiting
            } else {
                Status::Stuck
            };
        }
        &self.status
    }

    /// Could a token on a declared input event enable `step`: it consumes one, and each of
    /// its other inputs is one too or holds a token?
    fn awaits_input(&self, net: &Net, step: usize) -> bool {
        let slots = &net.input_slots[step];
        let inputs = &net.steps[step].inputs;
        inputs.iter().any(|&e| net.event(e).external)
            && slots
                .iter()
                .zip(inputs)
                .all(|(&sl, &e)| net.event(e).external || self.marking.len(sl) > 0)
    }

    fn can_await(&self, net: &Net) -> bool {
        (0..net.steps.len()).any(|s| self.awaits_input(net, s))
    }

    /// The declared input events (`kind: input`) a token on which could enable a step, in
    /// the plan's event order: what a `waiting` instance waits for from outside.
    pub fn awaited_events(&self, net: &Net) -> Vec<String> {
        let mut want = vec![false; net.events.len()];
        for s in 0..net.steps.len() {
            if self.awaits_input(net, s) {
                for &e in &net.steps[s].inputs {
                    if net.event(e).external {
                        want[e as usize] = true;
                    }
                }
            }
        }
        net.events
            .iter()
            .zip(want)
            .filter(|(_, w)| *w)
            .map(|(e, _)| e.name.clone())
            .collect()
    }

    /// Stops the instance for good.
    pub fn stop(&mut self) {
        self.status = Status::Stopped;
    }

    /// Pauses the instance (e.g. the firing-rate limit) with a reason.
    pub fn pause(&mut self, reason: impl Into<String>) {
        if !self.status.is_terminal() {
            self.status = Status::Paused {
                reason: reason.into(),
            };
        }
    }

    /// Resumes a paused instance.
    pub fn resume(&mut self, net: &Net) {
        if matches!(self.status, Status::Paused { .. } | Status::Stuck) {
            self.status = Status::Running;
            self.touch_all(net);
        }
    }

    /// Steps that hold some of their inputs but cannot fire: what each one lacks.
    pub fn waiting(&self, net: &Net) -> Vec<Waiting> {
        let mut out = Vec::new();
        for (sid, s) in net.steps.iter().enumerate() {
            let slots = &net.input_slots[sid];
            let has: Vec<String> = slots
                .iter()
                .zip(&s.inputs)
                .filter(|(sl, _)| self.marking.len(**sl) > 0)
                .map(|(_, e)| net.event(*e).name.clone())
                .collect();
            if has.is_empty() {
                continue;
            }
            let lacks: Vec<String> = slots
                .iter()
                .zip(&s.inputs)
                .filter(|(sl, _)| self.marking.len(**sl) == 0)
                .map(|(_, e)| net.event(*e).name.clone())
                .collect();
            let guard_blocked = lacks.is_empty() && self.bind(net, sid as StepId).is_none();
            if !lacks.is_empty() || guard_blocked {
                let guard_error = if guard_blocked {
                    self.guard_error(net, sid as StepId)
                } else {
                    None
                };
                out.push(Waiting {
                    step: s.name.clone(),
                    has,
                    lacks,
                    guard_blocked,
                    guard_error,
                });
            }
        }
        out
    }

    /// The event token `id` sits on, if it is in the marking (a scan: for traces only).
    pub fn token_event(&self, id: TokenId) -> Option<EventId> {
        self.marking
            .slots
            .iter()
            .find_map(|sl| sl.tokens.iter().find(|t| t.id == id).map(|t| t.event))
    }

    /// The error `step`'s guard raises on the oldest token of each input, if it raises one
    /// (one evaluation: a diagnosis, not a search).
    pub fn guard_error(&self, net: &Net, step: StepId) -> Option<String> {
        let s = net.step(step);
        let g = s.guard.as_ref()?;
        let slots = &net.input_slots[step as usize];
        let mut inputs: Vec<(&str, &Value)> = Vec::with_capacity(slots.len());
        for (&sl, &e) in slots.iter().zip(&s.inputs) {
            let t = self.marking.slots[sl as usize].tokens.get(0)?;
            inputs.push((net.event(e).name.as_str(), &*t.payload));
        }
        let fresh = String::new();
        let scope = Scope {
            inputs: &inputs,
            result: None,
            instance: &self.id,
            plan: &net.plan_name,
            fresh: &fresh,
        };
        g.eval_bool(&scope).err().map(|e| e.message)
    }

    /// Tokens on output events, by event name.
    pub fn results(&self, net: &Net) -> Vec<(String, Vec<Token>)> {
        net.events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.is_output)
            .filter_map(|(i, e)| {
                let slot = *net.event_slots[i].first()?;
                let toks: Vec<Token> = self.marking.slots[slot as usize]
                    .tokens
                    .iter()
                    .cloned()
                    .collect();
                (!toks.is_empty()).then(|| (e.name.clone(), toks))
            })
            .collect()
    }

    /// Moves the instance onto a revised plan's net (a repair): every token stays on the
    /// event of the same name, every in-flight firing on the step of the same name, and the
    /// instance runs again. A slot of `new` whose one consumer is a step that `old` also had
    /// gets exactly the tokens that step had not yet consumed; other slots of an event get
    /// every token still on it. Tokens on events, and firings of steps, that `new` no longer
    /// has are dropped and named in the error (the instance is then failed by the caller);
    /// the marking always ends up laid out for `new`. Pure and deterministic, so a journaled
    /// repair replays exactly.
    pub fn rebase(&mut self, old: &Net, new: &Net) -> Result<(), RebaseError> {
        let mut lost = RebaseError::default();
        let ev_map: Vec<Option<EventId>> =
            old.events.iter().map(|e| new.event_id(&e.name)).collect();
        let step_map: Vec<Option<StepId>> =
            old.steps.iter().map(|s| new.step_id(&s.name)).collect();
        let remap_origin = |o: &mut Origin| match o {
            Origin::Step { step, .. } | Origin::Failure { step, .. } => {
                if let Some(Some(n)) = step_map.get(*step as usize) {
                    *step = *n;
                }
            }
            _ => {}
        };
        let mut marking = Marking::new(new);
        for (oe, ev) in old.events.iter().enumerate() {
            let old_slots = &old.event_slots[oe];
            let mut any: Vec<&Token> = old_slots
                .iter()
                .flat_map(|&sl| self.marking.slots[sl as usize].tokens.iter())
                .collect();
            if any.is_empty() {
                continue;
            }
            let Some(ne) = ev_map[oe] else {
                lost.events.push(ev.name.clone());
                continue;
            };
            any.sort_by_key(|t| t.id);
            any.dedup_by_key(|t| t.id);
            for &nsl in &new.event_slots[ne as usize] {
                let consumers = &new.slots[nsl as usize].consumers;
                // The old slot the same consumer read from, if there is exactly one consumer.
                let own = match consumers.as_slice() {
                    [c] => old.step_id(&new.step(*c).name).and_then(|os| {
                        old.steps[os as usize]
                            .inputs
                            .iter()
                            .position(|&e| e as usize == oe)
                            .map(|k| old.input_slots[os as usize][k])
                    }),
                    _ => None,
                };
                let toks: Vec<&Token> = match own {
                    Some(osl) => self.marking.slots[osl as usize].tokens.iter().collect(),
                    None => any.clone(),
                };
                for t in toks {
                    let mut t = t.clone();
                    t.event = ne;
                    remap_origin(&mut t.origin);
                    marking.push(new, nsl, t);
                }
            }
        }
        let mut in_flight = InFlightMap::new();
        for (f, mut inf) in std::mem::take(&mut self.in_flight) {
            let Some(Some(ns)) = step_map.get(inf.step as usize).copied() else {
                lost.steps.push(old.step(inf.step).name.clone());
                continue;
            };
            inf.step = ns;
            for t in &mut inf.tokens {
                match ev_map.get(t.event as usize).copied().flatten() {
                    Some(ne) => t.event = ne,
                    None => lost.events.push(old.event(t.event).name.clone()),
                }
                remap_origin(&mut t.origin);
            }
            in_flight.insert(f, inf);
        }
        self.marking = marking;
        self.in_flight = in_flight;
        if !self.status.is_terminal() {
            self.status = Status::Running;
        }
        self.touch_all(new);
        lost.events.sort();
        lost.events.dedup();
        if lost.events.is_empty() && lost.steps.is_empty() {
            Ok(())
        } else {
            Err(lost)
        }
    }

    /// Fails the instance with `reason` (a repair that could not be made), unless it has
    /// already ended.
    pub fn fail_with(&mut self, reason: impl Into<String>) {
        if !self.status.is_terminal() {
            self.status = Status::Failed {
                reason: reason.into(),
            };
        }
    }

    /// Is anything left to examine or in flight?
    pub fn is_busy(&self) -> bool {
        !self.in_flight.is_empty() || !self.dirty.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::{Limits, parse_plan, validate};

    fn join_net(correlate: bool) -> Net {
        let plan = json!({
            "plan_name": "j", "graph_type": "reactive",
            "events": {"a": {"kind": "input"}, "b": {"kind": "input"}, "c": {"kind": "input"},
                       "out": {"kind": "output"}},
            "steps": {"j": {"on": ["a", "b", "c"], "action": "echo", "args": {},
                            "emits": ["out"], "correlate": correlate}}
        });
        let bytes = serde_json::to_vec(&plan).expect("ser");
        let plan = parse_plan(&bytes, &Limits::default()).expect("parses");
        let v = validate(&plan, None, &Limits::default());
        assert!(!v.has_errors(), "{:#?}", v.findings);
        v.net.expect("net")
    }

    /// The one-pass binding of a join without a guard is the recursive search's, token for
    /// token, whatever the correlations on each input.
    #[test]
    fn unguarded_joins_bind_as_the_search_does() {
        // Correlations per input, oldest first.
        let layouts: &[[&[&str]; 3]] = &[
            [&["x"], &["x"], &["x"]],
            [&["x", "y"], &["y", "x"], &["y"]],
            [&["x", "y", "z"], &["z", "y"], &["q", "z", "y"]],
            [&["x"], &["y"], &["x"]],
            [&["i1", "x"], &["x", "i1"], &["i1"]],
            [&["x", "x", "y"], &["y", "x", "x"], &["x", "y", "y"]],
        ];
        for correlate in [true, false] {
            let net = join_net(correlate);
            let step = net.step_id("j").expect("j");
            for layout in layouts {
                let mut inst = Instance::start(&net, "i1", json!({}), 0);
                for (k, corrs) in layout.iter().enumerate() {
                    let event = net.steps[step as usize].inputs[k];
                    for (n, c) in corrs.iter().enumerate() {
                        inst.add_token(&net, event, json!({"n": n}), Some(c), 0)
                            .expect("token");
                    }
                }
                let mut searched = Vec::new();
                let mut budget = MAX_GUARD_EVALS;
                let found = inst
                    .search(&net, step, &mut searched, &mut budget)
                    .then_some(searched);
                assert_eq!(
                    inst.bind(&net, step),
                    found,
                    "correlate {correlate}, {layout:?}"
                );
            }
        }
    }
}
