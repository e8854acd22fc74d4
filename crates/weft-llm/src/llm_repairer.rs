//! Repair: a running instance failed or is stuck; ask the model for a revised plan given the
//! instruction, the plan, the failure, the current marking and a journal excerpt; run it
//! through the same critic loop as planning; then map the marking onto the revised plan.
//! Tokens stay on events that keep their name; a revision that drops an event holding tokens
//! is sent back to the model (finding `R001`), and refused with the events named when the
//! attempts run out. The runtime calls this through [`LlmRepairer`], its
//! `weft_runtime::Repairer`; the engine swaps the plan in and journals the repair.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_core::{Finding, Plan, Severity, ToolSpec};

use crate::chat::{Message, Usage};
use crate::error::{Error, Result};
use crate::planner::critic::{self, CriticRound};
use crate::planner::{PlanOptions, catalog_of};
use crate::prompts;
use crate::session::Llm;
use crate::telemetry::{TelemetryEvent, TelemetryKind};

/// The planner's name in telemetry.
pub const PLANNER: &str = "llm.repair";

/// A marking as the runtime hands it over: event name → token payloads.
pub type Marking = BTreeMap<String, Vec<Value>>;

/// What the repair needs to know.
#[derive(Debug, Clone)]
pub struct RepairRequest {
    /// The instruction the plan was made for (or its description).
    pub instruction: String,
    /// The plan the instance runs.
    pub plan: Plan,
    /// What went wrong, e.g. `step "send" failed: [http_status] 503`.
    pub failure: String,
    /// The current marking.
    pub marking: Marking,
    /// The last journal records, as text.
    pub journal_excerpt: String,
    /// Tools the revised plan may use.
    pub tools: Vec<ToolSpec>,
}

/// A revised plan with the marking mapped onto it.
#[derive(Debug, Clone)]
pub struct RepairOutcome {
    /// The revised plan (valid and analysed).
    pub plan: Plan,
    /// The marking on the revised plan.
    pub marking: Marking,
    /// Candidates asked for.
    pub attempts: u32,
    /// Rejected candidates with the feedback sent.
    pub rounds: Vec<CriticRound>,
    /// Non-error findings on the revised plan.
    pub findings: Vec<Finding>,
    /// Tokens used.
    pub usage: Usage,
}

/// Maps `marking` onto `plan`: the same tokens on the same event names. `Err` lists the events
/// that hold tokens but are not in `plan`.
pub fn map_marking(marking: &Marking, plan: &Plan) -> Result<Marking, Vec<String>> {
    let lost: Vec<String> = marking
        .iter()
        .filter(|(e, toks)| !toks.is_empty() && !plan.events.contains_key(*e))
        .map(|(e, _)| e.clone())
        .collect();
    if !lost.is_empty() {
        return Err(lost);
    }
    Ok(marking
        .iter()
        .filter(|(_, t)| !t.is_empty())
        .map(|(e, t)| (e.clone(), t.clone()))
        .collect())
}

const LOST: &str = "R001";

fn lost_finding(events: &[String]) -> Finding {
    Finding {
        code: LOST.into(),
        name: "token-would-be-lost".into(),
        severity: Severity::Error,
        pointer: "/events".into(),
        message: format!(
            "event(s) {} hold tokens in the running instance but the revised plan removed them",
            events
                .iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
        hint: Some("keep every event that holds tokens, under the same name".into()),
        witness: None,
        depends_on_guards: false,
    }
}

/// Asks for a revised plan and maps the marking onto it.
pub async fn repair(llm: &Llm, req: &RepairRequest, opts: &PlanOptions) -> Result<RepairOutcome> {
    let corr = &opts.correlation;
    let tel = llm.telemetry();
    tel.emit(TelemetryEvent::new(TelemetryKind::Started, corr, PLANNER).detail(&req.failure));
    let catalog = catalog_of(&req.tools);
    let plan_json = serde_json::to_value(&req.plan).map_err(|e| Error::Decode(e.to_string()))?;
    let marking_json =
        serde_json::to_value(&req.marking).map_err(|e| Error::Decode(e.to_string()))?;
    let messages = vec![
        Message::system(prompts::repair_system(&critic::tools_json(&catalog))),
        Message::user(prompts::repair_user(
            &req.instruction,
            &plan_json,
            &req.failure,
            &marking_json,
            &req.journal_excerpt,
        )),
    ];
    let marking = req.marking.clone();
    let last_lost: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let extra = |p: &Plan| match map_marking(&marking, p) {
        Ok(_) => Vec::new(),
        Err(lost) => {
            let f = lost_finding(&lost);
            if let Ok(mut l) = last_lost.lock() {
                *l = lost;
            }
            vec![f]
        }
    };
    let spec = critic::LoopSpec {
        llm,
        corr,
        planner: PLANNER,
        purpose: "repair",
        catalog: &catalog,
        max_attempts: opts.max_attempts,
        max_tokens: opts.max_tokens,
        limits: &opts.limits,
        analysis: &opts.analysis,
        extra: Some(&extra),
    };
    let result = critic::run(spec, messages).await.and_then(|a| {
        let marking =
            map_marking(&req.marking, &a.plan).map_err(|events| Error::TokensWouldBeLost {
                attempts: a.attempts,
                events,
            })?;
        Ok(RepairOutcome {
            plan: a.plan,
            marking,
            attempts: a.attempts,
            rounds: a.rounds,
            findings: a.findings,
            usage: a.usage,
        })
    });
    let result = result.map_err(|e| match e {
        Error::PlanningFailed { attempts, findings }
            if !findings.is_empty() && findings.iter().all(|f| f.code == LOST) =>
        {
            let named = last_lost.lock().map(|l| l.clone()).unwrap_or_default();
            Error::TokensWouldBeLost {
                attempts,
                events: named,
            }
        }
        other => other,
    });
    match &result {
        Ok(o) => tel.emit(
            TelemetryEvent::new(TelemetryKind::Completed, corr, PLANNER)
                .iteration(o.attempts)
                .tokens(o.usage.total()),
        ),
        Err(e) => tel
            .emit(TelemetryEvent::new(TelemetryKind::Failed, corr, PLANNER).detail(e.to_string())),
    }
    result
}

/// The stable code of a repair failure, for the engine's `[code] message` reasons.
pub fn error_code(e: &Error) -> &'static str {
    match e {
        Error::TokensWouldBeLost { .. } => LOST,
        Error::PlanningFailed { .. } => "planning_failed",
        Error::BudgetExceeded { .. } => "llm_budget",
        Error::Config(_) => "llm_config",
        Error::Transport { .. } | Error::Timeout { .. } | Error::Unavailable { .. } => {
            "llm_unavailable"
        }
        Error::Rejected { .. } => "llm_rejected",
        Error::MalformedToolCall(_) | Error::Decode(_) => "llm_decode",
        Error::ScriptExhausted { .. } | Error::ScriptMismatch { .. } | Error::File { .. } => {
            "llm_script"
        }
        Error::ReplayDivergence { .. } => "llm_replay",
        Error::InvalidInput(_) => "invalid_input",
        Error::Transcript(_) => "llm_transcript",
    }
}

/// The engine's [`weft_runtime::Repairer`] on top of [`repair`]: builds the
/// [`RepairRequest`] from the engine's context (the instruction is the plan's
/// `description`, else its name, unless one is given), runs the critic loop and hands the
/// revised plan back. Correlation: tenant, plan and instance of the repaired instance.
#[derive(Clone)]
pub struct LlmRepairer {
    llm: std::sync::Arc<Llm>,
    tools: Vec<ToolSpec>,
    opts: PlanOptions,
    instruction: Option<String>,
}

impl std::fmt::Debug for LlmRepairer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LlmRepairer")
            .field("tools", &self.tools.len())
            .field("opts", &self.opts)
            .finish_non_exhaustive()
    }
}

impl LlmRepairer {
    /// A repairer asking `llm`, allowing `tools` in revised plans.
    pub fn new(llm: std::sync::Arc<Llm>, tools: Vec<ToolSpec>) -> Self {
        LlmRepairer {
            llm,
            tools,
            opts: PlanOptions::default(),
            instruction: None,
        }
    }
    /// Critic-loop options (attempts, limits, analysis bounds).
    pub fn with_options(mut self, opts: PlanOptions) -> Self {
        self.opts = opts;
        self
    }
    /// The instruction the plans were made for.
    pub fn with_instruction(mut self, instruction: impl Into<String>) -> Self {
        self.instruction = Some(instruction.into());
        self
    }
}

impl weft_runtime::Repairer for LlmRepairer {
    fn repair(
        &self,
        ctx: weft_runtime::RepairContext,
    ) -> weft_tools::BoxFuture<'static, Result<Plan, weft_runtime::RepairError>> {
        let llm = std::sync::Arc::clone(&self.llm);
        let mut opts = self.opts.clone();
        opts.correlation = crate::Correlation::new(&ctx.tenant)
            .with_plan(&ctx.plan.plan_name)
            .with_instance(&ctx.instance);
        let instruction = self
            .instruction
            .clone()
            .or_else(|| ctx.plan.description.clone())
            .unwrap_or_else(|| format!("(the plan `{}`)", ctx.plan.plan_name));
        let req = RepairRequest {
            instruction,
            plan: (*ctx.plan).clone(),
            failure: ctx.failure,
            marking: ctx.marking,
            journal_excerpt: ctx.journal_excerpt,
            tools: self.tools.clone(),
        };
        Box::pin(async move {
            repair(&llm, &req, &opts)
                .await
                .map(|o| o.plan)
                .map_err(|e| weft_runtime::RepairError::new(error_code(&e), e.to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapping_keeps_names_and_refuses_losses() {
        let plan: Plan = serde_json::from_str(
            r#"{"plan_name":"p","graph_type":"acyclic","events":{"start":{},"done":{}},"steps":{}}"#,
        )
        .unwrap();
        let mut m = Marking::new();
        m.insert("start".into(), vec![serde_json::json!({"a": 1})]);
        m.insert("gone_but_empty".into(), vec![]);
        assert_eq!(map_marking(&m, &plan).unwrap().len(), 1);
        m.insert("gone".into(), vec![serde_json::json!(1)]);
        assert_eq!(
            map_marking(&m, &plan).unwrap_err(),
            vec!["gone".to_string()]
        );
    }
}
