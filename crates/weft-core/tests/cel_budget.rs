//! Expression cost bombs (issue #27, item 1): a guard that names no input is evaluated by the
//! validator, so an expression doing astronomically much work must end in a finding (`V020`)
//! instead of holding the process.

use serde_json::json;
use weft_core::{Limits, StaticCatalog, parse_plan, validate};

fn list() -> String {
    let items: Vec<String> = (0..100).map(|i| i.to_string()).collect();
    format!("[{}]", items.join(","))
}

fn findings(plan: serde_json::Value) -> Vec<String> {
    let bytes = serde_json::to_vec(&plan).expect("serialises");
    let plan = parse_plan(&bytes, &Limits::default()).expect("parses");
    let v = validate(&plan, Some(&StaticCatalog::builtin()), &Limits::default());
    v.findings
        .iter()
        .map(|f| format!("{} {} {} {}", f.code, f.name, f.pointer, f.message))
        .collect()
}

#[test]
fn a_cost_bomb_guard_is_a_finding_not_a_hang() {
    let l = list();
    let guard = format!("{l}.all(a, {l}.all(b, {l}.all(c, {l}.all(d, {l}.all(e, true)))))");
    let plan = json!({"plan_name":"bomb","graph_type":"acyclic",
        "events":{"start":{},"done":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"noop","guard": guard,"emits":["done"]}}});
    assert!(serde_json::to_vec(&plan).expect("json").len() < 4096);
    let f = findings(plan);
    let hit = f
        .iter()
        .find(|f| f.starts_with("V020 expression-budget /steps/s/guard"))
        .unwrap_or_else(|| panic!("no V020 in {f:#?}"));
    assert!(hit.contains("evaluation budget"), "{hit}");
}

#[test]
fn a_string_bomb_when_is_a_finding() {
    let l = list();
    let s = "y".repeat(1000);
    let when = format!("size({l}.map(a, {l}.map(b, {l}.map(c, '{s}')))) > 0");
    let plan = json!({"plan_name":"bomb","graph_type":"acyclic",
        "events":{"start":{},"done":{"kind":"output"}},
        "steps":{"s":{"on":["start"],"action":"noop",
            "emits":[{"event":"done","when": when}]}}});
    let f = findings(plan);
    assert!(f.iter().any(|f| f.starts_with("V020")), "{f:#?}");
}
