//! The OpenAI chat-completions wire format: building the request body and parsing the
//! response tolerantly, because local servers differ from OpenAI in small ways (tool-call
//! `arguments` as an object, missing ids, `content: null`, extra fields, a call left as text).

use serde_json::{Map, Value, json};

use crate::chat::{ChatRequest, ChatResponse, Message, Role, ToolCall, ToolChoice, Usage};
use crate::error::{Error, Result};

/// The assistant prefill that makes llama.cpp + SmolLM2 start a tool call.
pub const PREFILL: &str = "<tool_call>\n";
/// Where that call ends.
pub const PREFILL_STOP: &str = "</tool_call>";

fn role_str(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

fn message_json(m: &Message) -> Value {
    let mut o = Map::new();
    o.insert("role".into(), json!(role_str(m.role)));
    o.insert(
        "content".into(),
        m.content.as_ref().map_or(Value::Null, |c| json!(c)),
    );
    if !m.tool_calls.is_empty() {
        let calls: Vec<Value> = m
            .tool_calls
            .iter()
            .map(|c| {
                json!({"id": c.id, "type": "function",
                       "function": {"name": c.name, "arguments": c.arguments}})
            })
            .collect();
        o.insert("tool_calls".into(), Value::Array(calls));
    }
    if let Some(id) = &m.tool_call_id {
        o.insert("tool_call_id".into(), json!(id));
    }
    Value::Object(o)
}

/// Whether a request forces a tool call (the prefill trick applies).
fn forces_tool(req: &ChatRequest) -> bool {
    !req.tools.is_empty()
        && matches!(
            req.tool_choice,
            ToolChoice::Required | ToolChoice::Function(_)
        )
}

/// The JSON body for `req`.
pub fn request_body(model: &str, req: &ChatRequest, prefill: bool) -> Value {
    let prefill = prefill && forces_tool(req);
    let mut messages: Vec<Value> = req.messages.iter().map(message_json).collect();
    let mut o = Map::new();
    o.insert("model".into(), json!(model));
    if prefill {
        messages.push(json!({"role": "assistant", "content": PREFILL}));
    }
    o.insert("messages".into(), Value::Array(messages));
    if !req.tools.is_empty() {
        let tools: Vec<Value> = req
            .tools
            .iter()
            .map(|t| {
                json!({"type": "function", "function": {
                    "name": t.name, "description": t.description, "parameters": t.parameters}})
            })
            .collect();
        o.insert("tools".into(), Value::Array(tools));
        let choice = match (&req.tool_choice, prefill) {
            (ToolChoice::Auto, _) => json!("auto"),
            (ToolChoice::None, _) => json!("none"),
            (ToolChoice::Required, _) | (ToolChoice::Function(_), true) => json!("required"),
            (ToolChoice::Function(name), false) => {
                json!({"type": "function", "function": {"name": name}})
            }
        };
        o.insert("tool_choice".into(), choice);
    }
    if let Some(rf) = &req.response_format {
        let v = match rf {
            crate::chat::ResponseFormat::JsonObject => json!({"type": "json_object"}),
            crate::chat::ResponseFormat::JsonSchema {
                name,
                schema,
                strict,
            } => json!({"type": "json_schema",
                         "json_schema": {"name": name, "strict": strict, "schema": schema}}),
        };
        o.insert("response_format".into(), v);
    }
    if let Some(m) = req.max_tokens {
        o.insert("max_tokens".into(), json!(m));
    }
    if let Some(t) = req.temperature {
        o.insert("temperature".into(), json!(t));
    }
    if let Some(s) = req.seed {
        o.insert("seed".into(), json!(s));
    }
    let mut stop = req.stop.clone();
    if prefill && !stop.iter().any(|s| s == PREFILL_STOP) {
        stop.push(PREFILL_STOP.into());
    }
    if !stop.is_empty() {
        o.insert("stop".into(), json!(stop));
    }
    Value::Object(o)
}

/// Arguments as a JSON text, whether the server sent a string or an object.
fn arguments_text(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Null) | None => "{}".into(),
        Some(other) => other.to_string(),
    }
}

fn parse_call(i: usize, v: &Value) -> Option<ToolCall> {
    // OpenAI: {id, type, function: {name, arguments}}; some servers flatten it.
    let f = v.get("function").unwrap_or(v);
    let name = f.get("name")?.as_str()?.to_string();
    let id = v
        .get("id")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .map_or_else(|| format!("call_{i}"), str::to_string);
    Some(ToolCall {
        id,
        name,
        arguments: arguments_text(f.get("arguments").or_else(|| f.get("parameters"))),
    })
}

/// Content may be a string, null, or a list of `{type: text, text}` parts.
fn content_text(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Array(parts) => {
            let t: String = parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect();
            Some(t)
        }
        _ => None,
    }
}

/// A call the server left as text: `{"name": …, "arguments": …}`, maybe in `<tool_call>` tags
/// (a prefilled completion that the server did not parse).
fn call_from_text(text: &str) -> Option<ToolCall> {
    let t = text
        .trim()
        .trim_start_matches("<tool_call>")
        .trim_end_matches("</tool_call>")
        .trim();
    let v: Value = serde_json::from_str(t).ok()?;
    let call = parse_call(0, &v)?;
    v.get("arguments")?;
    Some(call)
}

/// Parses a response body.
pub fn parse_response(body: &[u8], prefilled: bool) -> Result<ChatResponse> {
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| Error::Decode(format!("body is not JSON: {e}: {}", snippet(body))))?;
    if let Some(err) = v.get("error") {
        return Err(Error::Decode(format!(
            "server returned an error object: {err}"
        )));
    }
    let choice = v
        .get("choices")
        .and_then(|c| c.get(0))
        .ok_or_else(|| Error::Decode(format!("no choices in response: {}", snippet(body))))?;
    let msg = choice.get("message").unwrap_or(&Value::Null);
    let mut content = content_text(msg.get("content"));
    let mut tool_calls: Vec<ToolCall> = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .enumerate()
                .filter_map(|(i, c)| parse_call(i, c))
                .collect()
        })
        .unwrap_or_default();
    // Legacy `function_call`.
    if tool_calls.is_empty()
        && let Some(fc) = msg.get("function_call")
    {
        tool_calls.extend(parse_call(0, fc));
    }
    if tool_calls.is_empty()
        && prefilled
        && let Some(call) = content.as_deref().and_then(call_from_text)
    {
        tool_calls.push(call);
        content = None;
    }
    let usage = v
        .get("usage")
        .and_then(|u| serde_json::from_value::<Usage>(u.clone()).ok())
        .unwrap_or_default();
    let finish_reason = choice
        .get("finish_reason")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok(ChatResponse {
        content: content.filter(|c| !c.is_empty() || tool_calls.is_empty()),
        tool_calls,
        usage,
        finish_reason,
        latency_ms: 0,
        model: v.get("model").and_then(Value::as_str).map(str::to_string),
    })
}

/// The first 300 characters of a body, for error messages.
pub fn snippet(body: &[u8]) -> String {
    let s = String::from_utf8_lossy(body);
    let mut out: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_as_object_missing_id_and_null_content() {
        let body = br#"{"id":"x","extra":1,"choices":[{"index":0,"finish_reason":"tool_calls",
            "message":{"role":"assistant","content":null,"tool_calls":[
              {"type":"function","function":{"name":"create_plan","arguments":{"a":1}}}]}}],
            "usage":{"prompt_tokens":3,"completion_tokens":4,"total_tokens":7}}"#;
        let r = parse_response(body, false).unwrap();
        assert_eq!(r.content, None);
        assert_eq!(r.tool_calls[0].id, "call_0");
        assert_eq!(r.tool_calls[0].arguments, r#"{"a":1}"#);
        assert_eq!(r.usage.total_tokens, 7);
    }

    #[test]
    fn unparsed_prefilled_call_in_content() {
        let body = br#"{"choices":[{"message":{"content":"{\"name\": \"f\", \"arguments\": {\"x\": 2}}"}}]}"#;
        let r = parse_response(body, true).unwrap();
        assert_eq!(r.tool_calls[0].name, "f");
        assert_eq!(r.tool_calls[0].arguments, r#"{"x":2}"#);
    }

    #[test]
    fn prefill_body() {
        let req = ChatRequest {
            messages: vec![Message::user("hi")],
            tools: vec![crate::chat::ToolDef {
                name: "f".into(),
                description: String::new(),
                parameters: json!({}),
            }],
            tool_choice: ToolChoice::Function("f".into()),
            ..ChatRequest::default()
        };
        let b = request_body("m", &req, true);
        assert_eq!(b["tool_choice"], "required");
        assert_eq!(b["messages"][1]["content"], PREFILL);
        assert_eq!(b["stop"][0], PREFILL_STOP);
        let b = request_body("m", &req, false);
        assert_eq!(b["tool_choice"]["function"]["name"], "f");
    }
}
