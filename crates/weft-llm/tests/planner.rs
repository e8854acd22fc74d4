//! The verified planner against the scripted provider: each scenario asserts the exact CRITIC
//! feedback sent back to the model and the final outcome; plus cache, budget and
//! record → replay determinism.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::{StaticCatalog, ToolCatalog, ToolSpec};
use weft_llm::{
    Budget, BudgetLimits, Correlation, Error, Limit, Llm, MemoryPlanCache, MemoryTelemetry,
    MemoryTranscript, PlanOptions, ReplayProvider, Role, ScriptedExchange, ScriptedProvider, plan,
};

fn tools() -> Vec<ToolSpec> {
    let c = StaticCatalog::builtin();
    ["log", "echo", "send_email", "llm.complete"]
        .iter()
        .filter_map(|n| c.spec(n).cloned())
        .collect()
}

fn good() -> Value {
    json!({"plan_name": "greet", "graph_type": "acyclic",
           "events": {"start": {}, "done": {"kind": "output"}},
           "steps": {"greet": {"on": ["start"], "action": "log", "args": {"message": "hi"}, "emits": ["done"]}}})
}

struct Run {
    transcript: Arc<MemoryTranscript>,
    telemetry: Arc<MemoryTelemetry>,
    llm: Llm,
}

fn setup(script: Vec<ScriptedExchange>) -> Run {
    let transcript = Arc::new(MemoryTranscript::new());
    let telemetry = Arc::new(MemoryTelemetry::new());
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script)))
        .with_transcripts(transcript.clone())
        .with_telemetry(telemetry.clone());
    Run {
        transcript,
        telemetry,
        llm,
    }
}

fn opts() -> PlanOptions {
    PlanOptions {
        correlation: Correlation::new("acme"),
        ..PlanOptions::default()
    }
}

/// The feedback actually sent: the last message of the request of exchange `i`.
fn sent(run: &Run, i: usize) -> String {
    let ex = run.transcript.exchanges();
    let m = ex[i].request.messages.last().unwrap();
    assert_eq!(
        m.role,
        Role::Tool,
        "CRITIC goes back as the create_plan call's result"
    );
    m.content.clone().unwrap()
}

#[tokio::test]
async fn valid_first_time() {
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", good()).with_usage(100, 20),
    ]);
    let out = plan(&run.llm, "Say hi", &tools(), &opts()).await.unwrap();
    assert_eq!(out.plan.plan_name, "greet");
    assert_eq!(out.attempts, 1);
    assert_eq!(out.critic_rounds(), 0);
    assert_eq!(out.usage.total_tokens, 120);
    assert_eq!(
        run.telemetry.kinds(),
        [
            "planner.started",
            "planner.step.started",
            "planner.step.completed",
            "planner.completed"
        ]
    );
    let ex = run.transcript.exchanges();
    assert_eq!(ex.len(), 1);
    assert_eq!(ex[0].request.tools[0].name, "create_plan");
    assert!(
        ex[0].request.messages[0]
            .content_str()
            .contains("\"send_email\"")
    );
    assert_eq!(ex[0].correlation.tenant, "acme");
}

#[tokio::test]
async fn invalid_json_then_fixed() {
    let run = setup(vec![
        ScriptedExchange::tool_call(
            "create_plan",
            json!("{\"plan_name\": \"greet\", \"graph_type\": "),
        ),
        ScriptedExchange::tool_call("create_plan", good()).when_last("CRITIC: attempt 1 of 3"),
    ]);
    let out = plan(&run.llm, "Say hi", &tools(), &opts()).await.unwrap();
    assert_eq!(out.attempts, 2);
    assert_eq!(
        sent(&run, 1),
        "CRITIC: attempt 1 of 3 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n- L004 invalid-plan-json at /graph_type: EOF while parsing a value at line 1, column 37 (at /graph_type)\n  hint: check the plan against `weft schema`; unknown fields are rejected"
    );
    assert_eq!(out.rounds[0].feedback, sent(&run, 1));
    assert_eq!(out.rounds[0].findings[0].code, "L004");
}

#[tokio::test]
async fn unknown_field_is_named_with_its_pointer() {
    let mut bad = good();
    bad["steps"]["greet"]["actoin"] = json!("log");
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", bad),
        ScriptedExchange::tool_call("create_plan", good()),
    ]);
    let out = plan(&run.llm, "Say hi", &tools(), &opts()).await.unwrap();
    assert_eq!(
        sent(&run, 1),
        "CRITIC: attempt 1 of 3 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n- L004 invalid-plan-json at /steps/greet/actoin: unknown field `actoin`, expected one of `on`, `action`, `args`, `emits`, `guard`, `correlate`, `retry`, `timeout_ms`, `on_fail`, `description`, `approval` at line 1, column 188 (at /steps/greet/actoin)\n  hint: check the plan against `weft schema`; unknown fields are rejected"
    );
    assert_eq!(out.rounds[0].findings[0].pointer, "/steps/greet/actoin");
}

fn cycle() -> Value {
    json!({"plan_name": "cycle", "graph_type": "acyclic",
      "events": {"start": {}, "drafted": {}, "rejected": {}, "done": {"kind": "output"}},
      "steps": {
        "draft": {"on": ["start", "rejected"], "action": "llm.complete", "args": {"prompt": "Write a haiku"}, "emits": ["drafted"]},
        "review": {"on": ["drafted"], "action": "echo", "emits": [{"event": "rejected", "when": "result.score < 5"}, {"event": "done", "when": "result.score >= 5"}]}}})
}

#[tokio::test]
async fn cycle_named_then_fixed() {
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", cycle()),
        ScriptedExchange::tool_call("create_plan", good()).when_last("V004"),
    ]);
    let out = plan(
        &run.llm,
        "Write a haiku until it is good",
        &tools(),
        &opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        sent(&run, 1),
        "CRITIC: attempt 1 of 3 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n- V005 never-enabled at /steps/draft/on: step `draft` can never be enabled: no token can ever reach `rejected`\n  hint: emit the missing event from an earlier step, mark it `kind: input`, or list it in `initial`\n- V005 never-enabled at /steps/review/on: step `review` can never be enabled: no token can ever reach `drafted`\n  hint: emit the missing event from an earlier step, mark it `kind: input`, or list it in `initial`\n- V004 cycle at /steps/draft/emits: acyclic plan has a cycle: `draft` → `drafted` → `review` → `rejected`\n  hint: break the cycle, or set `\"graph_type\": \"reactive\"` if the plan is meant to loop"
    );
    assert_eq!(out.attempts, 2);
    assert_eq!(out.rounds[0].findings[2].code, "V004");
}

#[tokio::test]
async fn unknown_tool_then_fixed() {
    let mut bad = good();
    bad["steps"]["greet"]["action"] = json!("send_emial");
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", bad),
        ScriptedExchange::tool_call("create_plan", good()).when_last("V002"),
    ]);
    let out = plan(&run.llm, "Say hi", &tools(), &opts()).await.unwrap();
    assert_eq!(
        sent(&run, 1),
        "CRITIC: attempt 1 of 3 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n- V002 unknown-tool at /steps/greet/action: step `greet` uses unknown tool `send_emial`\n  hint: did you mean `send_email`?"
    );
    assert_eq!(out.rounds[0].findings[0].code, "V002");
}

fn deadlock() -> Value {
    json!({"plan_name": "deadlock", "graph_type": "acyclic",
      "events": {"start": {}, "checked": {}, "approved": {}, "done": {"kind": "output"}},
      "steps": {
        "check": {"on": ["start"], "action": "echo", "args": {"amount": "${start.amount}"},
                  "emits": ["checked", {"event": "approved", "when": "start.amount < 100"}]},
        "finish": {"on": ["checked", "approved"], "action": "log", "args": {"message": "done"}, "emits": ["done"]}}})
}

#[tokio::test]
async fn deadlock_witness_sent_then_fixed() {
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", deadlock()),
        ScriptedExchange::tool_call("create_plan", good()).when_last("witness firing sequence"),
    ]);
    let out = plan(&run.llm, "Approve small amounts", &tools(), &opts())
        .await
        .unwrap();
    assert_eq!(
        sent(&run, 1),
        "CRITIC: attempt 1 of 3 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n- A001 deadlock at /steps/finish: Deadlock: after firing `check`, nothing can fire and no output event holds a token; `finish` waits for `approved` (has `checked`). This relies on guards and `when` conditions being able to go either way (they were over-approximated).\n  witness firing sequence: check\n  hint: Make sure `approved` is always produced before `finish` needs it on every path (check conditional emits and exclusive events), or remove it from `finish`'s `on`."
    );
    let f = &out.rounds[0].findings[0];
    assert_eq!(f.code, "A001");
    assert!(f.witness.is_some());
}

#[tokio::test]
async fn attempts_exhausted_lists_last_findings() {
    let mut bad = good();
    bad["steps"]["greet"]["action"] = json!("send_emial");
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", cycle()),
        ScriptedExchange::tool_call("create_plan", bad),
    ]);
    let o = PlanOptions {
        max_attempts: 2,
        ..opts()
    };
    let err = plan(&run.llm, "Say hi", &tools(), &o).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, Error::PlanningFailed { attempts: 2, .. }));
    assert_eq!(
        msg,
        "planning gave up after 2 attempt(s); last findings:\n- V002 unknown-tool at /steps/greet/action: step `greet` uses unknown tool `send_emial`\n  hint: did you mean `send_email`?"
    );
    assert_eq!(run.telemetry.kinds().last(), Some(&"planner.failed"));
}

#[tokio::test]
async fn no_tool_call_gets_feedback_as_user_message() {
    let run = setup(vec![
        ScriptedExchange::content("I think you should send an email."),
        ScriptedExchange::tool_call("create_plan", good()).when_user("P001 no-plan"),
    ]);
    let out = plan(&run.llm, "Say hi", &tools(), &opts()).await.unwrap();
    assert_eq!(out.attempts, 2);
}

#[tokio::test]
async fn budget_exhausted_refuses_before_the_request() {
    let budget = Arc::new(Budget::new(BudgetLimits {
        per_tenant: Limit::new(Some(5_000), None),
        ..BudgetLimits::default()
    }));
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", cycle()).with_usage(2_500, 500),
        ScriptedExchange::tool_call("create_plan", good()),
    ]);
    let llm = run.llm.clone().with_budget(budget.clone());
    let err = plan(&llm, "Say hi", &tools(), &opts()).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(
        err,
        Error::BudgetExceeded {
            throttled: false,
            ..
        }
    ));
    assert!(
        msg.starts_with("LLM budget exceeded for tenant \"acme\": 3000 of 5000 tokens used (0 reserved by calls in flight); this call may need up to "),
        "{msg}"
    );
    // the second request was never sent
    assert_eq!(run.transcript.exchanges().len(), 1);
    assert!(run.telemetry.kinds().contains(&"planner.rejected"));
    assert_eq!(budget.spent_by_tenant("acme").tokens, 3_000);
}

#[tokio::test]
async fn cache_returns_the_plan_without_calling_the_model() {
    let cache = Arc::new(MemoryPlanCache::new());
    let run = setup(vec![ScriptedExchange::tool_call("create_plan", good())]);
    let o = PlanOptions {
        cache: Some(cache.clone()),
        ..opts()
    };
    let first = plan(&run.llm, "Say  HI ", &tools(), &o).await.unwrap();
    let again = plan(&run.llm, "say hi", &tools(), &o).await.unwrap();
    assert!(!first.from_cache && again.from_cache);
    assert_eq!(first.plan, again.plan);
    assert_eq!(run.transcript.exchanges().len(), 1);
}

#[tokio::test]
async fn semantic_review_concerns_are_warnings() {
    let run = setup(vec![
        ScriptedExchange::tool_call("create_plan", good()),
        ScriptedExchange::content(r#"{"concerns": ["nobody is greeted by name"]}"#),
    ]);
    let o = PlanOptions {
        semantic_review: true,
        ..opts()
    };
    let out = plan(&run.llm, "Say hi to Ann", &tools(), &o).await.unwrap();
    assert_eq!(out.warnings, ["review: nobody is greeted by name"]);
}

#[tokio::test]
async fn script_runs_out_with_a_clear_error() {
    let run = setup(vec![ScriptedExchange::tool_call("create_plan", cycle())]);
    let err = plan(&run.llm, "Say hi", &tools(), &opts())
        .await
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("scripted LLM: script exhausted after 1 exchange(s)"),
        "{err}"
    );
}

#[tokio::test]
async fn recorded_transcript_replays_to_the_same_outcome() {
    let path = std::env::temp_dir().join(format!("weft-llm-replay-{}.jsonl", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let script = vec![
        ScriptedExchange::tool_call("create_plan", deadlock()),
        ScriptedExchange::tool_call("create_plan", good()),
    ];
    let sink = Arc::new(weft_llm::JsonlTranscript::open(&path).unwrap());
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script))).with_transcripts(sink);
    let live = plan(&llm, "Approve small amounts", &tools(), &opts())
        .await
        .unwrap();

    let recorded = weft_llm::JsonlTranscript::load(&path).unwrap();
    assert_eq!(recorded.len(), 2);
    let replay = Arc::new(ReplayProvider::new(recorded.clone()));
    let llm = Llm::new(replay.clone());
    let replayed = plan(&llm, "Approve small amounts", &tools(), &opts())
        .await
        .unwrap();
    assert_eq!(live.plan, replayed.plan);
    assert_eq!(live.rounds, replayed.rounds);
    assert_eq!(replay.remaining(), 0);

    // A different instruction diverges loudly.
    let llm = Llm::new(Arc::new(ReplayProvider::new(recorded)));
    let err = plan(&llm, "Approve big amounts", &tools(), &opts())
        .await
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.starts_with("replay diverged at exchange 0: request/messages/1/content: recorded \"Instruction: Approve small amounts\""), "{msg}");
    let _ = std::fs::remove_file(&path);
}
