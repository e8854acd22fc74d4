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
