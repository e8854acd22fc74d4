//! weft-core: the pure heart of weft.
//!
//! Architecture invariant: this crate never does I/O, never spawns tasks and never reads a
//! clock. Everything here is a deterministic function of its inputs, which is what makes
//! plans analysable, executions replayable and the crate property-testable.

pub mod expr;
pub mod finding;
pub mod load;
pub mod plan;

pub use finding::{Code, Finding, Severity};
pub use load::{Limits, LoadError, parse_plan};
pub use plan::{Consume, Emit, EventDef, EventKind, GraphType, OnFail, Plan, Step};
