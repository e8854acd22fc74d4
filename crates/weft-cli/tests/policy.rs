//! `weft policy eval` and `weft policy test` on a real Rego bundle: the decision and its
//! reasons (human and JSON), the bundle taken from `[policy] bundles` when no file is named,
//! the bundle's tests run and a failing one reported, and exit codes 0, 1 and 2.

mod common;

use common::{code, json, stderr, stdout, temp_dir, weft_in};

const BUNDLE: &str = r#"package weft

deny contains msg if {
    input.tool.name == "send_email"
    not endswith(input.args.to, "@example.com")
    msg := sprintf("%s is outside example.com", [input.args.to])
}

test_outside_is_denied if {
    deny["eve@evil.test is outside example.com"] with input as {"tool": {"name": "send_email"}, "args": {"to": "eve@evil.test"}}
}

test_inside_is_allowed if {
    count(deny) == 0 with input as {"tool": {"name": "send_email"}, "args": {"to": "ann@example.com"}}
}
"#;

const WRONG_TEST: &str = r#"package weft

test_expects_too_much if {
    count(deny) == 2 with input as {"tool": {"name": "send_email"}, "args": {"to": "eve@evil.test"}}
}
"#;

fn call(to: &str) -> String {
    format!(
        r#"{{"version": 1, "kind": "tool_call", "tenant": "acme", "instance": "i1", "plan": "p",
            "step": "s", "attempt": 1,
            "tool": {{"name": "send_email", "effect": "write", "idempotent": false}},
            "args": {{"to": "{to}"}}}}"#
    )
}

#[test]
fn eval_shows_the_decision_and_why() {
    let dir = temp_dir("policy-eval");
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/weft.rego"), BUNDLE).unwrap();
    std::fs::write(dir.join("out.json"), call("eve@evil.test")).unwrap();
    std::fs::write(dir.join("in.json"), call("ann@example.com")).unwrap();

    let out = weft_in(&dir, &["policy", "eval", "--input", "out.json", "policies"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stdout(&out),
        "deny\n  - eve@evil.test is outside example.com\n"
    );
    let out = weft_in(
        &dir,
        &["policy", "eval", "--input", "in.json", "policies", "--json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["decision"].as_str(), v["rule"].as_str()),
        (Some("allow"), Some("data.weft.deny"))
    );
    assert_eq!(v["evaluator"], "compiled");
    // The interpreter alone, the reference, decides alike.
    let out = weft_in(
        &dir,
        &[
            "policy",
            "eval",
            "--input",
            "out.json",
            "policies",
            "--json",
            "--interpreter",
        ],
    );
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(
        (v["decision"].as_str(), v["evaluator"].as_str()),
        (Some("deny"), Some("interpreter"))
    );
    assert_eq!(v["reasons"][0], "eve@evil.test is outside example.com");

    // No file named: the bundle of `[policy]` in weft.toml.
    std::fs::write(
        dir.join("weft.toml"),
        "[policy]\nbundles = [\"policies\"]\n",
    )
    .unwrap();
    let out = weft_in(&dir, &["policy", "eval", "--input", "out.json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));

    // The same bundle governs `weft run`: the step fails before the email is written.
    std::fs::write(
        dir.join("mail.json"),
        r#"{"plan_name": "mail", "graph_type": "acyclic",
            "events": {"start": {}, "sent": {"kind": "output"}},
            "steps": {"send": {"on": ["start"], "action": "send_email",
                "args": {"to": "eve@evil.test", "subject": "hi", "body": "hello"}, "emits": ["sent"]}}}"#,
    )
    .unwrap();
    let out = weft_in(&dir, &["run", "mail.json", "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = stdout(&out);
    assert!(
        text.contains("policy_denied") && text.contains("eve@evil.test is outside example.com"),
        "{text}"
    );
    assert!(
        !dir.join(".weft/outbox").exists()
            || std::fs::read_dir(dir.join(".weft/outbox"))
                .unwrap()
                .next()
                .is_none()
    );

    // Not JSON, and a bundle that does not compile: exit 2 with what is wrong.
    std::fs::write(dir.join("bad.json"), "{nope").unwrap();
    let out = weft_in(&dir, &["policy", "eval", "--input", "bad.json", "policies"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("bad.json is not JSON"),
        "{}",
        stderr(&out)
    );
    std::fs::write(
        dir.join("broken.rego"),
        "package weft\ndeny contains x if {",
    )
    .unwrap();
    let out = weft_in(
        &dir,
        &["policy", "eval", "--input", "in.json", "broken.rego"],
    );
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("broken.rego does not compile"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn test_runs_the_bundles_rego_tests() {
    let dir = temp_dir("policy-test");
    std::fs::write(dir.join("weft.rego"), BUNDLE).unwrap();
    let out = weft_in(&dir, &["policy", "test", "weft.rego"]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(
        stdout(&out),
        "PASS data.weft.test_inside_is_allowed\nPASS data.weft.test_outside_is_denied\n2 passed, 0 failed\n"
    );
    std::fs::write(dir.join("wrong.rego"), WRONG_TEST).unwrap();
    let out = weft_in(
        &dir,
        &["policy", "test", "weft.rego", "wrong.rego", "--json"],
    );
    assert_eq!(code(&out), 1);
    let v = json(&out);
    assert_eq!(
        (v["passed"].as_u64(), v["failed"].as_u64()),
        (Some(2), Some(1)),
        "{v}"
    );
    let failed = v["tests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["passed"] == false)
        .unwrap();
    assert_eq!(failed["rule"], "data.weft.test_expects_too_much");
}

/// Requires every write to be approved first; refuses plans of more than three calls.
const GOVERNING: &str = r#"package weft

properties contains {"name": "approval_coverage", "before": {"effect": "write"}, "always": {"approval": true}}

deny contains msg if {
    input.kind == "plan"
    input.bound.tool_calls > 3
    msg := sprintf("%d tool calls is more than 3", [input.bound.tool_calls])
}
"#;

fn mail_plan(approved: bool, limits: &str) -> String {
    let approval = if approved {
        r#", "approval": {"reason": "mail leaves"}"#
    } else {
        ""
    };
    format!(
        r#"{{"plan_name": "mail", "graph_type": "acyclic"{limits},
            "events": {{"start": {{}}, "ready": {{}}, "sent": {{"kind": "output"}}}},
            "steps": {{
              "draft": {{"on": ["start"], "action": "echo", "args": {{"text": "hi"}}, "emits": ["ready"],
                         "retry": {{"max": 1}}}},
              "send": {{"on": ["ready"], "action": "send_email",
                        "args": {{"to": "ann@example.com", "subject": "s", "body": "b"}},
                        "emits": ["sent"]{approval}}}}}}}"#
    )
}

#[test]
fn analyze_proves_governance_and_run_refuses_what_it_disproves() {
    let dir = temp_dir("policy-governance");
    std::fs::create_dir_all(dir.join("policies")).unwrap();
    std::fs::write(dir.join("policies/weft.rego"), GOVERNING).unwrap();
    std::fs::write(
        dir.join("weft.toml"),
        "[policy]\nbundles = [\"policies\"]\n",
    )
    .unwrap();
    std::fs::write(dir.join("unapproved.json"), mail_plan(false, "")).unwrap();
    std::fs::write(dir.join("approved.json"), mail_plan(true, "")).unwrap();
    std::fs::write(
        dir.join("tight.json"),
        mail_plan(true, r#", "limits": {"max_tool_calls": 2}"#),
    )
    .unwrap();

    // The required property fails, with the run that breaks it; the exit code says so.
    let out = weft_in(&dir, &["analyze", "unapproved.json", "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    let a009 = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "A009")
        .expect("A009");
    assert_eq!(a009["witness"], serde_json::json!(["draft", "send"]));
    assert_eq!(v["analysis"]["governance"]["bound"]["tool_calls"]["max"], 3);
    // `weft run` refuses it before anything runs: no email is written.
    let out = weft_in(&dir, &["run", "unapproved.json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stdout(&out).contains("A009"), "{}", stdout(&out));
    assert!(
        !dir.join(".weft/outbox").exists()
            || std::fs::read_dir(dir.join(".weft/outbox")).unwrap().count() == 0
    );

    // Approved: the property holds and the human report says so.
    let out = weft_in(&dir, &["analyze", "approved.json"]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(
        stdout(&out).contains("approval coverage: holds for send")
            && stdout(&out).contains("bound per run: 3 tool calls, 0 LLM calls"),
        "{}",
        stdout(&out)
    );

    // Over its own limits (draft may be tried twice): refused with the run that spends 3.
    let out = weft_in(&dir, &["run", "tight.json", "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let v = json(&out);
    assert_eq!(v["outcome"], "invalid");
    let f = &v["findings"][0];
    assert_eq!(
        (f["code"].as_str(), f["pointer"].as_str()),
        (Some("A010"), Some("/limits/max_tool_calls"))
    );
}
