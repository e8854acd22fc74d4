//! [`Llm`]: the one path every model call in this crate takes. It fills in the call defaults
//! (`max_tokens`, `temperature`, `seed`), checks and charges the [`Budget`] *before* sending
//! (emitting `planner.throttled` / `planner.rejected` on refusal), and records the exchange in
//! the transcript, whatever the outcome.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::budget::Budget;
use crate::chat::{ChatRequest, ChatResponse, Usage};
use crate::error::{Error, Result};
use crate::ids::{Correlation, now_ms};
use crate::provider::ChatProvider;
use crate::telemetry::{TelemetryEvent, TelemetryKind, TelemetrySink, TracingTelemetry};
use crate::transcript::{Exchange, NoTranscript, TranscriptSink};

/// Defaults applied to requests that leave them unset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CallDefaults {
    /// Completion cap (always set: budgets reserve it).
    pub max_tokens: u32,
    /// Temperature (0 for reproducibility).
    pub temperature: Option<f32>,
    /// Seed.
    pub seed: Option<u64>,
}

impl Default for CallDefaults {
    fn default() -> Self {
        CallDefaults {
            max_tokens: 1024,
            temperature: Some(0.0),
            seed: Some(42),
        }
    }
}

/// A provider with transcripts, telemetry and budgets around it. Cheap to share in an `Arc`.
#[derive(Clone)]
pub struct Llm {
    provider: Arc<dyn ChatProvider>,
    transcripts: Arc<dyn TranscriptSink>,
    telemetry: Arc<dyn TelemetrySink>,
    budget: Option<Arc<Budget>>,
    defaults: CallDefaults,
    seq: Arc<AtomicU64>,
}

impl std::fmt::Debug for Llm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Llm")
            .field("provider", &self.provider.name())
            .field("defaults", &self.defaults)
            .finish_non_exhaustive()
    }
}

impl Llm {
    /// `provider` with no transcript, tracing telemetry and no budget.
    pub fn new(provider: Arc<dyn ChatProvider>) -> Self {
        Llm {
            provider,
            transcripts: Arc::new(NoTranscript),
            telemetry: Arc::new(TracingTelemetry),
            budget: None,
            defaults: CallDefaults::default(),
            seq: Arc::new(AtomicU64::new(0)),
        }
    }
    /// Records exchanges into `sink`.
    pub fn with_transcripts(mut self, sink: Arc<dyn TranscriptSink>) -> Self {
        self.transcripts = sink;
        self
    }
    /// Emits telemetry into `sink`.
    pub fn with_telemetry(mut self, sink: Arc<dyn TelemetrySink>) -> Self {
        self.telemetry = sink;
        self
    }
    /// Enforces `budget`.
    pub fn with_budget(mut self, budget: Arc<Budget>) -> Self {
        self.budget = Some(budget);
        self
    }
    /// Replaces the call defaults.
    pub fn with_defaults(mut self, defaults: CallDefaults) -> Self {
        self.defaults = defaults;
        self
    }
    /// `provider:model` (part of the plan cache key).
    pub fn model_id(&self) -> String {
        format!("{}:{}", self.provider.name(), self.provider.model())
    }
    /// The telemetry sink (planners emit their lifecycle events through it).
    pub fn telemetry(&self) -> &Arc<dyn TelemetrySink> {
        &self.telemetry
    }
    /// The budget ledger, if any.
    pub fn budget(&self) -> Option<&Arc<Budget>> {
        self.budget.as_ref()
    }
    /// The call defaults.
    pub fn defaults(&self) -> CallDefaults {
        self.defaults
    }

    /// Sends `req` for `corr`; `planner` and `purpose` label telemetry and the transcript.
    pub async fn chat(
        &self,
        corr: &Correlation,
        planner: &str,
        purpose: &str,
        mut req: ChatRequest,
    ) -> Result<ChatResponse> {
        let max_tokens = *req.max_tokens.get_or_insert(self.defaults.max_tokens);
        if req.temperature.is_none() {
            req.temperature = self.defaults.temperature;
        }
        if req.seed.is_none() {
            req.seed = self.defaults.seed;
        }
        let prompt_estimate = estimate_prompt_tokens(&req);
        let reservation = match &self.budget {
            Some(b) => match b.reserve(corr, prompt_estimate + u64::from(max_tokens)) {
                Ok(r) => Some(r),
                Err(e) => {
                    let kind = match &e {
                        Error::BudgetExceeded {
                            throttled: true, ..
                        } => TelemetryKind::Throttled,
                        _ => TelemetryKind::Rejected,
                    };
                    self.telemetry.emit(
                        TelemetryEvent::new(kind, corr, planner)
                            .step(purpose)
                            .detail(e.to_string()),
                    );
                    return Err(e);
                }
            },
            None => None,
        };
        let started_at_ms = now_ms();
        let t0 = Instant::now();
        let result = self.provider.chat(&req).await;
        let latency_ms = t0.elapsed().as_millis() as u64;
        let usage = match &result {
            Ok(r) if r.usage.total() > 0 => Usage {
                total_tokens: r.usage.total(),
                ..r.usage
            },
            // The server reported nothing: charge an estimate rather than nothing.
            Ok(r) => Usage {
                prompt_tokens: prompt_estimate,
                completion_tokens: r.content.as_ref().map_or(0, |c| c.len() as u64 / 4)
                    + r.tool_calls
                        .iter()
                        .map(|c| c.arguments.len() as u64 / 4)
                        .sum::<u64>(),
                total_tokens: 0,
            },
            Err(_) => Usage::default(),
        };
        if let (Some(b), Some(r)) = (&self.budget, reservation) {
            b.settle(r, usage.total());
        }
        let exchange = Exchange {
            seq: self.seq.fetch_add(1, Ordering::Relaxed),
            correlation: corr.clone(),
            purpose: purpose.to_string(),
            provider: self.provider.name().to_string(),
            request: req,
            response: result.as_ref().ok().cloned(),
            error: result.as_ref().err().map(ToString::to_string),
            usage,
            latency_ms,
            started_at_ms,
        };
        if let Err(e) = self.transcripts.record(&exchange) {
            tracing::warn!(error = %e, "Could not record an LLM transcript entry");
        }
        result.map(|mut r| {
            r.usage = usage;
            if r.latency_ms == 0 {
                r.latency_ms = latency_ms;
            }
            r
        })
    }
}

/// About four characters per token, over messages and tool schemas.
fn estimate_prompt_tokens(req: &ChatRequest) -> u64 {
    let msgs: usize = req
        .messages
        .iter()
        .map(|m| {
            m.content_str().len()
                + m.tool_calls
                    .iter()
                    .map(|c| c.arguments.len())
                    .sum::<usize>()
                + 8
        })
        .sum();
    let tools: usize = req
        .tools
        .iter()
        .map(|t| t.description.len() + t.parameters.to_string().len())
        .sum();
    ((msgs + tools) / 4 + 1) as u64
}
