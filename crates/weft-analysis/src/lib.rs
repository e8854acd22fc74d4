//! weft-analysis: what weft proves about a plan's behaviour before it runs.
//!
//! Architecture invariant: pure. No I/O beyond the strings callers pass in, no async, no
//! clocks; every function is deterministic, so findings are reproducible and snapshot-tested.
//!
//! # Compiling a plan to a P/T net
//! - An event with `consume: exclusive`, or with at most one consuming step, is one place.
//!   A broadcast event (the default) with k ≥ 2 consuming steps is k places, one copy per
//!   consumer (`event[step]`); emitting onto the event puts one token on every copy.
//! - Initial marking: one token on each initial event (`initial`, or `start`). Every other
//!   `kind: input` event gets an environment transition `env:<event>` guarded by a budget
//!   place holding `env_tokens` tokens, so plans with external input stay finite; the report's
//!   `notes` say so.
//! - A step is a transition consuming one token from each `on` place (listed twice counts
//!   once). Unconditional emits put tokens (an event emitted twice gets two). Emits with `when`
//!   are over-approximated: one variant per subset of conditional emits (`step[+a,-b]`), up to
//!   6 conditional emits (64 variants); beyond that each conditional emit becomes a pending
//!   place that a `step/emit:e` or `step/skip:e` transition resolves later (a further
//!   over-approximation, noted in the report). A `guard` is assumed "may hold". Such
//!   transitions are marked `guarded`.
//! - Failures the plan handles are variants `step[failed]` consuming the inputs: onto
//!   `<step>.failed` when some step listens on it, else onto `X` for `on_fail: "emit:X"`,
//!   else nothing for `on_fail: "continue"`. `abort` (the default) and `repair` are not
//!   modelled: they stop or pause the instance, which is not a net deadlock.
//! - Output places: events declared `kind: output`, or consumed by no step. Undeclared events
//!   that steps mention become internal places, so invalid plans still compile.
//!
//! # Analyses
//! Breadth-first reachability (`explore`) with a state limit gives deadlocks (A001, shortest
//! witness), dead steps (A002), option to complete (A004) and proper completion (A005);
//! Karp–Miller coverability (`cover`) runs only when reachability could not finish and gives
//! unbounded events (A003). A final marking is a dead marking with a token on an output place
//! (reactive plans: a dead marking with nothing left on non-output events). `sound` (A007) is
//! only reported after a complete exploration; a partial one gives A006 and `unknown`. When the
//! full exploration hits the state limit on a net without cycles, a partial-order reduced one
//! (stubborn sets, `reduce`) replaces it: it keeps every reachable dead marking, so the same
//! findings come out of far fewer markings (a 20-way fan-out: 23 instead of over a million).

mod analyze;
mod checks;
mod compile;
pub mod cover;
mod describe;
pub mod explore;
mod explore_safe;
pub mod export;
mod net;
pub mod pnml;
pub mod reduce;
mod report;

pub use analyze::{analyze_net, analyze_plan};
pub use compile::{CompileOptions, MAX_ENUMERATED_WHENS};
pub use net::{NetKind, Place, PtNet, Role, Transition};
pub use pnml::PnmlError;
pub use report::{AnalysisOptions, AnalysisReport, Verdict};
