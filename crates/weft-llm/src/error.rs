//! The crate's one error enum: every way an LLM exchange, a planning run, a repair or a ReAct
//! loop can fail, each with a message a person can act on (STYLE.md §5).

use weft_core::Finding;

/// Why an LLM-layer operation failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Missing or invalid provider configuration (base URL, model, …).
    #[error("LLM configuration: {0}")]
    Config(String),
    /// The HTTP request could not be sent or the connection failed.
    #[error("LLM transport error after {attempts} attempt(s): {message}")]
    Transport {
        /// Attempts made.
        attempts: u32,
        /// What failed.
        message: String,
    },
    /// No response within the configured timeout.
    #[error("LLM request timed out after {attempts} attempt(s) of {timeout_ms} ms each")]
    Timeout {
        /// Attempts made.
        attempts: u32,
        /// Per-attempt timeout.
        timeout_ms: u64,
    },
    /// The server kept answering 429 / 5xx until the retries ran out.
    #[error("LLM server answered HTTP {status} after {attempts} attempt(s): {body}")]
    Unavailable {
        /// Last HTTP status.
        status: u16,
        /// Attempts made.
        attempts: u32,
        /// Start of the last body.
        body: String,
    },
    /// The server refused the request (4xx other than 429).
    #[error("LLM server rejected the request with HTTP {status}: {body}")]
    Rejected {
        /// HTTP status.
        status: u16,
        /// Start of the body.
        body: String,
    },
    /// The model produced a tool call the server itself could not parse (llama.cpp answers
    /// HTTP 500 "Failed to parse tool call arguments"); the critic loop treats it as a bad
    /// candidate rather than an outage.
    #[error("the server could not parse the model's tool call: {0}")]
    MalformedToolCall(String),
    /// The response could not be understood.
    #[error("LLM response could not be decoded: {0}")]
    Decode(String),
    /// A scripted provider ran out of exchanges.
    #[error(
        "scripted LLM: script exhausted after {used} exchange(s); the unexpected request's last message was: {last_message:?}"
    )]
    ScriptExhausted {
        /// Exchanges served.
        used: usize,
        /// The last message of the request nobody expected.
        last_message: String,
    },
    /// A scripted exchange's match did not hold.
    #[error(
        "scripted LLM: exchange {index} expected the last {role} message to contain {expected:?}, got {got:?}"
    )]
    ScriptMismatch {
        /// 0-based exchange index.
        index: usize,
        /// `user`, `system` or `last`.
        role: String,
        /// Substring expected.
        expected: String,
        /// What the message was.
        got: String,
    },
    /// A script or transcript file is malformed.
    #[error("{path}: line {line}: {message}")]
    File {
        /// File.
        path: String,
        /// 1-based line (0 for the whole file).
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A replayed run asked something the recording did not.
    #[error("replay diverged at exchange {index}: {detail}")]
    ReplayDivergence {
        /// 0-based exchange index.
        index: usize,
        /// The first difference.
        detail: String,
    },
    /// A call was refused before it was sent because it would exceed a budget.
    #[error("LLM budget exceeded for {scope}: {detail}")]
    BudgetExceeded {
        /// `tenant acme`, `plan p`, `instance i`.
        scope: String,
        /// What would be exceeded.
        detail: String,
        /// `true` for a rate limit that passes with time (throttled), `false` for a cap.
        throttled: bool,
    },
    /// The critic loop ran out of attempts.
    #[error("planning gave up after {attempts} attempt(s); last findings:\n{}", render_findings(.findings))]
    PlanningFailed {
        /// Attempts made.
        attempts: u32,
        /// Findings on the last candidate.
        findings: Vec<Finding>,
    },
    /// A repaired plan would lose tokens of the current marking.
    #[error(
        "repair refused after {attempts} attempt(s): tokens would be lost on event(s) the revised plan removed: {}",
        .events.join(", ")
    )]
    TokensWouldBeLost {
        /// Attempts made.
        attempts: u32,
        /// Events that hold tokens but are gone from the revised plan.
        events: Vec<String>,
    },
    /// Invalid input to a library call (empty instruction, empty toolset, …).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// Writing a transcript failed.
    #[error("transcript: {0}")]
    Transcript(String),
}

impl Error {
    /// A stable code for the kind of failure.
    pub fn code(&self) -> &'static str {
        match self {
            Error::Config(_) => "llm_config",
            Error::Transport { .. } => "llm_transport",
            Error::Timeout { .. } => "llm_timeout",
            Error::Unavailable { .. } => "llm_unavailable",
            Error::Rejected { .. } => "llm_rejected",
            Error::MalformedToolCall(_) => "llm_malformed_tool_call",
            Error::Decode(_) => "llm_decode",
            Error::ScriptExhausted { .. } => "script_exhausted",
            Error::ScriptMismatch { .. } => "script_mismatch",
            Error::File { .. } => "file",
            Error::ReplayDivergence { .. } => "replay_divergence",
            Error::BudgetExceeded { .. } => "budget_exceeded",
            Error::PlanningFailed { .. } => "planning_failed",
            Error::TokensWouldBeLost { .. } => "tokens_would_be_lost",
            Error::InvalidInput(_) => "invalid_input",
            Error::Transcript(_) => "transcript",
        }
    }
}

/// One line per finding, as in the CRITIC message.
pub fn render_findings(findings: &[Finding]) -> String {
    findings
        .iter()
        .map(render_finding)
        .collect::<Vec<_>>()
        .join("\n")
}

/// One finding as the critic sends it: code, name, pointer, message, then hint and witness.
pub fn render_finding(f: &Finding) -> String {
    let at = if f.pointer.is_empty() {
        "(whole plan)"
    } else {
        f.pointer.as_str()
    };
    let mut s = format!("- {} {} at {}: {}", f.code, f.name, at, f.message);
    if let Some(w) = &f.witness {
        s.push_str(&format!(
            "\n  witness firing sequence: {}",
            if w.is_empty() {
                "(initial marking)".to_string()
            } else {
                w.join(" -> ")
            }
        ));
    }
    if let Some(h) = &f.hint {
        s.push_str(&format!("\n  hint: {h}"));
    }
    s
}

/// Shorthand.
pub type Result<T, E = Error> = std::result::Result<T, E>;
