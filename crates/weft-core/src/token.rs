//! Tokens: the coloured marks that sit on events (places).
//!
//! A token is `{id, event, payload, correlation, origin, created_at}` (DESIGN.md, "Net
//! semantics"). Payloads are shared (`Arc`) because a broadcast event hands the same token to
//! every listening step, and a step usually forwards its input unchanged.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::net::{EventId, StepId};

/// Per-instance token number; increases monotonically, so it also orders tokens by age.
pub type TokenId = u64;

/// Per-instance firing number.
pub type FiringId = u64;

/// Where a token came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Origin {
    /// The instance's input.
    Input,
    /// An event from outside the instance.
    External,
    /// Emitted by a step's firing.
    Step {
        /// The step.
        step: StepId,
        /// The firing.
        firing: FiringId,
    },
    /// An error token for a failed firing.
    Failure {
        /// The step that failed.
        step: StepId,
        /// The firing.
        firing: FiringId,
    },
}

/// A token on an event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Token {
    /// Number, unique within the instance.
    pub id: TokenId,
    /// The event (place) the token is on.
    pub event: EventId,
    /// The colour: the data the token carries.
    pub payload: Arc<Value>,
    /// Joins pair only tokens with the same correlation.
    pub correlation: Arc<str>,
    /// Where it came from.
    pub origin: Origin,
    /// When it was created, in milliseconds since the Unix epoch (supplied by the caller).
    pub created_at: i64,
}
