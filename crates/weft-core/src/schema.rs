//! The one way weft compiles a JSON Schema: a plan's event schemas, a tool's input and output
//! schemas (declared in `weft.toml`, put through the API, published by an MCP server or a
//! worker) and a ReAct request's toolset. They come from plan authors, tenants and peers, and
//! the values checked against them from anyone who can start an instance or answer a call,
//! so checking a value must not cost more than the value's size accounts for, whatever the
//! schema says.
//!
//! `pattern` and `patternProperties` are what could break that: the schema crate's default
//! engine (`fancy-regex`) backtracks for backreferences and lookarounds, up to a million steps
//! per string (~0.1 s each in a debug build; an array of such strings multiplies it). Here
//! they run on the `regex` crate's engine, which never backtracks and bounds a compiled
//! pattern's size. A pattern that needs backtracking does not compile, and the error says so.

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

/// Compiles `schema`, with its patterns on the linear-time engine (see the module's docs).
pub fn compile(schema: &Value) -> Result<Validator, SchemaError> {
    jsonschema::options()
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
        })
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
        assert!(v.is_valid(&json!({"id": "ab_1", "x-n": 3})));
        assert!(!v.is_valid(&json!({"id": "AB"})));
        assert!(!v.is_valid(&json!({"x-n": "three"})));
        let bad = json!({"id": format!("{}!", "a".repeat(100_000))});
        let e = v.validate(&bad).expect_err("too long and not matching");
        assert!(e.to_string().contains("does not match"), "{e}");
    }

    #[test]
    fn a_pattern_too_large_to_compile_is_an_error_not_an_allocation() {
        let e = compile(&json!({"type": "string", "pattern": r"\w{1000}{1000}"}));
        assert!(e.is_err(), "a pattern of 10^6 word classes compiled");
    }
}
