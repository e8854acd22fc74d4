//! The one way weft compiles a JSON Schema and checks a value against it: a plan's event
//! schemas, a tool's input and output schemas (declared in `weft.toml`, put through the API,
//! published by an MCP server or a worker) and a ReAct request's toolset. They come from plan
//! authors, tenants and peers, and the values checked against them from anyone who can start
//! an instance or answer a call, so a check must cost no more than the value's size accounts
//! for, whatever the schema says.
//!
//! Two things could break that. `pattern` and `patternProperties`: the schema crate's default
//! engine (`fancy-regex`) backtracks for backreferences and lookarounds, up to a million steps
//! per string (~0.1 s each in a debug build; an array of such strings multiplies it). Here
//! they run on the `regex` crate's engine, which never backtracks and bounds a compiled
//! pattern's size; a pattern that needs backtracking does not compile, and the error says so.
//! And references: the checker applies a subschema once per path that reaches it, so `$ref`s
//! shared by several branches multiply the work (and an error report's size) exponentially in
//! the schema's or the value's depth. `cost.rs` refuses the schemas whose references multiply
//! whatever the value, and counts the rest's work for each value before checking it: past
//! [`BUDGET_BASE`] plus [`BUDGET_PER_NODE`] per node of the value, the value is reported as
//! not checked rather than holding a thread.

mod cost;

use std::fmt;

use jsonschema::error::ValidationErrorKind;
use jsonschema::{PatternOptions, Validator};
use serde_json::Value;

/// Why a schema does not compile: the schema crate's message, and where a pattern is what
/// failed, what this engine does not take.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaError(String);

impl fmt::Display for SchemaError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SchemaError {}

/// Subschema applications a check may take whatever the value's size.
pub const BUDGET_BASE: u64 = 100_000;

/// Subschema applications a check may take per node of the value (its items, properties and
/// scalars), on top of [`BUDGET_BASE`].
pub const BUDGET_PER_NODE: u64 = 64;

/// A compiled schema: the checker and what checking costs.
#[derive(Debug)]
pub struct Schema {
    validator: Validator,
    cost: cost::Graph,
}

/// Where and why a value does not match a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    at: String,
    message: String,
}

impl Mismatch {
    /// The JSON pointer into the value where it does not match (empty: the whole value).
    pub fn at(&self) -> &str {
        &self.at
    }

    fn too_costly() -> Mismatch {
        Mismatch {
            at: String::new(),
            message: format!(
                "the value was not checked: checking it would apply this schema's subschemas \
                 more than {BUDGET_BASE} + {BUDGET_PER_NODE} × (nodes of the value) times, \
                 because its references reach the same parts of the value along many paths \
                 (nest fewer anyOf/oneOf/allOf branches naming the same $ref, or send a \
                 shallower value)"
            ),
        }
    }
}

impl From<jsonschema::ValidationError<'_>> for Mismatch {
    fn from(e: jsonschema::ValidationError<'_>) -> Mismatch {
        Mismatch {
            at: e.instance_path().to_string(),
            message: e.to_string(),
        }
    }
}

impl fmt::Display for Mismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl Schema {
    /// The first reason `value` does not match, if any; a value too costly to check does not
    /// match.
    pub fn check(&self, value: &Value) -> Result<(), Mismatch> {
        if !self.affordable(value) {
            return Err(Mismatch::too_costly());
        }
        if self.validator.is_valid(value) {
            return Ok(());
        }
        self.validator.validate(value).map_err(Mismatch::from)
    }

    /// Every reason `value` does not match (none: it matches).
    pub fn mismatches(&self, value: &Value) -> Vec<Mismatch> {
        if !self.affordable(value) {
            return vec![Mismatch::too_costly()];
        }
        if self.validator.is_valid(value) {
            return Vec::new();
        }
        self.validator
            .iter_errors(value)
            .map(Mismatch::from)
            .collect()
    }

    fn affordable(&self, value: &Value) -> bool {
        self.cost.within(value, BUDGET_BASE, BUDGET_PER_NODE)
    }
}

/// Compiles `schema`, with its patterns on the linear-time engine and its references' work
/// bounded (see the module's docs).
pub fn compile(schema: &Value) -> Result<Schema, SchemaError> {
    let validator = jsonschema::options()
        .with_pattern_options(PatternOptions::regex())
        .build(schema)
        .map_err(|e| match e.kind() {
            ValidationErrorKind::Format { format } if format == "regex" => SchemaError(format!(
                "{e} at {}: patterns are checked without backtracking (the syntax of Rust's \
                 `regex` crate), so backreferences such as \\1 and lookarounds such as (?=…) \
                 are not supported, nor patterns that compile too large",
                e.instance_path()
            )),
            _ => SchemaError(e.to_string()),
        })?;
    let cost = cost::Graph::build(schema).map_err(SchemaError)?;
    Ok(Schema { validator, cost })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn patterns_that_need_backtracking_do_not_compile() {
        for pattern in [r"^(a|a)*\1$", r"^(?=a)a+$", r"^(?!x)(a|a)*$", r"(?<=a)b"] {
            let e = compile(&json!({"type": "string", "pattern": pattern}))
                .err()
                .unwrap_or_else(|| panic!("{pattern} compiled"));
            let e = e.to_string();
            assert!(e.contains("without backtracking"), "{pattern}: {e}");
            assert!(e.contains("/pattern"), "{pattern}: {e}");
        }
        let e = compile(&json!({"patternProperties": {r"^(x)\1$": {}}}))
            .expect_err("a backreference in patternProperties compiled");
        assert!(e.to_string().contains("without backtracking"), "{e}");
    }

    #[test]
    fn patterns_without_backtracking_check_as_before() {
        let v = compile(&json!({
            "type": "object",
            "properties": {"id": {"type": "string", "pattern": "^[a-z0-9_-]{1,8}$"}},
            "patternProperties": {"^x-": {"type": "integer"}},
        }))
        .expect("compiles");
        assert_eq!(v.check(&json!({"id": "ab_1", "x-n": 3})), Ok(()));
        assert_eq!(
            v.check(&json!({"id": "AB"})).map_err(|e| e.at),
            Err("/id".into())
        );
        assert_eq!(
            v.check(&json!({"x-n": "three"})).map_err(|e| e.at),
            Err("/x-n".into())
        );
        let bad = json!({"id": format!("{}!", "a".repeat(100_000))});
        let e = v.check(&bad).expect_err("too long and not matching");
        assert!(e.to_string().contains("does not match"), "{e}");
    }

    #[test]
    fn a_pattern_too_large_to_compile_is_an_error_not_an_allocation() {
        let e = compile(&json!({"type": "string", "pattern": r"\w{1000}{1000}"}));
        assert!(e.is_err(), "a pattern of 10^6 word classes compiled");
    }

    /// `{"a": {"a": … {} …}}`, `depth` deep.
    fn nested(depth: usize) -> Value {
        (0..depth).fold(json!({}), |v, _| json!({ "a": v }))
    }

    /// A definition whose `anyOf` branches each apply it again to the property `a`.
    fn branching(branches: usize) -> Value {
        let branch = |i: usize| {
            json!({
                "type": "object", "required": ["a"], "minProperties": i,
                "properties": {"a": {"$ref": "#/$defs/n"}},
            })
        };
        json!({
            "$defs": {"n": {"anyOf": (0..branches).map(branch).collect::<Vec<_>>()}},
            "$ref": "#/$defs/n",
        })
    }

    #[test]
    fn references_that_multiply_whatever_the_value_do_not_compile() {
        // d_k names d_(k-1) twice: 2^40 paths to d0 for every value, even `{}`.
        let mut defs = serde_json::Map::new();
        defs.insert("d0".into(), json!({"type": "object", "required": ["z"]}));
        for k in 1..=40 {
            let prev = format!("#/$defs/d{}", k - 1);
            defs.insert(
                format!("d{k}"),
                json!({"anyOf": [{"$ref": prev}, {"$ref": prev, "minProperties": 1}]}),
            );
        }
        let e = compile(&json!({"$defs": defs, "$ref": "#/$defs/d40"}))
            .expect_err("2^40 paths compiled");
        assert!(e.to_string().contains("paths"), "{e}");

        let e = compile(
            &json!({"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}]}}, "$ref": "#/$defs/n"}),
        )
        .expect_err("a loop on one value compiled");
        assert!(e.to_string().contains("never end"), "{e}");

        let mut chain = serde_json::Map::new();
        for k in 0..40 {
            chain.insert(
                format!("c{k}"),
                json!({"$ref": format!("#/$defs/c{}", k + 1)}),
            );
        }
        chain.insert("c40".into(), json!({"type": "object"}));
        let e = compile(&json!({"$defs": chain, "$ref": "#/$defs/c0"}))
            .expect_err("a chain of 41 compiled");
        assert!(e.to_string().contains("deep"), "{e}");
    }

    #[test]
    fn a_value_whose_check_would_multiply_is_reported_unchecked_in_bounded_time() {
        let v = compile(&branching(2)).expect("compiles: its work depends on the value");
        // Fine while shallow: a real error, with its place.
        let e = v
            .check(&nested(3))
            .expect_err("the innermost object lacks `a`");
        assert!(!e.to_string().contains("not checked"), "{e}");
        // 2^60 paths: without the count, collecting the anyOf's errors takes time and
        // memory without bound (the process was killed for 23 GiB at depth 22).
        let deep = nested(60);
        let started = std::time::Instant::now();
        let e = v.check(&deep).expect_err("not checked");
        assert!(e.to_string().contains("not checked"), "{e}");
        assert_eq!(v.mismatches(&deep), vec![e]);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
    }

    #[test]
    fn recursive_schemas_that_descend_once_per_level_check_deep_values() {
        // A tree: every node's children are nodes; one path per node of the value.
        let tree = compile(&json!({
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
        }))
        .expect("compiles");
        let mut value = json!({"name": "leaf"});
        for i in 0..100 {
            value = json!({"name": i.to_string(), "left": value.clone(), "right": null,
                           "children": [{"name": "x"}, {"name": "y"}]});
        }
        assert_eq!(tree.check(&value), Ok(()));
        let mut bad = value.clone();
        let mut at = &mut bad;
        for _ in 0..100 {
            at = at.get_mut("left").expect("a left child");
        }
        at["name"] = json!(7);
        let e = tree.check(&bad).expect_err("a name that is a number");
        assert!(!e.to_string().contains("not checked"), "{e}");

        // Anchors, `$id`s and escaped pointers are followed as the checker follows them.
        let v = compile(&json!({
            "$id": "https://example.com/root.json",
            "$defs": {
                "a/b": {"$anchor": "ab", "type": "integer"},
                "other": {"$id": "other.json", "type": "string"},
            },
            "properties": {
                "x": {"$ref": "#/$defs/a~1b"},
                "y": {"$ref": "#ab"},
                "z": {"$ref": "other.json"},
            },
        }))
        .expect("compiles");
        assert_eq!(v.check(&json!({"x": 1, "y": 2, "z": "s"})), Ok(()));
        assert!(v.check(&json!({"z": 3})).is_err());
        // Draft 7's `"$id": "#name"` is an anchor.
        let v = compile(&json!({
            "$schema": "http://json-schema.org/draft-07/schema#",
            "definitions": {"b": {"$id": "#bee", "type": "boolean"}},
            "properties": {"w": {"$ref": "#bee"}},
        }))
        .expect("compiles");
        assert_eq!(v.check(&json!({"w": true})), Ok(()));
        assert_eq!(
            v.check(&json!({"w": 1})).map_err(|e| e.at),
            Err("/w".into())
        );
    }
}
