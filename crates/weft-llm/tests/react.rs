//! The seed-004 ReAct contract and loop: the seed's example payloads round-trip byte for byte,
//! and the loop with a two-tool toolset handles an invalid step with corrective feedback, a
//! finish, and the `max_steps` salvage.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use weft_llm::react::{PlannerRequest, ReactStep, ReactToolExecutor, TraceStep, run_react};
use weft_llm::{BoxFuture, Correlation, Llm, MemoryTranscript, ScriptedExchange, ScriptedProvider};

/// serialize(deserialize(text)) must equal the text's own compact form (key order preserved).
fn roundtrip<T: serde::de::DeserializeOwned + serde::Serialize>(text: &str) {
    let typed: T = serde_json::from_str(text).expect("seed payload deserializes");
    let original: Value = serde_json::from_str(text).expect("seed payload is JSON");
    assert_eq!(
        serde_json::to_string(&typed).unwrap(),
        serde_json::to_string(&original).unwrap()
    );
}

const SEED_REQUEST: &str = include_str!("fixtures/seed004-request.json");

/// §8's smoke-test payload: no metadata, snapshot, output_schema or token limits.
const SEED_SMOKE: &str = r#"{
  "caller": "debug-shell",
  "goal": {
    "type": "analysis",
    "description": "Extract structured facts from the provided text and summarize them in 2-3 bullets."
  },
  "context": {
    "conversation_history": [
      {
        "role": "user",
        "content": "Here's some info: Alice lives in Paris, works at Acme Corp, and her manager is Bob."
      }
    ],
    "external_facts": {
      "text": "Alice lives in Paris, works at Acme Corp, and her manager is Bob."
    }
  },
  "toolset": [
    {
      "tool_id": "extract_facts",
      "description": "Extract structured subject/predicate/object facts from a span of text.",
      "input_schema": {
        "type": "object",
        "properties": {
          "text": {"type": "string"}
        },
        "required": ["text"]
      }
    }
  ],
  "limits": {
    "max_steps": 4,
    "timeout_seconds": 60
  },
  "preferences": {
    "style": "neutral",
    "allow_internal_thought_logging": true,
    "return_trace": true
  }
}"#;

const SEED_STEP: &str = r#"{
  "thought": "...",
  "finish": false,
  "action": {
    "tool_id": "extract_facts",
    "input": { "text": "..." }
  },
  "final_answer": null
}"#;

const SEED_TRACE_STEP: &str = r#"{
  "step_index": 0,
  "thought": "First extract structured facts...",
  "action": {"tool_id": "extract_facts", "input": {"text": "..."}},
  "observation": {"llm_output": "..."}
}"#;

/// §5's response with the seed's literal `...` placeholder in `step_meta` removed (the only
/// change needed to make it JSON).
const SEED_RESPONSE: &str = r#"{
  "final_answer": {
    "content": "1. Alice lives in Paris.\n2. Alice works at Acme Corp.\n3. Alice's manager is Bob.",
    "structured": {}
  },
  "trace": [
    {
      "step_index": 0,
      "thought": "Use the extract_facts tool to parse the text into facts.",
      "action": {
        "tool_id": "extract_facts",
        "input": {
          "text": "Alice lives in Paris, works at Acme Corp, and her manager is Bob."
        }
      },
      "observation": {
        "llm_output": "...facts JSON or text...",
        "spark_meta": null,
        "step_meta": {"verb_name": "extract_facts"}
      }
    },
    {
      "step_index": 1,
      "thought": "Now summarize the extracted facts into 2–3 bullets.",
      "action": null,
      "observation": null
    }
  ]
}"#;

#[test]
fn seed_payloads_roundtrip_byte_for_byte() {
    roundtrip::<PlannerRequest>(SEED_REQUEST);
    roundtrip::<PlannerRequest>(SEED_SMOKE);
    roundtrip::<ReactStep>(SEED_STEP);
    roundtrip::<TraceStep>(SEED_TRACE_STEP);
    roundtrip::<weft_llm::react::PlannerResponse>(SEED_RESPONSE);
}

/// Two tools: `extract_facts` and `summarize_facts`, recording their calls.
#[derive(Default)]
struct Tools {
    calls: Mutex<Vec<(String, Value)>>,
}

impl ReactToolExecutor for Tools {
    fn call<'a>(&'a self, tool_id: &'a str, input: Value) -> BoxFuture<'a, Result<Value, String>> {
        self.calls
            .lock()
            .unwrap()
            .push((tool_id.to_string(), input.clone()));
        let out = match tool_id {
            "extract_facts" => Ok(json!({"facts": [["Alice", "lives_in", "Paris"]]})),
            "summarize_facts" => Ok(json!("- Alice lives in Paris")),
            other => Err(format!("unknown {other}")),
        };
        Box::pin(std::future::ready(out))
    }
}

fn request(max_steps: u32) -> PlannerRequest {
    let mut r: PlannerRequest = serde_json::from_str(SEED_SMOKE).unwrap();
    r.toolset.push(weft_llm::react::ToolDescriptor {
        tool_id: "summarize_facts".into(),
        description: "Summarize facts into bullets.".into(),
        input_schema: json!({"type": "object"}),
        output_schema: None,
    });
    r.limits.max_steps = Some(max_steps);
    r
}

fn step(v: Value) -> ScriptedExchange {
    ScriptedExchange::content(v.to_string()).with_usage(50, 10)
}

#[tokio::test]
async fn two_tools_invalid_step_corrected_then_finish() {
    let script = vec![
        step(json!({"thought": "extract", "finish": false,
                    "action": {"tool_id": "extract_facts", "input": {"text": "Alice lives in Paris"}}, "final_answer": null})),
        ScriptedExchange::content("I will now summarize!").when_last("Observation for step 0"),
        step(json!({"thought": "summarize", "finish": false,
                    "action": {"tool_id": "summarize_facts", "input": {"facts": []}}, "final_answer": null}))
            .when_last("CORRECTION: your last reply was not a valid step: the reply contains no JSON object."),
        step(json!({"thought": "done", "finish": true, "action": null,
                    "final_answer": {"content": "- Alice lives in Paris", "structured": {}}}))
            .when_last("Observation for step 2"),
    ];
    let transcript = Arc::new(MemoryTranscript::new());
    let llm =
        Llm::new(Arc::new(ScriptedProvider::new(script))).with_transcripts(transcript.clone());
    let tools = Tools::default();
    let resp = run_react(&llm, &Correlation::new("t"), &request(6), &tools)
        .await
        .unwrap();
    let fa = resp.final_answer.unwrap();
    assert_eq!(fa.content, "- Alice lives in Paris");
    let calls: Vec<String> = tools
        .calls
        .lock()
        .unwrap()
        .iter()
        .map(|c| c.0.clone())
        .collect();
    assert_eq!(calls, ["extract_facts", "summarize_facts"]);
    let trace = resp.trace.unwrap();
    assert_eq!(trace.len(), 4);
    assert_eq!(
        trace[1].observation.as_ref().unwrap()["error"],
        "the reply contains no JSON object"
    );
    assert_eq!(trace[3].action, None);
    assert_eq!(trace[3].observation, None);
    let usage = resp.usage.unwrap();
    assert_eq!(
        (usage.steps_used, usage.tool_calls, usage.invalid_steps),
        (4, 2, 1)
    );
    assert_eq!(usage.stop_reason, "finish");
    let charged: u64 = transcript.exchanges().iter().map(|e| e.usage.total()).sum();
    assert_eq!(usage.total_tokens, charged);
}

#[tokio::test]
async fn rule_violations_get_corrective_feedback() {
    let script = vec![
        step(json!({"thought": "x", "finish": true, "action": null, "final_answer": null})),
        step(json!({"thought": "x", "finish": false, "action": {"tool_id": "nope", "input": {}}, "final_answer": null}))
            .when_last("finish is true but final_answer is null"),
        step(json!({"thought": "ok", "finish": true, "action": null, "final_answer": {"content": "fine"}}))
            .when_last("action.tool_id `nope` is not in the toolset (extract_facts, summarize_facts)"),
    ];
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script)));
    let resp = run_react(&llm, &Correlation::new("t"), &request(4), &Tools::default())
        .await
        .unwrap();
    assert_eq!(resp.final_answer.unwrap().content, "fine");
    assert_eq!(resp.usage.unwrap().invalid_steps, 2);
}

#[tokio::test]
async fn max_steps_salvages_an_answer_from_the_last_step() {
    let script = vec![
        step(json!({"thought": "extract first", "finish": false,
                    "action": {"tool_id": "extract_facts", "input": {"text": "t"}}, "final_answer": null})),
        step(json!({"thought": "then summarize", "finish": false,
                    "action": {"tool_id": "summarize_facts", "input": {}}, "final_answer": null}))
        .when_last("This is your last step: set finish to true and give the final_answer."),
    ];
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script)));
    let resp = run_react(&llm, &Correlation::new("t"), &request(2), &Tools::default())
        .await
        .unwrap();
    let fa = resp.final_answer.unwrap();
    assert_eq!(fa.content, "then summarize\n- Alice lives in Paris");
    assert_eq!(
        fa.structured,
        Some(json!({"salvaged": true, "stop_reason": "max_steps"}))
    );
    assert_eq!(resp.usage.unwrap().stop_reason, "max_steps");
}

#[tokio::test]
async fn an_input_outside_the_toolset_schema_is_fed_back_not_called() {
    let script = vec![
        step(json!({"thought": "extract", "finish": false,
                    "action": {"tool_id": "extract_facts", "input": {"txt": 1}}, "final_answer": null})),
        step(json!({"thought": "again", "finish": false,
                    "action": {"tool_id": "extract_facts", "input": {"text": "Alice"}}, "final_answer": null}))
            .when_last("does not match the input_schema of `extract_facts`"),
        step(json!({"thought": "done", "finish": true, "action": null,
                    "final_answer": {"content": "ok"}})),
    ];
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script)));
    let tools = Tools::default();
    let resp = run_react(&llm, &Correlation::new("t"), &request(4), &tools)
        .await
        .unwrap();
    assert_eq!(resp.final_answer.unwrap().content, "ok");
    // Only the valid input reached the tool.
    let calls = tools.calls.lock().unwrap().clone();
    assert_eq!(
        calls,
        [("extract_facts".to_string(), json!({"text": "Alice"}))]
    );
    let trace = resp.trace.unwrap();
    let err = trace[0].observation.as_ref().unwrap()["error"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(err.contains("\"text\" is a required property"), "{err}");
    let usage = resp.usage.unwrap();
    assert_eq!((usage.tool_calls, usage.invalid_steps), (1, 1));
}

#[tokio::test]
async fn a_toolset_schema_weft_cannot_check_is_refused_before_the_model_is_asked() {
    for (schema, why) in [
        (json!({"type": 7}), "7 is not valid"),
        (
            json!({"properties": {"text": {"type": "string", "pattern": "^(a|a)*\\1$"}}}),
            "without backtracking",
        ),
        (
            json!({"$defs": {"n": {"allOf": [{"$ref": "#/$defs/n"}]}}, "$ref": "#/$defs/n"}),
            "never end",
        ),
    ] {
        let mut req = request(4);
        req.toolset[0].input_schema = schema;
        // The script would answer; the request must not get that far.
        let llm = Llm::new(Arc::new(ScriptedProvider::new(vec![step(
            json!({"thought": "done", "finish": true, "action": null, "final_answer": {"content": "ok"}}),
        )])));
        let e = run_react(&llm, &Correlation::new("t"), &req, &Tools::default())
            .await
            .expect_err("refused");
        let m = e.to_string();
        assert_eq!(e.code(), "invalid_input", "{m}");
        assert!(m.contains("`extract_facts`") && m.contains(why), "{m}");
    }
}

#[tokio::test]
async fn a_model_failure_mid_loop_returns_the_partial_trace_with_the_error() {
    // One good step, then the model fails (the script runs out).
    let script = vec![step(json!({"thought": "extract", "finish": false,
        "action": {"tool_id": "extract_facts", "input": {"text": "Alice lives in Paris"}},
        "final_answer": null}))];
    let llm = Llm::new(Arc::new(ScriptedProvider::new(script)));
    let resp = run_react(&llm, &Correlation::new("t"), &request(4), &Tools::default())
        .await
        .unwrap();
    let err = resp.error.expect("an error field");
    assert_eq!(err["code"], "script_exhausted");
    assert_eq!(resp.trace.unwrap().len(), 1);
    let usage = resp.usage.unwrap();
    assert_eq!(usage.stop_reason, "llm_error");
    assert_eq!(usage.tool_calls, 1);
    assert!(resp.final_answer.is_some(), "salvaged from the trace");

    // A failure before any progress is the caller's error.
    let llm = Llm::new(Arc::new(ScriptedProvider::new(Vec::new())));
    let e = run_react(&llm, &Correlation::new("t"), &request(4), &Tools::default())
        .await
        .unwrap_err();
    assert_eq!(e.code(), "script_exhausted");
}
