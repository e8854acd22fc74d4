//! Plan model v1: the contract between whoever writes a plan (an LLM or a person) and weft.
//!
//! These serde types are the single source of truth for the plan format described in
//! DESIGN.md ("Plan format (v1)"): the JSON Schema handed to an LLM is generated from them
//! (`weft schema`), and every unknown field is rejected rather than silently dropped.

use indexmap::IndexMap;
use schemars::JsonSchema;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;

/// Version of the plan model implemented by this crate.
pub const MODEL_VERSION: u32 = 1;

/// A plan: a colored Petri net whose places are `events` and whose transitions are `steps`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
#[schemars(title = "weft plan (model v1)")]
pub struct Plan {
    /// Name of the plan, unique per tenant in the plan store.
    pub plan_name: String,
    /// `acyclic` plans are DAGs that run to an end; `reactive` plans may cycle and live until stopped.
    pub graph_type: GraphType,
    /// Events (places). The key is the event name used in `on` and `emits`.
    pub events: IndexMap<String, EventDef>,
    /// Steps (transitions). The key is the step name.
    pub steps: IndexMap<String, Step>,
    /// What the plan is for, in plain language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The author's revision label for this plan (free text, e.g. "3" or "2024-06-01").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// Events that receive the instance's input. Defaults to `["start"]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial: Option<Vec<String>>,
    /// Budgets of each instance of the plan. `weft analyze` compares them with the plan's
    /// static bound (acyclic plans) before it runs; the engine's budget stage enforces them
    /// while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<PlanLimits>,
}

/// Budgets of one instance (`"limits"` of a plan). Every field is optional; an absent one
/// does not limit.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PlanLimits {
    /// Tool calls, every attempt of every step counted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tool_calls: Option<u64>,
    /// Calls of tools that ask a language model (`llm.complete`, `agent.react`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_llm_calls: Option<u64>,
    /// Sum of the declared `cost` of the tools called.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_cost: Option<f64>,
    /// Language-model tokens (prompt and completion). Known only once a model call returns:
    /// the call that passes the limit completes, the next model call is refused. Not bounded
    /// before the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_llm_tokens: Option<u64>,
    /// Wall time from the start of the instance, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_wall_ms: Option<u64>,
}

impl PlanLimits {
    /// True when no field is set.
    pub fn is_empty(&self) -> bool {
        self == &PlanLimits::default()
    }
}

/// Acyclic (one-off DAG) or reactive (long-lived, may cycle).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum GraphType {
    /// A directed acyclic graph: the instance ends `completed`, `stuck` or `failed`.
    Acyclic,
    /// A long-lived net that may contain cycles; it runs until stopped.
    Reactive,
}

/// Definition of an event (a place).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EventDef {
    /// What the event means.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the token payload. Every token put on the event matches it: an input or
    /// an event from outside that does not is refused, a step's emit that does not fails the
    /// step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Value>,
    /// `input` arrives from outside, `internal` is produced by steps, `output` is a final result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<EventKind>,
    /// `broadcast` (default): each listening step gets its own copy of every token.
    /// `exclusive`: competing consumers; one step takes each token.
    #[serde(default, skip_serializing_if = "Consume::is_default")]
    pub consume: Consume,
}

/// Where an event's tokens come from or go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// Receives tokens from outside at any time.
    Input,
    /// Produced and consumed by steps.
    Internal,
    /// A final result of the plan.
    Output,
}

/// How a token on an event is shared between the steps listening on it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Consume {
    /// Every step listening on the event gets its own copy of each token.
    #[default]
    Broadcast,
    /// Competing consumers: exactly one step takes each token.
    Exclusive,
}

impl Consume {
    fn is_default(&self) -> bool {
        *self == Consume::Broadcast
    }
}

/// A step: a transition that consumes one token from each `on` event, runs `action`, and
/// puts tokens on its `emits` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Step {
    /// Input events. All must hold a token (a join); tokens must share a correlation unless
    /// `correlate` is false.
    pub on: Vec<String>,
    /// Name of the tool to call.
    pub action: String,
    /// Arguments for the tool. A string `"${expr}"` is replaced by the value of the CEL
    /// expression; `${expr}` inside a longer string is interpolated.
    #[serde(default = "empty_object", skip_serializing_if = "is_empty_object")]
    #[schemars(schema_with = "args_schema")]
    pub args: Value,
    /// Events to put tokens on when the action succeeds: names, or `{event, when, data}`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub emits: Vec<Emit>,
    /// CEL boolean expression over the input tokens; a false guard leaves the tokens in place.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    /// Whether the tokens of a join must share the same correlation id (default true).
    #[serde(default = "default_true", skip_serializing_if = "is_true")]
    pub correlate: bool,
    /// Retry policy for a failing action.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry: Option<Retry>,
    /// Deadline for one attempt of the action, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// What happens when the action still fails after retries: `abort` (default),
    /// `continue`, `repair` or `emit:<event>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub on_fail: Option<OnFail>,
    /// What the step does, in plain language.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// A person must approve each firing before its action is called (see [`Approval`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<Approval>,
}

/// A step's human approval: each firing waits, before its tool is called, until a person
/// grants or denies it (`POST /v1/instances/{id}/approvals/{step}`, `weft approve`,
/// `weft deny`, the web UI). A grant calls the tool; a denial is the step error
/// `approval_denied`, which is not retried and follows the step's `on_fail`. The step's
/// `timeout_ms` bounds the wait too, so an approval step usually leaves it unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Approval {
    /// What the approver is asked, shown with the request (default: the step's description).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// How long to wait for a decision, in milliseconds; then `default` applies. Unset:
    /// wait until someone decides.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// The decision when `timeout_ms` passes without one: `deny` (default) or `grant`.
    #[serde(default, skip_serializing_if = "ApprovalDefault::is_deny")]
    pub default: ApprovalDefault,
}

/// What an approval that timed out decides.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalDefault {
    /// Deny the call.
    #[default]
    Deny,
    /// Grant the call.
    Grant,
}

impl ApprovalDefault {
    fn is_deny(&self) -> bool {
        matches!(self, ApprovalDefault::Deny)
    }
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}
fn is_empty_object(v: &Value) -> bool {
    matches!(v, Value::Object(m) if m.is_empty())
}
fn default_true() -> bool {
    true
}
fn is_true(b: &bool) -> bool {
    *b
}
fn args_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "Tool arguments (any JSON, usually an object). Strings may contain ${CEL} templates.",
    })
}

/// An output of a step: a plain event name, or a conditional / shaped emit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum Emit {
    /// Put a token carrying the action's result on this event.
    Event(String),
    /// Put a token on `event` when `when` holds, with payload `data` (default: the result).
    Shaped(ShapedEmit),
}

/// A conditional and/or payload-shaping emit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ShapedEmit {
    /// Event to put the token on.
    pub event: String,
    /// CEL boolean expression; the token is only emitted when it is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub when: Option<String>,
    /// Payload template (like `args`); defaults to the action's result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub data: Option<Value>,
}

impl Emit {
    /// The event this emit puts a token on.
    pub fn event(&self) -> &str {
        match self {
            Emit::Event(e) => e,
            Emit::Shaped(s) => &s.event,
        }
    }
    /// The `when` condition, if any.
    pub fn when(&self) -> Option<&str> {
        match self {
            Emit::Event(_) => None,
            Emit::Shaped(s) => s.when.as_deref(),
        }
    }
}

/// Retry policy: up to `max` further attempts, waiting `backoff_ms * multiplier^n` between.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Retry {
    /// Number of retries after the first attempt.
    pub max: u32,
    /// Delay before the first retry, in milliseconds (default 100).
    #[serde(default = "default_backoff")]
    pub backoff_ms: u64,
    /// Factor applied to the delay after each retry (default 2.0).
    #[serde(default = "default_multiplier")]
    pub multiplier: f64,
}

fn default_backoff() -> u64 {
    100
}
fn default_multiplier() -> f64 {
    2.0
}

/// What to do when a step's action fails for good.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum OnFail {
    /// Fail the instance (the default).
    Abort,
    /// Drop the failure: the step's inputs are consumed and nothing is emitted.
    Continue,
    /// Pause the instance and ask the repair loop for a revised plan.
    Repair,
    /// Put an error token on this event.
    Emit(String),
}

impl OnFail {
    /// The textual form used in plans.
    pub fn as_text(&self) -> String {
        match self {
            OnFail::Abort => "abort".into(),
            OnFail::Continue => "continue".into(),
            OnFail::Repair => "repair".into(),
            OnFail::Emit(e) => format!("emit:{e}"),
        }
    }
}

impl Serialize for OnFail {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.as_text())
    }
}

impl<'de> Deserialize<'de> for OnFail {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        match s.as_str() {
            "abort" => Ok(OnFail::Abort),
            "continue" => Ok(OnFail::Continue),
            "repair" => Ok(OnFail::Repair),
            other => match other.strip_prefix("emit:") {
                Some(ev) if !ev.is_empty() => Ok(OnFail::Emit(ev.to_string())),
                _ => Err(serde::de::Error::custom(format!(
                    "invalid on_fail `{other}`: expected `abort`, `continue`, `repair` or `emit:<event>`"
                ))),
            },
        }
    }
}

impl JsonSchema for OnFail {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "OnFail".into()
    }
    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "description": "`abort` (default), `continue`, `repair` or `emit:<event>`.",
            "pattern": "^(abort|continue|repair|emit:.+)$"
        })
    }
}

impl Plan {
    /// Events that receive the instance's input: `initial` if given, else `["start"]`.
    pub fn initial_events(&self) -> Vec<&str> {
        match &self.initial {
            Some(v) => v.iter().map(String::as_str).collect(),
            None => vec!["start"],
        }
    }

    /// The JSON Schema of the plan format, generated from these types.
    pub fn json_schema() -> Value {
        let schema = schemars::schema_for!(Plan);
        serde_json::to_value(schema).unwrap_or(Value::Null)
    }
}
