//! The crate's error type: everything the engine's public API can refuse, with stable codes
//! so front ends (CLI, HTTP) can map them without parsing messages.

use weft_core::Finding;

/// Why an engine call was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plan has validation errors.
    #[error("plan `{plan}` is invalid: {}", summary(.findings))]
    InvalidPlan {
        /// Plan name.
        plan: String,
        /// The error findings.
        findings: Vec<Finding>,
    },
    /// A plan document could not be loaded.
    #[error("plan could not be loaded: {0}")]
    Load(String),
    /// No plan registered under this name.
    #[error("no plan named `{0}` is registered")]
    UnknownPlan(String),
    /// No live instance with this id (for this tenant).
    #[error("no live instance `{0}`")]
    UnknownInstance(String),
    /// The instance's plan does not declare this event as `kind: input`.
    #[error(
        "instance `{instance}` does not accept event `{event}` (not an input event of plan `{plan}`)"
    )]
    EventNotAccepted {
        /// Instance.
        instance: String,
        /// Event name.
        event: String,
        /// Plan name.
        plan: String,
    },
    /// A payload from outside does not match its event's schema: the instance's input at
    /// its start (`input_invalid`) or an event sent to instances (`payload_invalid`). Nothing
    /// was started or queued.
    #[error(
        "{} for event `{event}` of plan `{plan}` does not match the event's schema: {message} (at `{at}`)",
        if *.start { "the input" } else { "the payload" }
    )]
    PayloadInvalid {
        /// Plan name.
        plan: String,
        /// Event name.
        event: String,
        /// JSON pointer into the payload where it does not match (empty: the whole payload).
        at: String,
        /// Why it does not match.
        message: String,
        /// Whether it was the instance's input (else an event from outside).
        start: bool,
    },
    /// The instance has ended and takes no more input.
    #[error("instance `{instance}` is {status} and takes no more input")]
    Ended {
        /// Instance.
        instance: String,
        /// Its status name.
        status: &'static str,
    },
    /// Timers cannot be armed (no tokio runtime to run the timer service on).
    #[error("timers are unavailable: {0}")]
    TimersUnavailable(String),
    /// A repair was asked for but the engine has no repairer.
    #[error("no repairer is configured (give the engine one, e.g. an LLM repairer)")]
    NoRepairer,
    /// The instance cannot be repaired in its state.
    #[error("instance `{instance}` is {status} and cannot be repaired")]
    NotRepairable {
        /// Instance.
        instance: String,
        /// Its status name.
        status: &'static str,
    },
    /// No firing of the step waits for an approval.
    #[error("no firing of step `{step}` of instance `{instance}` waits for an approval")]
    NoApproval {
        /// Instance.
        instance: String,
        /// The step asked for.
        step: String,
    },
    /// The approval was decided before.
    #[error(
        "the approval of step `{step}` of instance `{instance}` was already {} by {principal}",
        if *.granted { "granted" } else { "denied" }
    )]
    AlreadyDecided {
        /// Instance.
        instance: String,
        /// Step.
        step: String,
        /// The earlier decision.
        granted: bool,
        /// Who made it.
        principal: String,
    },
}

impl Error {
    /// Stable code for machines.
    pub fn code(&self) -> &'static str {
        match self {
            Error::InvalidPlan { .. } => "invalid_plan",
            Error::Load(_) => "plan_load",
            Error::UnknownPlan(_) => "unknown_plan",
            Error::UnknownInstance(_) => "unknown_instance",
            Error::EventNotAccepted { .. } => "event_not_accepted",
            Error::PayloadInvalid { start: true, .. } => "input_invalid",
            Error::PayloadInvalid { start: false, .. } => "payload_invalid",
            Error::Ended { .. } => "instance_ended",
            Error::TimersUnavailable(_) => "timer_unavailable",
            Error::NoRepairer => "no_repairer",
            Error::NotRepairable { .. } => "not_repairable",
            Error::NoApproval { .. } => "no_approval",
            Error::AlreadyDecided { .. } => "already_decided",
        }
    }
}

fn summary(findings: &[Finding]) -> String {
    findings
        .iter()
        .take(3)
        .map(|f| format!("{} {} at `{}`: {}", f.code, f.name, f.pointer, f.message))
        .collect::<Vec<_>>()
        .join("; ")
}
