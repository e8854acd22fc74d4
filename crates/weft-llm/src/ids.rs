//! Correlation ids: every exchange, telemetry event and transcript entry of one planning run,
//! repair or ReAct loop carries the same ids, so logs, transcripts and budgets line up.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Milliseconds since the Unix epoch (0 if the clock is before it).
pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// A process-unique id with a prefix: `plan-18f3a…-7`.
pub fn new_id(prefix: &str) -> String {
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{prefix}-{:x}-{n}", now_ms())
}

/// Who an LLM call is for. Also the budget scope.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Correlation {
    /// Id shared by every exchange and event of one operation (a planning run, a repair, …).
    pub correlation_id: String,
    /// Tenant (budgets per tenant).
    pub tenant: String,
    /// Plan name, when known (budgets per plan).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Instance id, when running inside one (budgets per instance).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
}

impl Correlation {
    /// A fresh correlation for `tenant`.
    pub fn new(tenant: impl Into<String>) -> Self {
        Correlation {
            correlation_id: new_id("corr"),
            tenant: tenant.into(),
            plan: None,
            instance: None,
        }
    }
    /// With a plan name.
    pub fn with_plan(mut self, plan: impl Into<String>) -> Self {
        self.plan = Some(plan.into());
        self
    }
    /// With an instance id.
    pub fn with_instance(mut self, instance: impl Into<String>) -> Self {
        self.instance = Some(instance.into());
        self
    }
}
