//! The plan JSON Schema as handed to a model: weft-core's generated schema with bounds added
//! (`maxItems`, `maxProperties`), because grammar-constrained small models loop on unbounded
//! arrays and maps until `max_tokens` cuts the JSON off (shared/llm/README.md).

use serde_json::{Value, json};
use weft_core::Plan;

/// Most items of any array in a generated plan.
pub const MAX_ITEMS: u64 = 12;
/// Most events or steps in a generated plan.
pub const MAX_PROPERTIES: u64 = 16;

/// The bounded plan schema.
pub fn plan_schema() -> Value {
    let mut s = Plan::json_schema();
    if let Some(o) = s.as_object_mut() {
        o.remove("$schema");
    }
    bound(&mut s);
    s
}

fn bound(v: &mut Value) {
    match v {
        Value::Object(o) => {
            let is_array = o.get("type") == Some(&json!("array"));
            if is_array && !o.contains_key("maxItems") {
                o.insert("maxItems".into(), json!(MAX_ITEMS));
            }
            let is_map = matches!(o.get("additionalProperties"), Some(Value::Object(_)));
            if is_map && !o.contains_key("maxProperties") {
                o.insert("maxProperties".into(), json!(MAX_PROPERTIES));
            }
            for (_, child) in o.iter_mut() {
                bound(child);
            }
        }
        Value::Array(a) => a.iter_mut().for_each(bound),
        _ => {}
    }
}
