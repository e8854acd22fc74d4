//! The ReAct loop (seed 004): at each step the model returns a step JSON; `finish: true` ends
//! with its `final_answer`, otherwise its `action` runs through the [`ReactToolExecutor`] and
//! the observation goes back to the model. Invalid step JSON or a broken rule gets corrective
//! feedback (and counts as a step), never a crash. When `max_steps` or the timeout is reached
//! without an answer, one is salvaged from the last step, as the seed says. [`answer`]
//! (`service.rs`) is the request → response service every front end shares.

pub mod executor;
pub mod service;
pub mod types;

use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub use executor::{ReactToolExecutor, RegistryExecutor};
pub use service::{Refusal, RefusalKind, answer};
pub use types::{
    Action, Context, FinalAnswer, Goal, Limits, PlannerRequest, PlannerResponse, Preferences,
    ReactStep, ReactUsage, ToolDescriptor, TraceStep, Turn,
};

use crate::chat::{ChatRequest, Message, ResponseFormat};
use crate::error::{Error, Result};
use crate::ids::Correlation;
use crate::prompts;
use crate::session::Llm;
use crate::telemetry::{TelemetryEvent, TelemetryKind};

/// The planner's name in telemetry.
pub const PLANNER: &str = "react";

/// The step schema given as `response_format` (bounded, with the toolset's ids).
pub fn step_schema(toolset: &[ToolDescriptor]) -> Value {
    let ids: Vec<&str> = toolset.iter().map(|t| t.tool_id.as_str()).collect();
    json!({"type": "object", "additionalProperties": false,
      "required": ["thought", "finish", "action", "final_answer"],
      "properties": {
        "thought": {"type": "string", "maxLength": 600},
        "finish": {"type": "boolean"},
        "action": {"anyOf": [{"type": "null"}, {"type": "object", "additionalProperties": false,
            "required": ["tool_id", "input"],
            "properties": {"tool_id": {"enum": ids}, "input": {"type": "object", "maxProperties": 8}}}]},
        "final_answer": {"anyOf": [{"type": "null"}, {"type": "object", "additionalProperties": false,
            "required": ["content"],
            "properties": {"content": {"type": "string", "maxLength": 2000},
                           "structured": {"type": "object", "maxProperties": 8}}}]}}})
}

/// Parses a step and checks the seed's rules.
pub fn parse_step(text: &str, toolset: &[ToolDescriptor]) -> Result<ReactStep, String> {
    let t = text.trim();
    let t = match (t.find('{'), t.rfind('}')) {
        (Some(a), Some(b)) if a < b => &t[a..=b],
        _ => return Err("the reply contains no JSON object".into()),
    };
    let step: ReactStep = serde_json::from_str(t)
        .map_err(|e| format!("the JSON does not match the step contract: {e}"))?;
    if step.finish {
        if step.final_answer.is_none() {
            return Err("finish is true but final_answer is null".into());
        }
        if step.action.is_some() {
            return Err("finish is true but action is not null".into());
        }
    } else {
        if step.final_answer.is_some() {
            return Err("finish is false but final_answer is not null".into());
        }
        let Some(action) = &step.action else {
            return Err("finish is false but action is null".into());
        };
        let Some(id) = &action.tool_id else {
            return Err("finish is false but action.tool_id is null".into());
        };
        if !toolset.iter().any(|t| &t.tool_id == id) {
            let ids: Vec<&str> = toolset.iter().map(|t| t.tool_id.as_str()).collect();
            return Err(format!(
                "action.tool_id `{id}` is not in the toolset ({})",
                ids.join(", ")
            ));
        }
    }
    Ok(step)
}

fn observation(tool_id: &str, result: &Result<Value, String>, ms: u64) -> Value {
    match result {
        Ok(v) => json!({
            "llm_output": match v { Value::String(s) => s.clone(), other => other.to_string() },
            "spark_meta": null,
            "raw_cortex": v,
            "step_meta": {"verb_name": tool_id, "ok": true, "duration_ms": ms},
        }),
        Err(e) => json!({
            "llm_output": format!("error: {e}"),
            "spark_meta": null,
            "raw_cortex": null,
            "step_meta": {"verb_name": tool_id, "ok": false, "error": e, "duration_ms": ms},
        }),
    }
}

/// The answer salvaged from the last step when the loop stops without one.
fn salvage(trace: &[TraceStep], reason: &str) -> FinalAnswer {
    let last_output = trace.iter().rev().find_map(|s| {
        s.action.as_ref()?;
        s.observation
            .as_ref()?
            .get("llm_output")?
            .as_str()
            .map(str::to_string)
    });
    let last_thought = trace
        .iter()
        .rev()
        .map(|s| s.thought.clone())
        .find(|t| !t.trim().is_empty());
    let content = match (last_thought, last_output) {
        (Some(t), Some(o)) => format!("{t}\n{o}"),
        (None, Some(o)) => o,
        (Some(t), None) => t,
        (None, None) => format!(
            "No answer: the planner stopped ({reason}) after {} step(s) without finishing.",
            trace.len()
        ),
    };
    FinalAnswer {
        content,
        structured: Some(json!({"salvaged": true, "stop_reason": reason})),
    }
}

/// Runs the loop for `req` with `tools`.
pub async fn run_react(
    llm: &Llm,
    corr: &Correlation,
    req: &PlannerRequest,
    tools: &dyn ReactToolExecutor,
) -> Result<PlannerResponse> {
    if req.goal.description.trim().is_empty() {
        return Err(Error::InvalidInput("goal.description is empty".into()));
    }
    let validators = input_validators(&req.toolset)?;
    let started = Instant::now();
    let deadline = started + Duration::from_secs(req.limits.timeout());
    let tel = llm.telemetry();
    tel.emit(
        TelemetryEvent::new(TelemetryKind::Started, corr, PLANNER).detail(&req.goal.description),
    );
    let goal = serde_json::to_value(&req.goal).map_err(|e| Error::Decode(e.to_string()))?;
    let toolset = serde_json::to_value(&req.toolset).map_err(|e| Error::Decode(e.to_string()))?;
    let context = serde_json::to_value(&req.context).map_err(|e| Error::Decode(e.to_string()))?;
    let mut messages = vec![
        Message::system(prompts::react_system(
            &goal,
            &toolset,
            &req.preferences.style,
        )),
        Message::user(prompts::react_context(&context)),
    ];
    let schema = step_schema(&req.toolset);
    let max_steps = req.limits.steps();
    let mut trace: Vec<TraceStep> = Vec::new();
    let mut usage = ReactUsage::default();
    let mut answer = None;
    let mut failure: Option<Value> = None;
    let mut stop = "max_steps";
    for i in 0..max_steps {
        let now = Instant::now();
        if now >= deadline {
            stop = "timeout";
            break;
        }
        let last = i + 1 == max_steps;
        let mut msgs = messages.clone();
        if last {
            msgs.push(Message::user(prompts::react_last_step()));
        }
        let creq = ChatRequest {
            messages: msgs,
            response_format: Some(ResponseFormat::JsonSchema {
                name: "react_step".into(),
                schema: schema.clone(),
                strict: true,
            }),
            max_tokens: Some(if last {
                req.limits.answer_tokens()
            } else {
                req.limits.reason_tokens()
            }),
            ..ChatRequest::default()
        };
        tel.emit(
            TelemetryEvent::new(TelemetryKind::StepStarted, corr, PLANNER)
                .step(format!("step-{i}"))
                .iteration(i + 1),
        );
        let resp = match tokio::time::timeout(
            deadline - now,
            llm.chat(corr, PLANNER, "react", creq),
        )
        .await
        {
            Ok(Ok(r)) => r,
            Ok(Err(e)) => {
                tel.emit(
                    TelemetryEvent::new(TelemetryKind::Failed, corr, PLANNER).detail(e.to_string()),
                );
                // Before any progress the failure is the caller's answer; after some, the
                // trace so far is worth more than the bare error.
                if trace.is_empty() {
                    return Err(e);
                }
                failure = Some(json!({"code": e.code(), "message": e.to_string()}));
                stop = "llm_error";
                break;
            }
            Err(_) => {
                stop = "timeout";
                break;
            }
        };
        usage.steps_used += 1;
        usage.prompt_tokens += resp.usage.prompt_tokens;
        usage.completion_tokens += resp.usage.completion_tokens;
        usage.total_tokens += resp.usage.total();
        let raw = resp.content.clone().unwrap_or_default();
        let done = TelemetryEvent::new(TelemetryKind::StepCompleted, corr, PLANNER)
            .step(format!("step-{i}"))
            .iteration(i + 1)
            .tokens(usage.total_tokens);
        match parse_step(&raw, &req.toolset) {
            Err(problem) => {
                usage.invalid_steps += 1;
                tel.emit(done.detail(format!("invalid step: {problem}")));
                trace.push(TraceStep {
                    step_index: i,
                    thought: String::new(),
                    action: None,
                    observation: Some(json!({"error": problem, "llm_output": raw})),
                });
                messages.push(Message::assistant(raw));
                messages.push(Message::user(prompts::react_correction(&problem)));
            }
            Ok(step) if step.finish => {
                tel.emit(done.detail("finish"));
                trace.push(TraceStep {
                    step_index: i,
                    thought: step.thought,
                    action: None,
                    observation: None,
                });
                answer = step.final_answer;
                stop = "finish";
                break;
            }
            Ok(step) => {
                let Some(action) = step.action else { continue };
                let tool_id = action.tool_id.clone().unwrap_or_default();
                // The input must match the toolset's schema before anything is called; a
                // violation is fed back like any other contract violation.
                if let Some(problem) = input_problem(&validators, &tool_id, &action.input) {
                    usage.invalid_steps += 1;
                    tel.emit(done.detail(format!("invalid input for {tool_id}: {problem}")));
                    let obs = json!({"error": problem});
                    messages.push(Message::assistant(raw));
                    messages.push(Message::user(prompts::react_observation(i, &obs)));
                    trace.push(TraceStep {
                        step_index: i,
                        thought: step.thought,
                        action: Some(action),
                        observation: Some(obs),
                    });
                    continue;
                }
                let t0 = Instant::now();
                let result = tools.call(&tool_id, action.input.clone()).await;
                usage.tool_calls += 1;
                let obs = observation(&tool_id, &result, t0.elapsed().as_millis() as u64);
                tel.emit(done.detail(format!("called {tool_id}")));
                messages.push(Message::assistant(raw));
                messages.push(Message::user(prompts::react_observation(i, &obs)));
                trace.push(TraceStep {
                    step_index: i,
                    thought: step.thought,
                    action: Some(action),
                    observation: Some(obs),
                });
            }
        }
    }
    let final_answer = answer.unwrap_or_else(|| salvage(&trace, stop));
    usage.stop_reason = stop.to_string();
    usage.duration_ms = started.elapsed().as_millis() as u64;
    tel.emit(
        TelemetryEvent::new(TelemetryKind::Completed, corr, PLANNER)
            .iteration(usage.steps_used)
            .tokens(usage.total_tokens)
            .detail(stop),
    );
    Ok(PlannerResponse {
        final_answer: Some(final_answer),
        trace: req.preferences.return_trace.then_some(trace),
        usage: Some(usage),
        error: failure,
    })
}

/// A validator per toolset entry; an entry whose input schema weft cannot check is the
/// caller's to fix, so the request is refused before the model is asked anything.
fn input_validators(
    toolset: &[ToolDescriptor],
) -> Result<Vec<(String, weft_core::schema::Schema)>> {
    toolset
        .iter()
        .map(|d| {
            weft_core::schema::compile(&d.input_schema)
                .map(|v| (d.tool_id.clone(), v))
                .map_err(|e| {
                    Error::InvalidInput(format!(
                        "the input_schema of toolset entry `{}` cannot be checked: {e}",
                        d.tool_id
                    ))
                })
        })
        .collect()
}

/// What is wrong with `input` for `tool_id`'s input schema, if anything.
fn input_problem(
    validators: &[(String, weft_core::schema::Schema)],
    tool_id: &str,
    input: &Value,
) -> Option<String> {
    let (_, v) = validators.iter().find(|(id, _)| id == tool_id)?;
    let e = v.check(input).err()?;
    Some(format!(
        "action.input does not match the input_schema of `{tool_id}`: {e} (at `{}`)",
        e.at()
    ))
}
