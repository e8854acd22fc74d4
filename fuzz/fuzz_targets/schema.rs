//! Fuzzes JSON Schema compile and check: the input is a schema, optionally followed by a NUL
//! byte and a value. A schema either compiles or is refused with a reason; a value is checked
//! or reported as too costly to check, always within the fuzzer's time and memory limits,
//! whatever the schema's references and patterns say.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

fuzz_target!(|data: &[u8]| {
    let (schema, rest) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (data, &[][..]),
    };
    let Ok(schema) = serde_json::from_slice::<Value>(schema) else {
        return;
    };
    let Ok(compiled) = weft_core::schema::compile(&schema) else {
        return;
    };
    let value = serde_json::from_slice::<Value>(rest).unwrap_or(Value::Null);
    let first = compiled.check(&value);
    let all = compiled.mismatches(&value);
    // The two agree on whether the value matches.
    assert_eq!(first.is_ok(), all.is_empty(), "{first:?} {all:?}");
});
