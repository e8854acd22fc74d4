//! weft-llm: everything weft does with a language model, behind one provider seam.
//!
//! - [`ChatProvider`] is the only way out to a model: [`OpenAiProvider`] (OpenAI, Azure OpenAI,
//!   vLLM, Ollama, llama.cpp's server), [`ScriptedProvider`] (a file of expected exchanges) and
//!   [`ReplayProvider`] (a recorded transcript, failing loudly on divergence).
//! - [`Llm`] wraps a provider with call defaults, a [`Budget`] checked before every call,
//!   `planner.*` telemetry and a [`TranscriptSink`] recording every exchange.
//!
//! Architecture invariant: the engine never depends on this crate; plans can be written by
//! hand and run without any model configured.

pub mod budget;
pub mod chat;
pub mod error;
pub mod ids;
pub mod openai;
pub mod provider;
pub mod replay;
pub mod scripted;
pub mod session;
pub mod telemetry;
pub mod transcript;

pub use budget::{Budget, BudgetLimits, Limit};
pub use chat::{
    ChatRequest, ChatResponse, Message, ResponseFormat, Role, ToolCall, ToolChoice, ToolDef, Usage,
};
pub use error::{Error, Result};
pub use ids::Correlation;
pub use openai::{OpenAiConfig, OpenAiProvider};
pub use provider::{BoxFuture, ChatProvider};
pub use replay::ReplayProvider;
pub use scripted::{ScriptedExchange, ScriptedProvider};
pub use session::{CallDefaults, Llm};
pub use telemetry::{MemoryTelemetry, TelemetryEvent, TelemetryKind, TelemetrySink};
pub use transcript::{Exchange, JsonlTranscript, MemoryTranscript, NoTranscript, TranscriptSink};
