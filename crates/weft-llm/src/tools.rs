//! The LLM as weft tools: `llm.complete` (one completion, optionally JSON-schema shaped) and
//! `agent.react` (the seed-004 loop), both under the same budgets as the planner: the budget
//! scope is the calling instance's tenant, plan and instance. Specs come from weft-core's
//! `builtin_tools.json`, so the validator and the planner see the same description.

use std::sync::Arc;

use serde_json::{Value, json};
use weft_builtins::builtin::builtin_spec;
use weft_tools::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

use crate::chat::{ChatRequest, Message, ResponseFormat};
use crate::error::Error;
use crate::ids::Correlation;
use crate::react::{self, Goal, PlannerRequest, ReactToolExecutor, ToolDescriptor};
use crate::session::Llm;

fn corr_of(ctx: &ToolContext) -> Correlation {
    Correlation {
        correlation_id: ctx.idempotency_key.to_string(),
        tenant: ctx.tenant.to_string(),
        plan: Some(ctx.plan.to_string()),
        instance: Some(ctx.instance.to_string()),
    }
}

fn tool_error(e: Error) -> ToolError {
    match e {
        Error::BudgetExceeded { throttled, .. } => {
            let msg = e.to_string();
            if throttled {
                ToolError::retryable("budget_throttled", msg)
            } else {
                ToolError::fatal("budget_exceeded", msg)
            }
        }
        Error::Timeout { .. } | Error::Transport { .. } | Error::Unavailable { .. } => {
            ToolError::retryable("llm_unavailable", e.to_string())
        }
        Error::InvalidInput(_) => ToolError::fatal("args_invalid", e.to_string()),
        other => ToolError::fatal("llm_error", other.to_string()),
    }
}

/// `llm.complete`.
#[derive(Debug, Clone)]
pub struct LlmCompleteTool {
    llm: Arc<Llm>,
    spec: ToolSpec,
}

impl LlmCompleteTool {
    /// Uses `llm` (its provider, transcripts and budget).
    pub fn new(llm: Arc<Llm>) -> Self {
        LlmCompleteTool {
            llm,
            spec: builtin_spec("llm.complete"),
        }
    }
}

impl Tool for LlmCompleteTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let llm = Arc::clone(&self.llm);
        Box::pin(async move {
            let prompt = args.get("prompt").and_then(Value::as_str).ok_or_else(|| {
                ToolError::fatal("args_invalid", "`prompt` (a string) is required")
            })?;
            let mut messages = Vec::new();
            if let Some(s) = args.get("system").and_then(Value::as_str) {
                messages.push(Message::system(s));
            }
            messages.push(Message::user(prompt));
            let schema = args.get("schema").filter(|s| s.is_object()).cloned();
            let req = ChatRequest {
                messages,
                response_format: schema.clone().map(|schema| ResponseFormat::JsonSchema {
                    name: "output".into(),
                    schema,
                    strict: true,
                }),
                max_tokens: args
                    .get("max_tokens")
                    .and_then(Value::as_u64)
                    .map(|m| m.min(u64::from(u32::MAX)) as u32),
                ..ChatRequest::default()
            };
            let resp = llm
                .chat(&corr_of(&ctx), "llm.complete", "complete", req)
                .await
                .map_err(tool_error)?;
            // Counted against the plan's `limits.max_llm_tokens` (known only now).
            ctx.services.record_usage(
                &ctx,
                weft_tools::Usage {
                    llm_tokens: resp.usage.prompt_tokens + resp.usage.completion_tokens,
                    ..weft_tools::Usage::default()
                },
            );
            let text = resp.content.clone().unwrap_or_default();
            let mut out =
                json!({"text": text, "usage": resp.usage, "finish_reason": resp.finish_reason});
            if schema.is_some() {
                let parsed: Value = serde_json::from_str(text.trim()).map_err(|e| {
                    ToolError::retryable(
                        "llm_bad_output",
                        format!("the model's output is not JSON: {e}"),
                    )
                })?;
                out["json"] = parsed;
            }
            Ok(out)
        })
    }
}

/// `agent.react`: runs the ReAct loop with tools from an executor.
pub struct AgentReactTool {
    llm: Arc<Llm>,
    executor: Arc<dyn ReactToolExecutor>,
    available: Vec<ToolDescriptor>,
    spec: ToolSpec,
}

impl std::fmt::Debug for AgentReactTool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentReactTool")
            .field("available", &self.available.len())
            .finish_non_exhaustive()
    }
}

impl AgentReactTool {
    /// `available` are the tools a plan may hand to the loop; `toolset` in the args picks
    /// among them (tool ids or descriptors), default all.
    pub fn new(
        llm: Arc<Llm>,
        executor: Arc<dyn ReactToolExecutor>,
        available: Vec<ToolDescriptor>,
    ) -> Self {
        AgentReactTool {
            llm,
            executor,
            available,
            spec: builtin_spec("agent.react"),
        }
    }

    fn request(&self, args: &Value) -> Result<PlannerRequest, ToolError> {
        let bad = |m: String| ToolError::fatal("args_invalid", m);
        let goal = args
            .get("goal")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("`goal` (a string) is required".into()))?;
        let toolset = match args.get("toolset").and_then(Value::as_array) {
            None => self.available.clone(),
            Some(items) => {
                let mut out = Vec::new();
                for it in items {
                    let id = it
                        .as_str()
                        .or_else(|| it.get("tool_id").and_then(Value::as_str))
                        .ok_or_else(|| {
                            bad(format!(
                                "toolset entry {it} is neither a tool id nor a descriptor"
                            ))
                        })?;
                    let d = self
                        .available
                        .iter()
                        .find(|d| d.tool_id == id)
                        .ok_or_else(|| {
                            bad(format!("tool `{id}` is not available to agent.react"))
                        })?;
                    out.push(d.clone());
                }
                out
            }
        };
        let field = |k: &str| -> Result<Value, ToolError> {
            Ok(args.get(k).cloned().unwrap_or_else(|| json!({})))
        };
        Ok(PlannerRequest {
            caller: "agent.react".into(),
            goal: Goal {
                kind: "analysis".into(),
                description: goal.to_string(),
                metadata: None,
            },
            context: serde_json::from_value(match args.get("context") {
                Some(Value::Object(o)) => Value::Object(o.clone()),
                Some(v) => json!({"external_facts": v}),
                None => json!({}),
            })
            .map_err(|e| bad(format!("context: {e}")))?,
            toolset,
            limits: serde_json::from_value(field("limits")?)
                .map_err(|e| bad(format!("limits: {e}")))?,
            preferences: serde_json::from_value(field("preferences")?)
                .map_err(|e| bad(format!("preferences: {e}")))?,
        })
    }
}

impl Tool for AgentReactTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let req = self.request(&args);
        let llm = Arc::clone(&self.llm);
        // The loop's calls act as this step's tenant, instance and step.
        let exec = self
            .executor
            .for_call(&ctx)
            .unwrap_or_else(|| Arc::clone(&self.executor));
        Box::pin(async move {
            let req = req?;
            let resp = react::run_react(&llm, &corr_of(&ctx), &req, exec.as_ref())
                .await
                .map_err(tool_error)?;
            // The loop's model calls beyond the one its call was charged for, and its tokens.
            if let Some(u) = &resp.usage {
                ctx.services.record_usage(
                    &ctx,
                    weft_tools::Usage {
                        llm_calls: u64::from(u.steps_used.saturating_sub(1)),
                        llm_tokens: u.prompt_tokens + u.completion_tokens,
                        ..weft_tools::Usage::default()
                    },
                );
            }
            serde_json::to_value(resp).map_err(|e| ToolError::fatal("llm_error", e.to_string()))
        })
    }
}
