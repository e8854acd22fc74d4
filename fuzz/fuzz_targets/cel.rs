//! Fuzzes CEL compile and evaluate under the evaluation budget: the input is an expression,
//! optionally followed by a NUL byte and a JSON object of input payloads (event name →
//! payload). Every evaluation must end (a value or an error), within the budget, without
//! panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;
use weft_core::cel_budget::{Budget, with_budget};
use weft_core::expr::{Expr, Scope};

fuzz_target!(|data: &[u8]| {
    let (src, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(src) = std::str::from_utf8(src) else {
        return;
    };
    let Ok(mut expr) = Expr::compile(src) else {
        return;
    };
    let payloads: Vec<(String, Value)> = match serde_json::from_slice::<Value>(rest) {
        Ok(Value::Object(m)) => m.into_iter().collect(),
        _ => vec![("start".to_string(), serde_json::json!({"n": 3, "s": "x", "l": [1, 2]}))],
    };
    expr.bind_names(payloads.iter().map(|(n, _)| n.as_str()));
    let inputs: Vec<(&str, &Value)> = payloads.iter().map(|(n, v)| (n.as_str(), v)).collect();
    let result = Value::Null;
    let scope = Scope {
        inputs: &inputs,
        result: Some(&result),
        instance: "i1",
        plan: "fuzz",
        fresh: "i1.1",
    };
    // A smaller budget than the default keeps each run short; the mechanism is the same.
    let budget = Budget {
        max_cost: 20_000,
        max_size: 1 << 20,
    };
    with_budget(budget, || {
        let _ = expr.eval(&scope);
        let _ = expr.eval_bool(&scope);
    });
});
