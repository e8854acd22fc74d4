//! The critic loop: ask for a `create_plan` call, then parse, validate and analyse the
//! candidate, and send every error finding back verbatim (code, name, pointer, message, hint,
//! and a deadlock's witness firing sequence) as a `CRITIC:` message, until a candidate passes
//! or the attempts run out. Planning and repair both use it.

use serde_json::{Value, json};
use weft_analysis::{AnalysisOptions, analyze_plan};
use weft_core::{Finding, Limits, Plan, Severity, StaticCatalog, parse_plan, validate};

use crate::chat::{ChatRequest, ChatResponse, Message, ToolChoice, ToolDef, Usage};
use crate::error::{Error, Result, render_findings};
use crate::ids::Correlation;
use crate::prompts;
use crate::session::Llm;
use crate::telemetry::{TelemetryEvent, TelemetryKind};

/// One rejected candidate.
#[derive(Debug, Clone, PartialEq)]
pub struct CriticRound {
    /// 1-based attempt.
    pub attempt: u32,
    /// Error findings on the candidate.
    pub findings: Vec<Finding>,
    /// The exact CRITIC message sent back.
    pub feedback: String,
}

/// What a successful loop produced.
#[derive(Debug, Clone)]
pub struct Accepted {
    /// The plan.
    pub plan: Plan,
    /// Attempts used (1 = first candidate accepted).
    pub attempts: u32,
    /// Rejected candidates, in order.
    pub rounds: Vec<CriticRound>,
    /// Warnings and info findings on the accepted plan.
    pub findings: Vec<Finding>,
    /// Tokens used.
    pub usage: Usage,
}

/// A further check on a structurally valid candidate.
pub(crate) type ExtraCheck<'a> = dyn Fn(&Plan) -> Vec<Finding> + Sync + 'a;

/// The knobs of one loop.
pub(crate) struct LoopSpec<'a> {
    pub llm: &'a Llm,
    pub corr: &'a Correlation,
    pub planner: &'a str,
    pub purpose: &'a str,
    pub catalog: &'a StaticCatalog,
    pub max_attempts: u32,
    pub max_tokens: u32,
    pub limits: &'a Limits,
    pub analysis: &'a AnalysisOptions,
    /// Further checks on a structurally valid plan (repair: the marking must map).
    pub extra: Option<&'a ExtraCheck<'a>>,
}

fn finding(code: &str, name: &str, pointer: &str, message: String, hint: &str) -> Finding {
    Finding {
        code: code.into(),
        name: name.into(),
        severity: Severity::Error,
        pointer: pointer.into(),
        message,
        hint: Some(hint.into()),
        witness: None,
        depends_on_guards: false,
    }
}

fn load_error_name(code: &str) -> &'static str {
    match code {
        "L001" => "too-large",
        "L002" => "invalid-utf8",
        "L003" => "too-deep",
        "L004" => "invalid-plan-json",
        _ => "too-many",
    }
}

const BROKEN_CALL: &str = "(unparseable create_plan call: ";

/// The candidate plan text of a reply, or the finding explaining why there is none.
fn candidate(resp: &ChatResponse) -> Result<String, Box<Finding>> {
    if let Some(call) = resp.tool_calls.first() {
        if call.name != prompts::CREATE_PLAN {
            return Err(Box::new(finding(
                "P002",
                "wrong-function",
                "",
                format!(
                    "you called `{}`, which does not exist; the only function is `{}`",
                    call.name,
                    prompts::CREATE_PLAN
                ),
                "call create_plan with the whole plan as its arguments",
            )));
        }
        // `{"plan_json": …}` (seed 000's shape) is accepted as well as the bare plan.
        if let Ok(Value::Object(o)) = serde_json::from_str::<Value>(&call.arguments)
            && o.len() == 1
        {
            match o.get("plan_json") {
                Some(Value::String(s)) => return Ok(s.clone()),
                Some(v) => return Ok(v.to_string()),
                None => {}
            }
        }
        return Ok(call.arguments.clone());
    }
    let text = resp.content.as_deref().unwrap_or("").trim();
    if let Some(m) = text.strip_prefix(BROKEN_CALL) {
        return Err(Box::new(finding(
            "P003",
            "invalid-call-json",
            "",
            format!(
                "the create_plan arguments were not valid JSON: {}",
                m.trim_end_matches(')')
            ),
            "write the plan as one complete JSON object, keep it short, and close every string and brace",
        )));
    }
    // Tolerance: a plan written as text (possibly fenced) instead of a call.
    let text = text
        .strip_prefix("```json")
        .or_else(|| text.strip_prefix("```"))
        .map_or(text, |t| t.trim_end().trim_end_matches("```"))
        .trim();
    if text.starts_with('{') {
        return Ok(text.to_string());
    }
    Err(Box::new(finding(
        "P001",
        "no-plan",
        "",
        "the reply contained no create_plan call and no plan".into(),
        "call create_plan with the whole plan as its arguments",
    )))
}

/// Parses, validates and analyses a candidate: `Ok` with its non-error findings, or the
/// error findings.
pub fn check_candidate(
    text: &str,
    catalog: &StaticCatalog,
    limits: &Limits,
    analysis: &AnalysisOptions,
) -> Result<(Plan, Vec<Finding>), Vec<Finding>> {
    let plan = parse_plan(text.as_bytes(), limits).map_err(|e| {
        vec![finding(
            e.code(),
            load_error_name(e.code()),
            e.pointer(),
            e.to_string(),
            e.hint(),
        )]
    })?;
    let v = validate(&plan, Some(catalog), limits);
    let (errors, mut rest): (Vec<Finding>, Vec<Finding>) =
        v.findings.into_iter().partition(Finding::is_error);
    if !errors.is_empty() {
        return Err(errors);
    }
    let report = analyze_plan(&plan, analysis);
    let (errors, more): (Vec<Finding>, Vec<Finding>) =
        report.findings.into_iter().partition(Finding::is_error);
    if !errors.is_empty() {
        return Err(errors);
    }
    rest.extend(more);
    Ok((plan, rest))
}

/// The `create_plan` function.
pub fn create_plan_tool() -> ToolDef {
    ToolDef {
        name: prompts::CREATE_PLAN.into(),
        description: "Submit the complete weft plan.".into(),
        parameters: super::schema::plan_schema(),
    }
}

/// The tool subset as the model sees it.
pub fn tools_json(catalog: &StaticCatalog) -> Value {
    Value::Array(
        catalog
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "args_schema": t.args_schema}))
            .collect(),
    )
}

/// Runs the loop from `messages` (system + first user message).
pub(crate) async fn run(spec: LoopSpec<'_>, mut messages: Vec<Message>) -> Result<Accepted> {
    let max = spec.max_attempts.max(1);
    let mut rounds = Vec::new();
    let mut usage = Usage::default();
    for attempt in 1..=max {
        spec.llm.telemetry().emit(
            TelemetryEvent::new(TelemetryKind::StepStarted, spec.corr, spec.planner)
                .step(format!("attempt-{attempt}"))
                .iteration(attempt),
        );
        let req = ChatRequest {
            messages: messages.clone(),
            tools: vec![create_plan_tool()],
            tool_choice: ToolChoice::Function(prompts::CREATE_PLAN.into()),
            max_tokens: Some(spec.max_tokens),
            ..ChatRequest::default()
        };
        let resp = match spec
            .llm
            .chat(spec.corr, spec.planner, spec.purpose, req)
            .await
        {
            Ok(r) => r,
            // A call so broken the server refused it: a bad candidate, fed back like any other.
            Err(Error::MalformedToolCall(m)) => ChatResponse {
                content: Some(format!("{BROKEN_CALL}{m})")),
                ..ChatResponse::default()
            },
            Err(e) => return Err(e),
        };
        usage.add(resp.usage);
        let checked = candidate(&resp)
            .map_err(|f| vec![*f])
            .and_then(|text| check_candidate(&text, spec.catalog, spec.limits, spec.analysis))
            .and_then(|(plan, rest)| {
                let extra = spec.extra.map(|f| f(&plan)).unwrap_or_default();
                if extra.is_empty() {
                    Ok((plan, rest))
                } else {
                    Err(extra)
                }
            });
        let step_done = TelemetryEvent::new(TelemetryKind::StepCompleted, spec.corr, spec.planner)
            .step(format!("attempt-{attempt}"))
            .iteration(attempt)
            .tokens(usage.total());
        match checked {
            Ok((plan, findings)) => {
                spec.llm.telemetry().emit(step_done.detail("accepted"));
                return Ok(Accepted {
                    plan,
                    attempts: attempt,
                    rounds,
                    findings,
                    usage,
                });
            }
            Err(findings) => {
                spec.llm
                    .telemetry()
                    .emit(step_done.detail(format!("rejected with {} finding(s)", findings.len())));
                if attempt == max {
                    return Err(Error::PlanningFailed {
                        attempts: attempt,
                        findings,
                    });
                }
                let feedback = prompts::critic(attempt, max, &render_findings(&findings));
                match resp.tool_calls.first() {
                    Some(call) => {
                        let id = call.id.clone();
                        messages.push(Message::assistant_calls(
                            resp.content.clone(),
                            resp.tool_calls.clone(),
                        ));
                        messages.push(Message::tool(id, feedback.clone()));
                    }
                    None => {
                        messages.push(Message::assistant(resp.content.clone().unwrap_or_default()));
                        messages.push(Message::user(feedback.clone()));
                    }
                }
                rounds.push(CriticRound {
                    attempt,
                    findings,
                    feedback,
                });
            }
        }
    }
    Err(Error::PlanningFailed {
        attempts: max,
        findings: Vec::new(),
    })
}
