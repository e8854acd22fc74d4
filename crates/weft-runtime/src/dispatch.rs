//! Carrying out the commands of firings: calling tools and applying their outcomes.
//!
//! A tool's future is polled once, inline, with the cell's waker ([`Cell::kick`]). Pure and
//! in-memory tools are ready at once and their outcome is applied in the same loop iteration,
//! with no channel hop and no task. Only futures that are still pending are kept (in the
//! instance's [`crate::cell::Pending`], or spawned on tokio for `write` tools so they run in
//! parallel); while the instance has no task, their first wake starts it.
//! Panics are caught and become `tool_panic` errors; unknown tools, args that fail the
//! tool's schema and args that cannot be rendered are fatal errors; `timeout_ms` bounds
//! every attempt. An immediate tool that waits for the journal (`Tool::waits_for_journal`,
//! a durable engine's gate) is queued with its journal mark and called inline by
//! [`Cell::run_gated`] once the journal says the mark is durable.

use std::any::Any;
use std::collections::VecDeque;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};

use futures::FutureExt;
use serde_json::Value;
use weft_core::instance::{Completion, idempotency_key};
use weft_core::token::FiringId;
use weft_core::{ActionError, Args, EventId, Fired, Net, StepId, Taken, Token};
use weft_tools::{
    BoxFuture, InlineArgs, InlineContext, InputName, Tool, ToolContext, ToolError, ToolServices,
};

use crate::cell::{Active, Cell, Core, PendingFut, Ready};
use crate::clock::Clock;
use crate::outcome::TraceEntry;
use crate::plans::{CompiledPlan, StepRt};

/// The error for a caught panic.
pub(crate) fn panic_error(p: Box<dyn Any + Send>) -> ActionError {
    let msg = p
        .downcast_ref::<&str>()
        .map(|s| (*s).to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a tool panicked".to_string());
    ActionError::new("tool_panic", format!("the tool panicked: {msg}"))
}

/// A pending tool future, bounded: panics are caught and `timeout_ms` bounds the attempt
/// (its timer starts at the first poll of the guard).
struct Guarded {
    fut: BoxFuture<'static, Result<Value, ToolError>>,
    timeout_ms: Option<u64>,
    clock: Arc<dyn Clock>,
    sleep: Option<BoxFuture<'static, ()>>,
    /// The waker the tool future was last polled with, just before it was guarded (the
    /// dispatch's inline poll): a first poll with the same waker starts only the timer,
    /// as polling the tool again would just repeat that poll.
    polled_with: Option<Waker>,
}

impl Guarded {
    fn new(
        fut: BoxFuture<'static, Result<Value, ToolError>>,
        timeout_ms: Option<u64>,
        clock: Arc<dyn Clock>,
        polled_with: Option<Waker>,
    ) -> Self {
        Guarded {
            fut,
            timeout_ms,
            clock,
            sleep: None,
            polled_with,
        }
    }
}

impl Future for Guarded {
    type Output = Result<Value, ActionError>;

    fn poll(self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let repeat = this
            .polled_with
            .take()
            .is_some_and(|w| w.will_wake(cx.waker()));
        if !repeat {
            match catch_unwind(AssertUnwindSafe(|| this.fut.as_mut().poll(cx))) {
                Ok(Poll::Ready(r)) => return Poll::Ready(r.map_err(ActionError::from)),
                Ok(Poll::Pending) => {}
                Err(p) => return Poll::Ready(Err(panic_error(p))),
            }
        }
        if let Some(ms) = this.timeout_ms {
            let clock = &this.clock;
            let sleep = this.sleep.get_or_insert_with(|| clock.sleep(ms));
            if sleep.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Err(timeout_error(ms)));
            }
        }
        Poll::Pending
    }
}

/// A step whose tool is not registered.
fn unknown_tool(srt: &StepRt) -> ActionError {
    ActionError::fatal(
        "unknown_tool",
        format!(
            "step `{}`: no tool named `{}` is registered",
            srt.name, srt.action
        ),
    )
}

fn timeout_error(ms: u64) -> ActionError {
    ActionError::new(
        "timeout",
        format!("the action did not finish within {ms} ms"),
    )
}

/// The `weft.step` span of one attempt of a firing (tenant, instance, step, action, firing,
/// attempt, idempotency key; `outcome` is recorded when the result is known). Disabled
/// (one level check, no allocation) unless a subscriber wants INFO spans.
fn step_span(ctx: &ToolContext, action: &str, firing: FiringId) -> tracing::Span {
    if !step_spans_enabled() {
        return tracing::Span::none();
    }
    step_span_of(
        &ctx.tenant,
        &ctx.instance,
        &ctx.step,
        action,
        firing,
        ctx.attempt,
        &ctx.idempotency_key,
    )
}

/// Whether a subscriber wants `weft.step` spans (one cached level check).
fn step_spans_enabled() -> bool {
    tracing::enabled!(target: "weft::step", tracing::Level::INFO)
}

/// The `weft.step` span from its parts (the inline path has no `ToolContext` to read).
fn step_span_of(
    tenant: &str,
    instance: &str,
    step: &str,
    action: &str,
    firing: FiringId,
    attempt: u32,
    key: &str,
) -> tracing::Span {
    tracing::info_span!(target: "weft::step", "weft.step", tenant, instance, step, action,
        firing, attempt, idempotency_key = key, outcome = tracing::field::Empty)
}

/// Records a result on its step span: `ok`, or the error's code.
fn step_outcome<T>(span: &tracing::Span, r: &Result<T, ActionError>) {
    if !span.is_disabled() {
        span.record(
            "outcome",
            r.as_ref().map_or_else(|e| e.code.as_str(), |_| "ok"),
        );
    }
}

/// Aborts a spawned task when the instance drops it (stop, failure).
struct AbortOnDrop(tokio::task::JoinHandle<Result<Value, ActionError>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Future for AbortOnDrop {
    type Output = Result<Value, ActionError>;
    fn poll(mut self: std::pin::Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.0.poll_unpin(cx).map(|r| match r {
            Ok(r) => r,
            Err(e) if e.is_panic() => Err(panic_error(e.into_panic())),
            Err(e) => Err(ActionError::new("cancelled", e.to_string())),
        })
    }
}

impl Cell {
    fn context(
        self: &Arc<Self>,
        plan: &Arc<str>,
        srt: &StepRt,
        key: Arc<str>,
        attempt: u32,
        inputs: Vec<(Arc<str>, Arc<Value>)>,
    ) -> ToolContext {
        ToolContext {
            tenant: Arc::clone(&self.tenant),
            instance: Arc::clone(&self.name),
            plan: Arc::clone(plan),
            step: Arc::clone(&srt.name),
            idempotency_key: key,
            attempt,
            deadline: srt
                .timeout_ms
                .map(|ms| std::time::Instant::now() + std::time::Duration::from_millis(ms)),
            inputs: Arc::new(inputs),
            services: Arc::clone(self) as Arc<dyn ToolServices>,
        }
    }

    /// The tool's view of a firing's inputs (shared with the in-flight record), each name
    /// passed through `name` (kept borrowed for an inline call, made an `Arc` for a context).
    fn inputs_with<'p, N>(
        srt: &'p StepRt,
        core: &Core,
        firing: FiringId,
        name: impl Fn(InputName<'p>) -> N,
    ) -> Vec<(N, Arc<Value>)> {
        core.inst
            .as_ref()
            .and_then(|i| i.in_flight.get(&firing))
            .map(|inf| {
                inf.tokens
                    .iter()
                    .enumerate()
                    .map(|(k, t)| {
                        (
                            name(Self::input_name(&core.plan.net, srt, k, t.event)),
                            Arc::clone(&t.payload),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// [`Cell::inputs_with`] for a [`ToolContext`].
    fn inputs(&self, srt: &StepRt, core: &Core, firing: FiringId) -> Vec<(Arc<str>, Arc<Value>)> {
        Self::inputs_with(srt, core, firing, |n| n.to_arc())
    }

    /// The event name of the `k`-th consumed token (the step's `k`-th input), borrowed from
    /// the compiled plan when it is the step's own.
    fn input_name<'p>(net: &Net, srt: &'p StepRt, k: usize, event: EventId) -> InputName<'p> {
        match srt.inputs.get(k) {
            Some((e, n)) if *e == event => InputName::Plan(n),
            _ => InputName::Owned(Arc::from(net.event(event).name.as_str())),
        }
    }

    /// Runs the effect of a firing of `plan` (the instance's current plan, held by the
    /// caller).
    pub(crate) fn dispatch(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        f: Fired,
        ready: &mut VecDeque<Ready>,
    ) {
        let srt = &plan.steps[f.step as usize];
        if core.trace.is_some() {
            self.trace_start(core, &f);
        }
        self.publish(
            "plan.step.started",
            || serde_json::json!({"step": &*srt.name, "firing": f.firing, "action": srt.action}),
        );
        let (tool, args) = match Self::prepare(plan, srt, f.step, f.args) {
            Ok(prepared) => prepared,
            Err(e) => {
                ready.push_back(Ready::Outcome(f.firing, Err(e)));
                return;
            }
        };
        if srt.immediate {
            if srt.gated
                && let Some(j) = &self.engine.journal
            {
                // Called in the loop once the journal is durable (`Cell::run_gated`): the
                // args wait with the firing, the tokens stay in its in-flight record.
                let mark = j.gate(
                    &self.tenant,
                    &self.name,
                    &srt.name,
                    f.firing,
                    tool.spec().idempotent,
                );
                let args = match args {
                    InlineArgs::Owned(v) => Some(v),
                    InlineArgs::Literal(_) => None,
                };
                let active = core
                    .active
                    .get_or_insert_with(|| Box::new(Active::default()));
                active.gated.push_back((mark, f.firing, args));
                if let Some(w) = &active.waker {
                    w.wake_by_ref();
                }
                return;
            }
            self.call_immediate(core, plan, srt, tool, f.firing, args, ready);
            return;
        }
        self.call_first(core, plan, srt, tool, f.firing, args.into_value(), ready);
    }

    /// The tool of a firing of `step` and its args, checked: rendered, lent from the plan
    /// when literal (no copy, no count per firing), and valid for the tool's schema. The
    /// tool is borrowed: an immediate call needs no reference of its own (cloning the `Arc`
    /// cost two atomic operations per step); a deferred call clones it.
    fn prepare<'p>(
        plan: &'p CompiledPlan,
        srt: &'p StepRt,
        step: StepId,
        args: Result<Option<Args>, String>,
    ) -> Result<(&'p Arc<dyn Tool>, InlineArgs<'p>), ActionError> {
        let args = match args {
            Ok(Some(a)) => InlineArgs::Owned(a.into_value()),
            Ok(None) => match plan.net.literal_args(step) {
                Some(v) => InlineArgs::Literal(v),
                None => InlineArgs::Owned(Value::Null),
            },
            Err(m) => {
                return Err(ActionError::fatal(
                    "args_invalid",
                    format!("the args of step `{}` could not be rendered: {m}", srt.name),
                ));
            }
        };
        let Some(tool) = srt.tool.as_ref() else {
            return Err(unknown_tool(srt));
        };
        if let Some(v) = &srt.validator
            && let Err(e) = v.check(args.as_value())
        {
            return Err(ActionError::fatal(
                "args_invalid",
                format!(
                    "the args of step `{}` do not match the schema of `{}`: {e} (at `{}`)",
                    srt.name,
                    srt.action,
                    e.at()
                ),
            ));
        }
        Ok((tool, args))
    }

    /// Runs a firing the loop took instead of recording it as in flight
    /// ([`weft_core::Instance::next_taking`]: an immediate tool, and nothing reads the
    /// consumed tokens once the tool has them): calls the tool with the tokens' payloads at
    /// once and queues its result to be put on the step's emits. Anything else (args that
    /// do not render or validate, a tool error or panic) records the firing as in flight,
    /// just as [`Cell::dispatch`] and [`Cell::call_immediate`] would have left it, and
    /// queues the error as that firing's outcome.
    pub(crate) fn call_taken(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        taken: Taken,
        ready: &mut VecDeque<Ready>,
    ) {
        let Taken {
            firing,
            step,
            mut tokens,
            args,
        } = taken;
        let net = &*plan.net;
        let srt = &plan.steps[step as usize];
        let Some(inst) = core.inst.as_mut() else {
            return;
        };
        let (tool, args) = match Self::prepare(plan, srt, step, args) {
            Ok(prepared) => prepared,
            Err(e) => {
                // Not dispatched: the record keeps its tokens, as `fire` leaves it.
                inst.keep_in_flight(firing, step, tokens, None);
                ready.push_back(Ready::Outcome(firing, Err(e)));
                return;
            }
        };
        let build = |inputs| {
            let key = Arc::from(idempotency_key(&self.name, &srt.name, firing));
            self.context(&plan.name, srt, key, 1, inputs)
        };
        // The payloads go to the tool; the binding's correlation (its first token's) moves
        // to the result.
        let mut drained = tokens.drain(..);
        let (correlation, ctx) = match drained.next() {
            Some(Token {
                event,
                payload,
                correlation,
                ..
            }) if drained.len() == 0 => (
                correlation,
                InlineContext::one(Self::input_name(net, srt, 0, event), payload, &build),
            ),
            Some(Token {
                event,
                payload,
                correlation,
                ..
            }) => {
                let mut v = Vec::with_capacity(drained.len() + 1);
                v.push((Self::input_name(net, srt, 0, event), payload));
                for (k, t) in drained.by_ref().enumerate() {
                    v.push((Self::input_name(net, srt, k + 1, t.event), t.payload));
                }
                (correlation, InlineContext::named(v, &build))
            }
            None => (
                Arc::clone(inst.root_correlation()),
                InlineContext::named(Vec::new(), &build),
            ),
        };
        drop(drained);
        inst.recycle(tokens);
        match self.call_inline(srt, tool, firing, ctx, args) {
            Ok(result) => ready.push_back(Ready::Emit {
                firing,
                step,
                correlation,
                result,
            }),
            Err(e) => {
                if let Some(inst) = core.inst.as_mut() {
                    // As `detach_inputs` leaves the record: no tokens, the correlation.
                    inst.keep_in_flight(firing, step, Vec::new(), Some(correlation));
                }
                ready.push_back(Ready::Outcome(firing, Err(e)));
            }
        }
    }

    /// Calls an immediate tool in the loop, in its `weft.step` span when a subscriber wants
    /// one: a panic becomes a `tool_panic` error. The result is wrapped in its `Arc` inside
    /// the unwind guard, so what moves out of the call is a pointer, not the 80-byte value
    /// (each move of the value through the `Result` combinators is a stack copy that `perf
    /// annotate` shows stalling).
    fn call_inline(
        &self,
        srt: &StepRt,
        tool: &Arc<dyn Tool>,
        firing: FiringId,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Arc<Value>, ActionError> {
        let call = || {
            catch_unwind(AssertUnwindSafe(|| {
                tool.call_inline(ctx, args).map(Arc::new)
            }))
        };
        if step_spans_enabled() {
            let key = idempotency_key(&self.name, &srt.name, firing);
            let span = step_span_of(
                &self.tenant,
                &self.name,
                &srt.name,
                &srt.action,
                firing,
                1,
                &key,
            );
            let r = match span.in_scope(call) {
                Ok(r) => r.map_err(ActionError::from),
                Err(p) => Err(panic_error(p)),
            };
            step_outcome(&span, &r);
            r
        } else {
            // No span wanted: nothing to enter or record.
            match call() {
                Ok(r) => r.map_err(ActionError::from),
                Err(p) => Err(panic_error(p)),
            }
        }
    }

    /// The first attempt of a tool that is not called inline: with a context, through
    /// [`Cell::call`].
    #[allow(clippy::too_many_arguments)]
    fn call_first(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &CompiledPlan,
        srt: &StepRt,
        tool: &Arc<dyn Tool>,
        firing: FiringId,
        args: Value,
        ready: &mut VecDeque<Ready>,
    ) {
        let key: Arc<str> = Arc::from(idempotency_key(&self.name, &srt.name, firing));
        let inputs = self.inputs(srt, core, firing);
        let ctx = self.context(&plan.name, srt, key, 1, inputs);
        self.call(
            core,
            firing,
            Arc::clone(tool),
            ctx,
            args,
            srt.timeout_ms,
            srt.spawn,
            ready,
        );
    }

    /// Calls an immediate tool in the loop: it finishes at once, so its outcome is applied
    /// before anything else can look at the instance, and the consumed tokens can go to
    /// the tool when nothing reads them afterwards (a payload only the tool holds is then
    /// taken over, not copied).
    #[allow(clippy::too_many_arguments)]
    fn call_immediate(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &Arc<CompiledPlan>,
        srt: &StepRt,
        tool: &Arc<dyn Tool>,
        firing: FiringId,
        args: InlineArgs<'_>,
        ready: &mut VecDeque<Ready>,
    ) {
        let net = &*plan.net;
        // The context (names, key, services) is built only if the tool asks for it.
        let build = |inputs| {
            let key = Arc::from(idempotency_key(&self.name, &srt.name, firing));
            self.context(&plan.name, srt, key, 1, inputs)
        };
        let detached = core
            .inst
            .as_mut()
            .and_then(|i| i.detach_inputs(net, firing))
            .map(|mut tokens| {
                if tokens.len() == 1
                    && let Some((event, payload)) = tokens.next()
                {
                    // One input: held in place, no vector.
                    return InlineContext::one(
                        Self::input_name(net, srt, 0, event),
                        payload,
                        &build,
                    );
                }
                let mut v = Vec::with_capacity(tokens.len());
                for (k, (event, payload)) in tokens.enumerate() {
                    v.push((Self::input_name(net, srt, k, event), payload));
                }
                InlineContext::named(v, &build)
            });
        let ctx = match detached {
            Some(ctx) => ctx,
            // Names stay borrowed (no second vector of `Arc` names).
            None => InlineContext::named(Self::inputs_with(srt, core, firing, |n| n), &build),
        };
        let r = self.call_inline(srt, tool, firing, ctx, args);
        ready.push_back(Ready::Outcome(firing, r));
    }

    /// Calls the gated immediate actions whose journal mark is durable, in dispatch order
    /// (`Tool::waits_for_journal`), and applies their outcomes; returns whether it called
    /// any. A mark that cannot become durable fails its action with
    /// `journal_unavailable`; one that is not durable yet leaves the rest waiting (the
    /// journal wakes `cx`).
    pub(crate) fn run_gated(self: &Arc<Self>, core: &mut Core, cx: &mut Context<'_>) -> bool {
        let Some(j) = self.engine.journal.clone() else {
            return false;
        };
        let plan = Arc::clone(&core.plan);
        let mut ready: VecDeque<Ready> = VecDeque::new();
        while let Some(&(mark, firing, _)) = core.active.as_ref().and_then(|a| a.gated.front()) {
            let res = match j.poll_durable(&self.name, mark, cx) {
                Poll::Pending => break,
                Poll::Ready(r) => r,
            };
            let Some((_, _, args)) = core.active.as_mut().and_then(|a| a.gated.pop_front()) else {
                break;
            };
            if let Err(why) = res {
                ready.push_back(Ready::Outcome(
                    firing,
                    Err(ActionError::fatal(
                        "journal_unavailable",
                        format!("the action was not dispatched: {why}"),
                    )),
                ));
                continue;
            }
            // The step as the current plan knows it (a repair may have rebased the firing).
            let Some(step) = core
                .inst
                .as_ref()
                .and_then(|i| i.in_flight.get(&firing))
                .map(|f| f.step)
            else {
                continue;
            };
            let srt = &plan.steps[step as usize];
            let args = match args {
                Some(v) => InlineArgs::Owned(v),
                None => match plan.net.literal_args(step) {
                    Some(v) => InlineArgs::Literal(v),
                    None => InlineArgs::Owned(Value::Null),
                },
            };
            match srt.tool.as_ref() {
                Some(tool) if srt.immediate => {
                    self.call_immediate(core, &plan, srt, tool, firing, args, &mut ready)
                }
                Some(tool) => self.call_first(
                    core,
                    &plan,
                    srt,
                    tool,
                    firing,
                    args.into_value(),
                    &mut ready,
                ),
                None => ready.push_back(Ready::Outcome(firing, Err(unknown_tool(srt)))),
            }
        }
        if ready.is_empty() {
            return false;
        }
        self.run_ready(core, ready);
        true
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        self: &Arc<Self>,
        core: &mut Core,
        firing: FiringId,
        tool: Arc<dyn Tool>,
        ctx: ToolContext,
        args: Value,
        timeout_ms: Option<u64>,
        spawn: bool,
        ready: &mut VecDeque<Ready>,
    ) {
        let span = step_span(&ctx, &tool.spec().name, firing);
        let entered = span.enter();
        let mut fut = match catch_unwind(AssertUnwindSafe(|| tool.call(ctx, args))) {
            Ok(f) => f,
            Err(p) => {
                ready.push_back(Ready::Outcome(firing, Err(panic_error(p))));
                return;
            }
        };
        // Polled with the cell's waker: when the instance has no task, the tool's first
        // wake starts it (`push_pending`).
        let kick = self.kick();
        let mut cx = Context::from_waker(kick);
        let r = match catch_unwind(AssertUnwindSafe(|| fut.as_mut().poll(&mut cx))) {
            Ok(Poll::Ready(r)) => r.map_err(ActionError::from),
            Ok(Poll::Pending) => {
                drop(entered);
                let g = Guarded::new(
                    fut,
                    timeout_ms,
                    Arc::clone(&self.engine.clock),
                    Some(kick.clone()),
                );
                if span.is_disabled() {
                    self.push_pending(core, firing, g, spawn, ready);
                } else {
                    let s = span.clone();
                    let g = tracing::Instrument::instrument(g, span)
                        .inspect(move |r| step_outcome(&s, r));
                    self.push_pending(core, firing, g, spawn, ready);
                }
                return;
            }
            Err(p) => Err(panic_error(p)),
        };
        step_outcome(&span, &r);
        ready.push_back(Ready::Outcome(firing, r.map(Arc::new)));
    }

    /// Keeps a pending action for the instance's task, starting the task if it has none; on
    /// a runtime of several threads ([`crate::engine::lazy_tasks`]), the action is instead
    /// polled once with [`Cell::kick`] (the guards and timers around it too), so its first
    /// wake starts the task, and one that finishes on that poll is applied in the loop.
    fn push_pending(
        self: &Arc<Self>,
        core: &mut Core,
        firing: FiringId,
        fut: impl Future<Output = Result<Value, ActionError>> + Send + 'static,
        spawn: bool,
        ready: &mut VecDeque<Ready>,
    ) {
        let rt = self.engine.runtime();
        let lazy = crate::engine::lazy_tasks(rt.as_ref());
        let mut fut: PendingFut = match rt.filter(|_| spawn) {
            Some(h) => Box::pin(AbortOnDrop(h.spawn(fut)).map(move |r| (firing, r.map(Arc::new)))),
            None => Box::pin(fut.map(move |r| (firing, r.map(Arc::new)))),
        };
        let active = core
            .active
            .get_or_insert_with(|| Box::new(Active::default()));
        if self.task_live() || !lazy {
            active.pending.push(fut);
            if let Some(w) = &active.waker {
                w.wake_by_ref();
            }
            self.spawn_task();
            return;
        }
        let mut cx = Context::from_waker(self.kick());
        match fut.as_mut().poll(&mut cx) {
            Poll::Ready((firing, r)) => ready.push_back(Ready::Outcome(firing, r)),
            Poll::Pending => active.pending.push(fut),
        }
    }

    /// Applies an action's outcome (`plan`: the instance's current plan, held by the caller).
    pub(crate) fn complete(
        self: &Arc<Self>,
        core: &mut Core,
        plan: &CompiledPlan,
        firing: FiringId,
        result: Result<Arc<Value>, ActionError>,
        now: i64,
        ready: &mut VecDeque<Ready>,
    ) {
        let net = &*plan.net;
        let Some(inst) = core.inst.as_mut() else {
            return;
        };
        let Some(step) = inst.in_flight.get(&firing).map(|f| f.step) else {
            return;
        };
        let traced = core
            .trace
            .is_some()
            .then(|| result.clone().map(Arc::unwrap_or_clone));
        let err = if self.engine.bus.wants() {
            result.as_ref().err().cloned()
        } else {
            None
        };
        let c = inst.complete(net, firing, result, now);
        if !inst.in_flight.contains_key(&firing) {
            self.forget_approvals(firing);
        }
        if let (Some(t), Some(out)) = (core.trace.as_mut(), traced)
            && let Some(e) = t.iter_mut().find(|e| e.firing == firing)
        {
            e.outcome = Some(out);
            e.finished_ms = Some(now);
            match &c {
                Completion::Emitted(ids) => e.emitted = ids.clone().collect(),
                Completion::ErrorToken { token, .. } => e.emitted = vec![*token],
                Completion::Retry { attempt, .. } => e.attempts = *attempt,
                _ => {}
            }
            e.emitted_events = e
                .emitted
                .iter()
                .map(|&id| inst.token_event(id).map(|ev| net.event(ev).name.clone()))
                .collect();
        }
        let sname = &plan.steps[step as usize].name;
        let repair = match &c {
            Completion::Repair(e) => {
                Some(format!("step `{sname}` failed: [{}] {}", e.code, e.message))
            }
            _ => None,
        };
        match c {
            Completion::Retry { attempt, delay_ms } => {
                self.publish("plan.step.error", || {
                    serde_json::json!({"step": &**sname, "firing": firing, "error": err, "retry": attempt})
                });
                self.retry(core, firing, attempt, delay_ms, ready);
            }
            Completion::Emitted(ids) => self.publish("plan.step.finished", || {
                let ids: Vec<_> = ids.collect();
                serde_json::json!({"step": &**sname, "firing": firing, "emitted": ids})
            }),
            Completion::Unknown => {}
            other => self.publish("plan.step.error", || {
                let handled = match other {
                    Completion::ErrorToken { .. } => "error_token",
                    Completion::Dropped => "dropped",
                    Completion::Repair(_) => "repair",
                    _ => "abort",
                };
                serde_json::json!({"step": &**sname, "firing": firing, "error": err, "handled": handled})
            }),
        }
        if let Some(failure) = repair {
            self.request_repair(core, failure);
        }
    }

    /// Runs another attempt of a firing after `delay_ms`, with the same idempotency key.
    pub(crate) fn retry(
        self: &Arc<Self>,
        core: &mut Core,
        firing: FiringId,
        attempt: u32,
        delay_ms: u64,
        ready: &mut VecDeque<Ready>,
    ) {
        let plan = Arc::clone(&core.plan);
        let Some((step, args)) = core.inst.as_ref().and_then(|i| {
            let step = i.in_flight.get(&firing)?.step;
            Some((step, i.args(&plan.net, firing)?))
        }) else {
            return;
        };
        let srt = &plan.steps[step as usize];
        let Some(tool) = srt.tool.clone() else {
            return;
        };
        let args = match args {
            Ok(a) => a,
            Err(m) => {
                ready.push_back(Ready::Outcome(
                    firing,
                    Err(ActionError::fatal(
                        "args_invalid",
                        format!("the args of step `{}` could not be rendered: {m}", srt.name),
                    )),
                ));
                return;
            }
        };
        // Same key as `weft_core::Instance::fire`, so retries keep it.
        let key: Arc<str> = Arc::from(idempotency_key(&self.name, &srt.name, firing));
        let inputs = self.inputs(srt, core, firing);
        let ctx = self.context(&plan.name, srt, key, attempt, inputs);
        if delay_ms == 0 {
            self.call(
                core,
                firing,
                tool,
                ctx,
                args,
                srt.timeout_ms,
                srt.spawn,
                ready,
            );
            return;
        }
        let clock = Arc::clone(&self.engine.clock);
        let timeout = srt.timeout_ms;
        let span = step_span(&ctx, &srt.action, firing);
        let fut = async move {
            clock.sleep(delay_ms).await;
            let r = match catch_unwind(AssertUnwindSafe(|| span.in_scope(|| tool.call(ctx, args))))
            {
                Ok(f) => {
                    tracing::Instrument::instrument(
                        Guarded::new(f, timeout, clock, None),
                        span.clone(),
                    )
                    .await
                }
                Err(p) => Err(panic_error(p)),
            };
            step_outcome(&span, &r);
            r
        };
        self.push_pending(core, firing, fut, srt.spawn, ready);
    }

    fn trace_start(&self, core: &mut Core, f: &Fired) {
        let plan = Arc::clone(&core.plan);
        let net = &*plan.net;
        let now = self.engine.clock.now_ms();
        let binding = core
            .inst
            .as_ref()
            .and_then(|i| i.in_flight.get(&f.firing))
            .map(|inf| {
                inf.tokens
                    .iter()
                    .map(|t| {
                        (
                            t.id,
                            net.event(t.event).name.clone(),
                            Arc::clone(&t.payload),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        if let Some(t) = core.trace.as_mut() {
            t.push(TraceEntry {
                firing: f.firing,
                step: net.step(f.step).name.clone(),
                binding,
                args: f.args_value(net),
                attempts: 1,
                outcome: None,
                emitted: Vec::new(),
                emitted_events: Vec::new(),
                started_ms: now,
                finished_ms: None,
            });
        }
    }

    /// Publishes a lifecycle event if anyone listens; `data` is only built then.
    pub(crate) fn publish(&self, ty: &str, data: impl FnOnce() -> Value) {
        let bus = &self.engine.bus;
        if !bus.wants() {
            return;
        }
        bus.publish(self.engine.cloud_event(
            ty,
            &self.tenant,
            Some(&self.name),
            &self.plan_name,
            data(),
        ));
    }
}
