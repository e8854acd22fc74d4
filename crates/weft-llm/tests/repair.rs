//! Repair against the scripted provider: a revision that would drop an event holding tokens
//! is sent back and finally refused with the events named; a good revision maps the marking.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_core::{Plan, StaticCatalog, ToolCatalog, ToolSpec};
use weft_llm::{
    Correlation, Error, Llm, Marking, MemoryTranscript, PlanOptions, RepairRequest, Role,
    ScriptedExchange, ScriptedProvider, repair,
};

fn tools() -> Vec<ToolSpec> {
    let c = StaticCatalog::builtin();
    ["log", "echo", "send_email"]
        .iter()
        .filter_map(|n| c.spec(n).cloned())
        .collect()
}

fn original() -> Plan {
    serde_json::from_value(json!({"plan_name": "notify", "graph_type": "acyclic",
      "events": {"start": {}, "fetched": {}, "done": {"kind": "output"}},
      "steps": {
        "fetch": {"on": ["start"], "action": "echo", "emits": ["fetched"]},
        "send": {"on": ["fetched"], "action": "send_email",
                 "args": {"to": "a@example.com", "subject": "s", "body": "b"}, "emits": ["done"], "on_fail": "repair"}}}))
    .unwrap()
}

fn request() -> RepairRequest {
    let mut marking = Marking::new();
    marking.insert("fetched".into(), vec![json!({"id": 7})]);
    RepairRequest {
        instruction: "Fetch the report and email it".into(),
        plan: original(),
        failure: "step `send` failed: [smtp] 554 relay denied".into(),
        marking,
        journal_excerpt: "fired fetch\nsend failed: [smtp] 554 relay denied".into(),
        tools: tools(),
    }
}

/// Drops `fetched`: the token on it would be lost.
fn lossy() -> Value {
    json!({"plan_name": "notify", "graph_type": "acyclic",
      "events": {"start": {}, "done": {"kind": "output"}},
      "steps": {"log_it": {"on": ["start"], "action": "log", "args": {"message": "x"}, "emits": ["done"]}}})
}

/// Keeps `fetched`, logs instead of emailing.
fn fixed() -> Value {
    json!({"plan_name": "notify", "graph_type": "acyclic",
      "events": {"start": {}, "fetched": {}, "done": {"kind": "output"}},
      "steps": {
        "fetch": {"on": ["start"], "action": "echo", "emits": ["fetched"]},
        "report": {"on": ["fetched"], "action": "log", "args": {"message": "email relay down"}, "emits": ["done"]}}})
}

#[tokio::test]
async fn a_repair_that_would_lose_a_token_is_refused() {
    let transcript = Arc::new(MemoryTranscript::new());
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", lossy()),
        ScriptedExchange::tool_call("create_plan", lossy()).when_last("R001 token-would-be-lost"),
    ])))
    .with_transcripts(transcript.clone());
    let opts = PlanOptions {
        max_attempts: 2,
        correlation: Correlation::new("acme"),
        ..PlanOptions::default()
    };
    let err = repair(&llm, &request(), &opts).await.unwrap_err();
    assert!(
        matches!(&err, Error::TokensWouldBeLost { attempts: 2, events } if events == &["fetched".to_string()])
    );
    assert_eq!(
        err.to_string(),
        "repair refused after 2 attempt(s): tokens would be lost on event(s) the revised plan removed: fetched"
    );
    let ex = transcript.exchanges();
    let feedback = ex[1].request.messages.last().unwrap();
    assert_eq!(feedback.role, Role::Tool);
    assert_eq!(
        feedback.content_str(),
        "CRITIC: attempt 1 of 2 was rejected. Fix every finding below and call `create_plan` again with the complete corrected plan.\n\
- R001 token-would-be-lost at /events: event(s) `fetched` hold tokens in the running instance but the revised plan removed them\n  hint: keep every event that holds tokens, under the same name"
    );
    // The repair context carried the failure, the marking and the journal.
    let ctx = ex[0].request.messages[1].content_str();
    assert!(
        ctx.contains("Failure: step `send` failed: [smtp] 554 relay denied"),
        "{ctx}"
    );
    assert!(
        ctx.contains(r#"Current marking (event -> token payloads): {"fetched":[{"id":7}]}"#),
        "{ctx}"
    );
    assert!(ctx.contains("Journal excerpt:\nfired fetch"), "{ctx}");
}

#[tokio::test]
async fn a_successful_repair_maps_the_marking() {
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", lossy()),
        ScriptedExchange::tool_call("create_plan", fixed()).when_last("R001"),
    ])));
    let out = repair(&llm, &request(), &PlanOptions::default())
        .await
        .unwrap();
    assert_eq!(out.attempts, 2);
    assert!(out.plan.steps.contains_key("report"));
    assert_eq!(out.marking.get("fetched"), Some(&vec![json!({"id": 7})]));
    let c = StaticCatalog::builtin();
    assert!(c.spec("log").is_some());
}

/// The original plan with a step that really fails (`fail`) and asks for a repair.
fn failing_doc() -> Value {
    json!({"plan_name": "notify", "graph_type": "acyclic",
      "description": "Fetch the report and email it",
      "events": {"start": {}, "fetched": {}, "done": {"kind": "output"}},
      "steps": {
        "fetch": {"on": ["start"], "action": "echo", "emits": ["fetched"]},
        "send": {"on": ["fetched"], "action": "fail", "args": {"message": "554 relay denied"},
                 "emits": ["done"], "on_fail": "repair"}}})
}

fn engine_with(llm: Llm) -> (weft_runtime::Engine, Arc<weft_runtime::MemoryJournal>) {
    let mut reg = weft_tools::Registry::new();
    weft_builtins::builtin::register_pure(&mut reg);
    let specs: Vec<ToolSpec> = reg.iter().map(|t| t.spec().clone()).collect();
    let journal = Arc::new(weft_runtime::MemoryJournal::new());
    let repairer = weft_llm::LlmRepairer::new(Arc::new(llm), specs).with_options(PlanOptions {
        max_attempts: 2,
        ..PlanOptions::default()
    });
    let engine = weft_runtime::Engine::new(weft_runtime::EngineOptions {
        registry: Arc::new(reg),
        journal: Some(journal.clone()),
        repairer: Some(Arc::new(repairer)),
        ..weft_runtime::EngineOptions::default()
    });
    (engine, journal)
}

#[tokio::test]
async fn the_engine_repairs_a_failed_step_with_the_scripted_model_and_replays_it() {
    let transcript = Arc::new(MemoryTranscript::new());
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", fixed()).when_user("554 relay denied"),
    ])))
    .with_transcripts(transcript.clone());
    let (engine, journal) = engine_with(llm);
    let original = engine
        .register(serde_json::from_value(failing_doc()).unwrap())
        .unwrap();
    let h = engine.start("acme", "notify", json!({"id": 7})).unwrap();
    let o = tokio::time::timeout(std::time::Duration::from_secs(10), h.wait())
        .await
        .unwrap();
    assert_eq!(o.status, weft_core::Status::Completed, "{o:?}");
    assert!(h.plan().net.step_id("report").is_some());
    // The model was told the instruction (the plan's description), the failure, the
    // marking (the failed firing's token back on `fetched`) and the journal.
    let ex = transcript.exchanges();
    assert_eq!(ex.len(), 1);
    let ctx = ex[0].request.messages[1].content_str();
    assert!(ctx.contains("Fetch the report and email it"), "{ctx}");
    assert!(
        ctx.contains("step `send` failed: [tool_error] 554 relay denied"),
        "{ctx}"
    );
    // (`echo` emits its args, here `{}`.)
    assert!(ctx.contains(r#"{"fetched":[{}]}"#), "{ctx}");
    assert!(ctx.contains("Outcome"), "{ctx}");
    // Replay from the original plan reproduces the repaired run.
    let inputs = journal.inputs(h.id());
    assert_eq!(
        inputs
            .iter()
            .filter(|i| matches!(i, weft_runtime::Input::Repair(_)))
            .count(),
        1
    );
    let replayed = weft_runtime::journal_hook::replay(&original.net, h.id(), &inputs).unwrap();
    let live = h.core_instance().unwrap();
    assert_eq!(replayed.status, live.status);
    assert_eq!(
        serde_json::to_value(&replayed.marking).unwrap(),
        serde_json::to_value(&live.marking).unwrap()
    );
}

#[tokio::test]
async fn the_engine_fails_the_instance_with_r001_when_every_revision_loses_a_token() {
    let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", lossy()),
        ScriptedExchange::tool_call("create_plan", lossy()).when_last("R001"),
    ])));
    let (engine, _) = engine_with(llm);
    engine
        .register(serde_json::from_value(failing_doc()).unwrap())
        .unwrap();
    let h = engine.start("acme", "notify", json!({"id": 7})).unwrap();
    let o = tokio::time::timeout(std::time::Duration::from_secs(10), h.wait())
        .await
        .unwrap();
    let weft_core::Status::Failed { reason } = &o.status else {
        panic!("expected failed, got {o:?}");
    };
    assert!(
        reason.starts_with("repair failed: [R001] repair refused after 2 attempt(s)"),
        "{reason}"
    );
    assert!(reason.contains("fetched"), "{reason}");
}
