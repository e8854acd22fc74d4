//! The compiled rules decide every call exactly as regorus's interpreter does. Generated
//! calls go through the realistic bundle and through bundles written to reach the corners of
//! the compiled subset (undefined values, `not`, iteration, sets referring to sets, defaults,
//! arithmetic, set operators, builtins given the wrong types); each decision is compared
//! with the interpreter's (`Policy::interpreted`). Bundles outside the subset are left to
//! the interpreter, with the construct named.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod calls;

use calls::{Gen, call};
use weft_policy::{Decision, Evaluator, Policy};

const REALISTIC: &str = include_str!("../benches/realistic.rego");

/// Undefined values, `not`, comparisons across types, membership with a key.
const UNDEFINED: &str = r#"package weft

deny contains "no tool" if not input.tool.name
deny contains "not version 1" if not input.version == 1
deny contains "attempt compared with a string" if input.attempt > "a"
deny contains sprintf("big charge %v", [input.args.amount_cents]) if {
	amount := input.args.amount_cents
	amount > 150000
}
deny contains "odd url" if lower(input.args.url) == "not a url"
deny contains "null header" if input.args.headers.c == null
deny contains "header c is d" if "c", "d" in input.args.headers
deny contains "first tag ok" if "ok" == input.args.tags[0]
deny contains "tag 2 is 3" if 2, 3 in input.args.tags
deny contains "no such key" if input.args.nope.deeper == 1
require_approval contains "a write" if input.tool.effect == "write"
"#;

/// Rules referring to rules, a set rule read by another, defaults, iteration with keys.
const RULES: &str = r#"package weft

tenants := {
	"acme": {"max": 3, "tags": ["a", "b"], "hosts": {"acme.com", "github.com"}},
	"globex": {"max": 1, "tags": [], "hosts": set()},
}

default max_attempts := 2

max_attempts := tenants[input.tenant].max if input.tenant != ""

deny contains "too many attempts" if input.attempt > max_attempts

require_approval contains "nothing denied" if count(deny) == 0

require_approval contains msg if {
	some i, tag in tenants[input.tenant].tags
	msg := sprintf("tag %d: %s", [i, tag])
	input.tool.effect == "write"
}

require_approval contains "a known host" if {
	some h in tenants[input.tenant].hosts
	endswith(object.get(input.args, "url", ""), h)
}

approval_timeout_ms := 1000 + count(tenants) * 500
"#;

/// Failures, which the interpreter turns into a denial: builtins given the wrong types, a
/// statement after an assignment that failed, iteration over a string, two values of one
/// rule, arithmetic on what is not a number; and a rule that fails but nothing refers to.
const FAILURES: &str = r#"package weft

deny contains "lower of the url" if lower(input.args.url) == "not a url"
deny contains "after an undefined assignment" if {
	x := input.args.nope
	input.tool.name == lower(input.args.url)
}
deny contains "a filter first" if {
	input.tool.name == "search"
	y := upper(input.args.url)
	y == "X"
}
deny contains "a secret tag" if {
	some t in input.args.tags
	startswith(t, "secret")
}
deny contains "many" if many == "ok"
deny contains "attempts and args" if input.attempt + count(input.args) > 8
deny contains "a letter of the url" if {
	input.tool.name == "http.get"
	some c in input.args.url
	c == "x"
}
deny contains "a pattern from the input" if regex.match(input.args.query, "drop table")
deny contains "a pattern regorus refuses" if {
	input.tool.name == "shell.exec"
	regex.match("(", input.tenant)
}
many := t if some t in input.args.tags
unused := lower(input.args.url)
"#;

/// Arithmetic, set operators, membership in objects, regexes, builtins given numbers.
const OPERATORS: &str = r#"package weft

blocked := {"shell.exec", "k8s.apply"}
write_tools := {"payments.charge", "send_email"}

deny contains "blocked" if count({input.tool.name} & blocked) > 0
deny contains "a write with many args" if {
	n := (count(input.args) * 2) + 1
	n > 5
	input.tool.name in (write_tools | {"sql.query"})
}
deny contains "a deep url" if count(split(input.args.url, "/")) - 1 > 4
deny contains "two args" if count(input.args) / 2 == 1
deny contains "digits" if regex.match(`[0-9]{3}`, input.args.url)
deny contains "upper of a number" if upper(input.args.url) == "42"
deny contains "step a" if input.step in {"x": 1, "y": "a"}
deny contains "all but one blocked" if count(blocked - {input.tool.name}) == 1
"#;

fn policy(text: &str) -> Policy {
    Policy::from_sources(vec![("b.rego".into(), text.into())]).expect("compiles")
}

/// Decides `n` generated calls both ways and compares; returns the decisions by kind.
fn compare(text: &str, seed: u64, n: usize) -> (usize, usize, usize) {
    let compiled = policy(text);
    assert_eq!(compiled.evaluator(), Evaluator::Compiled, "{text}");
    let reference = compiled.interpreted();
    let mut g = Gen(seed);
    let (mut allowed, mut denied, mut asked) = (0, 0, 0);
    for i in 0..n {
        let doc = call(&mut g);
        let decision = compiled.decide(&doc);
        assert_eq!(decision, reference.decide(&doc), "call {i}: {doc}");
        assert_eq!(
            compiled.decide_deny(&doc),
            reference.decide_deny(&doc),
            "call {i}: {doc}"
        );
        match decision {
            Decision::Allow => allowed += 1,
            Decision::Deny(_) => denied += 1,
            Decision::RequireApproval { .. } => asked += 1,
        }
    }
    (allowed, denied, asked)
}

#[test]
fn the_realistic_bundle_decides_as_the_interpreter() {
    let (allowed, denied, asked) = compare(REALISTIC, 0x9E37_79B9_7F4A_7C15, 3000);
    assert!(
        allowed > 30 && denied > 30 && asked > 0,
        "{allowed} {denied} {asked}"
    );
}

#[test]
fn corner_bundles_decide_as_the_interpreter() {
    for (name, text) in [
        ("undefined", UNDEFINED),
        ("rules", RULES),
        ("operators", OPERATORS),
        ("failures", FAILURES),
    ] {
        let (allowed, denied, asked) = compare(text, 11, 2000);
        // Each bundle reaches more than one decision, so the comparison means something.
        let kinds = [allowed, denied, asked].iter().filter(|n| **n > 0).count();
        assert!(kinds >= 2, "{name}: {allowed} {denied} {asked}");
    }
}

/// The compiled rules decide nearly every call themselves: the interpreter only gets the
/// calls that fail (with the realistic bundle, a builtin given an argument of the wrong
/// type: a URL that is a number), and none of a bundle that cannot fail.
#[test]
fn the_interpreter_is_rarely_asked() {
    let p = policy(REALISTIC);
    let mut g = Gen(5);
    for _ in 0..1000 {
        p.decide(&call(&mut g));
    }
    assert!(p.handed_over() < 60, "{} handed over", p.handed_over());
    let q = policy(RULES);
    for _ in 0..1000 {
        q.decide(&call(&mut g));
    }
    assert!(q.handed_over() < 100, "{} handed over", q.handed_over());
    let r = policy(OPERATORS);
    for _ in 0..1000 {
        r.decide(&call(&mut g));
    }
    assert!(r.handed_over() < 200, "{} handed over", r.handed_over());
}

/// A call needing more steps than the compiled rules take is decided by the interpreter.
#[test]
fn a_call_past_the_work_limit_goes_to_the_interpreter() {
    let items: Vec<String> = (0..60).map(|i| format!("\"v{i}\"")).collect();
    let text = format!(
        "package weft\n\nbig := [{}]\n\ndeny contains \"x\" if {{\n\tsome a in big\n\tsome b in big\n\tsome c in big\n\tinput.tenant == concat(\"\", [a, b, c])\n}}\n",
        items.join(", ")
    );
    let p = policy(&text);
    assert_eq!(p.evaluator(), Evaluator::Compiled);
    let mut g = Gen(3);
    let _ = p.decide(&call(&mut g));
    assert!(p.handed_over() >= 1);
}

#[test]
fn bundles_outside_the_subset_are_interpreted_and_say_why() {
    for (text, why) in [
        (
            "deny contains \"x\" if {\n\tsome i, t in input.args.tags\n\tinput.args.tags[i] == \"ok\"\n}",
            "a local variable in an index",
        ),
        (
            "deny contains \"x\" if {\n\tsome i\n\tinput.args.tags[i] == \"ok\"\n}",
            "`some x` declarations",
        ),
        (
            "deny contains \"x\" if trace(input.tenant)",
            "the builtin trace",
        ),
        (
            "deny contains \"x\" if count([t | some t in input.args]) > 1",
            "this expression",
        ),
        (
            "deny contains \"x\" if every t in [1] { t != input.attempt }",
            "`every`",
        ),
        (
            "f(x) := x if true\n\ndeny contains \"x\" if f(input.tenant)",
            "a call of a rule",
        ),
        (
            "deny contains \"x\" if input.tenant = \"acme\"",
            "unification",
        ),
        (
            "v := 1 if input.attempt > 1\nelse := 2\n\ndeny contains \"x\" if v == 1",
            "`else`",
        ),
        (
            "deny contains \"x\" if { input.tenant == \"a\" with input as {} }",
            "`with`",
        ),
        (
            "deny contains \"x\" if input.args.tags[_] == \"ok\"",
            "this variable",
        ),
        (
            &format!("deny contains \"x\" if input{} == 1", ".a".repeat(80)),
            "nested deeper",
        ),
        (
            &format!(
                "deny contains \"x\" if {{\n{}}}",
                "\tinput.attempt > 1\n".repeat(300)
            ),
            "more statements",
        ),
    ] {
        let p = policy(&format!("package weft\n\n{text}\n"));
        match p.evaluator() {
            Evaluator::Interpreter(reason) => assert!(reason.contains(why), "{text}: {reason}"),
            other => panic!("{text}: {other:?}"),
        }
        // Still decided, by the interpreter.
        let mut g = Gen(9);
        let doc = call(&mut g);
        assert_eq!(p.decide(&doc), p.interpreted().decide(&doc));
    }
}
