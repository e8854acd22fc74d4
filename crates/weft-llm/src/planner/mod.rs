//! The verified planner: instruction + tool subset → a plan that parses, validates and passes
//! behavioural analysis, via a `create_plan` tool call and the critic loop; then an optional
//! semantic review whose concerns come back as warnings; with a plan cache in front.

pub mod cache;
pub mod critic;
pub mod schema;

use std::sync::Arc;

use serde_json::{Value, json};
use weft_analysis::AnalysisOptions;
use weft_core::{Finding, Limits, Plan, StaticCatalog, ToolSpec};

pub use cache::{MemoryPlanCache, PlanCache, cache_key, cache_key_for_model};
pub use critic::{CriticRound, check_candidate};

use crate::chat::{ChatRequest, Message, ResponseFormat, Usage};
use crate::error::{Error, Result};
use crate::ids::Correlation;
use crate::prompts;
use crate::session::Llm;
use crate::telemetry::{TelemetryEvent, TelemetryKind};

/// The planner's name in telemetry.
pub const PLANNER: &str = "llm.plan";

/// How to plan.
#[derive(Clone)]
pub struct PlanOptions {
    /// Ids and budget scope of the run.
    pub correlation: Correlation,
    /// Candidates the critic loop may ask for (≥ 1).
    pub max_attempts: u32,
    /// Run the semantic review pass on the accepted plan.
    pub semantic_review: bool,
    /// Completion cap per planning call.
    pub max_tokens: u32,
    /// Load limits for candidates.
    pub limits: Limits,
    /// Analysis bounds for candidates.
    pub analysis: AnalysisOptions,
    /// The plan cache.
    pub cache: Option<Arc<dyn PlanCache>>,
}

impl std::fmt::Debug for PlanOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanOptions")
            .field("correlation", &self.correlation)
            .field("max_attempts", &self.max_attempts)
            .field("semantic_review", &self.semantic_review)
            .finish_non_exhaustive()
    }
}

impl Default for PlanOptions {
    fn default() -> Self {
        PlanOptions {
            correlation: Correlation::new("local"),
            max_attempts: 3,
            semantic_review: false,
            max_tokens: 1536,
            limits: Limits::default(),
            analysis: AnalysisOptions {
                max_states: 50_000,
                max_coverability_nodes: 10_000,
                ..AnalysisOptions::default()
            },
            cache: None,
        }
    }
}

/// A planned plan.
#[derive(Debug, Clone)]
pub struct PlanOutcome {
    /// The plan (valid and analysed).
    pub plan: Plan,
    /// Served from the cache without calling the model.
    pub from_cache: bool,
    /// Candidates asked for (0 from the cache).
    pub attempts: u32,
    /// Rejected candidates with the exact CRITIC feedback sent.
    pub rounds: Vec<CriticRound>,
    /// Non-error findings on the plan.
    pub findings: Vec<Finding>,
    /// Semantic review concerns (and review failures), as warnings.
    pub warnings: Vec<String>,
    /// Tokens used.
    pub usage: Usage,
}

impl PlanOutcome {
    /// Critic rounds needed (rejected candidates).
    pub fn critic_rounds(&self) -> usize {
        self.rounds.len()
    }
}

/// A catalog of exactly `tools`.
pub fn catalog_of(tools: &[ToolSpec]) -> StaticCatalog {
    let mut c = StaticCatalog::new();
    for t in tools {
        c.insert(t.clone());
    }
    c
}

/// Plans `instruction` with `tools`.
pub async fn plan(
    llm: &Llm,
    instruction: &str,
    tools: &[ToolSpec],
    opts: &PlanOptions,
) -> Result<PlanOutcome> {
    if instruction.trim().is_empty() {
        return Err(Error::InvalidInput("the instruction is empty".into()));
    }
    let corr = &opts.correlation;
    let key = cache_key_for_model(
        instruction,
        tools.iter().map(|t| t.name.as_str()),
        &llm.model_id(),
    );
    let cached = match &opts.cache {
        Some(c) => c.get(&key).await,
        None => None,
    };
    if let Some(plan) = cached {
        return Ok(PlanOutcome {
            plan,
            from_cache: true,
            attempts: 0,
            rounds: Vec::new(),
            findings: Vec::new(),
            warnings: Vec::new(),
            usage: Usage::default(),
        });
    }
    let tel = llm.telemetry();
    tel.emit(TelemetryEvent::new(TelemetryKind::Started, corr, PLANNER).detail(instruction));
    let catalog = catalog_of(tools);
    let messages = vec![
        Message::system(prompts::planner_system(&critic::tools_json(&catalog))),
        Message::user(prompts::planner_user(instruction)),
    ];
    let spec = critic::LoopSpec {
        llm,
        corr,
        planner: PLANNER,
        purpose: "plan",
        catalog: &catalog,
        max_attempts: opts.max_attempts,
        max_tokens: opts.max_tokens,
        limits: &opts.limits,
        analysis: &opts.analysis,
        extra: None,
    };
    let accepted = match critic::run(spec, messages).await {
        Ok(a) => a,
        Err(e) => {
            tel.emit(
                TelemetryEvent::new(TelemetryKind::Failed, corr, PLANNER).detail(e.to_string()),
            );
            return Err(e);
        }
    };
    let mut usage = accepted.usage;
    let mut warnings = Vec::new();
    if opts.semantic_review {
        match review(llm, corr, instruction, &accepted.plan).await {
            Ok((concerns, u)) => {
                usage.add(u);
                warnings.extend(concerns.into_iter().map(|c| format!("review: {c}")));
            }
            Err(e) => warnings.push(format!("semantic review unavailable: {e}")),
        }
    }
    if let Some(c) = &opts.cache {
        c.put(&key, &accepted.plan).await;
    }
    tel.emit(
        TelemetryEvent::new(TelemetryKind::Completed, corr, PLANNER)
            .iteration(accepted.attempts)
            .tokens(usage.total())
            .detail(format!(
                "accepted after {} critic round(s)",
                accepted.rounds.len()
            )),
    );
    Ok(PlanOutcome {
        plan: accepted.plan,
        from_cache: false,
        attempts: accepted.attempts,
        rounds: accepted.rounds,
        findings: accepted.findings,
        warnings,
        usage,
    })
}

/// The review's JSON schema (bounded).
fn review_schema() -> Value {
    json!({"type": "object", "additionalProperties": false, "required": ["concerns"],
           "properties": {"concerns": {"type": "array", "maxItems": 5,
                                       "items": {"type": "string", "maxLength": 300}}}})
}

/// The semantic review pass: concerns about whether the plan achieves the instruction.
pub async fn review(
    llm: &Llm,
    corr: &Correlation,
    instruction: &str,
    plan: &Plan,
) -> Result<(Vec<String>, Usage)> {
    let plan_json = serde_json::to_value(plan).map_err(|e| Error::Decode(e.to_string()))?;
    let req = ChatRequest {
        messages: vec![
            Message::system(prompts::review_system()),
            Message::user(prompts::review_user(instruction, &plan_json)),
        ],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "plan_review".into(),
            schema: review_schema(),
            strict: true,
        }),
        max_tokens: Some(512),
        ..ChatRequest::default()
    };
    let resp = llm.chat(corr, PLANNER, "review", req).await?;
    let text = resp.content.clone().unwrap_or_default();
    let v: Value = serde_json::from_str(text.trim())
        .map_err(|e| Error::Decode(format!("review is not JSON ({e}): {text:?}")))?;
    let concerns = v
        .get("concerns")
        .and_then(Value::as_array)
        .ok_or_else(|| Error::Decode(format!("review has no `concerns` list: {text:?}")))?
        .iter()
        .filter_map(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .map(str::to_string)
        .collect();
    Ok((concerns, resp.usage))
}
