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
//!   transitions are marked `guarded`. A constant condition is folded first (`fold.rs`): a
//!   `when` that is always true is an unconditional emit, one never true is dropped, and a
//!   guard never true gets an input place nothing produces (`<step>.guard=false`), so the
//!   step is dead; the report's notes say so.
//! - Failures the plan handles are variants `step[failed]` consuming the inputs: onto
//!   `<step>.failed` when some step listens on it, else onto `X` for `on_fail: "emit:X"`,
//!   else nothing for `on_fail: "continue"`. `abort` (the default) and `repair` are not
//!   modelled: they stop or pause the instance, which is not a net deadlock. A step whose
//!   `<step>.denied` event some step listens on also gets `step[denied]` onto it (a call a
//!   policy or a person denied, which never ran).
//! - Output places: events declared `kind: output`; when the plan declares none, events
//!   consumed by no step (the runtime's completion rule). Undeclared events that steps mention
//!   become internal places, so invalid plans still compile.
//!
//! # Analyses
//! Breadth-first reachability (`explore`) with a state limit gives deadlocks (A001, shortest
//! witness), dead steps (A002), option to complete (A004) and proper completion (A005);
//! Karp–Miller coverability (`cover`) runs only when reachability could not finish and gives
//! unbounded events (A003). With `AnalysisOptions::governance`, `governance.rs` adds approval
//! coverage and a policy's "before X, always Y" properties (A009, with a shortest witness),
//! the most tool calls, LLM calls and declared cost of a run of an acyclic plan (A010 over the
//! plan's `limits`) and the policy's decision on the whole plan (G001).
//!
//! # Soundness: which notion
//! - Plans: soundness *with respect to their outputs*. A completed marking is a dead marking
//!   with a token on an output place (reactive plans: a dead marking with nothing left on
//!   non-output events); option to complete, proper completion (nothing left on other events
//!   in a completed marking), no dead steps, bounded.
//! - Imported nets: classical workflow-net soundness (van der Aalst), also for cyclic nets,
//!   against the PNML final marking, or `[sink]` when the net is a workflow net (one source,
//!   one sink, every node on a path between them); a net with neither gets A008 (naming the
//!   offending nodes) and `not_applicable`. Proper completion is classical: no reachable
//!   marking covers the final one with more tokens. An unbounded net is not sound (A003).
//! - `PtNet::workflow_net` (`workflow.rs`) is the plan's net as a workflow net for other tools.
//!
//! `sound` (A007, naming the notion) is
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
mod fold;
pub mod governance;
mod net;
pub mod pnml;
pub mod reduce;
mod report;
mod workflow;

pub use analyze::{analyze_net, analyze_plan};
pub use compile::{CompileOptions, MAX_ENUMERATED_WHENS};
pub use governance::{Governance, GovernanceReport, PlanAcceptance, Property, Selector};
pub use net::{NetKind, NotWorkflow, Place, PtNet, Role, Transition};
pub use pnml::PnmlError;
pub use report::{AnalysisOptions, AnalysisReport, DEFAULT_MAX_BYTES, Interrupt, Verdict};
