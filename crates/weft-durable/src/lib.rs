//! weft-durable: durable instances. The runtime's [`weft_runtime::Journal`] hook over a
//! [`weft_store::Store`] ([`StoreJournal`]), crash recovery, checkpoints, time travel
//! ([`inspect`]), the determinism check ([`replay`]), chain verification ([`verify`]) and
//! compaction of reactive instances. It depends on the `Store` trait only, never on a
//! backend: the assembly point (`weft-node`) opens the store and hands it over. The W4
//! benchmark and the kill -9 crash test that exercise it live in `weft-bench`.
//!
//! ## Durability rule (W4 contract)
//! A record is durable before anything that depends on it is dispatched or reported.
//! [`StoreJournal`]'s `record` only buffers (it is called synchronously inside the instance
//! loop, so it must not block on a disk), and every tool of a durable engine is wrapped in a
//! [`Gate`] (the link [`Durable`] installs at `weft_tools::Stage::Durability` of the
//! tool-call chain): it records `action.dispatched` (non-idempotent tools only, see below)
//! and waits until everything the instance has recorded so far is committed before the real
//! tool runs.
//! Waiting gates hand their instance's buffer to the journal's committers, which write every
//! waiting instance at once with [`weft_store::Store::write_batch`] (SQLite: one writer job,
//! one transaction, one fsync for all of them; PostgreSQL: three transactions per batch).
//! [`Durable::wait`] waits for the final records before it returns an outcome. So a step's
//! outcome is durable before the next step starts and the result before the run returns;
//! an engine without a durable journal has no gates and keeps its in-memory hot path.
//! When an instance has nothing left in flight (it waits for an event or a timer, or it
//! ended) the runtime calls `Journal::idle` and its lane is written without anyone
//! waiting, so a waiting instance's state is durable although no dispatch follows.
//! Lifecycle events go through a [`GatedBus`]: an event about an instance is held until
//! every record the instance had when the event was published is durable (and asks for
//! that write at once), so no subscriber sees `plan.step.finished` or `plan.completed`
//! for a step or result that a crash could still undo.
//!
//! ## When the store fails
//! A batch the store refuses (unreachable, `disk full`, …) counts as not written: its
//! records go back to the front of their lanes and the gates waiting on them keep waiting,
//! so nothing is dispatched past an unjournaled record. Each affected instance is paused
//! with a reason starting `store_unavailable:` (with the store's message); the lanes are
//! written again after a backoff (50 ms doubling to 5 s, for as long as it takes), and the
//! first write that succeeds resumes the instance. Before a retry the lane is reconciled
//! with the store (a backend whose batch parts commit separately, PostgreSQL, may have
//! written some of it): an existing instance record is not created again, and records the
//! head already holds count as durable instead of being appended twice. A retry costs one
//! copy of the batch's records, kept while the write is in flight. If the process dies
//! while an instance is paused that way, recovery resumes it (the store works again).
//!
//! ## Leases (several `weft` processes on one store)
//! Every engine has a lease owner id ([`DurableConfig::owner`], default `$WEFT_OWNER` or
//! `weft-<host>/<pid>`, one per process) and writes only instances it leases. A lease whose
//! owner is a default id of this host with no live process (`/proc/<pid>` gone: `weft`
//! was killed and restarted here) is taken over at once; any other waits for its expiry. An instance it starts
//! is leased (epoch 1) by the same write that creates it; [`Durable::recover`] acquires the
//! leases of what it restores in bulk and skips instances another live owner holds
//! ([`RecoveryReport::leased_elsewhere`]); [`Durable::restore`] / `resume` refuse them
//! (`leased_elsewhere`). Every batch goes through `Store::write_batch_fenced`: each
//! instance's fence (owner + epoch) is checked inside the batch's transaction, so the
//! embedded path pays one indexed read per instance per batch, not a round trip. A
//! background task renews the held leases every [`DurableConfig::lease_renew_ms`] (one bulk
//! write per 1,000 instances). When another owner took an instance over (its lease had
//! expired: this process hung or was cut off for longer than
//! [`DurableConfig::lease_ttl_ms`]), the refused write or the failed renewal stops the
//! instance here for good: its buffered records, held events and timer-table writes are
//! dropped, waiting gates fail, it is paused locally with `lease_lost: …` and logged, and
//! nothing of it is written again (status updates are fenced by owner too).
//!
//! `action.dispatched` is journaled only for non-idempotent tools (unless
//! [`DurableConfig::record_idempotent_dispatch`]): recovery dispatches an in-flight
//! idempotent action again whether or not its dispatch was recorded, so for them the row
//! would only cost journal bytes on every step.
//!
//! ## Recovery
//! [`Durable::recover`] pages through the store's non-terminal instances, loads snapshot +
//! journal tail for 500 at a time (`Store::load_many`), folds each with the pure core and
//! hands it to `Engine::restore`: an in-flight action whose `action.dispatched` record is
//! durable is dispatched again with the same idempotency key if its tool is idempotent,
//! otherwise it completes with the error `outcome_unknown`; one whose dispatch was never
//! durable cannot have run and is dispatched again. Instances whose journal shows them
//! finished only get their status fixed.
//!
//! ## Timers and the instance context
//! `timer.after` / `at` / `cron` and `context.put` are journaled by the runtime's tool
//! services while the tool runs (`timer.set`, `context.put`), so before the step's
//! outcome; the fold (`weft_runtime::journal_hook::fold`, the one rule) keeps the pending
//! timers and the context in [`Folded::extras`]. Recovery hands them to
//! `Engine::restore_with`: the context comes back and every pending timer is re-armed
//! under its id at its due time; one that came due while weft was down fires at once and
//! its `timer.fired` record carries `late_ms`. A cron timer's next occurrence travels in
//! its `timer.fired` record (`next_due_ms`), so the re-arm is as durable as the firing. A
//! `timer.*` step dispatched again after a restart finds the timer its first dispatch set
//! (by idempotency key) instead of setting a second one. The store's timer table
//! (`put_timer` / `delete_timer`) mirrors the pending timers, written right after the batch
//! that made their records durable; the journal stays the truth: recovery puts the rows of
//! every re-armed timer again and deletes rows no pending timer owns
//! ([`RecoveryReport::stale_timer_rows`]). Each process reserves a block of 2^32 instance ids
//! (journal `weft.ids`) so ids never repeat across restarts.
//!
//! ## Approvals
//! A call waiting for a person writes `approval.requested` (flushed at once: nothing else
//! would make it durable while the call waits), its decision `approval.decided`; both fold
//! into [`Folded::extras`] until the firing's last outcome. The wait comes before the journal
//! gate, so a pending approval has no `action.dispatched`: recovery dispatches the call
//! again, which finds its request (and waits on) or its decision (and goes on), and a
//! deadline that passed while weft was down applies the default at once.
//!
//! ## Compaction policy (bounded storage for reactive plans)
//! For reactive instances the journal keeps a folded copy of the state beside the buffer;
//! when at least [`DurableConfig::snapshot_every`] records (default 100) were written
//! since the last snapshot, the batch that makes them durable is followed by a snapshot at
//! the new head and the truncation of what it covers, one write fenced by the instance's
//! lease (`Store::compact_fenced`: a process that lost the lease can neither snapshot nor
//! truncate). The kept journal is then at most about
//! `snapshot_every` records plus one snapshot, whose size is the marking's (plus in-flight
//! actions): storage follows the marking, not the history. Acyclic instances are never
//! compacted (they end, and their journal is their audit trail). `verify` checks the kept
//! chain from its anchor; `replay` of a compacted instance checks from the snapshot;
//! `inspect --at` and `resume --from` cannot go before the anchor (`not_found`).
//!
//! ## Records
//! See [`Entry`]: `instance.started` (plan, plan version, input, record version `v`),
//! `token.added`, `timer.set`, `timer.fired`, `context.put`, `action.result` /
//! `action.error`, `action.dispatched`, `instance.paused` / `resumed` / `stopped`,
//! `repair.applied`, `approval.requested` / `decided`. A journal whose `v` is newer than [`RECORD_VERSION`] is refused with
//! `journal_too_new`; an unknown kind is named.
//!
//! Throughput, recovery and compaction figures, with how they were measured:
//! `docs/performance.md`.

mod durable;
mod error;
mod history;
mod record;
mod store_journal;

pub use durable::{DEFAULT_SNAPSHOT_EVERY, Durable, DurableConfig, RecoveryReport};
pub use error::DurableError;
pub use history::{
    InFlightAction, InspectEvent, Inspection, PlanCache, ReplayReport, checkpoint, checkpoint_seq,
    inspect, replay, verify,
};
pub use record::{Entry, Folded, RECORD_VERSION};
pub use store_journal::{Gate, GatedBus, JournalStats, StoreJournal};
