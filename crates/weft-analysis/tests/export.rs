//! Snapshot tests of the DOT and Mermaid drawings, on a plan whose names need escaping.

use weft_analysis::export::{dot, mermaid};
use weft_core::{Limits, Plan, parse_plan};

fn tricky() -> Plan {
    parse_plan(
        r#"{"plan_name":"review \"v2\"","graph_type":"acyclic",
        "events":{"email.received":{"kind":"input"},"start":{},"draft\\ready":{},"résumé #1":{},"done":{"kind":"output"},"write.failed":{}},
        "steps":{
          "write":{"on":["start","email.received"],"action":"llm.draft","guard":"inputs[\"email.received\"].size > 0 && start.x != \"<none>\"","emits":["draft\\ready",{"event":"résumé #1","when":"result.lang == 'fr'"}]},
          "send | it":{"on":["draft\\ready"],"action":"send_email","emits":["done"],"on_fail":"emit:done"},
          "report":{"on":["write.failed"],"action":"log"}}}"#
            .as_bytes(),
        &Limits::default(),
    )
    .expect("plan parses")
}

#[test]
fn dot_snapshot() {
    insta::assert_snapshot!(dot(&tricky()));
}

#[test]
fn mermaid_snapshot() {
    insta::assert_snapshot!(mermaid(&tricky()));
}

#[test]
fn dot_escapes_every_quote() {
    let out = dot(&tricky());
    // Every line's quotes pair up once escaped quotes are removed.
    for line in out.lines() {
        let unescaped = line.replace("\\\\", "").replace("\\\"", "");
        assert_eq!(unescaped.matches('"').count() % 2, 0, "{line}");
    }
}
