//! Introspection: `explain` (a plan in plain language) and `summarize` (a run, from its journal
//! excerpt). Both are grounded: the explainer must name every step of the plan (checked, asked
//! again once, then the deterministic template is used), and with no model configured both
//! fall back to deterministic, template-based text built from the plan and journal alone.

use std::collections::{BTreeSet, VecDeque};

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use weft_core::{EventKind, Plan};

use crate::chat::{ChatRequest, Message, ResponseFormat};
use crate::error::{Error, Result};
use crate::ids::Correlation;
use crate::prompts;
use crate::session::Llm;

/// Who wrote a text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The model.
    Llm,
    /// The deterministic template.
    Template,
}

/// A plan explanation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Explanation {
    /// The text.
    pub text: String,
    /// Who wrote it.
    pub source: Source,
    /// Problems with the model's text (steps it missed, names it invented).
    pub warnings: Vec<String>,
}

/// Steps in an order they can run: breadth-first from the initial events.
pub fn step_order(plan: &Plan) -> Vec<String> {
    let mut have: BTreeSet<String> = plan
        .initial
        .clone()
        .unwrap_or_else(|| vec!["start".into()])
        .into_iter()
        .collect();
    for (name, ev) in &plan.events {
        if ev.kind == Some(EventKind::Input) {
            have.insert(name.clone());
        }
    }
    let mut order = Vec::new();
    let mut done = BTreeSet::new();
    let mut queue: VecDeque<()> = VecDeque::from([()]);
    while queue.pop_front().is_some() {
        for (name, step) in &plan.steps {
            if !done.contains(name) && step.on.iter().all(|e| have.contains(e)) {
                done.insert(name.clone());
                order.push(name.clone());
                have.extend(step.emits.iter().map(|e| e.event().to_string()));
                queue.push_back(());
            }
        }
    }
    // Steps that can never be enabled still get explained, last.
    order.extend(plan.steps.keys().filter(|s| !done.contains(*s)).cloned());
    order
}

fn list(items: &[String]) -> String {
    items
        .iter()
        .map(|i| format!("`{i}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The deterministic explanation.
pub fn explain_template(plan: &Plan) -> String {
    let mut out = format!(
        "Plan `{}` is {} with {} event(s) and {} step(s).",
        plan.plan_name,
        match plan.graph_type {
            weft_core::GraphType::Acyclic => "a one-shot (acyclic) workflow",
            weft_core::GraphType::Reactive => "a long-running (reactive) workflow",
        },
        plan.events.len(),
        plan.steps.len()
    );
    if let Some(d) = &plan.description {
        out.push_str(&format!(" {d}"));
    }
    let initial = plan.initial.clone().unwrap_or_else(|| vec!["start".into()]);
    out.push_str(&format!(
        "\nIt starts when input arrives on {}.",
        list(&initial)
    ));
    for (i, name) in step_order(plan).iter().enumerate() {
        let Some(step) = plan.steps.get(name) else {
            continue;
        };
        out.push_str(&format!(
            "\n{}. Step `{name}` waits for {} and runs the tool `{}`",
            i + 1,
            list(&step.on),
            step.action
        ));
        if let Some(g) = &step.guard {
            out.push_str(&format!(" (only when `{g}` holds)"));
        }
        let emits: Vec<String> = step
            .emits
            .iter()
            .map(|e| match e.when() {
                Some(w) => format!("`{}` when `{w}`", e.event()),
                None => format!("`{}`", e.event()),
            })
            .collect();
        if emits.is_empty() {
            out.push_str("; it emits nothing.");
        } else {
            out.push_str(&format!("; then it emits {}.", emits.join(", ")));
        }
        if let Some(d) = &step.description {
            out.push_str(&format!(" ({d})"));
        }
    }
    let outputs: Vec<String> = plan
        .events
        .iter()
        .filter(|(n, e)| {
            e.kind == Some(EventKind::Output) || !plan.steps.values().any(|s| s.on.contains(n))
        })
        .map(|(n, _)| n.clone())
        .collect();
    if !outputs.is_empty() {
        out.push_str(&format!(
            "\nIt finishes with a token on {}.",
            list(&outputs)
        ));
    }
    out
}

/// Steps the text does not name, and backticked names that are neither steps, events nor tools.
fn grounding(plan: &Plan, text: &str) -> (Vec<String>, Vec<String>) {
    let missing = plan
        .steps
        .keys()
        .filter(|s| !text.contains(s.as_str()))
        .cloned()
        .collect();
    let known = |n: &str| {
        plan.steps.contains_key(n)
            || plan.events.contains_key(n)
            || plan.steps.values().any(|s| s.action == n)
            || n == plan.plan_name
    };
    let invented = text
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|n| !n.is_empty() && !n.contains(' ') && !known(n))
        .map(str::to_string)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    (missing, invented)
}

/// Explains `plan`; with no model, the template.
pub async fn explain(llm: Option<&Llm>, corr: &Correlation, plan: &Plan) -> Result<Explanation> {
    let Some(llm) = llm else {
        return Ok(Explanation {
            text: explain_template(plan),
            source: Source::Template,
            warnings: Vec::new(),
        });
    };
    let plan_json = serde_json::to_value(plan).map_err(|e| Error::Decode(e.to_string()))?;
    let mut messages = vec![
        Message::system(prompts::explain_system()),
        Message::user(prompts::explain_user(&plan_json)),
    ];
    for round in 0..2 {
        let req = ChatRequest {
            messages: messages.clone(),
            max_tokens: Some(768),
            ..ChatRequest::default()
        };
        let resp = llm.chat(corr, "llm.explain", "explain", req).await?;
        let text = resp.content.unwrap_or_default();
        let (missing, invented) = grounding(plan, &text);
        if missing.is_empty() {
            let warnings = invented
                .iter()
                .map(|n| format!("the explanation mentions `{n}`, which is not in the plan"))
                .collect();
            return Ok(Explanation {
                text,
                source: Source::Llm,
                warnings,
            });
        }
        if round == 1 {
            return Ok(Explanation {
                text: explain_template(plan),
                source: Source::Template,
                warnings: vec![format!(
                    "the model's explanation did not name step(s) {}; used the template instead",
                    list(&missing)
                )],
            });
        }
        messages.push(Message::assistant(text));
        messages.push(Message::user(prompts::explain_missing(&missing)));
    }
    Ok(Explanation {
        text: explain_template(plan),
        source: Source::Template,
        warnings: Vec::new(),
    })
}

/// A run summary.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Summary {
    /// What happened.
    pub what_happened: String,
    /// Problems seen.
    pub problems: Vec<String>,
    /// What to do about them.
    pub suggestions: Vec<String>,
    /// Who wrote it.
    pub source: Source,
}

fn summary_schema() -> Value {
    json!({"type": "object", "additionalProperties": false,
           "required": ["what_happened", "problems", "suggestions"],
           "properties": {
             "what_happened": {"type": "string", "maxLength": 1200},
             "problems": {"type": "array", "maxItems": 6, "items": {"type": "string", "maxLength": 300}},
             "suggestions": {"type": "array", "maxItems": 6, "items": {"type": "string", "maxLength": 300}}}})
}

/// Whether a journal line reports a problem. A record line (`#<seq> <kind> <body>`) is judged
/// by its kind only (`action.error`, `repair.failed`, `instance.paused`): words in a body
/// (a plan document, a payload) say nothing about the run. Other lines by their words.
fn is_problem(line: &str) -> bool {
    let l = line.trim();
    if let Some(rest) = l.strip_prefix('#') {
        let kind = rest.split_whitespace().nth(1).unwrap_or("");
        return kind.ends_with(".error") || kind.ends_with(".failed") || kind == "instance.paused";
    }
    let l = l.to_lowercase();
    l.contains("fail") || l.contains("error") || l.contains("stuck") || l.contains("timeout")
}

/// The deterministic summary: which steps the journal mentions, and its error lines.
pub fn summarize_template(journal: &str, plan: &Plan) -> Summary {
    let lines: Vec<&str> = journal.lines().filter(|l| !l.trim().is_empty()).collect();
    let seen: Vec<String> = step_order(plan)
        .into_iter()
        .filter(|s| journal.contains(s.as_str()))
        .collect();
    let problems: Vec<String> = lines
        .iter()
        .filter(|l| is_problem(l))
        .map(|l| l.trim().to_string())
        .take(6)
        .collect();
    let never: Vec<String> = plan
        .steps
        .keys()
        .filter(|s| !journal.contains(s.as_str()))
        .cloned()
        .collect();
    let mut suggestions = Vec::new();
    if !problems.is_empty() {
        suggestions.push(
            "inspect the failing step's args and tool, then retry or repair the instance".into(),
        );
    }
    if !never.is_empty() {
        suggestions.push(format!(
            "step(s) {} never appear in the journal: check the events they wait for",
            list(&never)
        ));
    }
    Summary {
        what_happened: format!(
            "The journal excerpt has {} record(s) for plan `{}`; it mentions step(s) {}.",
            lines.len(),
            plan.plan_name,
            if seen.is_empty() {
                "none".into()
            } else {
                list(&seen)
            }
        ),
        problems,
        suggestions,
        source: Source::Template,
    }
}

/// Summarises a run; with no model, the template.
pub async fn summarize(
    llm: Option<&Llm>,
    corr: &Correlation,
    journal: &str,
    plan: &Plan,
) -> Result<Summary> {
    let Some(llm) = llm else {
        return Ok(summarize_template(journal, plan));
    };
    let plan_json = serde_json::to_value(plan).map_err(|e| Error::Decode(e.to_string()))?;
    let req = ChatRequest {
        messages: vec![
            Message::system(prompts::summarize_system()),
            Message::user(prompts::summarize_user(&plan_json, journal)),
        ],
        response_format: Some(ResponseFormat::JsonSchema {
            name: "run_summary".into(),
            schema: summary_schema(),
            strict: true,
        }),
        max_tokens: Some(768),
        ..ChatRequest::default()
    };
    let resp = llm.chat(corr, "llm.summarize", "summarize", req).await?;
    let text = resp.content.unwrap_or_default();
    #[derive(Deserialize)]
    struct Wire {
        what_happened: String,
        #[serde(default)]
        problems: Vec<String>,
        #[serde(default)]
        suggestions: Vec<String>,
    }
    let w: Wire = serde_json::from_str(text.trim())
        .map_err(|e| Error::Decode(format!("summary is not the expected JSON ({e}): {text:?}")))?;
    Ok(Summary {
        what_happened: w.what_happened,
        problems: w.problems,
        suggestions: w.suggestions,
        source: Source::Llm,
    })
}
