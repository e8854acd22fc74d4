//! `[policy]` on a node: the bundle named in the configuration decides every tool call of
//! every plan before it runs. A denied `send_email` fails its step with `policy_denied` and
//! writes nothing to the outbox; an allowed one is sent. A bundle that does not compile
//! refuses to build the node, naming the file.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use serde_json::json;
use weft_core::Status;
use weft_node::{Builder, Config};

const BUNDLE: &str = r#"
package weft

deny contains msg if {
    input.tool.name == "send_email"
    not endswith(input.args.to, "@example.com")
    msg := sprintf("%s is outside example.com (step %s of %s)", [input.args.to, input.step, input.plan])
}
"#;

fn config(dir: &std::path::Path, rego: &str) -> Config {
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/weft.rego"), rego).unwrap();
    let mut c = Config::default();
    c.policy.bundles = vec![dir.join("policies")];
    c.tools.email.outbox_dir = dir.join("outbox");
    c
}

fn mail(to: &str) -> serde_json::Value {
    json!({"plan_name": "mail", "graph_type": "acyclic",
        "events": {"start": {}, "sent": {"kind": "output"}},
        "steps": {"send": {"on": ["start"], "action": "send_email",
            "args": {"to": to, "subject": "hi", "body": "hello"}, "emits": ["sent"]}}})
}

fn outbox(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join("outbox")).map_or(0, |d| d.count())
}

#[tokio::test]
async fn the_configured_bundle_decides_every_call_before_it_runs() {
    let dir = std::env::temp_dir().join(format!("weft-node-policy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, BUNDLE))
        .in_memory()
        .expect("node");
    assert!(
        node.chain()
            .iter()
            .any(|(stage, link)| *stage == weft_tools::Stage::Policy
                && link.as_deref().is_some_and(|l| l.contains("weft.rego"))),
        "{:?}",
        node.chain()
    );
    let engine = node.engine();

    let denied = engine
        .compile_value(mail("eve@evil.test"))
        .expect("compiles");
    let o = engine
        .start_with("local", &denied, json!({}), Default::default())
        .wait()
        .await;
    match o.status {
        Status::Failed { reason } => {
            assert!(reason.contains("policy_denied"), "{reason}");
            assert!(
                reason.contains("eve@evil.test is outside example.com (step send of mail)"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(outbox(&dir), 0, "a denied email is never written");

    let allowed = engine
        .compile_value(mail("ann@example.com"))
        .expect("compiles");
    let o = engine
        .start_with("local", &allowed, json!({}), Default::default())
        .wait()
        .await;
    assert_eq!(o.status, Status::Completed);
    assert_eq!(outbox(&dir), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_bundle_that_does_not_compile_refuses_the_node() {
    let dir = std::env::temp_dir().join(format!("weft-node-policy-bad-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let err = Builder::new(config(&dir, "package weft\ndeny contains x if {"))
        .in_memory()
        .expect_err("refused");
    let msg = err.to_string();
    assert!(
        msg.contains("[policy]") && msg.contains("weft.rego") && msg.contains("does not compile"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
