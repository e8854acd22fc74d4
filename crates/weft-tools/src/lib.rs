//! weft-tools: the tool interface, what a step's `action` runs through.
//!
//! A [`Tool`] is described by a [`ToolSpec`] (name, description, args schema, effect class,
//! idempotency: the same description the validator and the LLM planner see) and called with
//! a [`ToolContext`] carrying tenant, instance, step, idempotency key and deadline. Tools that
//! need the engine (timers, child plans, the instance's key-value context) reach it through
//! the [`ToolServices`] trait, which the runtime implements; this keeps tools testable and
//! free of any dependency on the runtime crate. The [`Registry`] is the one table of tools,
//! and the [`Chain`] is the one ordered list of interceptors every call passes.
//!
//! This crate is the interface only: the engine depends on it and on nothing that performs a
//! call. The built-in tools live in `weft-builtins`; tools users bring come from the sources
//! the assembly point (`weft-node`) reads from the configuration.

pub mod approval;
pub mod budget;
pub mod chain;
pub mod decision;
pub mod http_guard;
pub mod profile;
pub mod registry;
pub mod shared;
pub mod timed;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
pub use weft_core::catalog::{Effect, ToolSpec};
pub use weft_core::instance::Args;

pub use approval::{ApprovalDecision, ApprovalRequest, Approved};
pub use budget::{BudgetLink, Budgeted, Usage};
pub use chain::{Chain, Interceptor, Stage};
pub use decision::PolicyDecision;
pub use profile::{Isolation, Needs, Profile};
pub use registry::{Registry, TenantTools};
pub use shared::SharedCounts;
pub use timed::{CallTimer, TimeCalls, Timed};

/// A boxed future, as returned by tools.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a tool call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{code}] {message}")]
pub struct ToolError {
    /// Stable code, e.g. `http_status`, `timeout`, `denied`, `args_invalid`.
    pub code: String,
    /// Human message.
    pub message: String,
    /// Whether retrying may help (network errors yes, bad args no).
    pub retryable: bool,
}

impl ToolError {
    /// A retryable error.
    pub fn retryable(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            retryable: true,
        }
    }
    /// An error that retrying cannot fix.
    pub fn fatal(code: impl Into<String>, message: impl Into<String>) -> Self {
        ToolError {
            code: code.into(),
            message: message.into(),
            retryable: false,
        }
    }
}

impl From<ToolError> for weft_core::ActionError {
    fn from(e: ToolError) -> Self {
        weft_core::ActionError {
            code: e.code,
            message: e.message,
            retryable: e.retryable,
        }
    }
}

/// What a tool knows about the call it is serving.
#[derive(Clone)]
pub struct ToolContext {
    /// Tenant that owns the instance.
    pub tenant: Arc<str>,
    /// Instance id.
    pub instance: Arc<str>,
    /// Plan name.
    pub plan: Arc<str>,
    /// Step name.
    pub step: Arc<str>,
    /// Stable across retries and crash recovery: tools with side effects use it to dedupe.
    pub idempotency_key: Arc<str>,
    /// 1 for the first attempt.
    pub attempt: u32,
    /// When the runtime will give up on this attempt, if the step has a timeout.
    pub deadline: Option<Instant>,
    /// The input token payloads of the firing, by event name. When the runtime hands a
    /// firing's tokens over (nothing reads them after the call), the payloads are not shared
    /// and [`ToolContext::into_input_values`] takes them without copying.
    pub inputs: Arc<Vec<(Arc<str>, Arc<Value>)>>,
    /// Engine services (timers, child plans, instance context).
    pub services: Arc<dyn ToolServices>,
}

impl std::fmt::Debug for ToolContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolContext")
            .field("tenant", &self.tenant)
            .field("instance", &self.instance)
            .field("step", &self.step)
            .field("idempotency_key", &self.idempotency_key)
            .field("attempt", &self.attempt)
            .finish_non_exhaustive()
    }
}

/// A timer request from a tool: put a token on `event` of the calling instance at `due_ms`
/// (Unix epoch milliseconds), then every `every` if it repeats.
#[derive(Debug, Clone, PartialEq)]
pub struct TimerRequest {
    /// Event to put the token on.
    pub event: String,
    /// Token payload.
    pub data: Value,
    /// First firing time (Unix epoch ms).
    pub due_ms: i64,
    /// A cron expression for repeating timers.
    pub cron: Option<String>,
    /// How many times a repeating timer fires at most.
    pub count: Option<u32>,
}

/// What the engine offers tools. The runtime implements it; tests can use [`NoServices`].
pub trait ToolServices: Send + Sync {
    /// Current wall-clock time in Unix epoch milliseconds.
    fn now_ms(&self) -> i64;
    /// Registers a timer for the calling instance; returns a timer id.
    fn set_timer(&self, ctx: &ToolContext, timer: TimerRequest) -> Result<String, ToolError>;
    /// Reads a key of the instance's key-value context.
    fn context_get(&self, ctx: &ToolContext, key: &str) -> Option<Value>;
    /// Writes a key of the instance's key-value context.
    fn context_put(&self, ctx: &ToolContext, key: &str, value: Value) -> Result<(), ToolError>;
    /// Runs a child instance of `plan` (a stored plan name, or an inline plan document) with
    /// `input`, and resolves to its result (the payloads of its output tokens by event).
    fn run_child(
        &self,
        ctx: &ToolContext,
        plan: ChildPlan,
        input: Value,
    ) -> BoxFuture<'static, Result<Value, ToolError>>;
    /// Records a policy's decision on the calling firing: the engine journals it in the
    /// instance's hash chain (`policy.decided`) and publishes it. Default: nothing.
    fn record_decision(&self, _ctx: &ToolContext, _decision: PolicyDecision) {}

    /// Adds what a call used that is known only once it ran (a model call's tokens, the
    /// further model calls of an agent loop) to the instance's count, journaled like a
    /// charge; it refuses nothing (the next call is refused if a limit is passed). Default:
    /// nothing.
    fn record_usage(&self, _ctx: &ToolContext, _used: Usage) {}

    /// Counts one call of the calling firing against its plan's `limits`, before it runs
    /// ([`Budgeted`]): `Err(budget_exceeded)` when it would go over one (the engine then
    /// also publishes `budget.exceeded`). Default (no engine): nothing is counted.
    fn charge(&self, _ctx: &ToolContext, _charge: Usage) -> Result<(), ToolError> {
        Ok(())
    }

    /// After [`ToolServices::charge`] refused a call with `refusal`: when budgets are set to
    /// pause instead of failing, a wait that pauses the calling instance and resolves once it
    /// is resumed (the call is then charged again) or fails once it is stopped. `None`: the
    /// refusal stands (the default, and always without an engine).
    fn wait_budget(
        &self,
        _ctx: &ToolContext,
        _refusal: &ToolError,
    ) -> Option<BoxFuture<'static, Result<(), ToolError>>> {
        None
    }

    /// Waits for a person's decision on the calling firing ([`ApprovalRequest`]): the
    /// engine records the request (once per firing: a retry or a re-dispatch after a restart
    /// finds it, or its decision), tells people it waits and resolves with the decision.
    /// Default (no engine): `approval_unavailable`.
    fn await_approval(
        &self,
        ctx: &ToolContext,
        _request: ApprovalRequest,
    ) -> BoxFuture<'static, Result<ApprovalDecision, ToolError>> {
        let step = ctx.step.to_string();
        Box::pin(async move {
            Err(ToolError::fatal(
                "approval_unavailable",
                format!(
                    "the call of step `{step}` needs a person's approval, and approvals need an instance of a running engine"
                ),
            ))
        })
    }
}

/// Which plan a child instance runs.
#[derive(Debug, Clone, PartialEq)]
pub enum ChildPlan {
    /// A plan registered with the engine, by name and optional version.
    Named {
        /// Plan name.
        name: String,
        /// Version label, if pinned.
        version: Option<String>,
    },
    /// A plan document given inline.
    Inline(Value),
}

/// Services for tools run outside an engine: no timers, no children, an empty context.
#[derive(Debug, Default)]
pub struct NoServices;

impl ToolServices for NoServices {
    fn now_ms(&self) -> i64 {
        0
    }
    fn set_timer(&self, _: &ToolContext, _: TimerRequest) -> Result<String, ToolError> {
        Err(ToolError::fatal(
            "unsupported",
            "timers need a running engine",
        ))
    }
    fn context_get(&self, _: &ToolContext, _: &str) -> Option<Value> {
        None
    }
    fn context_put(&self, _: &ToolContext, _: &str, _: Value) -> Result<(), ToolError> {
        Err(ToolError::fatal(
            "unsupported",
            "the instance context needs a running engine",
        ))
    }
    fn run_child(
        &self,
        _: &ToolContext,
        _: ChildPlan,
        _: Value,
    ) -> BoxFuture<'static, Result<Value, ToolError>> {
        Box::pin(async {
            Err(ToolError::fatal(
                "unsupported",
                "child plans need a running engine",
            ))
        })
    }
}

/// Builds a firing's [`ToolContext`] from its inputs.
pub type ContextBuilder<'a> = &'a dyn Fn(Vec<(Arc<str>, Arc<Value>)>) -> ToolContext;

/// The args of an immediate call ([`Tool::call_inline`]): rendered for this firing, or the
/// step's literal args borrowed from the compiled plan (not copied, and no reference count
/// touched, per firing).
#[derive(Debug, Clone, PartialEq)]
pub enum InlineArgs<'a> {
    /// Rendered from a template for this firing.
    Owned(Value),
    /// The step's literal args.
    Literal(&'a Value),
}

impl InlineArgs<'_> {
    /// The args.
    pub fn as_value(&self) -> &Value {
        match self {
            InlineArgs::Owned(v) => v,
            InlineArgs::Literal(v) => v,
        }
    }

    /// The args, owned (literal args are copied).
    pub fn into_value(self) -> Value {
        match self {
            InlineArgs::Owned(v) => v,
            InlineArgs::Literal(v) => v.clone(),
        }
    }
}

/// The event name of an immediate call's input: borrowed from the compiled plan on the hot
/// path (no reference count is touched per firing), owned otherwise.
#[derive(Debug, Clone)]
pub enum InputName<'a> {
    /// The plan's own copy of the name.
    Plan(&'a Arc<str>),
    /// A name of its own.
    Owned(Arc<str>),
}

impl InputName<'_> {
    /// The name.
    pub fn as_str(&self) -> &str {
        match self {
            InputName::Plan(n) => n,
            InputName::Owned(n) => n,
        }
    }

    /// The name as an `Arc` (shares the plan's copy).
    pub fn to_arc(&self) -> Arc<str> {
        match self {
            InputName::Plan(n) => Arc::clone(n),
            InputName::Owned(n) => Arc::clone(n),
        }
    }

    fn into_arc(self) -> Arc<str> {
        match self {
            InputName::Plan(n) => Arc::clone(n),
            InputName::Owned(n) => n,
        }
    }
}

impl<'a> From<&'a Arc<str>> for InputName<'a> {
    fn from(n: &'a Arc<str>) -> Self {
        InputName::Plan(n)
    }
}

impl From<Arc<str>> for InputName<'_> {
    fn from(n: Arc<str>) -> Self {
        InputName::Owned(n)
    }
}

/// The context of an immediate call ([`Tool::call_inline`]): the firing's inputs, and the
/// rest of the [`ToolContext`] (names, idempotency key, services) built on demand.
pub struct InlineContext<'a> {
    inputs: InlineInputs<'a>,
    build: ContextBuilder<'a>,
}

/// The inputs of an immediate call: a one-input step's input is held in place (no vector
/// is allocated per firing for it).
enum InlineInputs<'a> {
    One([(InputName<'a>, Arc<Value>); 1]),
    Many(Vec<(InputName<'a>, Arc<Value>)>),
}

impl std::fmt::Debug for InlineContext<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InlineContext")
            .field("inputs", &self.len())
            .finish_non_exhaustive()
    }
}

impl<'a> InlineContext<'a> {
    /// The inputs (as in [`ToolContext::inputs`]) and how to build the full context.
    pub fn new(inputs: Vec<(Arc<str>, Arc<Value>)>, build: ContextBuilder<'a>) -> Self {
        Self::named(
            inputs
                .into_iter()
                .map(|(n, p)| (InputName::Owned(n), p))
                .collect(),
            build,
        )
    }

    /// [`InlineContext::new`] with names that may be borrowed from the plan.
    pub fn named(inputs: Vec<(InputName<'a>, Arc<Value>)>, build: ContextBuilder<'a>) -> Self {
        InlineContext {
            inputs: InlineInputs::Many(inputs),
            build,
        }
    }

    /// [`InlineContext::new`] for a firing with one input (nothing is allocated for it).
    pub fn one(
        event: impl Into<InputName<'a>>,
        payload: Arc<Value>,
        build: ContextBuilder<'a>,
    ) -> Self {
        InlineContext {
            inputs: InlineInputs::One([(event.into(), payload)]),
            build,
        }
    }

    fn slice(&self) -> &[(InputName<'a>, Arc<Value>)] {
        match &self.inputs {
            InlineInputs::One(one) => one,
            InlineInputs::Many(v) => v,
        }
    }

    /// Number of inputs.
    pub fn len(&self) -> usize {
        self.slice().len()
    }

    /// Has the firing no inputs?
    pub fn is_empty(&self) -> bool {
        self.slice().is_empty()
    }

    /// The `k`-th input (binding order): its event name and payload.
    pub fn input(&self, k: usize) -> Option<(&str, &Arc<Value>)> {
        self.slice().get(k).map(|(n, p)| (n.as_str(), p))
    }

    /// The inputs by event name, in binding order.
    pub fn inputs(&self) -> impl ExactSizeIterator<Item = (&str, &Arc<Value>)> {
        self.slice().iter().map(|(n, p)| (n.as_str(), p))
    }

    /// The input payloads, owned and in binding order (as
    /// [`ToolContext::take_input_values`]).
    pub fn take_input_values(self) -> InputValues<'a> {
        match self.inputs {
            InlineInputs::One([(_, p)]) => InputValues {
                one: Some(p),
                many: Vec::new().into_iter(),
            },
            InlineInputs::Many(v) => InputValues {
                one: None,
                many: v.into_iter(),
            },
        }
    }

    /// The full context.
    pub fn into_context(self) -> ToolContext {
        let inputs = match self.inputs {
            InlineInputs::One([(n, p)]) => vec![(n.into_arc(), p)],
            InlineInputs::Many(v) => v.into_iter().map(|(n, p)| (n.into_arc(), p)).collect(),
        };
        (self.build)(inputs)
    }
}

/// The input payloads of an immediate call, owned and in binding order
/// ([`InlineContext::take_input_values`]): moved out where the call is their only holder,
/// cloned otherwise.
pub struct InputValues<'a> {
    one: Option<Arc<Value>>,
    many: std::vec::IntoIter<(InputName<'a>, Arc<Value>)>,
}

impl InputValues<'_> {
    /// The next payload as it is held: a tool that can do better than copying a payload
    /// it shares with others (read only what it needs) takes it this way.
    pub fn next_arc(&mut self) -> Option<Arc<Value>> {
        match self.one.take() {
            Some(p) => Some(p),
            None => self.many.next().map(|(_, p)| p),
        }
    }
}

impl Iterator for InputValues<'_> {
    type Item = Value;

    fn next(&mut self) -> Option<Value> {
        let p = self.next_arc()?;
        Some(Arc::try_unwrap(p).unwrap_or_else(|shared| (*shared).clone()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.one.is_some()) + self.many.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for InputValues<'_> {}

impl ToolContext {
    /// The input payloads, owned and in binding order: moved out where this context is
    /// their only holder, cloned otherwise.
    pub fn into_input_values(self) -> Vec<Value> {
        self.take_input_values().collect()
    }

    /// [`ToolContext::into_input_values`] as an iterator (no vector is built).
    pub fn take_input_values(self) -> impl Iterator<Item = Value> {
        let inputs = Arc::try_unwrap(self.inputs).unwrap_or_else(|shared| (*shared).clone());
        inputs
            .into_iter()
            .map(|(_, p)| Arc::try_unwrap(p).unwrap_or_else(|shared| (*shared).clone()))
    }

    /// A context for calling a tool outside an engine (tests, `weft tools call`).
    pub fn detached(step: &str) -> ToolContext {
        ToolContext {
            tenant: Arc::from("local"),
            instance: Arc::from("detached"),
            plan: Arc::from("detached"),
            step: Arc::from(step),
            idempotency_key: Arc::from(format!("detached/{step}/0")),
            attempt: 1,
            deadline: None,
            inputs: Arc::new(Vec::new()),
            services: Arc::new(NoServices),
        }
    }
}

/// A tool: what a step's `action` names.
pub trait Tool: Send + Sync {
    /// Name, description, args schema, effect class and idempotency.
    fn spec(&self) -> &ToolSpec;

    /// Runs the tool. Tools whose future is immediately ready (pure, in-memory work) are
    /// called inline by the runtime without spawning a task, so keep them allocation-light.
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>>;

    /// Whether the tool always finishes at once (in-memory work, no waiting). The runtime
    /// then calls [`Tool::call_now`] instead of [`Tool::call`]: no future, no task, and the
    /// firing's input tokens may be handed over (see [`ToolContext::into_input_values`]).
    fn is_immediate(&self) -> bool {
        false
    }

    /// Whether this immediate tool may be called only once its instance's journal is
    /// durable (a durable engine's gate around an immediate tool). The runtime then records
    /// the dispatch, waits for the journal (`Journal::poll_durable` in `weft-runtime`)
    /// without a future or a context per call, and calls [`Tool::call_inline`] in the
    /// instance's loop. Default: no.
    fn waits_for_journal(&self) -> bool {
        false
    }

    /// What the tool's calls need — hosts, paths, limits, isolation — from which a step's
    /// security profile is derived ([`profile::derive`]). `None` (the default) says nothing:
    /// a pure tool is then assumed to need nothing, any other everything. A tool wrapping
    /// another forwards its answer.
    fn profile_needs(&self) -> Option<Needs> {
        None
    }

    /// How the runtime calls an immediate tool: the context is built only if the tool asks
    /// for it ([`InlineContext::into_context`]) and literal args come borrowed from the plan
    /// ([`InlineArgs::Literal`], not copied per firing). The default builds the context,
    /// takes the args owned and calls [`Tool::call_now`]; a pure tool that needs only its
    /// inputs and args can override it and skip both. Must behave exactly like `call_now`.
    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        self.call_now(ctx.into_context(), args.into_value())
    }

    /// Runs an immediate tool synchronously. The default polls [`Tool::call`]'s future once
    /// and reports a future that is not ready as an error.
    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        let mut fut = self.call(ctx, args);
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        match fut.as_mut().poll(&mut cx) {
            std::task::Poll::Ready(r) => r,
            std::task::Poll::Pending => Err(ToolError::fatal(
                "not_immediate",
                format!(
                    "tool `{}` says it is immediate but did not finish at once",
                    self.spec().name
                ),
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Names borrowed from the plan and owned ones read the same, reach the full context as
    /// `Arc`s (the borrowed one sharing the plan's copy), and the payloads come out in
    /// binding order, taken over where the context was their only holder.
    #[test]
    fn inline_inputs_keep_names_and_order() {
        let plan_name: Arc<str> = Arc::from("a");
        let shared = Arc::new(json!({"x": 1}));
        let build = |inputs: Vec<(Arc<str>, Arc<Value>)>| {
            let mut c = ToolContext::detached("s");
            c.inputs = Arc::new(inputs);
            c
        };
        let inputs = || {
            vec![
                (InputName::from(&plan_name), Arc::clone(&shared)),
                (InputName::from(Arc::<str>::from("b")), Arc::new(json!(2))),
            ]
        };
        let ctx = InlineContext::named(inputs(), &build);
        assert_eq!(ctx.len(), 2);
        assert!(!ctx.is_empty());
        assert_eq!(
            ctx.input(1).map(|(n, p)| (n, (**p).clone())),
            Some(("b", json!(2)))
        );
        assert_eq!(ctx.input(2), None);
        let names: Vec<&str> = ctx.inputs().map(|(n, _)| n).collect();
        assert_eq!(names, ["a", "b"]);
        let full = ctx.into_context();
        assert!(Arc::ptr_eq(&full.inputs[0].0, &plan_name));
        assert_eq!(&*full.inputs[1].0, "b");

        let mut values = InlineContext::named(inputs(), &build).take_input_values();
        assert_eq!(values.len(), 2);
        assert_eq!(values.next(), Some(json!({"x": 1})));
        assert_eq!(values.next(), Some(json!(2)));
        assert_eq!(values.next(), None);

        let one = InlineContext::one(&plan_name, Arc::new(json!(3)), &build);
        assert_eq!(one.len(), 1);
        assert_eq!(one.into_context().inputs[0].1, Arc::new(json!(3)));
    }
}
