//! Findings: what validation and analysis say about a plan.
//!
//! Every finding has a stable code, a severity, a JSON pointer into the plan, a message and a
//! hint. The LLM critic loop sends them back to the model verbatim, and `--json` prints them
//! for machines, so the codes and field names are part of weft's public contract.

use serde::{Deserialize, Serialize};

/// How serious a finding is. Only errors make a plan invalid.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Informational: worth knowing, nothing to fix.
    Info,
    /// Probably a mistake, but the plan can run.
    Warning,
    /// The plan must not run as it is.
    Error,
}

impl Severity {
    /// Lower-case name.
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Info => "info",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

/// The stable codes of every finding weft can report. `V…` come from validation, `A…` from
/// behavioural analysis, `G…` from the deployment's governance. Never renumber; retire codes instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Code {
    /// V001: a step, `initial` or `on_fail` names an event that is not declared.
    UnknownEvent,
    /// V002: a step's action is not a registered tool.
    UnknownTool,
    /// V003: literal args do not match the tool's JSON schema.
    ArgsMismatch,
    /// V004: an acyclic plan contains a cycle.
    Cycle,
    /// V005: a step can never be enabled (an input is never produced).
    NeverEnabled,
    /// V006: an event is emitted by no step and is not an input or initial event.
    NeverEmitted,
    /// V007: an event is consumed by no step and is not declared `output`.
    NeverConsumed,
    /// V008: a CEL expression does not compile.
    InvalidExpression,
    /// V009: an event or step name is empty, too long or has control characters.
    InvalidName,
    /// V010: a step has no input events.
    NoInputs,
    /// V011: the plan has no start: no `initial` list and no `start` event.
    NoStart,
    /// V012: a guard or `when` is a constant that is not a boolean.
    NotBoolean,
    /// V013: a step lists the same input event twice.
    DuplicateInput,
    /// V014: an event's payload schema is not a valid JSON Schema.
    InvalidSchema,
    /// V015: a retry or timeout policy is out of range.
    InvalidPolicy,
    /// V016: a plan with no steps.
    EmptyPlan,
    /// V017: an expression refers to a name that is not one of the step's inputs.
    UnknownReference,
    /// V020: a CEL expression exceeded its evaluation budget while being checked.
    ExprBudget,
    /// V021: an emit's literal data does not match its event's payload schema.
    DataMismatch,
    /// A001: a reachable marking in which nothing can fire and the plan has not completed.
    Deadlock,
    /// A002: a step that no reachable marking enables.
    DeadStep,
    /// A003: an event that can accumulate unboundedly many tokens.
    Unbounded,
    /// A004: from some reachable marking no completion is reachable (option to complete).
    NoOptionToComplete,
    /// A005: the plan can complete with tokens left on non-output events.
    ImproperCompletion,
    /// A006: exploration stopped at the state limit; verdicts are partial.
    StateLimit,
    /// A007: the plan is a sound workflow net.
    Sound,
    /// A008: an imported net is not a workflow net and has no final marking.
    NotWorkflowNet,
    /// A009: a property a policy requires ("before X, always Y") does not hold on some run.
    PropertyViolated,
    /// A010: some run of an acyclic plan can spend more than the plan's `limits` allow.
    OverBudget,
    /// G001: the deployment's policy refuses the plan.
    PolicyDenied,
}

impl Code {
    /// The stable short code, e.g. `V001`.
    pub fn as_str(self) -> &'static str {
        match self {
            Code::UnknownEvent => "V001",
            Code::UnknownTool => "V002",
            Code::ArgsMismatch => "V003",
            Code::Cycle => "V004",
            Code::NeverEnabled => "V005",
            Code::NeverEmitted => "V006",
            Code::NeverConsumed => "V007",
            Code::InvalidExpression => "V008",
            Code::InvalidName => "V009",
            Code::NoInputs => "V010",
            Code::NoStart => "V011",
            Code::NotBoolean => "V012",
            Code::DuplicateInput => "V013",
            Code::InvalidSchema => "V014",
            Code::InvalidPolicy => "V015",
            Code::EmptyPlan => "V016",
            Code::UnknownReference => "V017",
            Code::ExprBudget => "V020",
            Code::DataMismatch => "V021",
            Code::Deadlock => "A001",
            Code::DeadStep => "A002",
            Code::Unbounded => "A003",
            Code::NoOptionToComplete => "A004",
            Code::ImproperCompletion => "A005",
            Code::StateLimit => "A006",
            Code::Sound => "A007",
            Code::NotWorkflowNet => "A008",
            Code::PropertyViolated => "A009",
            Code::OverBudget => "A010",
            Code::PolicyDenied => "G001",
        }
    }

    /// A kebab-case name that reads better than the number.
    pub fn name(self) -> &'static str {
        match self {
            Code::UnknownEvent => "unknown-event",
            Code::UnknownTool => "unknown-tool",
            Code::ArgsMismatch => "args-mismatch",
            Code::Cycle => "cycle",
            Code::NeverEnabled => "never-enabled",
            Code::NeverEmitted => "never-emitted",
            Code::NeverConsumed => "never-consumed",
            Code::InvalidExpression => "invalid-expression",
            Code::InvalidName => "invalid-name",
            Code::NoInputs => "no-inputs",
            Code::NoStart => "no-start",
            Code::NotBoolean => "not-boolean",
            Code::DuplicateInput => "duplicate-input",
            Code::InvalidSchema => "invalid-schema",
            Code::InvalidPolicy => "invalid-policy",
            Code::EmptyPlan => "empty-plan",
            Code::UnknownReference => "unknown-reference",
            Code::ExprBudget => "expression-budget",
            Code::DataMismatch => "data-mismatch",
            Code::Deadlock => "deadlock",
            Code::DeadStep => "dead-step",
            Code::Unbounded => "unbounded",
            Code::NoOptionToComplete => "no-option-to-complete",
            Code::ImproperCompletion => "improper-completion",
            Code::StateLimit => "state-limit",
            Code::Sound => "sound",
            Code::NotWorkflowNet => "not-workflow-net",
            Code::PropertyViolated => "property-violated",
            Code::OverBudget => "over-budget",
            Code::PolicyDenied => "policy-denied",
        }
    }
}

/// One thing validation or analysis found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Finding {
    /// Stable code, e.g. `V001`.
    pub code: String,
    /// Kebab-case name of the code, e.g. `unknown-event`.
    pub name: String,
    /// How serious it is.
    pub severity: Severity,
    /// RFC 6901 pointer into the plan (`""` for the whole plan).
    pub pointer: String,
    /// What is wrong, naming the events and steps involved.
    pub message: String,
    /// How to fix it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
    /// For deadlocks and similar: the steps fired from the initial marking to reach the problem.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub witness: Option<Vec<String>>,
    /// True when the verdict relies on guards or `when` conditions being over-approximated
    /// (treated as "may or may not hold").
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub depends_on_guards: bool,
}

impl Finding {
    /// A new finding with no hint or witness.
    pub fn new(
        code: Code,
        severity: Severity,
        pointer: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Finding {
            code: code.as_str().to_string(),
            name: code.name().to_string(),
            severity,
            pointer: pointer.into(),
            message: message.into(),
            hint: None,
            witness: None,
            depends_on_guards: false,
        }
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    /// Adds a witness firing sequence.
    pub fn witness(mut self, steps: Vec<String>) -> Self {
        self.witness = Some(steps);
        self
    }

    /// Marks the finding as depending on over-approximated guards.
    pub fn on_guards(mut self, depends: bool) -> Self {
        self.depends_on_guards = depends;
        self
    }

    /// Is this an error?
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }
}

/// JSON pointer to a step, or to a field of it.
pub fn step_ptr(step: &str, field: &str) -> String {
    let s = crate::load::escape_pointer(step);
    if field.is_empty() {
        format!("/steps/{s}")
    } else {
        format!("/steps/{s}/{field}")
    }
}

/// JSON pointer to an event.
pub fn event_ptr(event: &str) -> String {
    format!("/events/{}", crate::load::escape_pointer(event))
}
