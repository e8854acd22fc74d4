//! weft-llm: everything weft does with a language model, behind one provider seam.
//!
//! - [`ChatProvider`] is the only way out to a model: [`OpenAiProvider`] (OpenAI, Azure OpenAI,
//!   vLLM, Ollama, llama.cpp's server), [`ScriptedProvider`] (a file of expected exchanges) and
//!   [`ReplayProvider`] (a recorded transcript, failing loudly on divergence).
//! - [`Llm`] wraps a provider with call defaults, a [`Budget`] checked before every call,
//!   `planner.*` telemetry and a [`TranscriptSink`] recording every exchange (in memory, a
//!   JSONL file, or a weft store: [`StoreTranscript`], with [`StorePlanCache`]).
//! - Roles on top: [`plan`] (instruction → verified plan through the critic loop),
//!   [`repair()`] (failure + marking → revised plan with the marking mapped), [`explain()`] and
//!   [`summarize`], the seed-004 ReAct loop ([`run_react`]), the seed-001 planner
//!   [`Lifecycle`], and the tools `llm.complete` / `agent.react`.
//!
//! Architecture invariant: the engine never depends on this crate; plans can be written by
//! hand and run without any model configured. Prompts live in [`prompts`], versioned.

pub mod budget;
pub mod chat;
pub mod error;
pub mod explain;
pub mod ids;
pub mod lifecycle;
pub mod llm_repairer;
pub mod openai;
pub mod planner;
pub mod prompts;
pub mod provider;
pub mod react;
pub mod replay;
pub mod scripted;
pub mod session;
pub mod stored;
pub mod telemetry;
pub mod tools;
pub mod transcript;

pub use budget::{Budget, BudgetLimits, Limit};
pub use chat::{
    ChatRequest, ChatResponse, Message, ResponseFormat, Role, ToolCall, ToolChoice, ToolDef, Usage,
};
pub use error::{Error, Result};
pub use explain::{Explanation, Summary, explain, explain_template, summarize, summarize_template};
pub use ids::Correlation;
pub use lifecycle::{Lifecycle, PlannerResult, PlannerSteps, StepInstance};
pub use llm_repairer::{LlmRepairer, Marking, RepairOutcome, RepairRequest, map_marking, repair};
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use planner::{MemoryPlanCache, PlanCache, PlanOptions, PlanOutcome, plan};
pub use provider::{BoxFuture, ChatProvider};
pub use react::{PlannerRequest, PlannerResponse, ReactToolExecutor, RegistryExecutor, run_react};
pub use replay::ReplayProvider;
pub use scripted::{ScriptedExchange, ScriptedProvider};
pub use session::{CallDefaults, Llm};
pub use stored::{StorePlanCache, StoreTranscript, TranscriptScope, list_transcripts};
pub use telemetry::{
    MemoryTelemetry, TelemetryEvent, TelemetryKind, TelemetrySink, TracingTelemetry,
};
pub use tools::{AgentReactTool, LlmCompleteTool};
pub use transcript::{
    Exchange, JsonlTranscript, MemoryTranscript, NoTranscript, TranscriptSink, token_totals,
};
