//! Generated tool calls as a policy sees them (tenants, tools, effect classes, URLs,
//! arguments, attempts, budgets), shared by the tests that compare two ways of deciding.

#![allow(dead_code)]

use std::sync::Arc;

use serde_json::{Value, json};
use weft_policy::call_input;
use weft_tools::{Effect, ToolContext, ToolSpec};

/// A small deterministic generator (xorshift), so a failure is repeatable.
pub(crate) struct Gen(pub(crate) u64);

impl Gen {
    pub(crate) fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    pub(crate) fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[(self.next() % items.len() as u64) as usize]
    }
}

pub(crate) const TENANTS: &[&str] = &["acme", "globex", "initech", "umbrella", ""];
pub(crate) const TOOLS: &[&str] = &[
    "http.request",
    "http.get",
    "payments.charge",
    "send_email",
    "search",
    "sql.query",
    "llm.complete",
    "shell.exec",
];
pub(crate) const EFFECTS: &[Effect] = &[Effect::Pure, Effect::Read, Effect::Write];
pub(crate) const URLS: &[&str] = &[
    "https://api.github.com/repos/acme/weft",
    "https://api.acme.com:8443/v1/x?y=1",
    "https://user:pw@api.acme.com/",
    "http://169.254.169.254/latest/meta-data/",
    "https://10.1.2.3/",
    "https://evil.example.org/",
    "https://sub.acme.com/path",
    "https://LOCALHOST/",
    "not a url",
    "",
];
pub(crate) const STEPS: &[&str] = &["fetch_invoice", "Charge", "a", "step-2", "notify_all"];

pub(crate) fn args(g: &mut Gen, tool: &str) -> Value {
    match g.next() % 9 {
        0 => json!({}),
        1 => json!({"url": 42}),
        2 => json!({"to": g.pick(&["ann@acme.com", "bob@ACME.COM", "eve@evil.org"]) }),
        3 => json!({"query": g.pick(&["select 1", "DROP table x", "alter  t", "truncated"]) }),
        4 => json!({"customer": "c", "amount_cents": g.next() % 200_000, "currency": "eur"}),
        5 => {
            json!({"tags": ["ok", "secret-x", 3, "Secretive"], "addresses": ["10.2.3.4", "192.168.0.1", 7]})
        }
        6 => json!({"headers": {"a": "b", "c": g.pick(&[json!("d"), json!(1), json!(null)])}}),
        _ => {
            let mut a =
                json!({"url": g.pick(URLS), "method": g.pick(&["GET", "post", "DELETE", "PATCH"])});
            if tool == "http.request" && g.next().is_multiple_of(2) {
                a["headers"] = json!({"accept": "application/json"});
            }
            a
        }
    }
}

pub(crate) fn context(g: &mut Gen) -> ToolContext {
    let step = *g.pick(STEPS);
    ToolContext {
        tenant: Arc::from(*g.pick(TENANTS)),
        instance: Arc::from("i01J8ZQ4W7Y2N3K5M6P7R8S9T0"),
        plan: Arc::from(*g.pick(&["billing", "onboarding", ""])),
        step: Arc::from(step),
        attempt: (g.next() % 7 + 1) as u32,
        ..ToolContext::detached(step)
    }
}

/// One generated call's input document (some with a `budget`, as an operator's bundle
/// might be given one).
pub(crate) fn call(g: &mut Gen) -> Value {
    let tool = *g.pick(TOOLS);
    let spec = ToolSpec::new(tool, *g.pick(EFFECTS), g.next().is_multiple_of(2));
    let ctx = context(g);
    let args = args(g, tool);
    let mut doc = call_input(&ctx, &spec, &args);
    if g.next().is_multiple_of(3) {
        doc["budget"] =
            json!({"tool_calls": (g.next() % 4) as i64 - 1, "cost_cents": g.next() % 60});
    }
    doc
}
