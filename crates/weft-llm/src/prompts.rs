//! Every prompt weft sends to a model, in one place and versioned: a change of wording changes
//! [`PROMPT_VERSION`], which transcripts carry (in the system prompt), so a recorded
//! transcript shows which prompts produced it and replays fail loudly after a wording change.

use serde_json::Value;

/// Version of the prompt set.
pub const PROMPT_VERSION: &str = "weft-prompts/1";

/// The function the planner must call.
pub const CREATE_PLAN: &str = "create_plan";

/// The prefix of critic feedback.
pub const CRITIC: &str = "CRITIC:";

const SAMPLE_PLAN: &str = r#"{"plan_name":"sample","graph_type":"acyclic","events":{"start":{},"done":{"kind":"output"}},"steps":{"first":{"on":["start"],"action":"send_email","args":{"to":"a@example.com","subject":"Hi","body":"Test"},"emits":["done"]}}}"#;

const PLAN_RULES: &str = "A weft plan is a Petri net. `events` are places that hold tokens; `steps` are transitions. \
A step fires when every event in its `on` list holds a token: it runs its `action` (a tool name) with `args`, then puts a token on each event in `emits`.\n\
Rules:\n\
- `graph_type` is \"acyclic\" (no loops) unless the instruction asks for something that repeats (then \"reactive\").\n\
- Declare every event you use under `events`. The instance's input arrives on the event `start` (or on the events listed in `initial`).\n\
- Use only the tools listed below as `action`, with `args` matching the tool's args_schema.\n\
- Every step must be able to fire starting from `start`; mark the final event(s) with \"kind\": \"output\".\n\
- A step that joins several events waits for all of them: make sure every one of them is always emitted.\n\
- Strings in `args` may use ${expr} templates over input payloads, e.g. \"${start.email}\".";

/// The planner's system prompt.
pub fn planner_system(tools: &Value) -> String {
    format!(
        "You are weft's planner ({PROMPT_VERSION}). Turn the user's instruction into a weft plan and submit it by calling the function `{CREATE_PLAN}` with the whole plan as its arguments. \
Its parameters are the plan's JSON Schema.\n\n{PLAN_RULES}\n\nExample plan:\n{SAMPLE_PLAN}\n\nTools you may use (name, description, args_schema):\n{tools}"
    )
}

/// The planner's first user message.
pub fn planner_user(instruction: &str) -> String {
    format!("Instruction: {instruction}")
}

/// The critic feedback for a rejected candidate; `findings` are rendered verbatim.
pub fn critic(attempt: u32, max_attempts: u32, findings: &str) -> String {
    format!(
        "{CRITIC} attempt {attempt} of {max_attempts} was rejected. Fix every finding below and call `{CREATE_PLAN}` again with the complete corrected plan.\n{findings}"
    )
}

/// The semantic reviewer's system prompt.
pub fn review_system() -> String {
    format!(
        "You review weft plans ({PROMPT_VERSION}). The plan already passed structural checks. \
List concrete concerns where the plan may not achieve the instruction (a missing action, a wrong recipient, a step that does nothing useful). \
Reply with JSON {{\"concerns\": [\"...\"]}}; an empty list when there are none."
    )
}

/// The semantic reviewer's user message.
pub fn review_user(instruction: &str, plan: &Value) -> String {
    format!("Instruction: {instruction}\nPlan:\n{plan}")
}

/// The repair system prompt.
pub fn repair_system(tools: &Value) -> String {
    format!(
        "You are weft's repair planner ({PROMPT_VERSION}). A running plan failed or is stuck. Propose a revised plan and submit it by calling `{CREATE_PLAN}` with the whole revised plan. \
Tokens currently sit on some events (the marking): keep every event that holds tokens, under the same name, so the instance can continue; \
change or add steps so the work can finish.\n\n{PLAN_RULES}\n\nTools you may use (name, description, args_schema):\n{tools}"
    )
}

/// The repair context.
pub fn repair_user(
    instruction: &str,
    plan: &Value,
    failure: &str,
    marking: &Value,
    journal: &str,
) -> String {
    format!(
        "Original instruction: {instruction}\nCurrent plan:\n{plan}\nFailure: {failure}\nCurrent marking (event -> token payloads): {marking}\nJournal excerpt:\n{journal}"
    )
}

/// The explainer's system prompt.
pub fn explain_system() -> String {
    format!(
        "You explain weft plans in plain language for someone who has never seen one ({PROMPT_VERSION}). \
Walk through the plan in the order its steps can run. Refer to every step by its exact name in backticks, e.g. `notify`, \
and say what starts it and what it produces. Do not invent steps, tools or events that are not in the plan."
    )
}

/// The explainer's user message.
pub fn explain_user(plan: &Value) -> String {
    format!("Plan:\n{plan}")
}

/// Asking again when the explanation missed steps.
pub fn explain_missing(missing: &[String]) -> String {
    format!(
        "Your explanation does not mention these steps by name: {}. Explain again, naming every step in backticks.",
        missing.join(", ")
    )
}

/// The summariser's system prompt.
pub fn summarize_system() -> String {
    format!(
        "You summarize a run of a weft plan from its journal ({PROMPT_VERSION}). \
Reply with JSON {{\"what_happened\": \"...\", \"problems\": [\"...\"], \"suggestions\": [\"...\"]}}. \
Ground every statement in the journal lines and the plan; refer to steps by name; do not guess at events the journal does not show."
    )
}

/// The summariser's user message.
pub fn summarize_user(plan: &Value, journal: &str) -> String {
    format!("Plan:\n{plan}\nJournal excerpt:\n{journal}")
}

/// The ReAct planner's system prompt (seed 004 step contract and rules).
pub fn react_system(goal: &Value, toolset: &Value, style: &str) -> String {
    format!(
        "You are a ReAct planner ({PROMPT_VERSION}). Decide, one step at a time, whether to call a tool or to finish with a final answer. Style: {style}.\n\
Goal: {goal}\n\
Tools (tool_id, description, input_schema):\n{toolset}\n\
Reply with exactly one JSON object:\n\
{{\"thought\": \"string\", \"finish\": true or false, \"action\": {{\"tool_id\": \"string or null\", \"input\": {{...}}}}, \"final_answer\": {{\"content\": \"string\", \"structured\": {{...}}}}}}\n\
Rules:\n\
- If finish == true: final_answer MUST be non-null and action MUST be null.\n\
- If finish == false: action MUST be non-null and contain a tool_id from the tools above, and final_answer MUST be null.\n\
After each tool call you get its observation; use it to decide the next step."
    )
}

/// The ReAct context message.
pub fn react_context(context: &Value) -> String {
    format!("Context:\n{context}")
}

/// A tool observation shown to the ReAct planner.
pub fn react_observation(step_index: u32, observation: &Value) -> String {
    format!("Observation for step {step_index}:\n{observation}")
}

/// Corrective feedback for an invalid ReAct step.
pub fn react_correction(problem: &str) -> String {
    format!(
        "CORRECTION: your last reply was not a valid step: {problem}. Reply with one JSON object following the rules."
    )
}

/// Last-step nudge.
pub fn react_last_step() -> &'static str {
    "This is your last step: set finish to true and give the final_answer."
}
