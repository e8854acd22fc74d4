//! `planner.*` telemetry (seed 001): the events every planner run emits, with correlation
//! ids, through a small [`TelemetrySink`] that the runtime's bus will implement later.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use crate::ids::{Correlation, now_ms};

/// The kinds of planner telemetry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum TelemetryKind {
    /// `planner.started`
    #[serde(rename = "planner.started")]
    Started,
    /// `planner.step.started`
    #[serde(rename = "planner.step.started")]
    StepStarted,
    /// `planner.step.completed`
    #[serde(rename = "planner.step.completed")]
    StepCompleted,
    /// `planner.completed`
    #[serde(rename = "planner.completed")]
    Completed,
    /// `planner.failed`
    #[serde(rename = "planner.failed")]
    Failed,
    /// `planner.throttled`: refused by a rate limit that passes with time.
    #[serde(rename = "planner.throttled")]
    Throttled,
    /// `planner.rejected`: refused by a token or call cap.
    #[serde(rename = "planner.rejected")]
    Rejected,
}

impl TelemetryKind {
    /// The event type string.
    pub fn as_str(self) -> &'static str {
        match self {
            TelemetryKind::Started => "planner.started",
            TelemetryKind::StepStarted => "planner.step.started",
            TelemetryKind::StepCompleted => "planner.step.completed",
            TelemetryKind::Completed => "planner.completed",
            TelemetryKind::Failed => "planner.failed",
            TelemetryKind::Throttled => "planner.throttled",
            TelemetryKind::Rejected => "planner.rejected",
        }
    }
}

/// One telemetry event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TelemetryEvent {
    /// Event type.
    #[serde(rename = "type")]
    pub kind: TelemetryKind,
    /// Ids.
    pub correlation: Correlation,
    /// Which planner (`llm.plan`, `llm.repair`, `react`, or a lifecycle planner's name).
    pub planner: String,
    /// Step id, for step events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub step: Option<String>,
    /// Iteration / attempt number (1-based).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iteration: Option<u32>,
    /// Tokens consumed so far by the run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
    /// Outcome or reason, in words.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
    /// Unix ms.
    pub at_ms: i64,
}

impl TelemetryEvent {
    /// A new event.
    pub fn new(kind: TelemetryKind, correlation: &Correlation, planner: &str) -> Self {
        TelemetryEvent {
            kind,
            correlation: correlation.clone(),
            planner: planner.to_string(),
            step: None,
            iteration: None,
            tokens: None,
            detail: None,
            at_ms: now_ms(),
        }
    }
    /// With a step id.
    pub fn step(mut self, step: impl Into<String>) -> Self {
        self.step = Some(step.into());
        self
    }
    /// With an iteration.
    pub fn iteration(mut self, i: u32) -> Self {
        self.iteration = Some(i);
        self
    }
    /// With tokens.
    pub fn tokens(mut self, t: u64) -> Self {
        self.tokens = Some(t);
        self
    }
    /// With a detail.
    pub fn detail(mut self, d: impl Into<String>) -> Self {
        self.detail = Some(d.into());
        self
    }
}

/// Where telemetry goes.
pub trait TelemetrySink: Send + Sync {
    /// Emits one event; must not block for long.
    fn emit(&self, event: TelemetryEvent);
}

/// Logs events with `tracing` and nothing else.
#[derive(Debug, Default)]
pub struct TracingTelemetry;

impl TelemetrySink for TracingTelemetry {
    fn emit(&self, e: TelemetryEvent) {
        tracing::info!(
            event = e.kind.as_str(),
            weft.correlation = %e.correlation.correlation_id,
            weft.tenant = %e.correlation.tenant,
            weft.planner = %e.planner,
            step = e.step.as_deref().unwrap_or(""),
            detail = e.detail.as_deref().unwrap_or(""),
            "Planner telemetry"
        );
    }
}

/// Keeps events in memory (tests, health reports).
#[derive(Debug, Default)]
pub struct MemoryTelemetry {
    events: Mutex<Vec<TelemetryEvent>>,
}

impl MemoryTelemetry {
    /// Empty.
    pub fn new() -> Self {
        Self::default()
    }
    /// A copy of the events so far.
    pub fn events(&self) -> Vec<TelemetryEvent> {
        self.events.lock().map(|v| v.clone()).unwrap_or_default()
    }
    /// The event types so far, in order.
    pub fn kinds(&self) -> Vec<&'static str> {
        self.events().iter().map(|e| e.kind.as_str()).collect()
    }
}

impl TelemetrySink for MemoryTelemetry {
    fn emit(&self, event: TelemetryEvent) {
        if let Ok(mut v) = self.events.lock() {
            v.push(event);
        }
    }
}
