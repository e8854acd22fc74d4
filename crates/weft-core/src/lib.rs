//! weft-core: the pure heart of weft.
//!
//! Architecture invariant: this crate never does I/O, never spawns tasks and never reads a
//! clock. Everything here is a deterministic function of its inputs, which is what makes
//! plans analysable, executions replayable and the crate property-testable.

pub mod catalog;
pub mod cel_budget;
pub mod cloudevents;
pub mod expr;
pub mod finding;
pub mod inflight;
pub mod instance;
pub mod load;
pub mod marking;
pub mod name;
pub mod net;
pub mod plain;
pub mod plan;
pub mod queue;
pub mod schema;
pub mod token;
pub mod validate;

pub use catalog::{Effect, StaticCatalog, ToolCatalog, ToolSpec};
pub use finding::{Code, Finding, Severity};
pub use instance::{
    ActionError, Args, Completion, Detached, Fired, Instance, Next, RebaseError, Status, Taken,
};
pub use load::{Limits, LoadError, parse_plan};
pub use name::valid_name;
pub use net::{EventId, Net, StepId};
pub use plan::{
    Approval, ApprovalDefault, Consume, Emit, EventDef, EventKind, GraphType, OnFail, Plan,
    PlanLimits, Step,
};
pub use token::{Origin, Token, TokenId};
pub use validate::{Validation, validate};
