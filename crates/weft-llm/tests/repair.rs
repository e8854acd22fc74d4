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
