//! What bounding a schema check's work costs: `Schema::check` (the count of subschema
//! applications, then the check) against the schema crate's own `validate` (what weft called
//! before the count) and `is_valid`, for a tool's flat args schema and for a recursive tree
//! schema, whose count walks the value.
//!
//! Run: `cargo bench -p weft-core --bench schema`.

use serde_json::{Value, json};

fn main() {
    divan::main();
}

fn flat() -> (Value, Value) {
    let schema = json!({
        "type": "object",
        "properties": {
            "text": {"type": "string", "maxLength": 1000},
            "n": {"type": "integer", "minimum": 0},
            "tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]+$"}},
        },
        "required": ["text"],
    });
    let value = json!({"text": "find the invoices of March", "n": 3, "tags": ["a", "bc", "def"]});
    (schema, value)
}

/// A tree of nodes with children, a left and a right: `levels` levels along the left spine,
/// each with three leaf children (five nodes of the value per level).
fn tree(levels: usize) -> (Value, Value) {
    let schema = json!({
        "$defs": {"node": {
            "type": "object",
            "required": ["name"],
            "properties": {
                "name": {"type": "string"},
                "children": {"type": "array", "items": {"$ref": "#/$defs/node"}},
                "left": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
                "right": {"anyOf": [{"$ref": "#/$defs/node"}, {"type": "null"}]},
            },
        }},
        "$ref": "#/$defs/node",
    });
    let mut value = json!({"name": "leaf"});
    for i in 0..levels {
        value = json!({"name": i.to_string(), "left": value, "right": null,
                       "children": [{"name": "x"}, {"name": "y"}, {"name": "z"}]});
    }
    (schema, value)
}

fn case(name: &str) -> (Value, Value) {
    if name == "flat" { flat() } else { tree(25) }
}

fn raw(schema: &Value) -> jsonschema::Validator {
    jsonschema::options()
        .with_pattern_options(jsonschema::PatternOptions::regex())
        .build(schema)
        .expect("compiles")
}

#[divan::bench(args = ["flat", "tree"])]
fn weft_check(bencher: divan::Bencher, name: &str) {
    let (schema, value) = case(name);
    let s = weft_core::schema::compile(&schema).expect("compiles");
    bencher.bench_local(|| s.check(divan::black_box(&value)).is_ok());
}

#[divan::bench(args = ["flat", "tree"])]
fn crate_validate(bencher: divan::Bencher, name: &str) {
    let (schema, value) = case(name);
    let v = raw(&schema);
    bencher.bench_local(|| v.validate(divan::black_box(&value)).is_ok());
}

#[divan::bench(args = ["flat", "tree"])]
fn crate_is_valid(bencher: divan::Bencher, name: &str) {
    let (schema, value) = case(name);
    let v = raw(&schema);
    bencher.bench_local(|| v.is_valid(divan::black_box(&value)));
}
