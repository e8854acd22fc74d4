//! `weft_core::schema` against the schema crate on random schemas and values: whatever the
//! count adds, a value it lets through is judged exactly as the crate judges it, and the first
//! mismatch and the list of them agree. Schemas are built from four definitions whose
//! subschemas (`anyOf`, `allOf`, `oneOf`, `not`, `properties`, `items`, `type`, `required`)
//! name one another, so loops, shared branches and recursion through properties all occur.

use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// A subschema of up to `depth` levels naming definitions `d0`…`d3`.
fn subschema(depth: u32) -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        (0..4u8).prop_map(|d| json!({"$ref": format!("#/$defs/d{d}")})),
        prop_oneof![
            Just("object"),
            Just("array"),
            Just("integer"),
            Just("string")
        ]
        .prop_map(|t| json!({"type": t})),
        Just(json!({"required": ["a"]})),
        Just(json!(true)),
    ];
    leaf.prop_recursive(depth, 24, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"anyOf": v})),
            prop::collection::vec(inner.clone(), 1..4).prop_map(|v| json!({"allOf": v})),
            prop::collection::vec(inner.clone(), 1..3).prop_map(|v| json!({"oneOf": v})),
            inner.clone().prop_map(|s| json!({"not": s})),
            (inner.clone(), inner.clone())
                .prop_map(|(a, b)| json!({"properties": {"a": a, "b": b}})),
            inner.prop_map(|s| json!({"items": s})),
        ]
    })
}

fn schema() -> impl Strategy<Value = Value> {
    (prop::collection::vec(subschema(3), 4), 0..4u8).prop_map(|(defs, root)| {
        let defs: Map<String, Value> = defs
            .into_iter()
            .enumerate()
            .map(|(i, d)| (format!("d{i}"), d))
            .collect();
        json!({"$defs": defs, "$ref": format!("#/$defs/d{root}")})
    })
}

/// Values over the properties `a` and `b`, items, integers and strings.
fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        any::<i8>().prop_map(|n| json!(n)),
        Just(json!("s")),
        Just(json!(null))
    ];
    leaf.prop_recursive(6, 40, 3, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            (prop::option::of(inner.clone()), prop::option::of(inner)).prop_map(|(a, b)| {
                let mut m = Map::new();
                if let Some(a) = a {
                    m.insert("a".into(), a);
                }
                if let Some(b) = b {
                    m.insert("b".into(), b);
                }
                Value::Object(m)
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn a_checked_value_is_judged_as_the_crate_judges_it(schema in schema(), value in value()) {
        let Ok(ours) = weft_core::schema::compile(&schema) else {
            // Refused: a loop, a chain too deep or paths that multiply; nothing to compare.
            return Ok(());
        };
        let crate_says = jsonschema::options()
            .with_pattern_options(jsonschema::PatternOptions::regex())
            .build(&schema)
            .expect("compiles where ours does")
            .is_valid(&value);
        let first = ours.check(&value);
        let all = ours.mismatches(&value);
        prop_assert_eq!(first.is_ok(), all.is_empty(), "{:?} {:?}", first, all);
        let unchecked = first
            .as_ref()
            .err()
            .is_some_and(|e| e.to_string().starts_with("the value was not checked"));
        if !unchecked {
            prop_assert_eq!(first.is_ok(), crate_says, "{} against {}: {:?}", value, schema, first);
        }
    }
}
