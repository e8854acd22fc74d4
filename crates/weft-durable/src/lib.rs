//! weft-durable: durable instances. The runtime's [`weft_runtime::Journal`] hook over a
//! [`weft_store::Store`] ([`StoreJournal`]), crash recovery, checkpoints, time travel
//! ([`inspect`]), the determinism check ([`replay`]), chain verification ([`verify`]),
//! compaction of reactive instances, and the W4 benchmark ([`bench::run_w4`]).
//!
//! ## Durability rule (W4 contract)
//! A record is durable before anything that depends on it is dispatched or reported:
//! [`StoreJournal::record`](weft_runtime::Journal::record) only buffers (it is called
//! synchronously inside the instance loop), and every tool of a durable engine is wrapped in
//! a [`Gate`] that records `action.dispatched` and waits for the instance's buffered records
//! to be committed (fsync'd; concurrent instances share the store's group commit) before
//! the real tool runs. [`Durable::wait`] waits for the final records before it returns the
//! outcome. So a step's outcome is durable before the next step starts, and in-memory
//! engines (no durable journal, no gates) keep their hot path untouched.
//!
//! ## Recovery
//! [`Durable::recover`] pages through the store's non-terminal instances, folds each from
//! its latest snapshot and journal tail with the pure core, and hands it to
//! `Engine::restore`: an in-flight action whose `action.dispatched` record is durable is
//! dispatched again with the same idempotency key if its tool is idempotent, otherwise it
//! completes with the error `outcome_unknown`; one whose dispatch was never durable cannot
//! have run and is dispatched again.
//!
//! ## Compaction (bounded storage for reactive plans)
//! For reactive instances the journal keeps a folded copy of the state beside the buffer;
//! every [`DurableConfig::snapshot_every`] records (default 1,000) the flush that makes
//! them durable also stores a snapshot at the new head and `truncate_before(head + 1)`. The
//! kept journal is then at most `snapshot_every` records plus one snapshot, whose size is
//! the marking's: storage is proportional to the marking, not to the history. Acyclic
//! instances are never compacted (their journal is their audit trail and ends).

pub mod bench;
mod durable;
mod error;
mod history;
mod journal;
mod record;

pub use durable::{Durable, DurableConfig, RecoveryReport};
pub use error::DurableError;
pub use history::{
    InFlightAction, InspectEvent, Inspection, PlanCache, ReplayReport, checkpoint, checkpoint_seq,
    inspect, replay, verify,
};
pub use journal::{Gate, JournalStats, StoreJournal};
pub use record::{Entry, Folded, RECORD_VERSION};
