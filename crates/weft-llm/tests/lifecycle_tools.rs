//! The seed-001 planner lifecycle (hooks, retry, skip, self-critique, fallback, iteration
//! guard, telemetry) and the `llm.complete` / `agent.react` tools under budgets; plus
//! explain/summarize with and without a model.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::Plan;
use weft_llm::lifecycle::{Evaluation, Outcome, RunState, SelfCritiqueResult};
use weft_llm::{
    AgentReactTool, BoxFuture, Budget, BudgetLimits, Correlation, Lifecycle, Limit, Llm,
    LlmCompleteTool, MemoryTelemetry, PlannerSteps, ReactToolExecutor, ScriptedExchange,
    ScriptedProvider, StepInstance, explain, summarize,
};
use weft_tools::{Tool, ToolContext};

struct Demo {
    fail_draft: bool,
}

impl PlannerSteps for Demo {
    fn name(&self) -> &str {
        "demo"
    }
    fn validate_inputs(&self, p: &Value) -> Result<(), String> {
        p.get("topic")
            .map(|_| ())
            .ok_or_else(|| "topic is required".into())
    }
    fn draft_plan<'a>(&'a self, _: &'a Value) -> BoxFuture<'a, Result<Vec<StepInstance>, String>> {
        let steps = if self.fail_draft {
            Err("model unavailable".to_string())
        } else {
            Ok(["outline", "skipme", "write"]
                .iter()
                .map(|id| StepInstance {
                    id: id.to_string(),
                    input: json!({}),
                    max_retries: 1,
                })
                .collect())
        };
        Box::pin(std::future::ready(steps))
    }
    fn should_skip(&self, s: &StepInstance, _: &RunState) -> bool {
        s.id == "skipme"
    }
    fn execute_step<'a>(
        &'a self,
        ctx: &'a Value,
        s: &'a StepInstance,
        st: &'a RunState,
    ) -> BoxFuture<'a, Result<Value, String>> {
        let out = json!({"step": s.id, "topic": ctx["topic"], "attempt_feedback": st.feedback});
        Box::pin(std::future::ready(Ok(out)))
    }
    fn evaluate_step(&self, s: &StepInstance, out: &Value) -> Evaluation {
        if s.id == "write" && out["attempt_feedback"].as_array().is_none_or(Vec::is_empty) {
            Evaluation::Retry("too short".into())
        } else {
            Evaluation::Accept
        }
    }
}

#[tokio::test]
async fn lifecycle_runs_hooks_with_retry_skip_and_telemetry() {
    let tel = Arc::new(MemoryTelemetry::new());
    let lc = Lifecycle::new(tel.clone());
    let corr = Correlation::new("acme");
    let r = lc
        .run(
            &Demo { fail_draft: false },
            &corr,
            &json!({"topic": "rust"}),
        )
        .await;
    assert_eq!(r.outcome, Outcome::Success);
    assert_eq!(r.completed_steps, ["outline", "write"]);
    assert_eq!((r.iterations, r.retries), (3, 1));
    assert_eq!(
        tel.kinds(),
        [
            "planner.started",
            "planner.step.started",
            "planner.step.completed",
            "planner.step.started",
            "planner.step.completed",
            "planner.step.started",
            "planner.step.completed",
            "planner.completed"
        ]
    );
    assert!(
        tel.events()
            .iter()
            .all(|e| e.correlation.correlation_id == corr.correlation_id)
    );

    let r = lc.run(&Demo { fail_draft: false }, &corr, &json!({})).await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(r.diagnostics, ["invalid inputs: topic is required"]);

    // the max-iteration guard
    let r = Lifecycle::new(tel.clone())
        .max_iterations(2)
        .run(&Demo { fail_draft: false }, &corr, &json!({"topic": 1}))
        .await;
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(
        r.diagnostics,
        ["max iterations (2) reached at step `write`"]
    );
    assert_eq!(r.outstanding_steps, ["write"]);
}

#[tokio::test]
async fn fallback_plan_and_self_critique() {
    let tel = Arc::new(MemoryTelemetry::new());
    let lc = Lifecycle::new(tel.clone())
        .use_fallback_plan(Arc::new(|_| {
            vec![StepInstance {
                id: "safe".into(),
                input: json!({}),
                max_retries: 0,
            }]
        }))
        .use_self_critique(Arc::new(|_, _| SelfCritiqueResult {
            is_approved: false,
            notes: "off topic".into(),
            suggested_changes: vec![],
        }));
    let r = lc
        .run(
            &Demo { fail_draft: true },
            &Correlation::new("a"),
            &json!({"topic": "x"}),
        )
        .await;
    assert!(r.used_fallback);
    assert_eq!(r.outcome, Outcome::Failed);
    assert_eq!(
        r.diagnostics,
        ["step `safe` failed after 1 attempt(s): self-critique: off topic"]
    );
    assert_eq!(tel.kinds().last(), Some(&"planner.failed"));
}

fn ctx() -> ToolContext {
    let mut c = ToolContext::detached("ask");
    c.tenant = Arc::from("acme");
    c.plan = Arc::from("p1");
    c.instance = Arc::from("i1");
    c
}

#[tokio::test]
async fn llm_complete_tool_under_budget() {
    let budget = Arc::new(Budget::new(BudgetLimits {
        per_instance: Limit::new(None, Some(1)),
        ..BudgetLimits::default()
    }));
    let tel = Arc::new(MemoryTelemetry::new());
    let llm = Arc::new(
        Llm::new(Arc::new(ScriptedProvider::new(vec![
            ScriptedExchange::content(r#"{"n": 3}"#)
                .when_user("count")
                .with_usage(7, 3),
        ])))
        .with_budget(budget.clone())
        .with_telemetry(tel.clone()),
    );
    let tool = LlmCompleteTool::new(llm);
    assert_eq!(tool.spec().name, "llm.complete");
    let out = tool
        .call(
            ctx(),
            json!({"prompt": "count", "schema": {"type": "object"}, "max_tokens": 20}),
        )
        .await
        .unwrap();
    assert_eq!(out["json"], json!({"n": 3}));
    assert_eq!(budget.spent_by_instance("i1").tokens, 10);
    let err = tool
        .call(ctx(), json!({"prompt": "again"}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "budget_exceeded");
    assert!(
        err.message.contains("instance \"i1\": 1 of 1 calls used"),
        "{}",
        err.message
    );
    assert_eq!(tel.kinds(), ["planner.rejected"]);
}

struct Echo;
impl ReactToolExecutor for Echo {
    fn call<'a>(&'a self, _: &'a str, input: Value) -> BoxFuture<'a, Result<Value, String>> {
        Box::pin(std::future::ready(Ok(input)))
    }
}

#[tokio::test]
async fn agent_react_tool_runs_the_loop() {
    let llm = Arc::new(Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::content(json!({"thought": "t", "finish": false, "action": {"tool_id": "echo", "input": {"x": 1}}, "final_answer": null}).to_string()),
        ScriptedExchange::content(json!({"thought": "t", "finish": true, "action": null, "final_answer": {"content": "x is 1"}}).to_string()),
    ]))));
    let tool = AgentReactTool::new(
        llm,
        Arc::new(Echo),
        vec![weft_llm::react::ToolDescriptor {
            tool_id: "echo".into(),
            description: "echo".into(),
            input_schema: json!({}),
            output_schema: None,
        }],
    );
    let out = tool
        .call(
            ctx(),
            json!({"goal": "find x", "toolset": ["echo"], "limits": {"max_steps": 3}}),
        )
        .await
        .unwrap();
    assert_eq!(out["final_answer"]["content"], "x is 1");
    let err = tool
        .call(ctx(), json!({"goal": "g", "toolset": ["rm"]}))
        .await
        .unwrap_err();
    assert_eq!(err.code, "args_invalid");
}

fn plan() -> Plan {
    serde_json::from_value(json!({"plan_name": "greet", "graph_type": "acyclic",
      "events": {"start": {}, "done": {"kind": "output"}},
      "steps": {"greet": {"on": ["start"], "action": "log", "args": {"message": "hi"}, "emits": ["done"]}}}))
    .unwrap()
}

#[tokio::test]
async fn explain_and_summarize_without_and_with_a_model() {
    let corr = Correlation::new("a");
    let e = explain(None, &corr, &plan()).await.unwrap();
    assert_eq!(
        e.text,
        "Plan `greet` is a one-shot (acyclic) workflow with 2 event(s) and 1 step(s).\nIt starts when input arrives on `start`.\n1. Step `greet` waits for `start` and runs the tool `log`; then it emits `done`.\nIt finishes with a token on `done`."
    );
    // A model explanation that misses the step is asked again, then replaced by the template.
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::content("It says hello."),
        ScriptedExchange::content("It says hello, via `send_sms`.")
            .when_user("does not mention these steps by name: greet"),
    ])));
    let e = explain(Some(&llm), &corr, &plan()).await.unwrap();
    assert_eq!(e.source, weft_llm::explain::Source::Template);
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::content("`greet` logs hi via `send_sms`."),
    ])));
    let e = explain(Some(&llm), &corr, &plan()).await.unwrap();
    assert_eq!(
        e.warnings,
        ["the explanation mentions `send_sms`, which is not in the plan"]
    );

    let s = summarize(None, &corr, "greet started\ngreet failed: timeout", &plan())
        .await
        .unwrap();
    assert_eq!(s.problems, ["greet failed: timeout"]);
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::content(
            r#"{"what_happened": "greet timed out", "problems": ["timeout"], "suggestions": ["raise timeout_ms"]}"#,
        ),
    ])));
    let s = summarize(Some(&llm), &corr, "greet failed: timeout", &plan())
        .await
        .unwrap();
    assert_eq!(s.suggestions, ["raise timeout_ms"]);
}
