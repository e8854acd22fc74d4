//! `[policy]` on a node: the bundle named in the configuration decides every tool call of
//! every plan before it runs. A denied `send_email` fails its step with `policy_denied` and
//! writes nothing to the outbox; an allowed one is sent. A bundle that does not compile
//! refuses to build the node, naming the file. A call the bundle names in `require_approval`
//! waits for a person's decision before it runs.

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
        .expect("the plan takes any input")
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
        .expect("the plan takes any input")
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

const APPROVAL_BUNDLE: &str = r#"
package weft

require_approval contains msg if {
    input.tool.name == "send_email"
    msg := sprintf("email to %s", [input.args.to])
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn require_approval_waits_for_a_person_before_the_call() {
    use weft_runtime::Filter;
    let dir = std::env::temp_dir().join(format!("weft-node-approval-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, APPROVAL_BUNDLE))
        .in_memory()
        .expect("node");
    let engine = node.engine();
    let mut events = engine.subscribe(Filter::default());
    let plan = engine
        .compile_value(mail("ann@example.com"))
        .expect("compiles");
    let h = engine
        .start_with("local", &plan, json!({}), Default::default())
        .expect("the plan takes any input");
    // `approval.requested` says what is asked.
    let asked = tokio::time::timeout(std::time::Duration::from_secs(10), async {
        loop {
            if let weft_runtime::Delivery::Event(e) = events.recv().await.expect("bus open")
                && e.ty == "dev.weft.approval.requested"
            {
                return e;
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "approval.requested within 10 s: {:?} {:?}",
            h.state(),
            h.outcome_now()
        )
    });
    assert_eq!(asked.data["step"], "send", "{:?}", asked.data);
    assert_eq!(asked.data["reasons"][0], "email to ann@example.com");
    assert_eq!(h.state().status_name(), "waiting_approval");
    assert_eq!(outbox(&dir), 0, "nothing is sent before the decision");
    engine
        .decide_approval(h.id(), "send", None, true, "ann", None)
        .expect("decided");
    let o = tokio::time::timeout(std::time::Duration::from_secs(10), h.wait())
        .await
        .expect("settles");
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(outbox(&dir), 1);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// A bundle that decides on plans too: it refuses plans whose runs can make more than two
/// tool calls, and requires that every email is approved first.
const PLAN_BUNDLE: &str = r#"
package weft

deny contains msg if {
    input.kind == "plan"
    input.bound.tool_calls > 2
    msg := sprintf("plan %s can make %d tool calls, at most 2 are allowed", [input.plan.plan_name, input.bound.tool_calls])
}

properties contains {"name": "mail_approved", "before": {"tool": "send_email"}, "always": {"approval": true}}
"#;

fn steps(n: usize, approved: bool) -> weft_core::Plan {
    let mut events = serde_json::Map::new();
    let mut steps = serde_json::Map::new();
    events.insert("e0".into(), json!({}));
    for i in 0..n {
        events.insert(format!("e{}", i + 1), json!({}));
        steps.insert(
            format!("s{i}"),
            json!({"on": [format!("e{i}")], "action": "noop", "emits": [format!("e{}", i + 1)]}),
        );
    }
    let mut send = json!({"on": [format!("e{n}")], "action": "send_email",
        "args": {"to": "a@example.com", "subject": "s", "body": "b"}, "emits": ["sent"]});
    if approved {
        send["approval"] = json!({"reason": "mail leaves the company"});
    }
    steps.insert("send".into(), send);
    events.insert("sent".into(), json!({"kind": "output"}));
    serde_json::from_value(
        json!({"plan_name": format!("p{n}"), "graph_type": "acyclic",
        "initial": ["e0"], "events": events, "steps": steps}),
    )
    .unwrap()
}

fn refusals(node: &weft_node::Node, plan: &weft_core::Plan) -> Vec<String> {
    let report = weft_analysis::analyze_plan(
        plan,
        &weft_analysis::AnalysisOptions {
            governance: Some(node.governance("acme")),
            ..weft_analysis::AnalysisOptions::default()
        },
    );
    report
        .findings
        .iter()
        .filter(|f| weft_analysis::governance::refuses(f))
        .map(|f| format!("{} {}", f.code, f.message))
        .collect()
}

#[test]
fn the_bundle_decides_on_whole_plans_and_declares_their_properties() {
    let dir = std::env::temp_dir().join(format!("weft-node-plan-policy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, PLAN_BUNDLE))
        .in_memory()
        .expect("node");
    // One step and an approved email: two calls, approved first.
    assert_eq!(refusals(&node, &steps(1, true)), Vec::<String>::new());
    // The email without its approval: the declared property fails, with its run.
    let r = refusals(&node, &steps(1, false));
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("A009") && r[0].contains("mail_approved") && r[0].contains("s0 → send"),
        "{r:?}"
    );
    // Three calls: the policy's plan rule refuses it, naming the bound it saw.
    let r = refusals(&node, &steps(2, true));
    assert_eq!(r.len(), 1, "{r:?}");
    assert!(
        r[0].starts_with("G001") && r[0].contains("can make 3 tool calls"),
        "{r:?}"
    );

    // Rules written for tool calls do not fire on plans; no properties, nothing refused.
    let calls_only = Builder::new(config(&dir.join("calls"), BUNDLE))
        .in_memory()
        .expect("node");
    assert_eq!(
        refusals(&calls_only, &steps(3, false)),
        Vec::<String>::new()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bundle_declaring_malformed_properties_is_refused() {
    let dir = std::env::temp_dir().join(format!("weft-node-bad-props-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let bad = "package weft\n\nproperties contains {\"name\": \"x\", \"before\": {\"efect\": \"write\"}, \"always\": {}}\n";
    let err = Builder::new(config(&dir, bad))
        .in_memory()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("data.weft.properties") && err.contains("efect"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test]
async fn a_refused_candidate_goes_back_to_the_model_through_the_critic() {
    use weft_llm::{Llm, PlanOptions, ScriptedExchange, ScriptedProvider};
    let dir = std::env::temp_dir().join(format!("weft-node-plan-critic-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, PLAN_BUNDLE))
        .llm(None)
        .in_memory()
        .expect("node");
    let plan_args = |p: &weft_core::Plan| serde_json::to_value(p).unwrap();
    let llm = Llm::new(std::sync::Arc::new(ScriptedProvider::new(vec![
        ScriptedExchange::tool_call("create_plan", plan_args(&steps(2, true))),
        ScriptedExchange::tool_call("create_plan", plan_args(&steps(1, true))).when_last("G001"),
    ])));
    let mut opts = PlanOptions::default();
    opts.analysis.governance = Some(node.governance("acme"));
    let tools: Vec<weft_core::ToolSpec> = weft_core::StaticCatalog::builtin()
        .iter()
        .cloned()
        .collect();
    let out = weft_llm::plan(&llm, "mail someone", &tools, &opts)
        .await
        .expect("the second candidate is accepted");
    assert_eq!(out.plan.plan_name, "p1");
    assert_eq!(out.attempts, 2);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A denial goes to the plan's `<step>.denied` listener, before `<step>.failed`; another
/// failure of the same step still goes to `<step>.failed`.
#[tokio::test]
async fn a_denial_goes_to_the_denied_listener_and_other_failures_to_the_failed_one() {
    let dir = std::env::temp_dir().join(format!("weft-node-denied-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, BUNDLE))
        .in_memory()
        .expect("node");
    let engine = node.engine();
    let plan = |to: &str| {
        json!({"plan_name": "mail", "graph_type": "acyclic",
        "events": {"start": {}, "sent": {"kind": "output"}, "send.denied": {}, "send.failed": {},
                   "refused": {"kind": "output"}, "broken": {"kind": "output"}},
        "steps": {
            "send": {"on": ["start"], "action": "send_email",
                "args": {"to": to, "subject": "hi", "body": "hello"}, "emits": ["sent"]},
            "note_refusal": {"on": ["send.denied"], "action": "echo",
                "args": {"code": "${inputs[\"send.denied\"].error.code}"}, "emits": ["refused"]},
            "note_failure": {"on": ["send.failed"], "action": "echo",
                "args": {"code": "${inputs[\"send.failed\"].error.code}"}, "emits": ["broken"]}}})
    };
    let run = |doc| async move {
        let p = engine.compile_value(doc).expect("compiles");
        engine
            .start_with("local", &p, json!({}), Default::default())
            .expect("the plan takes any input")
            .wait()
            .await
    };
    let o = run(plan("eve@evil.test")).await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    let r = o.results_json();
    assert_eq!(r["refused"]["code"], "policy_denied", "{r}");
    assert!(r.get("broken").is_none(), "{r}");
    // Not a denial (the address is not one): the failed listener takes it.
    let o = run(plan("not an address@example.com")).await;
    assert_eq!(o.status, Status::Completed, "{o:?}");
    let r = o.results_json();
    assert!(r.get("refused").is_none(), "{r}");
    assert!(r["broken"]["code"].is_string(), "{r}");
    assert_eq!(outbox(&dir), 0);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Every decision is part of the instance's journal (its hash chain) and published: the
/// audit trail of an allowed and a denied call on a durable node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_decision_is_journaled_in_the_hash_chain_and_published() {
    use weft_runtime::{Delivery, Filter};
    let dir = std::env::temp_dir().join(format!("weft-node-decided-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = config(&dir, BUNDLE);
    c.store.url = dir.join("weft.db").display().to_string();
    let node = Builder::new(c).open().await.expect("node");
    let d = node.durable().unwrap();
    let mut events = node.engine().subscribe(Filter::default());
    let mut kinds = Vec::new();
    for (name, to) in [("ok", "ann@example.com"), ("no", "eve@evil.test")] {
        let mut p = mail(to);
        p["plan_name"] = json!(name);
        d.register("local", p).await.unwrap();
        let h = d.start("local", name, json!({})).unwrap();
        let _ = tokio::time::timeout(std::time::Duration::from_secs(20), d.wait(&h))
            .await
            .expect("settles");
        let store = node.store().unwrap();
        weft_durable::verify(store.as_ref(), h.id())
            .await
            .expect("the chain verifies");
        let decided: Vec<weft_durable::Entry> = store
            .read(h.id(), 1, 1_000)
            .await
            .unwrap()
            .iter()
            .map(|r| weft_durable::Entry::from_record(r).unwrap())
            .filter(|e| e.kind() == "policy.decided")
            .collect();
        assert_eq!(decided.len(), 1, "{decided:?}");
        match &decided[0] {
            weft_durable::Entry::PolicyDecided {
                decision, attempt, ..
            } => {
                assert_eq!(*attempt, 1);
                kinds.push((decision.decision.clone(), decision.reasons.clone()));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(kinds[0], ("allow".to_string(), vec![]));
    assert_eq!(kinds[1].0, "deny");
    assert!(kinds[1].1[0].contains("eve@evil.test"), "{kinds:?}");
    let mut published = Vec::new();
    while let Ok(Some(Delivery::Event(e))) =
        tokio::time::timeout(std::time::Duration::from_millis(100), events.recv()).await
    {
        if e.ty == "dev.weft.policy.decided" {
            published.push(e.data["decision"].as_str().unwrap_or("").to_string());
        }
    }
    assert_eq!(published, ["allow", "deny"]);
    let _ = std::fs::remove_dir_all(&dir);
}

/// A reloaded bundle governs the next call of an engine already running; a broken one
/// leaves the previous in force.
#[tokio::test]
async fn a_reloaded_bundle_governs_the_next_call() {
    let dir = std::env::temp_dir().join(format!("weft-node-reload-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut c = config(&dir, "package weft\n");
    c.policy.reload_ms = 0;
    let node = Builder::new(c).in_memory().expect("node");
    let run = |node: &weft_node::Node| {
        let engine = node.engine().clone();
        async move {
            let p = engine
                .compile_value(mail("eve@evil.test"))
                .expect("compiles");
            engine
                .start_with("local", &p, json!({}), Default::default())
                .expect("the plan takes any input")
                .wait()
                .await
                .status
        }
    };
    assert_eq!(run(&node).await, Status::Completed);
    std::fs::write(dir.join("policies/weft.rego"), BUNDLE).unwrap();
    node.policies().unwrap().reload().expect("reloads");
    assert!(matches!(run(&node).await, Status::Failed { .. }));
    std::fs::write(
        dir.join("policies/weft.rego"),
        "package weft\ndeny contains x if {",
    )
    .unwrap();
    assert!(node.policies().unwrap().reload().is_err());
    assert!(
        matches!(run(&node).await, Status::Failed { .. }),
        "the denial stays in force"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The chain's order holds for a step's own links too: the policy decides first, so a
/// denied call asks no person and spends nothing of the plan's limits.
#[tokio::test]
async fn a_denied_call_asks_no_approval_and_spends_no_budget() {
    let dir = std::env::temp_dir().join(format!("weft-node-order-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let node = Builder::new(config(&dir, BUNDLE))
        .in_memory()
        .expect("node");
    let engine = node.engine();
    let mut doc = mail("eve@evil.test");
    doc["limits"] = json!({"max_tool_calls": 5});
    doc["steps"]["send"]["approval"] = json!({"reason": "mail leaves the company"});
    let p = engine.compile_value(doc).expect("compiles");
    let h = engine
        .start_with("local", &p, json!({}), Default::default())
        .expect("the plan takes any input");
    let o = tokio::time::timeout(std::time::Duration::from_secs(10), h.wait())
        .await
        .expect("decided by the policy, not waiting for a person");
    match &o.status {
        Status::Failed { reason } => assert!(reason.contains("policy_denied"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(engine.approvals(h.id()).unwrap_or_default().is_empty());
    assert_eq!(h.state().usage.map(|u| u.tool_calls), Some(0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// A plan's token limit, with the real `llm.complete` over a scripted model (17 tokens a
/// call): tokens are known after each call, so the call that reaches the limit completes and
/// the next model call is refused.
#[tokio::test]
async fn the_token_limit_refuses_the_model_call_after_the_one_that_reached_it() {
    use weft_llm::{ScriptedExchange, ScriptedProvider};
    let script = (0..3)
        .map(|i| ScriptedExchange::content(format!("answer {i}")).with_usage(12, 5))
        .collect();
    let node = Builder::new(Config::default())
        .llm(Some(std::sync::Arc::new(ScriptedProvider::new(script))))
        .in_memory()
        .expect("node");
    let engine = node.engine();
    let step = |on: &str, out: &str| json!({"on": [on], "action": "llm.complete", "args": {"prompt": "go on"}, "emits": [out]});
    let doc = json!({"plan_name": "talk", "graph_type": "acyclic",
        "limits": {"max_llm_tokens": 30},
        "events": {"start": {}, "a": {}, "b": {}, "done": {"kind": "output"}},
        "steps": {"one": step("start", "a"), "two": step("a", "b"), "three": step("b", "done")}});
    let p = engine.compile_value(doc).expect("compiles");
    let h = engine
        .start_with("local", &p, json!({}), Default::default())
        .expect("the plan takes any input");
    let o = tokio::time::timeout(std::time::Duration::from_secs(20), h.wait())
        .await
        .expect("settles");
    match &o.status {
        Status::Failed { reason } => {
            assert!(
                reason.contains("three") && reason.contains("max_llm_tokens"),
                "{reason}"
            );
        }
        other => panic!("{other:?}"),
    }
    let used = h.state().usage.expect("usage");
    assert_eq!((used.llm_calls, used.llm_tokens), (2, 34));
}
