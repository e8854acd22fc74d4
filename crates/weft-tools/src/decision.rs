//! A policy's decision on one call, as the engine journals it (`policy.decided`, in the
//! instance's hash chain) and publishes it: the audit trail of governance.

use serde::{Deserialize, Serialize};

/// What a policy decided on one call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PolicyDecision {
    /// `allow`, `deny` or `require_approval`.
    pub decision: String,
    /// The reasons the bundle gave (none for `allow`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}
