//! The [`Store`] trait: everything weft keeps durably, one object-safe async trait so the
//! runtime holds an `Arc<dyn Store>` and never names a backend.

use async_trait::async_trait;
use serde_json::Value;

use crate::chain::{Chaining, Hash, PLAIN, Verifier, VerifyReport};
use crate::error::{Error, Result};
use crate::types::{
    Appended, CountRow, Counts, EffectRecorded, Fence, InstanceRecord, InstanceStatus, Lease,
    LeaseTerms, NewRecord, Page, PlanInfo, PlanRecord, PlanStatus, Record, Snapshot, Timer,
    ToolRecord,
};

/// `(instance, status, reason, now_ms)`: a status change in a batch.
pub type StatusChange = (String, InstanceStatus, Option<String>, i64);

/// Polls futures concurrently (a minimal `join_all`, so the trait crate needs no
/// `futures` dependency), returning their outputs in order.
async fn futures_join_all<F: std::future::Future>(futs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut futs: Vec<std::pin::Pin<Box<F>>> = futs.map(Box::pin).collect();
    let mut out: Vec<Option<F::Output>> = futs.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (f, o) in futs.iter_mut().zip(out.iter_mut()) {
            if o.is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => *o = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    out.into_iter().flatten().collect()
}

/// Records read per round trip by [`Store::verify`].
const VERIFY_PAGE: u32 = 1_000;

/// Durable state of weft. Every method is atomic; a returned `Ok` means committed durably.
#[async_trait]
pub trait Store: Send + Sync + 'static {
    /// Backend name (`sqlite`, `postgres`), for messages.
    fn backend(&self) -> &'static str;

    /// How this store hashes its journal (decided when it opened: [`Chaining::resolve`]).
    fn chaining(&self) -> &Chaining {
        &PLAIN
    }

    // --- journal -------------------------------------------------------------------------

    /// Appends records to an instance's journal, atomically: all or none. The store assigns
    /// contiguous sequence numbers after the current head and chains the hashes inside the
    /// transaction, so concurrent appenders to one instance serialize instead of forking.
    /// Resolves after the commit is durable; concurrent calls may share one commit (group
    /// commit). An empty batch changes nothing and returns the current head.
    async fn append(&self, instance: &str, records: Vec<NewRecord>) -> Result<Appended>;

    /// [`Store::append`], only if `fence` still holds, checked in the append's transaction:
    /// the instance's lease row has `fence.owner` at `fence.epoch` (a lease that expired
    /// without being taken over still counts). Otherwise nothing is written and the error
    /// is [`Error::LeaseLost`] (`lease_lost`).
    async fn append_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        records: Vec<NewRecord>,
    ) -> Result<Appended>;

    /// Up to `limit` records with `seq >= from_seq`, in sequence order.
    async fn read(&self, instance: &str, from_seq: u64, limit: u32) -> Result<Vec<Record>>;

    /// The chain head: last sequence number and its hash (`None` if nothing was appended).
    async fn head(&self, instance: &str) -> Result<Option<(u64, Hash)>>;

    /// Where the kept journal starts: `(seq, hash)` of the last record dropped by
    /// [`Store::truncate_before`], or `(0, GENESIS)`.
    async fn chain_base(&self, instance: &str) -> Result<(u64, Hash)>;

    /// Drops records with `seq < before`. Refused (`no_snapshot`) unless a snapshot at
    /// `seq >= before - 1` exists, so compaction never loses state; snapshots older than the
    /// new base are dropped too. Returns how many records were removed.
    async fn truncate_before(&self, instance: &str, before: u64) -> Result<u64>;

    /// Last sequence number (0 if nothing was appended).
    async fn last_seq(&self, instance: &str) -> Result<u64> {
        Ok(self.head(instance).await?.map_or(0, |(seq, _)| seq))
    }

    /// The chain head's seq when the instance record's status was last set (0 when
    /// nothing was appended then), `None` for an unknown instance or a backend that does
    /// not keep it. A journal never ends before it: [`Store::verify`] checks that.
    async fn status_seq(&self, _instance: &str) -> Result<Option<u64>> {
        Ok(None)
    }

    /// Checks the instance's whole kept journal against its hash chain and head, and the
    /// head against what the store recorded beside the journal (the seq the instance
    /// record's status was set at, the latest snapshot), so a tail cut off with its head
    /// moved back is found too ([`crate::ChainFault::TailMissing`]). A broken chain is
    /// `Err(Error::Chain(..))` naming the first bad sequence number; a keyed store opened
    /// without its key is `Err(Error::ChainKeyed)`.
    ///
    /// The head is read first and the chain checked up to it, so records a live writer
    /// appends meanwhile do not count as a mismatch; records beyond a head that did not
    /// move while they were read do (a head that lags its records). The instance record
    /// and the snapshot are read before the head, for the same reason.
    async fn verify(&self, instance: &str) -> Result<VerifyReport> {
        let chaining = self.chaining();
        if matches!(chaining, Chaining::KeyedWithoutKey) {
            return Err(Error::ChainKeyed {
                message: format!(
                    "the journal of {instance} is keyed (HMAC-SHA256) and cannot be checked without its key"
                ),
            });
        }
        let status_seq = self.status_seq(instance).await?;
        let snapshot = self
            .latest_snapshot(instance)
            .await?
            .map(|s| (s.seq, s.hash));
        let head = self.head(instance).await?;
        let head_seq = head.map_or(0, |(s, _)| s);
        let (base_seq, base_hash) = self.chain_base(instance).await?;
        let mut v = Verifier::with_chaining(instance, base_seq, base_hash, chaining.clone());
        if let Some((seq, _)) = snapshot {
            v.watch(seq);
        }
        let checked = |report: VerifyReport| {
            Verifier::check_recorded(&report, status_seq, snapshot).map_err(Error::Chain)?;
            Ok(report)
        };
        // Read from the base, not from the next expected seq, so stray records below it
        // show up as a gap instead of being skipped.
        let mut from = base_seq + 1;
        // Past the head, records count only if the head did not move meanwhile.
        let mut past_head = false;
        loop {
            let page = self.read(instance, from, VERIFY_PAGE).await?;
            let Some(last) = page.last() else { break };
            from = last.seq.saturating_add(1);
            let full = page.len() == VERIFY_PAGE as usize;
            for r in &page {
                if r.seq > head_seq && !past_head {
                    if self.head(instance).await? != head {
                        // Appended after the head was read: not part of this check.
                        return v.finish(head).map_err(Error::Chain).and_then(checked);
                    }
                    past_head = true;
                }
                v.push(r).map_err(Error::Chain)?;
            }
            if !full {
                break;
            }
        }
        v.finish(head).map_err(Error::Chain).and_then(checked)
    }

    /// One write for many instances, in this order: create `creates`, append each of
    /// `appends` (one instance each, at most once per batch), set each of `statuses`
    /// (`(id, status, reason, now_ms)`). Returns the appends' results in order. The SQLite
    /// backend does it all in one job of one transaction (atomic); the default runs the
    /// parts concurrently (each atomic on its own, sharing group commits). Resolves after
    /// everything is durable. This is what the runtime's journal flushes.
    async fn write_batch(
        &self,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, Vec<NewRecord>)>,
        statuses: Vec<(String, InstanceStatus, Option<String>, i64)>,
    ) -> Result<Vec<Appended>> {
        let c = futures_join_all(creates.into_iter().map(|r| self.create_instance(r))).await;
        for r in c {
            r?;
        }
        let a = futures_join_all(
            appends
                .into_iter()
                .map(|(i, recs)| async move { self.append(&i, recs).await }),
        )
        .await;
        let s = futures_join_all(
            statuses
                .into_iter()
                .map(|(id, st, reason, now)| async move {
                    self.update_status(&id, st, reason, now).await
                }),
        )
        .await;
        for r in s {
            r?;
        }
        a.into_iter().collect()
    }

    /// [`Store::write_batch`] for a lease holder (`terms.owner`), fenced per instance:
    /// each of `creates` is created together with its lease (owner `terms.owner`, epoch 1,
    /// expiring `terms.ttl_ms` after `terms.now_ms`; a lease row already there is left
    /// alone); each of `appends` (`(instance, epoch, records)`) is written only if the
    /// instance's lease row names `terms.owner` at `epoch`, checked in the write's
    /// transaction exactly as [`Store::append_fenced`] does; each of `statuses` is set only
    /// if the instance's lease row names `terms.owner`. The records are shared (`Arc`) so
    /// the caller keeps them for a retry without copying them. An append whose fence fails gets
    /// [`Error::LeaseLost`] in its slot and writes nothing; the others are written. The
    /// outer `Err` means the batch as a whole failed. The default runs the parts
    /// concurrently (statuses unfenced); the backends override it with the checks inside
    /// their transactions, so fencing costs no extra round trip.
    async fn write_batch_fenced(
        &self,
        terms: &LeaseTerms,
        creates: Vec<InstanceRecord>,
        appends: Vec<(String, u64, std::sync::Arc<[NewRecord]>)>,
        statuses: Vec<StatusChange>,
    ) -> Result<Vec<Result<Appended>>> {
        for c in creates {
            let id = c.id.clone();
            self.create_instance(c).await?;
            self.acquire_lease(&id, &terms.owner, terms.ttl_ms, terms.now_ms)
                .await?;
        }
        let a = futures_join_all(appends.into_iter().map(|(i, epoch, recs)| async move {
            let fence = Fence {
                owner: terms.owner.clone(),
                epoch,
            };
            self.append_fenced(&i, &fence, recs.to_vec()).await
        }))
        .await;
        for (id, st, reason, now) in statuses {
            match self.update_status(&id, st, reason, now).await {
                Ok(()) | Err(Error::NotFound { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(a)
    }

    /// For each instance, its latest snapshot and every kept record after it (from
    /// `snapshot.seq + 1`, or from seq 1 without a snapshot): what recovery folds. Backends
    /// override this to answer many instances in one round trip.
    async fn load_many(
        &self,
        instances: &[String],
    ) -> Result<Vec<(Option<Snapshot>, Vec<Record>)>> {
        let mut out = Vec::with_capacity(instances.len());
        for id in instances {
            let snap = self.latest_snapshot(id).await?;
            let mut from = snap.as_ref().map_or(1, |s| s.seq + 1);
            let mut recs = Vec::new();
            loop {
                let page = self.read(id, from, VERIFY_PAGE).await?;
                let full = page.len() == VERIFY_PAGE as usize;
                if let Some(last) = page.last() {
                    from = last.seq + 1;
                }
                recs.extend(page);
                if !full {
                    break;
                }
            }
            out.push((snap, recs));
        }
        Ok(out)
    }

    // --- snapshots -----------------------------------------------------------------------

    /// Stores a snapshot taken after record `snapshot.seq`. Rejected (`invalid_input`) if
    /// that record exists with a different hash, or lies beyond the head.
    async fn put_snapshot(&self, instance: &str, snapshot: Snapshot) -> Result<()>;

    /// The snapshot with the highest sequence number.
    async fn latest_snapshot(&self, instance: &str) -> Result<Option<Snapshot>>;

    /// Compaction by a lease holder, in one transaction: only if `fence` still holds
    /// (checked exactly as [`Store::append_fenced`] does; otherwise [`Error::LeaseLost`] and
    /// nothing changes), stores `snapshot` (checked as [`Store::put_snapshot`]) and drops the
    /// records it covers ([`Store::truncate_before`]`(snapshot.seq + 1)`). Returns how many
    /// records were removed. A process whose lease was taken over can neither write a
    /// snapshot nor truncate the new owner's journal.
    async fn compact_fenced(
        &self,
        instance: &str,
        fence: &Fence,
        snapshot: Snapshot,
    ) -> Result<u64>;

    // --- plans ---------------------------------------------------------------------------

    /// Stores a new version of a plan (status `template`); versions count 1, 2, … per
    /// (tenant, name).
    async fn put_plan(&self, tenant: &str, name: &str, document: Value, now_ms: i64)
    -> Result<u32>;

    /// A plan version, or the latest one when `version` is `None`.
    async fn get_plan(
        &self,
        tenant: &str,
        name: &str,
        version: Option<u32>,
    ) -> Result<Option<PlanRecord>>;

    /// Every version of every plan of a tenant, by name then version.
    async fn list_plans(&self, tenant: &str) -> Result<Vec<PlanInfo>>;

    /// Changes a version's status (`not_found` if it does not exist).
    async fn set_plan_status(
        &self,
        tenant: &str,
        name: &str,
        version: u32,
        status: PlanStatus,
    ) -> Result<()>;

    // --- tools ---------------------------------------------------------------------------

    /// Stores a new version of a tenant's declared tool: its definition, or `None` for a
    /// deletion (kept as a version, so the history stays readable); versions count 1, 2, …
    /// per (tenant, name).
    async fn put_tool(
        &self,
        tenant: &str,
        name: &str,
        definition: Option<Value>,
        now_ms: i64,
    ) -> Result<u32>;

    /// Every version of every tool of `tenant` (of every tenant when `None`), by tenant,
    /// name, then version.
    async fn list_tools(&self, tenant: Option<&str>) -> Result<Vec<ToolRecord>>;

    // --- instances -----------------------------------------------------------------------

    /// Creates an instance record (`conflict` if the id exists).
    async fn create_instance(&self, record: InstanceRecord) -> Result<()>;

    /// Sets an instance's status and reason (`not_found` if it does not exist).
    async fn update_status(
        &self,
        id: &str,
        status: InstanceStatus,
        reason: Option<String>,
        now_ms: i64,
    ) -> Result<()>;

    /// An instance record.
    async fn get_instance(&self, id: &str) -> Result<Option<InstanceRecord>>;

    /// A tenant's instances, optionally of one status, by id.
    async fn list_instances(
        &self,
        tenant: &str,
        status: Option<InstanceStatus>,
        page: Page,
    ) -> Result<Vec<InstanceRecord>>;

    /// All tenants' instances that are not terminal, by id: what recovery rebuilds.
    async fn non_terminal_instances(&self, page: Page) -> Result<Vec<InstanceRecord>>;

    // --- timers --------------------------------------------------------------------------

    /// Sets (or moves) a timer.
    async fn put_timer(&self, timer: Timer) -> Result<()>;

    /// Up to `limit` timers with `due_ms <= now_ms`, earliest first.
    async fn due_timers(&self, now_ms: i64, limit: u32) -> Result<Vec<Timer>>;

    /// Up to `limit` timers (1..=10,000) of any due time, ordered by (instance, timer id),
    /// strictly after the key `after`: a keyset cursor through the whole timer table.
    async fn list_timers(&self, after: Option<(String, String)>, limit: u32) -> Result<Vec<Timer>>;

    /// Removes a timer; `false` if it did not exist.
    async fn delete_timer(&self, instance: &str, timer_id: &str) -> Result<bool>;

    // --- idempotency records -------------------------------------------------------------

    /// Records an effect's outcome under its idempotency key, unless the key is already
    /// recorded, in which case the first outcome is returned and kept.
    async fn record_effect(&self, key: &str, outcome: Value) -> Result<EffectRecorded>;

    /// The recorded outcome of an effect.
    async fn get_effect(&self, key: &str) -> Result<Option<Value>>;

    /// Removes up to `limit` idempotency records whose keys lie in `[from, to)`, compared
    /// byte by byte; returns how many went. A record that guards a tool effect must outlive
    /// its instance, so a caller removes only a key range it owns (the server's CloudEvent
    /// deduplication records, once older than their window).
    async fn delete_effects(&self, from: &str, to: &str, limit: u32) -> Result<u64>;

    // --- leases --------------------------------------------------------------------------

    /// Takes or extends the lease on an instance for `ttl_ms` from `now_ms`. Succeeds if
    /// there is no lease, it is `owner`'s, or it expired (`expires_at_ms <= now_ms`); a live
    /// lease of another owner is never taken. Taking over another owner's lease raises its
    /// epoch (the fencing token, see [`Store::append_fenced`]).
    async fn acquire_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool>;

    /// Extends `owner`'s lease; `false` if it is not (or no longer) theirs: another owner
    /// took it over or `owner` released it. A lease that expired but that nobody took over
    /// is still `owner`'s (same row, same epoch: nothing was written under another fence),
    /// so it is renewed: a process starved past the ttl keeps its instances unless another
    /// process has claimed them in the meantime.
    async fn renew_lease(
        &self,
        instance: &str,
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<bool>;

    /// [`Store::acquire_lease`] for many instances at once (recovery takes the leases of
    /// what it restores, 500 at a time): for each, the lease's epoch if `owner` holds it
    /// now, `None` if another owner's live lease kept it. A lease of one of `dead` (owners
    /// the caller knows have died, e.g. a killed process on the same host) is taken over
    /// as if it had expired (its epoch raised). Backends do it in one write.
    async fn acquire_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
        dead: &[String],
    ) -> Result<Vec<Option<u64>>> {
        let mut out = Vec::with_capacity(instances.len());
        for id in instances {
            // A dead owner's lease counts as expired: acquire "after" its expiry.
            let at = match self.owner_of(id, now_ms).await? {
                Some(l) if dead.contains(&l.owner) => l.expires_at_ms,
                _ => now_ms,
            };
            let got = if self.acquire_lease(id, owner, ttl_ms, at).await? {
                self.owner_of(id, at)
                    .await?
                    .filter(|l| l.owner == owner)
                    .map(|l| l.epoch)
            } else {
                None
            };
            out.push(got);
        }
        Ok(out)
    }

    /// [`Store::renew_lease`] for many instances at once (the background renewal of a
    /// durable engine): for each, whether `owner`'s lease was extended (`false`: another
    /// owner has it or it was released; the caller must stop writing that instance).
    async fn renew_leases(
        &self,
        instances: &[String],
        owner: &str,
        ttl_ms: i64,
        now_ms: i64,
    ) -> Result<Vec<bool>> {
        let mut out = Vec::with_capacity(instances.len());
        for id in instances {
            out.push(self.renew_lease(id, owner, ttl_ms, now_ms).await?);
        }
        Ok(out)
    }

    /// The owners of live leases (each once): recovery looks for dead ones among them.
    async fn lease_owners(&self, now_ms: i64) -> Result<Vec<String>>;

    /// Gives the lease up; `false` if `owner` did not hold it. The epoch is kept, so the
    /// next owner's is higher.
    async fn release_lease(&self, instance: &str, owner: &str) -> Result<bool>;

    /// [`Store::release_lease`] for many instances at once (a durable engine's graceful
    /// shutdown): returns how many of them `owner` held and gave up. Backends override it
    /// with one write.
    async fn release_leases(&self, instances: &[String], owner: &str) -> Result<usize> {
        let mut n = 0;
        for id in instances {
            if self.release_lease(id, owner).await? {
                n += 1;
            }
        }
        Ok(n)
    }

    /// The live lease on an instance, if any.
    async fn owner_of(&self, instance: &str, now_ms: i64) -> Result<Option<Lease>>;

    // --- shared counters -----------------------------------------------------------------

    /// Adds each row's counts to its counter (key, period), made at zero when missing, all
    /// in one transaction, and returns the counters' totals after, in the rows' order (zero
    /// counts read a counter). Counters whose period ended by `now_ms` are removed first. A
    /// key is at most [`MAX_COUNT_KEY`] bytes and a cost finite and not negative
    /// (`invalid_input`, nothing added; [`check_count_rows`]).
    async fn add_counts(&self, rows: Vec<CountRow>, now_ms: i64) -> Result<Vec<Counts>>;

    /// Every counter whose period has not ended by `now_ms`.
    async fn live_counts(&self, now_ms: i64) -> Result<Vec<CountRow>>;
}

/// The longest key of a shared counter, in bytes.
pub const MAX_COUNT_KEY: usize = 512;

/// Checks rows for [`Store::add_counts`] (every backend refuses the same rows).
pub fn check_count_rows(rows: &[CountRow]) -> Result<()> {
    for r in rows {
        if r.key.is_empty() || r.key.len() > MAX_COUNT_KEY {
            return Err(Error::InvalidInput {
                message: format!(
                    "a shared counter's key must be 1 to {MAX_COUNT_KEY} bytes, not {}",
                    r.key.len()
                ),
            });
        }
        if !r.counts.cost.is_finite() || r.counts.cost < 0.0 {
            return Err(Error::InvalidInput {
                message: format!(
                    "counter {:?}: the cost to add must be finite and not negative, not {}",
                    r.key, r.counts.cost
                ),
            });
        }
    }
    Ok(())
}
