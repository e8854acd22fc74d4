//! weft-durable: durable instances. The runtime's [`weft_runtime::Journal`] hook over a
//! [`weft_store::Store`] ([`StoreJournal`]), crash recovery, checkpoints, time travel
//! ([`inspect`]), the determinism check ([`replay`]), chain verification ([`verify`]),
//! compaction of reactive instances, and the W4 benchmark ([`bench::run_w4`]).
//!
//! ## Durability rule (W4 contract)
//! A record is durable before anything that depends on it is dispatched or reported.
//! [`StoreJournal`]'s `record` only buffers (it is called synchronously inside the instance
//! loop, so it must not block on a disk), and every tool of a durable engine is wrapped in a
//! [`Gate`]: it records `action.dispatched` (non-idempotent tools only, see below) and waits
//! until everything the instance has recorded so far is committed before the real tool runs.
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
//! `action.error`, `action.dispatched`, `instance.paused` / `resumed` / `stopped`. A journal whose `v` is newer than
//! [`RECORD_VERSION`] is refused with `journal_too_new`; an unknown kind is named.

//! ## Measured (2 cores shared with other builds, load 2.5–5; release build)
//! `cargo run --release -p weft-durable --example w4 -- durable durable_concurrent
//! durable_recovery durable_compaction` (BENCHMARKS.md sizes; add
//! `WEFT_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:5432/test` for PostgreSQL,
//! `WEFT_W4_RUNS=1000` shortens a repetition):
//!
//! | workload | SQLite | PostgreSQL |
//! |---|---|---|
//! | W4-strict (`durable`), steps/s | 3,397 (10,000 runs/rep; 1,482–4,046 in shorter runs as the disk's fsync varied) | 691–773 (1,000 runs/rep) |
//! | fsyncs (commits) per step, strict | 1.24 (start + 5 outcomes per 5 steps, plus status rows) | 1.2 journal commits |
//! | W4-concurrent (`durable_concurrent`), steps/s | 31,000–56,000 | 26,500–34,600 |
//! | commits per step, concurrent | 0.001 | 0.001 |
//! | journal per step | 1.2 records, 95 bytes of body | same |
//! | recovery of 100,000 waiting instances | 2.7–3.3 s | 10,000 in 0.78 s |
//! | reactive instance fed 100,000 events | compacted: 0 rows + 344-byte snapshot kept; uncompacted: 200,001 rows, 14.3 MB | – |
//!
//! Durable timers, the gated bus and the store-failure retry (a copy of each batch's
//! records) left W4 where it was: `WEFT_W4_RUNS=2000 cargo run --release -p weft-durable
//! --example w4 -- durable durable_concurrent`, this build then the build before them, back
//! to back on the same loaded machine: W4-strict 822 vs 681 steps/s at 1.284 vs 1.273
//! fsyncs per step; W4-concurrent 25,476 vs 27,686 steps/s (rep times spread 0.28–0.63 s
//! in both).
//!
//! Leases, fenced batches, multi-row SQLite appends and parallel restore (this build),
//! measured on the shared machine at load average 10.5–11.4 (other helpers' builds; not
//! comparable with the figures above, and no baseline was run under the same load):
//! `WEFT_W4_RUNS=2000 WEFT_W4_REPS=3 weft bench durable_concurrent` 23,226 steps/s,
//! 0.002 fsyncs per step, 1.2 records and 94.1 body bytes per step;
//! `weft bench durable_recovery` (100,000 instances, clippy running beside it, leases
//! acquired per 500 then) 15.2 s, mostly off-CPU (`perf`: ~1.4 s of CPU samples for 20,000),
//! so recovery now takes the leases of a whole page in one commit: then 8.58 s at load
//! 10.3 (`WEFT_W4_RECOVERY_INSTANCES=100000 weft bench durable_recovery`), W4-concurrent
//! 20,538 steps/s on SQLite and 9,147 on PostgreSQL (`WEFT_BENCH_POSTGRES_URL=… `, same
//! sizes, load 10.1–10.3).
//!
//! Writer and recovery work (`durable-perf`): SQLite writer without a savepoint per group
//! commit, statement journals in memory, 64 MiB cache, 32 MiB checkpoint interval; the query
//! planner stability guarantee (a `LIMIT ?` re-prepared the statement on every bind: two
//! re-parses per recovered instance); `load_many` in one read transaction (SQLite) or one
//! statement per 500 instances (PostgreSQL, was two round trips per instance); leases taken
//! with one `RETURNING` statement each. `weft bench durable_concurrent durable_recovery`
//! with `WEFT_BENCH_POSTGRES_URL`, the build before and this one back to back (load
//! 4.2–4.5): W4-concurrent SQLite 31,096 → 43,795 steps/s (two more pairs at load 3.0–3.3:
//! 39,991 → 59,927 and 25,013 → 30,416), PostgreSQL 28,965 → 23,886 (pairs: 24,404 →
//! 22,129, 18,899 → 17,576: unchanged within the noise, its hot path did not change);
//! recovery of 100,000 instances SQLite 4.20 → 1.53 s, PostgreSQL 19.9 → 2.79 s. Still
//! 0.001 fsyncs, 1.2 records and 94.7 body bytes per step.
//!
//! Goals not met yet: W4-concurrent 100,000 steps/s on SQLite (the single writer thread is
//! about half of all CPU: per lane and batch a chain-head read, a fence read, the journal
//! insert and the head upsert, plus instance, lease and status rows per run; the next step
//! is fewer statements per append) and 30,000 on PostgreSQL; recovery under 2 s is met on
//! an unloaded machine only (restore builds one cell and one journal lane per instance).
//!
//! Compaction every 100 records (`DEFAULT_SNAPSHOT_EVERY`, was 1,000): a reactive instance
//! keeps at most its last 100 records plus a snapshot, and under the server's event load
//! most of its rows die in the SQLite journal log before a merge would move them (see
//! ARCHITECTURE.md, `weft-server`, for the event-load figures). `weft bench
//! durable_compaction`: 100,000 events, 0 rows and a 356-byte snapshot kept, 95,045
//! events/s (uncompacted 97,410). W4 does not compact (acyclic); on a machine whose speed
//! varied by up to 40% within minutes, alternating with the build before: W4-concurrent
//! 51,049–59,629 steps/s (before 48,186–52,234), recovery of 100,000 instances 1.33–1.49 s
//! (before 1.23–1.36 s).
//!
//! Session 9 (a third machine of the kind): the SQLite writer thread remembers chain heads
//! and lease rows (`weft-store-sqlite`'s `cache.rs`), which takes the two point reads per
//! lane and batch out of W4's writer (~8% fewer writer samples under `perf`) but leaves
//! W4-concurrent where it was: 65,021–77,869 steps/s in alternating runs of both builds,
//! PostgreSQL 28,561–30,790. What bounds it is not the writer's work alone: with the head
//! upserts switched off (an experiment, not a build) it did not move either; one tokio
//! worker instead of two (the writer thread takes the other core) gave 75,107–79,441 against
//! 67,253–73,663; and the first repetition is nearly always the fastest (0.45–0.57 s,
//! 88–110k steps/s) while the later ones take 0.59–0.93 s as the file grows (~70 MB plus a
//! 128 MiB WAL after five repetitions of 10,000 runs). Recovery of 100,000 instances: 1.20–1.34 s
//! (before 1.15–1.31 s; the bench recovers through the store that just wrote them, whose
//! writer still remembers them all).
//!
//! Session 10 (a fourth machine of the kind; its speed drifted by ~10% within the hour):
//! W4-concurrent 70,198–88,645 steps/s over 25 runs (thin- and fat-LTO builds, and the
//! experiments' builds below with their switches off); the first repetition takes
//! 0.44–0.57 s (88–114k steps/s), the later ones 0.45–0.80 s. What one
//! durable step costs, measured rather than guessed:
//! - **The gate is the cost, not the records.** The same workload with `bench.add` left
//!   ungated (`gate_pure_actions: false`, as `weft serve` runs pure tools; an experiment,
//!   since W4's contract forbids it) runs at 229,948–260,824 steps/s with the same 1.2
//!   records and 95 body bytes per step. CPU per step (`perf record -e cpu-clock`, all
//!   threads, samples ÷ 4 kHz ÷ steps including the warm-up): ~5.8 µs ungated (writer 3.7,
//!   the bench's main thread, which runs the whole instance inline at its start, 1.5)
//!   against 18–21 µs gated (writer 8–9, tokio workers 8–9, main thread ~2). A gated step is
//!   a durability round trip:
//!   its record (`bench.add` is idempotent: no `action.dispatched`), a lane flush, a
//!   commit-loop pass and a fenced one-record append, a waker, a poll of the instance's
//!   pending set, a boxed
//!   call with a `ToolContext` whose inputs are shared with the in-flight record (so
//!   `bench.add` copies its input map: 16% of the workers' time), and the completion.
//!   Ungated, a run's six records go to the writer as one lane.
//! - **Not the chain heads.** Skipping the `chain_heads` upsert (experiment) cut the bytes
//!   written by ~5% (`/usr/bin/time -f %O`: 1.23–1.32M blocks against 1.27–1.39M) and left
//!   the throughput in the noise (77–88k against 72–81k).
//! - **Not the id order.** Instance ids `i<n>` interleave in text order with earlier
//!   repetitions' (`i1005` < `i10050` < `i1006`); numbering from 1,000,000 (fixed width, so
//!   every insert lands at the b-tree's right edge) cut the bytes written by ~12% and left
//!   the throughput where it was (78–87k against 76–86k).
//! - **Later repetitions pay earlier ones' deferred work.** A 30,000-run warm-up makes the
//!   first repetition 0.90 s: log merges (the log merges once it holds four rows per live
//!   instance) and WAL checkpoints of the runs before it. A repetition writes ~72 MB on a
//!   fresh store and ~150 MB later (5 reps: ~665 MB for 300,000 steps, ~2.3 KB per step).
//!
//! The way to 100,000 is the round trip: run a gated immediate tool inline in the instance's
//! loop once its lane is durable (no boxed call, no context, inputs handed over as the
//! inline path does; at most the ungated path's cost plus the wait), and fewer writer
//! statements per single-record append.
//!
//! Session 11 (a fifth machine of the kind, ~40% slower than the fourth: the build that gave
//! 4.4M W1 steps/s and ~199k W2 workflows/s there gave 2.6M and 111–122k) did the first
//! half. A gated immediate tool
//! now runs inline in the instance's loop once the journal says its mark is durable
//! (`Tool::waits_for_journal`, `Journal::gate` / `Journal::poll_durable`,
//! `Cell::run_gated`), and the hot instance-keyed maps hash with foldhash. Fifteen alternating
//! pairs of `weft bench durable_concurrent` against the session's starting build (eleven
//! with the old build first, four with the new one first; the machine sped up meanwhile):
//! 54,365–80,215 steps/s (median 60,498) against 46,283–75,539 (median 52,093); the new
//! build was faster in 14 pairs and within 1% in the other (median ratio +14%). CPU per step (`perf record -e cpu-clock -F 1000`, samples by thread ÷ 250,250
//! steps): the tokio workers 5.9–8.8 µs against 11.3–12.5; the writer thread 11.3–15.2
//! (both builds). The writer is now the bottleneck (56% of all samples, a whole core):
//! its commit and WAL frame writes ~29%, `append_many` ~30%, log merges ~21%, status
//! updates ~8%, instance creates ~6% (`perf --call-graph dwarf`). W4-strict is unchanged:
//! in six alternating pairs the build that ran second was slower each time (base first:
//! 2,043–2,106 steps/s new against 2,134–2,156 base; new first: 2,271–2,488 against
//! 2,168–2,408; the goal is 318).
//!
//! Session 12 (a sixth machine, between the fourth and the fifth: the session's starting
//! build gave 3.84M W1 steps/s, 179k W2 workflows/s and 79,002 W4-concurrent steps/s at
//! first) took the writer thread's SQLite work down in two steps (`weft-store-sqlite`'s
//! `journal.rs` docs; schema version 5): a journal log row is one group commit's records of
//! a partition as one blob instead of a row per record, and chain heads are written by the
//! log merge instead of by every append. Writer CPU per step (the `perf` method above, two
//! runs each, alternating): 10.21 / 9.20 µs before, 9.26 / 8.74 with the batches, 8.41 /
//! 8.36 with both. Throughput moved less than that: over 13 runs of the new build and 11 of
//! the old one, alternated and in both orders, medians 82.5k against 80.1k steps/s
//! (73–89k against 70–87k). What the timeline shows (`perf script`, 20 ms buckets): the
//! 10,000 runs move in lockstep, so for stretches of 60–100 ms only the writer thread runs
//! (every instance waits for the batch it is in) and at other times the workers have
//! nothing to hand it. Smaller or more concurrent batches (1,024 or 512 lanes, three or four
//! committers) were slower (63–80k), and so were merges at 2, 3, 6 or 8 records per live
//! instance instead of 4. `synchronous=NORMAL` on the writer (no fsync at all) was not
//! faster either (66–79k), so the fsync is off the critical path. The first repetition is
//! ~30% faster than the rest because the merges of its records run in the next one: the
//! steady state writes ~200 MB per repetition (`/proc/PID/io`), 2x the first, in WAL frames
//! of merged journal pages and their checkpoints.
//!
//! Session 13 (a seventh machine of the kind) found what bounds it by counting: the writer
//! thread spent ~40% of its wall time in `COMMIT` (timed around the statement), of which
//! the fsync is ~6 points (the same build with `synchronous=NORMAL`: ~35%); the rest is
//! writing WAL frames, one 4 KiB page each. Keeping the WAL of two repetitions (checkpoints
//! switched off, an experiment) and attributing each frame to the b-tree that owns its page
//! (`dbstat`): 78% were `journal` pages, written by the log merges, and 6% `chain_heads`.
//! `journal` was keyed by `(instance, seq)`, so the ~1,250 instances of one log partition
//! were spread over the whole table and a merge of ~5,000 records rewrote ~1,250 leaf pages.
//! Schema version 6 (`weft-store-sqlite`'s `journal.rs` docs) puts the partition first in
//! the keys of `journal` and `chain_heads`: journal frames 25,723 → 8,504, WAL 139 → 68 MB,
//! a whole run writing ~260–340 MB instead of ~630–740 (`/usr/bin/time -f %O`). W4-concurrent
//! (`weft bench durable_concurrent`), each run alternated with the session's starting build:
//! with `journal` rekeyed, 77,009–90,866 steps/s in four runs during a slow phase of the
//! machine (the old build 59,890–67,147 there) and 96,802–110,569 in six later runs (old
//! build 63,761–82,166); with `chain_heads` rekeyed as well, 88,458–110,987 in seven runs,
//! median 102,853, five of them at or above 100,000 (old build 69,694–81,722 in the same
//! pairs; the two runs under 100,000 came when the old build fell to ~70k). Also measured and
//! left out: a separate thread syncing the WAL after `COMMIT` (the writer on
//! `synchronous=NORMAL`, callers answered after the sync) was +3.5% on average over five
//! pairs, inside the noise; the background checkpoint every 50, 100 or 1,000 ms instead of
//! 200 was no better; on tmpfs the old layout gave 94–104k, so the disk's write bandwidth
//! (~470 MB/s here) was much of the gap.

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
