//! weft-runtime: the execution engine.
//!
//! It runs plan instances on top of the pure firing rule in `weft_core::Instance`: each
//! instance has one sequential loop that owns its marking (`cell`), tools are called
//! through the `weft_tools::Tool` trait (`dispatch`), events come in through [`Engine::ingest`]
//! and lifecycle events go out on a [`bus::Bus`]. Storage, bus and tools are reached only
//! through traits; every instance input passes a [`journal_hook::Journal`] hook so the durability
//! layer can persist and replay it.
//!
//! Architecture invariant: the runtime never changes a marking except by applying a
//! [`journal_hook::Input`] to a `weft_core::Instance`; all time comes from [`clock::Clock`].

mod approvals;
mod budget;
pub mod bus;
mod cell;
pub mod clock;
mod dispatch;
mod engine;
mod error;
mod ids;
pub mod journal_hook;
mod outcome;
mod plans;
pub mod quota;
mod recover;
mod repair_loop;
mod routes;
mod services;
mod timers;

pub use approvals::ApprovalView;
pub use bus::{Bus, CloudEvent, Delivery, Filter, InProcessBus, Subscription};
pub use clock::{Clock, ManualClock, SystemClock};
pub use engine::{
    BatchEvent, CronNext, Engine, EngineOptions, InstanceHandle, StartOptions, WeakEngine,
};
pub use error::Error;
pub use ids::IdNames;
pub use journal_hook::{
    Decided, Extras, Input, Journal, MemoryJournal, PendingApproval, PendingTimer, Repair, Usage,
};
pub use outcome::{Awaits, InFlightInfo, Outcome, ResultTokens, StateSnapshot, TraceEntry};
pub use plans::CompiledPlan;
pub use recover::Redispatch;
pub use repair_loop::{RepairContext, RepairError, Repairer};
pub use services::ChildPlans;
