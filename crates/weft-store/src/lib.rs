//! weft-store: the durable state of weft behind one trait, so the runtime never knows which
//! database it runs on.
//!
//! An instance's state is the fold of its **journal** (DESIGN "Durability"); the journal is
//! hash-chained ([`chain`]) so `weft journal verify` can prove that no record was altered,
//! removed or reordered. Beside the journal, a [`Store`] keeps snapshots (to replay only a
//! tail and to compact never-ending instances), the plan store, instance records (for listing
//! and for recovery), pending timers, idempotency records of effects and leases (which `weft`
//! process owns an instance).
//!
//! Backends (`weft-store-sqlite`, the embedded default, and `weft-store-postgres`) implement
//! [`Store`] and run the same `conformance` suite (feature `conformance`). A store is named by
//! a URL whose scheme picks the backend from the assembly point's table of openers
//! (`weft-node`); each backend parses the rest of its own URL.
//!
//! ## How the runtime is meant to use it
//! - **Journal**: one `append` per instance-loop turn with every record that turn produced
//!   (`instance.started` with plan version and input, `token.added`, `step.fired` with its
//!   binding, `action.dispatched` with its idempotency key, `action.completed`/`failed`,
//!   `tokens.emitted`, `timer.set`/`fired`, `repair.applied`, `instance.stopped`); the kinds
//!   and bodies are the runtime's, the store only orders, chains and keeps them. Dispatch an
//!   action only after the append that records `action.dispatched` resolved.
//! - **Recovery**: page through [`Store::non_terminal_instances`]; for each, take
//!   [`Store::latest_snapshot`], `read` from `snapshot.seq + 1` and fold; an
//!   `action.dispatched` without a result is re-dispatched with the same key (or gets
//!   `outcome_unknown`); [`Store::get_effect`] tells what an idempotent tool already did.
//!   With several processes, take [`Store::acquire_lease`] first and keep renewing it, and
//!   write with [`Store::append_fenced`] and the lease's [`Fence`]: once another process
//!   has taken the lease over, the old owner's appends fail with `lease_lost`.
//! - **Timers**: `put_timer` in the same turn as the `timer.set` record; a poller calls
//!   [`Store::due_timers`], fires, journals `timer.fired`, then `delete_timer`.
//! - **Checkpoints / time travel**: a checkpoint is a (seq, hash) of the chain
//!   (`cp-<hash>`); `read` up to any seq and fold to inspect a past marking.
//! - **Compaction** (reactive instances): `put_snapshot` at the head, then
//!   `truncate_before(snapshot.seq + 1)`; `verify` then starts from that anchor.
//!
//! Architecture invariant: a future returned by [`Store::append`] resolves only after the
//! records are durably committed (fsync'd), so nothing that depends on a record can happen
//! before the record would survive a crash.

pub mod chain;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod store;
mod types;

pub use chain::{
    ChainError, ChainFault, ChainKey, Chaining, GENESIS, Hash, KEY_ID_META, VerifyReport, Witness,
};
pub use error::{Error, Result};

/// The embedded store's file when no location is configured, relative to the working
/// directory.
pub const DEFAULT_SQLITE_PATH: &str = ".weft/weft.db";
pub use store::{MAX_COUNT_KEY, StatusChange, Store, check_count_rows};
pub use types::{
    Appended, CountRow, Counts, EffectRecorded, Fence, InstanceRecord, InstanceStatus, Lease,
    LeaseTerms, NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Snapshot, Timer,
    ToolRecord, check_records, now_ms,
};
