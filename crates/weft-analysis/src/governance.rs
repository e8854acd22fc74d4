//! Governance proved before the run: properties of the form "before X, always Y" checked over
//! every firing sequence of the net (approval coverage is the built-in one), and, for acyclic
//! plans, the most tool calls, LLM calls and declared cost any run can spend, each with the run
//! that spends it. A plan whose bound exceeds its `limits` is refused before it runs.
//!
//! # What is exact and what is over-approximated
//! The checks run on the same P/T net as the other analyses, so guards and `when` conditions
//! are assumed to go either way. That only adds runs: a property that holds, and a bound, are
//! proofs for every real run; a violation or the run reaching a bound may need a guard to hold
//! that never does (the finding then says `depends_on_guards`). Inputs from outside are the
//! `env_tokens` budget per input event, as for deadlocks. The bound counts every attempt a
//! step's `retry` allows; it does not count what a tool does inside (a child plan's calls, the
//! model calls of one `agent.react` call beyond the first).
//!
//! # "Before X, always Y"
//! A firing of a step matching `before` (its action was called, whether it then succeeded or
//! failed) must be preceded, on the same run, by a successful firing of a step matching
//! `always`, or match `always` itself. Approval coverage is `before: {effect: write}, always:
//! {approval: true}`: a step that declares `approval` is covered by its own approval, which
//! happens before its call; a denied approval is a failure, so it covers nothing after it.
//! Approvals a policy asks for at run time depend on the call's args and are not counted.
//! Checking is a breadth-first search of the markings reachable without a `Y` firing for one
//! where an uncovered `X` is enabled, so the witness is a shortest run.

use std::collections::{HashMap, VecDeque};

use serde::{Deserialize, Serialize};
use weft_core::{Code, Effect, Finding, Plan, Severity, ToolCatalog};

use crate::explore::Bounds;
use crate::net::{NetKind, PtNet, Role};

/// Name of the built-in property: every write is approved first.
pub const APPROVAL_COVERAGE: &str = "approval_coverage";

/// What the governance checks know about the tools and which properties are required.
#[derive(Debug, Clone, Default)]
pub struct Governance {
    /// Facts of tools by name (a tool missing here counts as `write`, without a cost).
    pub tools: HashMap<String, ToolFacts>,
    /// Properties a policy declares; each must hold (a violation is an `A009` error). One
    /// named [`APPROVAL_COVERAGE`] replaces the built-in one, which is otherwise only reported.
    pub properties: Vec<Property>,
    /// Decides whether a plan is accepted at all, given what the checks found (a policy
    /// bundle's plan rules); its findings join the report's.
    pub acceptance: Option<std::sync::Arc<dyn PlanAcceptance>>,
}

/// A decision on a whole plan before it runs (e.g. a Rego bundle's `deny` for plans). Pure:
/// the same plan and report give the same findings.
pub trait PlanAcceptance: Send + Sync + std::fmt::Debug {
    /// Findings about `plan` (errors refuse it), given the governance checks' report.
    fn findings(&self, plan: &Plan, report: &GovernanceReport) -> Vec<Finding>;
}

/// The facts of one tool the checks use.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolFacts {
    /// Its effect class.
    pub effect: Effect,
    /// Declared cost of one call.
    pub cost: Option<f64>,
    /// It asks a language model.
    pub llm: bool,
}

impl Governance {
    /// The facts of every tool of `catalog`, and the required `properties`.
    pub fn from_catalog(catalog: &dyn ToolCatalog, properties: Vec<Property>) -> Self {
        let tools = catalog
            .names()
            .into_iter()
            .filter_map(|name| {
                let spec = catalog.spec(name)?;
                Some((
                    name.to_string(),
                    ToolFacts {
                        effect: spec.effect,
                        cost: spec.cost,
                        llm: spec.llm,
                    },
                ))
            })
            .collect();
        Governance {
            tools,
            properties,
            acceptance: None,
        }
    }
}

/// "Before a step matching `before`, always a step matching `always`."
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Property {
    /// A name for messages (`approval_coverage` for the built-in one).
    pub name: String,
    /// The steps that must be preceded.
    pub before: Selector,
    /// The steps that must precede them.
    pub always: Selector,
}

impl Property {
    /// The built-in property: before a `write` tool, always an approval.
    pub fn approval_coverage() -> Self {
        Property {
            name: APPROVAL_COVERAGE.to_string(),
            before: Selector {
                effect: Some(Effect::Write),
                ..Selector::default()
            },
            always: Selector {
                approval: Some(true),
                ..Selector::default()
            },
        }
    }
}

/// Which steps a property means: every field given must match (an empty selector matches
/// every step).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Selector {
    /// The step's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// The step's action, exactly.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool: Option<String>,
    /// The step's action starts with this (`crm.` for an MCP server's tools).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_prefix: Option<String>,
    /// The effect class of the step's tool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub effect: Option<Effect>,
    /// Whether the step declares an `approval`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval: Option<bool>,
}

impl Selector {
    fn matches(&self, plan: &Plan, gov: &Governance, step: &str) -> bool {
        let Some(s) = plan.steps.get(step) else {
            return false;
        };
        let effect = gov.tools.get(&s.action).map_or(Effect::Write, |f| f.effect);
        self.step.as_deref().is_none_or(|n| n == step)
            && self.tool.as_deref().is_none_or(|t| t == s.action)
            && self
                .tool_prefix
                .as_deref()
                .is_none_or(|p| s.action.starts_with(p))
            && self.effect.is_none_or(|e| e == effect)
            && self.approval.is_none_or(|a| a == s.approval.is_some())
    }
}

/// The outcome of one property.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PropertyResult {
    /// The property's name.
    pub name: String,
    /// A policy requires it (a violation is an error); the built-in one otherwise is only
    /// reported.
    pub required: bool,
    /// `Some(true)` holds on every run, `Some(false)` a run violates it, `None` the
    /// exploration stopped at a limit first.
    pub holds: Option<bool>,
    /// The steps `before` selects.
    pub steps: Vec<String>,
    /// For a violation: the steps fired, ending with the uncovered one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub witness: Vec<String>,
    /// The witness as the net's transition names (for replay by the token game).
    #[serde(skip)]
    pub path: Vec<String>,
}

/// The most one run of an acyclic plan can spend, per measure.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostBound {
    /// Tool calls, every attempt counted.
    pub tool_calls: Extreme,
    /// Calls of tools that ask a language model.
    pub llm_calls: Extreme,
    /// Sum of declared costs (`None` when no tool of the plan declares a cost).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cost: Option<Extreme>,
    /// Some transition on the way was over-approximated (a guard or `when`): the bound holds,
    /// but the run reaching it may be impossible.
    pub depends_on_guards: bool,
}

/// A maximum and a run reaching it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Extreme {
    /// The maximum over every run (a whole number is written without a fraction).
    #[serde(serialize_with = "whole")]
    pub max: f64,
    /// Steps of a run that reaches it.
    pub witness: Vec<String>,
    /// The witness as transition names.
    #[serde(skip)]
    pub path: Vec<String>,
}

/// What the governance checks found.
#[derive(Debug, Clone, PartialEq, Default, Serialize)]
pub struct GovernanceReport {
    /// One result per property: the built-in approval coverage first, then the declared ones.
    pub properties: Vec<PropertyResult>,
    /// The cost bound of an acyclic plan, when its runs could all be explored.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bound: Option<CostBound>,
}

/// Whether `f` is a governance finding that refuses a plan (`A009`, `A010`, `G001` errors):
/// front ends refuse such a plan before it runs, unlike a deadlock, which is reported.
pub fn refuses(f: &Finding) -> bool {
    f.is_error()
        && [
            Code::PropertyViolated.as_str(),
            Code::OverBudget.as_str(),
            Code::PolicyDenied.as_str(),
        ]
        .contains(&f.code.as_str())
}

/// Runs the governance checks on `plan`'s net; returns the report and its findings (`A009` for
/// a required property that does not hold, `A010` for a bound over the plan's `limits`).
pub(crate) fn check(
    plan: &Plan,
    net: &PtNet,
    gov: &Governance,
    bounds: &Bounds,
) -> (GovernanceReport, Vec<Finding>) {
    let mut report = GovernanceReport::default();
    let mut findings = Vec::new();
    let mut props: Vec<(Property, bool)> = Vec::new();
    if !gov.properties.iter().any(|p| p.name == APPROVAL_COVERAGE) {
        props.push((Property::approval_coverage(), false));
    }
    props.extend(gov.properties.iter().cloned().map(|p| (p, true)));
    for (p, required) in props {
        let r = always_before(plan, net, gov, &p, required, bounds);
        if required {
            findings.extend(property_finding(net, &p, &r));
        }
        report.properties.push(r);
    }
    if net.kind == NetKind::Acyclic {
        report.bound = cost_bound(plan, net, gov, bounds);
        findings.extend(budget_findings(plan, report.bound.as_ref()));
    }
    if let Some(a) = &gov.acceptance {
        findings.extend(a.findings(plan, &report));
    }
    (report, findings)
}

/// Which transitions are calls of a `before` step, and which are successful `always` steps.
fn always_before(
    plan: &Plan,
    net: &PtNet,
    gov: &Governance,
    p: &Property,
    required: bool,
    bounds: &Bounds,
) -> PropertyResult {
    // A denied call never ran: only firings that called the tool count as `before`.
    let step_of = |t: usize| {
        let tr = &net.transitions[t];
        match tr.role {
            Role::Step | Role::Failure => tr.step.as_deref(),
            _ => None,
        }
    };
    let before = |t: usize| step_of(t).is_some_and(|s| p.before.matches(plan, gov, s));
    let self_covered = |t: usize| step_of(t).is_some_and(|s| p.always.matches(plan, gov, s));
    let covers = |t: usize| net.transitions[t].role == Role::Step && self_covered(t);
    let mut steps: Vec<String> = plan
        .steps
        .keys()
        .filter(|s| p.before.matches(plan, gov, s))
        .cloned()
        .collect();
    steps.sort();
    let mut result = PropertyResult {
        name: p.name.clone(),
        required,
        holds: Some(true),
        steps,
        witness: Vec::new(),
        path: Vec::new(),
    };
    if result.steps.is_empty() {
        return result;
    }
    // Breadth-first over the markings reachable without a covering firing.
    let mut seen: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut markings: Vec<Vec<u32>> = Vec::new();
    let mut parent: Vec<(u32, u32)> = Vec::new();
    let mut queue = VecDeque::new();
    seen.insert(net.initial.clone(), 0);
    markings.push(net.initial.clone());
    parent.push((u32::MAX, u32::MAX));
    queue.push_back(0u32);
    let mut guard = bounds.guard();
    while let Some(s) = queue.pop_front() {
        for t in 0..net.transitions.len() {
            let m = &markings[s as usize];
            if !net.enabled(t, m) {
                continue;
            }
            if before(t) && !self_covered(t) {
                let mut path = vec![t as u32];
                let mut at = s;
                while parent[at as usize].0 != u32::MAX {
                    path.push(parent[at as usize].1);
                    at = parent[at as usize].0;
                }
                path.reverse();
                result.holds = Some(false);
                result.witness = path
                    .iter()
                    .map(|&t| net.witness_label(t as usize))
                    .collect();
                result.path = path
                    .iter()
                    .map(|&t| net.transitions[t as usize].name.clone())
                    .collect();
                return result;
            }
            if covers(t) {
                continue;
            }
            let Some(next) = net.fire(t, m) else { continue };
            if seen.contains_key(&next) {
                continue;
            }
            if guard
                .admit(markings.len(), markings.len() * net.places.len() * 8)
                .is_err()
            {
                result.holds = None;
                return result;
            }
            let id = markings.len() as u32;
            seen.insert(next.clone(), id);
            markings.push(next);
            parent.push((s, t as u32));
            queue.push_back(id);
        }
    }
    result
}

/// A009 for a required property that does not hold or could not be decided.
fn property_finding(net: &PtNet, p: &Property, r: &PropertyResult) -> Option<Finding> {
    let what = if p.name == APPROVAL_COVERAGE {
        "every write is approved first".to_string()
    } else {
        format!(
            "before {}, always {}",
            describe(&p.before),
            describe(&p.always)
        )
    };
    match r.holds {
        Some(true) => None,
        Some(false) => {
            let last = r.witness.last().cloned().unwrap_or_default();
            let guarded = r.path.iter().any(|name| {
                net.transition_index(name)
                    .is_some_and(|t| net.transitions[t].guarded)
            });
            let mut f = Finding::new(
                Code::PropertyViolated,
                Severity::Error,
                weft_core::finding::step_ptr(&last, ""),
                format!(
                    "Property `{}` ({what}) does not hold: step `{last}` can run with nothing matching {} before it; run: {}.",
                    p.name,
                    describe(&p.always),
                    r.witness.join(" → ")
                ),
            )
            .hint(if p.name == APPROVAL_COVERAGE {
                "Give the step an `approval` (or a step before it on every path), or make its tool's effect class honest."
            } else {
                "Add a step matching the required one on every path before it, or change the plan's order."
            })
            .on_guards(guarded);
            f.witness = Some(r.witness.clone());
            Some(f)
        }
        None => Some(
            Finding::new(
                Code::PropertyViolated,
                Severity::Error,
                "",
                format!(
                    "Property `{}` ({what}) could not be decided: the exploration stopped at the state or memory limit.",
                    p.name
                ),
            )
            .hint("Raise `max_states`, or split the plan into smaller plans."),
        ),
    }
}

/// A selector in words, for messages.
fn describe(s: &Selector) -> String {
    let mut parts = Vec::new();
    if let Some(n) = &s.step {
        parts.push(format!("step `{n}`"));
    }
    if let Some(t) = &s.tool {
        parts.push(format!("tool `{t}`"));
    }
    if let Some(p) = &s.tool_prefix {
        parts.push(format!("a tool `{p}…`"));
    }
    if let Some(e) = s.effect {
        parts.push(format!(
            "a {} tool",
            match e {
                Effect::Pure => "pure",
                Effect::Read => "read",
                Effect::Write => "write",
            }
        ));
    }
    match s.approval {
        Some(true) => parts.push("an approval".into()),
        Some(false) => parts.push("no approval".into()),
        None => {}
    }
    if parts.is_empty() {
        "any step".into()
    } else {
        parts.join(" with ")
    }
}

/// The three measures one firing of transition `t` adds.
fn weights(plan: &Plan, net: &PtNet, gov: &Governance, t: usize) -> [f64; 3] {
    let tr = &net.transitions[t];
    let step = match (tr.role, &tr.step) {
        (Role::Step | Role::Failure, Some(s)) => plan.steps.get(s),
        _ => None,
    };
    let Some(step) = step else {
        return [0.0; 3];
    };
    let attempts = 1.0 + step.retry.as_ref().map_or(0.0, |r| f64::from(r.max));
    let facts = gov.tools.get(&step.action);
    [
        attempts,
        if facts.is_some_and(|f| f.llm) {
            attempts
        } else {
            0.0
        },
        attempts * facts.and_then(|f| f.cost).unwrap_or(0.0),
    ]
}

/// The longest run per measure, by a depth-first search memoised on markings (the reachability
/// graph of an acyclic net has no cycles). `None` when a limit stopped it.
fn cost_bound(plan: &Plan, net: &PtNet, gov: &Governance, bounds: &Bounds) -> Option<CostBound> {
    struct Node {
        marking: Vec<u32>,
        best: [f64; 3],
        /// Per measure: the transition and the node it leads to on a longest run.
        next: [(u32, u32); 3],
        done: bool,
    }
    let w: Vec<[f64; 3]> = (0..net.transitions.len())
        .map(|t| weights(plan, net, gov, t))
        .collect();
    let mut ids: HashMap<Vec<u32>, u32> = HashMap::new();
    let mut nodes = vec![Node {
        marking: net.initial.clone(),
        best: [0.0; 3],
        next: [(u32::MAX, u32::MAX); 3],
        done: false,
    }];
    ids.insert(net.initial.clone(), 0);
    let mut stack: Vec<(u32, usize)> = vec![(0, 0)];
    let mut guard = bounds.guard();
    while let Some(&(n, cursor)) = stack.last() {
        let mut t = cursor;
        let mut pushed = false;
        while t < net.transitions.len() {
            let Some(next) = net.fire(t, &nodes[n as usize].marking) else {
                t += 1;
                continue;
            };
            let c = match ids.get(&next) {
                Some(&c) => c,
                None => {
                    if guard
                        .admit(nodes.len(), nodes.len() * net.places.len() * 8)
                        .is_err()
                    {
                        return None;
                    }
                    let c = nodes.len() as u32;
                    ids.insert(next.clone(), c);
                    nodes.push(Node {
                        marking: next,
                        best: [0.0; 3],
                        next: [(u32::MAX, u32::MAX); 3],
                        done: false,
                    });
                    if let Some(top) = stack.last_mut() {
                        top.1 = t;
                    }
                    stack.push((c, 0));
                    pushed = true;
                    break;
                }
            };
            if !nodes[c as usize].done {
                // A marking on the current path again: a cycle, which an acyclic net has not.
                return None;
            }
            let child = nodes[c as usize].best;
            let node = &mut nodes[n as usize];
            for (k, (&wk, &ck)) in w[t].iter().zip(&child).enumerate() {
                let v = wk + ck;
                if node.next[k].0 == u32::MAX || v > node.best[k] {
                    node.best[k] = v;
                    node.next[k] = (t as u32, c);
                }
            }
            t += 1;
        }
        if !pushed {
            nodes[n as usize].done = true;
            stack.pop();
        }
    }
    let extreme = |k: usize| {
        let mut path = Vec::new();
        let mut at = 0u32;
        while let (t, c) = nodes[at as usize].next[k]
            && t != u32::MAX
        {
            path.push(t as usize);
            at = c;
        }
        if nodes[0].best[k] == 0.0 {
            path.clear();
        }
        Extreme {
            max: nodes[0].best[k],
            witness: path.iter().map(|&t| net.witness_label(t)).collect(),
            path: path
                .iter()
                .map(|&t| net.transitions[t].name.clone())
                .collect(),
        }
    };
    let any_cost = plan
        .steps
        .values()
        .any(|s| gov.tools.get(&s.action).is_some_and(|f| f.cost.is_some()));
    let bound = CostBound {
        tool_calls: extreme(0),
        llm_calls: extreme(1),
        cost: any_cost.then(|| extreme(2)),
        depends_on_guards: net.transitions.iter().any(|t| t.guarded),
    };
    Some(bound)
}

/// A010 for each measure whose bound exceeds the plan's `limits`, or a warning when limits are
/// set and no bound could be found.
fn budget_findings(plan: &Plan, bound: Option<&CostBound>) -> Vec<Finding> {
    let Some(limits) = plan.limits.as_ref().filter(|l| {
        l.max_tool_calls.is_some() || l.max_llm_calls.is_some() || l.max_cost.is_some()
    }) else {
        return Vec::new();
    };
    let Some(b) = bound else {
        return vec![
            Finding::new(
                Code::OverBudget,
                Severity::Warning,
                "/limits",
                "The plan's runs could not all be explored (state or memory limit), so whether they stay within `limits` is unknown; the budget is still enforced while it runs.",
            )
            .hint("Raise `max_states`, or split the plan into smaller plans."),
        ];
    };
    let checks = [
        (
            "max_tool_calls",
            "tool calls",
            limits.max_tool_calls.map(|v| v as f64),
            Some(&b.tool_calls),
        ),
        (
            "max_llm_calls",
            "LLM calls",
            limits.max_llm_calls.map(|v| v as f64),
            Some(&b.llm_calls),
        ),
        (
            "max_cost",
            "declared cost",
            limits.max_cost,
            b.cost.as_ref(),
        ),
    ];
    let mut out = Vec::new();
    for (field, what, limit, extreme) in checks {
        let (Some(limit), Some(e)) = (limit, extreme) else {
            continue;
        };
        if e.max > limit {
            let mut f = Finding::new(
                Code::OverBudget,
                Severity::Error,
                format!("/limits/{field}"),
                format!(
                    "A run can spend {} {what}, over `limits.{field}` ({}); run: {}.",
                    number(e.max),
                    number(limit),
                    e.witness.join(" → ")
                ),
            )
            .hint("Raise the limit, lower the steps' `retry.max`, or take calls out of the longest run.")
            .on_guards(b.depends_on_guards);
            f.witness = Some(e.witness.clone());
            out.push(f);
        }
    }
    out
}

/// Serialises a whole number as an integer.
fn whole<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.fract() == 0.0 && (0.0..9.0e15).contains(v) {
        s.serialize_u64(*v as u64)
    } else {
        s.serialize_f64(*v)
    }
}

/// A number without a needless `.0`.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}
