//! `weft schema` prints the plan JSON Schema that LLM planners are given: it must be valid
//! JSON, a valid JSON Schema, accept every working example and reject a plan with an unknown
//! field (plans reject unknown fields; the schema must say so too).

mod common;

use common::{code, json, root, weft};

fn validator() -> jsonschema::Validator {
    let out = weft(&["schema"]);
    assert_eq!(code(&out), 0);
    let schema = json(&out);
    jsonschema::validator_for(&schema).expect("weft schema is a valid JSON Schema")
}

#[test]
fn sample_plan_validates_against_the_schema() {
    let v = validator();
    let sample: serde_json::Value =
        serde_json::from_slice(&std::fs::read(root().join("examples/sample.json")).expect("read"))
            .expect("sample is JSON");
    let errors: Vec<String> = v.iter_errors(&sample).map(|e| e.to_string()).collect();
    assert!(errors.is_empty(), "{errors:?}");
}

#[test]
fn every_working_example_validates_against_the_schema() {
    let v = validator();
    for entry in std::fs::read_dir(root().join("examples")).expect("dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "json") || path.ends_with("expected.json") {
            continue;
        }
        let plan: serde_json::Value =
            serde_json::from_slice(&std::fs::read(&path).expect("read")).expect("JSON");
        let errors: Vec<String> = v.iter_errors(&plan).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{}: {errors:?}", path.display());
    }
}

#[test]
fn unknown_fields_are_rejected_by_the_schema() {
    let v = validator();
    let plan = serde_json::json!({
        "plan_name": "x", "graph_type": "acyclic", "events": {"start": {}},
        "steps": {"a": {"on": ["start"], "action": "noop", "bogus": 1}}
    });
    assert!(!v.is_valid(&plan));
}
