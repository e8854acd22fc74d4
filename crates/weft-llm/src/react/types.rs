//! The seed-004 ReAct contract, field for field: the `PlannerRequest` (caller, goal, context,
//! toolset, limits, preferences), the per-step JSON the model returns (thought, finish,
//! action, final_answer), the `TraceStep` and the `PlannerResponse`. Field order and
//! null-versus-absent follow the seed's example payloads, which round-trip byte for byte.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `POST /plan/react` body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerRequest {
    /// Who asks (`debug-shell`, `agent.react`, …).
    #[serde(default)]
    pub caller: String,
    /// What to achieve.
    pub goal: Goal,
    /// What the planner sees.
    #[serde(default)]
    pub context: Context,
    /// Tools the planner may call.
    #[serde(default)]
    pub toolset: Vec<ToolDescriptor>,
    /// Budget.
    #[serde(default)]
    pub limits: Limits,
    /// Output hints.
    #[serde(default)]
    pub preferences: Preferences,
}

/// The goal.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Goal {
    /// `analysis`, `routing`, `planning`, …
    #[serde(rename = "type", default)]
    pub kind: String,
    /// In words.
    pub description: String,
    /// Anything else.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metadata: Option<Value>,
}

/// One chat turn of the conversation history.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Turn {
    /// `user`, `assistant`, …
    pub role: String,
    /// Text.
    pub content: String,
}

/// What the planner should see.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Context {
    /// Chat history.
    #[serde(default)]
    pub conversation_history: Vec<Turn>,
    /// State snapshot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub orion_state_snapshot: Option<Value>,
    /// Extra JSON, often the text being worked on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_facts: Option<Value>,
}

/// A tool the planner may call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolDescriptor {
    /// Tool id (the verb / weft tool name).
    pub tool_id: String,
    /// What it does.
    #[serde(default)]
    pub description: String,
    /// JSON Schema of `action.input`.
    #[serde(default = "empty_object")]
    pub input_schema: Value,
    /// JSON Schema of the output.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_schema: Option<Value>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Planning budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Limits {
    /// Most planner steps (LLM calls), default 4.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<u32>,
    /// Completion cap of a reasoning step, default 512.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_reason: Option<u32>,
    /// Completion cap of the final (last) step, default 1024.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_tokens_answer: Option<u32>,
    /// Wall-clock limit of the whole loop, default 60.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_seconds: Option<u64>,
}

impl Limits {
    /// `max_steps` or 4, at least 1.
    pub fn steps(&self) -> u32 {
        self.max_steps.unwrap_or(4).max(1)
    }
    /// `max_tokens_reason` or 512.
    pub fn reason_tokens(&self) -> u32 {
        self.max_tokens_reason.unwrap_or(512)
    }
    /// `max_tokens_answer` or 1024.
    pub fn answer_tokens(&self) -> u32 {
        self.max_tokens_answer.unwrap_or(1024)
    }
    /// `timeout_seconds` or 60.
    pub fn timeout(&self) -> u64 {
        self.timeout_seconds.unwrap_or(60)
    }
}

/// Output hints.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Preferences {
    /// `neutral`, …
    #[serde(default = "neutral")]
    pub style: String,
    /// Whether thoughts may be logged.
    #[serde(default)]
    pub allow_internal_thought_logging: bool,
    /// Include the trace in the response.
    #[serde(default = "yes")]
    pub return_trace: bool,
}

fn neutral() -> String {
    "neutral".into()
}
fn yes() -> bool {
    true
}

impl Default for Preferences {
    fn default() -> Self {
        Preferences {
            style: neutral(),
            allow_internal_thought_logging: false,
            return_trace: true,
        }
    }
}

/// The tool to call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Action {
    /// Tool id (the seed allows null; the loop rejects it when `finish` is false).
    pub tool_id: Option<String>,
    /// Tool input.
    #[serde(default = "empty_object")]
    pub input: Value,
}

/// The final answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FinalAnswer {
    /// Text.
    pub content: String,
    /// Optional structured JSON.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub structured: Option<Value>,
}

/// What the model returns at each step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReactStep {
    /// Reasoning.
    #[serde(default)]
    pub thought: String,
    /// Done?
    pub finish: bool,
    /// Tool call (null when finishing).
    #[serde(default)]
    pub action: Option<Action>,
    /// Answer (null when not finishing).
    #[serde(default)]
    pub final_answer: Option<FinalAnswer>,
}

/// One entry of the trace.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    /// 0-based.
    pub step_index: u32,
    /// The step's thought.
    pub thought: String,
    /// The action taken (null on a finishing or invalid step).
    pub action: Option<Action>,
    /// What the tool returned (null on a finishing step).
    pub observation: Option<Value>,
}

/// Usage of one loop.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ReactUsage {
    /// Planner steps (LLM calls) used.
    pub steps_used: u32,
    /// Tool calls made.
    pub tool_calls: u32,
    /// Steps the model got wrong and was corrected on.
    pub invalid_steps: u32,
    /// Wall time.
    pub duration_ms: u64,
    /// Prompt tokens.
    pub prompt_tokens: u64,
    /// Completion tokens.
    pub completion_tokens: u64,
    /// Total tokens.
    pub total_tokens: u64,
    /// `finish`, `max_steps` (answer salvaged), `timeout` (answer salvaged) or `llm_error`
    /// (the model failed after the loop had made progress: the partial trace is returned
    /// with the error).
    pub stop_reason: String,
}

/// What the loop returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlannerResponse {
    /// The answer (salvaged at `max_steps`).
    pub final_answer: Option<FinalAnswer>,
    /// The trace, when `preferences.return_trace`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trace: Option<Vec<TraceStep>>,
    /// Usage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<ReactUsage>,
    /// Why the loop stopped early when the model failed after some progress (`code`,
    /// `message`); the answer is then salvaged from the trace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Value>,
}
