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
//! [`Store`] and run the same [`conformance`] suite (feature `conformance`). A store location
//! is a string parsed by [`Location::parse`]; the binary, which links every backend, matches
//! on it and calls the backend's `open`.
//!
//! Architecture invariant: a future returned by [`Store::append`] resolves only after the
//! records are durably committed (fsync'd), so nothing that depends on a record can happen
//! before the record would survive a crash.

pub mod chain;
#[cfg(feature = "conformance")]
pub mod conformance;
mod error;
mod location;
mod store;
mod types;

pub use chain::{ChainError, ChainFault, GENESIS, Hash, VerifyReport};
pub use error::{Error, Result};
pub use location::Location;
pub use store::Store;
pub use types::{
    Appended, EffectRecorded, InstanceRecord, InstanceStatus, Lease, NewRecord, Page, PlanInfo,
    PlanRecord, PlanStatus, Record, Snapshot, Timer, check_records, now_ms,
};
