//! Rego bundles deciding tool calls: real policies through regorus, the link in front of a
//! real tool (it is called only when allowed), and bundles refused with a clear error.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use weft_policy::{Decision, Policy, PolicyError, PolicyLink, call_input};
use weft_tools::{BoxFuture, Effect, Interceptor, Tool, ToolContext, ToolError, ToolSpec};

const BUNDLE: &str = r#"
package weft

# Email only to the company's own domain.
deny contains msg if {
    input.tool.name == "send_email"
    not endswith(input.args.to, "@example.com")
    msg := sprintf("email to %s leaves example.com", [input.args.to])
}

# Nothing that writes, for the tenant on probation.
deny contains "tenant probation may not write" if {
    input.tenant == "probation"
    input.tool.effect == "write"
}
"#;

fn policy() -> Policy {
    Policy::from_sources(vec![("weft.rego".into(), BUNDLE.into())]).expect("compiles")
}

fn input(tenant: &str, tool: &str, effect: &str, args: Value) -> Value {
    json!({"version": 1, "kind": "tool_call", "tenant": tenant, "instance": "i1",
           "plan": "p", "step": "s", "attempt": 1,
           "tool": {"name": tool, "effect": effect, "idempotent": false}, "args": args})
}

#[test]
fn a_bundle_allows_and_denies_with_its_reasons() {
    let p = policy();
    let inside = json!({"to": "ann@example.com"});
    let outside = json!({"to": "bob@elsewhere.org"});
    assert_eq!(
        p.decide(&input("acme", "send_email", "write", inside.clone())),
        Decision::Allow
    );
    assert_eq!(
        p.decide(&input("acme", "send_email", "write", outside.clone())),
        Decision::Deny(vec!["email to bob@elsewhere.org leaves example.com".into()])
    );
    // Two rules at once: both reasons, sorted.
    assert_eq!(
        p.decide(&input("probation", "send_email", "write", outside)),
        Decision::Deny(vec![
            "email to bob@elsewhere.org leaves example.com".into(),
            "tenant probation may not write".into()
        ])
    );
    assert_eq!(
        p.decide(&input("probation", "echo", "pure", json!({}))),
        Decision::Allow
    );
}

#[test]
fn a_rule_that_fails_to_evaluate_denies() {
    // `deny` is not a set of reasons here: weft cannot read it, so it denies.
    let p = Policy::from_sources(vec![(
        "odd.rego".into(),
        "package weft\ndeny := 42\n".into(),
    )])
    .unwrap();
    match p.decide(&input("acme", "echo", "pure", json!({}))) {
        Decision::Deny(r) => assert!(r[0].contains("must be a set of reasons"), "{r:?}"),
        other => panic!("an unreadable decision must deny: {other:?}"),
    }
}

const APPROVALS: &str = r#"
package weft

deny contains "no deletes" if input.tool.name == "delete_all"

require_approval contains msg if {
    input.tool.effect == "write"
    msg := sprintf("%s writes (step %s)", [input.tool.name, input.step])
}

approval_timeout_ms := 60000 if input.tenant == "acme"
"#;

#[test]
fn require_approval_asks_a_person_and_a_denial_wins() {
    let p = Policy::from_sources(vec![("a.rego".into(), APPROVALS.into())]).unwrap();
    assert!(p.may_require_approval());
    assert_eq!(
        p.decide(&input("acme", "send_email", "write", json!({}))),
        Decision::RequireApproval {
            reasons: vec!["send_email writes (step s)".into()],
            timeout_ms: Some(60_000)
        }
    );
    assert_eq!(
        p.decide(&input("other", "send_email", "write", json!({}))),
        Decision::RequireApproval {
            reasons: vec!["send_email writes (step s)".into()],
            timeout_ms: None
        }
    );
    assert_eq!(
        p.decide(&input("acme", "echo", "pure", json!({}))),
        Decision::Allow
    );
    // `delete_all` is a write too, but the denial wins over the approval.
    assert_eq!(
        p.decide(&input("acme", "delete_all", "write", json!({}))),
        Decision::Deny(vec!["no deletes".into()])
    );
    // A bundle without the rule never asks (and its tools stay inline).
    let plain = Policy::from_sources(vec![(
        "d.rego".into(),
        "package weft
deny contains \"x\" if false
# require_approval is not a rule here
"
        .into(),
    )])
    .unwrap();
    assert!(!plain.may_require_approval());
}

#[test]
fn an_unreadable_approval_timeout_denies() {
    let p = Policy::from_sources(vec![(
        "t.rego".into(),
        "package weft
require_approval contains \"why\" if true
approval_timeout_ms := \"soon\"
"
        .into(),
    )])
    .unwrap();
    match p.decide(&input("acme", "echo", "pure", json!({}))) {
        Decision::Deny(r) => assert!(r[0].contains("approval_timeout_ms"), "{r:?}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn bad_bundles_are_refused_with_the_file_named() {
    let err = Policy::from_sources(vec![(
        "broken.rego".into(),
        "package weft\ndeny contains x if {".into(),
    )])
    .unwrap_err();
    assert!(matches!(err, PolicyError::Compile { .. }), "{err}");
    assert!(err.to_string().contains("broken.rego"), "{err}");
    let err = Policy::from_sources(vec![(
        "other.rego".into(),
        "package other\nx := 1\n".into(),
    )])
    .unwrap_err();
    assert!(err.to_string().contains("package weft"), "{err}");
    let err = Policy::load(&["/no/such/bundle.rego".into()]).unwrap_err();
    assert!(matches!(err, PolicyError::Read { .. }), "{err}");
}

#[test]
fn a_directory_is_read_in_name_order() {
    let dir = std::env::temp_dir().join(format!("weft-policy-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("a.rego"), BUNDLE).unwrap();
    std::fs::write(dir.join("notes.txt"), "not a policy").unwrap();
    let p = Policy::load(std::slice::from_ref(&dir)).expect("loads");
    assert_eq!(p.files(), [dir.join("a.rego").display().to_string()]);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// `send_email`, a write tool.
fn mail_spec() -> ToolSpec {
    ToolSpec {
        name: "send_email".into(),
        description: String::new(),
        args_schema: json!({}),
        effect: Effect::Write,
        idempotent: false,
        cost: None,
        llm: false,
    }
}

/// A write tool that counts its calls.
struct Mailer {
    spec: ToolSpec,
    calls: Arc<AtomicUsize>,
}

impl Tool for Mailer {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }
    fn call(&self, _: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Box::pin(async move { Ok(json!({"sent": args["to"]})) })
    }
}

#[tokio::test]
async fn the_link_calls_the_tool_only_when_the_policy_allows() {
    let calls = Arc::new(AtomicUsize::new(0));
    let mailer: Arc<dyn Tool> = Arc::new(Mailer {
        spec: mail_spec(),
        calls: Arc::clone(&calls),
    });
    let link = PolicyLink::new(policy());
    assert!(link.describe().contains("weft.rego"));
    let governed = link.wrap(mailer);
    let ctx = ToolContext::detached("mail");
    let ok = governed
        .call(ctx.clone(), json!({"to": "ann@example.com"}))
        .await
        .expect("allowed");
    assert_eq!(ok["sent"], "ann@example.com");
    let err = governed
        .call(ctx.clone(), json!({"to": "eve@evil.test"}))
        .await
        .expect_err("denied");
    assert_eq!(err.code, "policy_denied");
    assert!(
        err.message.contains("eve@evil.test leaves example.com"),
        "{}",
        err.message
    );
    assert!(!err.retryable, "a denial is not retried");
    assert_eq!(
        calls.load(Ordering::SeqCst),
        1,
        "the denied call never reached the tool"
    );
    let doc = call_input(&ctx, governed.spec(), &json!({"to": "x"}));
    assert_eq!(
        (doc["version"].clone(), doc["tool"]["effect"].clone()),
        (json!(1), json!("write"))
    );
}

/// A mailer that states its needs: one host.
struct Scoped(Mailer);

impl Tool for Scoped {
    fn spec(&self) -> &ToolSpec {
        self.0.spec()
    }
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        self.0.call(ctx, args)
    }
    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        Some(weft_tools::Needs {
            network: vec!["smtp.example.com:587".into()],
            ..weft_tools::Needs::nothing("http")
        })
    }
}

/// The input's `profile` is the tool's own (its stated needs through every link), so a
/// bundle can deny tools that may reach anywhere.
#[tokio::test]
async fn the_input_profile_is_derived_from_the_tools_stated_needs() {
    let bundle = r#"package weft
deny contains "reaches anywhere" if { some h in input.profile.network.hosts; h == "*" }
"#;
    let link =
        PolicyLink::new(Policy::from_sources(vec![("p.rego".into(), bundle.into())]).unwrap());
    let mailer = || Mailer {
        spec: mail_spec(),
        calls: Arc::new(AtomicUsize::new(0)),
    };
    let ctx = ToolContext::detached("mail");
    // Stating one host: allowed, also behind a budget link that forwards the needs.
    let scoped = link.wrap(weft_tools::Budgeted::wrap(Arc::new(Scoped(mailer()))));
    scoped
        .call(ctx.clone(), json!({"to": "a"}))
        .await
        .expect("allowed");
    // Stating nothing, not pure: assumed to reach anything, denied.
    let silent = link.wrap(Arc::new(mailer()));
    let err = silent
        .call(ctx, json!({"to": "a"}))
        .await
        .expect_err("denied");
    assert!(err.message.contains("reaches anywhere"), "{}", err.message);
}
