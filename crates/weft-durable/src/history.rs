//! Reading an instance's past: rebuild it from snapshot + journal tail, time travel
//! ([`inspect`]), the determinism check ([`replay`]), chain verification ([`verify`]) and
//! checkpoints ([`checkpoint`], `cp-<sha256 of the journal head>`, seed 002).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde::Serialize;
use serde_json::Value;
use weft_core::instance::Waiting;
use weft_core::token::FiringId;
use weft_runtime::{CompiledPlan, Engine};
use weft_store::{Hash, InstanceRecord, InstanceStatus, Record, Store, VerifyReport};

use crate::error::DurableError;
use crate::record::{Entry, Folded};

const PAGE: u32 = 1_000;

/// Compiled plans by (tenant, name, version), so recovery compiles each version once.
#[derive(Default)]
pub struct PlanCache {
    plans: Mutex<HashMap<(String, String, u32), Arc<CompiledPlan>>>,
}

impl std::fmt::Debug for PlanCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PlanCache").finish_non_exhaustive()
    }
}

impl PlanCache {
    /// `doc`, stored as `version` of `tenant`'s plan `name`, compiled once.
    fn compiled(
        &self,
        engine: &Engine,
        tenant: &str,
        name: &str,
        version: u32,
        doc: Value,
    ) -> Result<Arc<CompiledPlan>, DurableError> {
        let key = (tenant.to_string(), name.to_string(), version);
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(p));
        }
        let p = engine.compile_value_for(tenant, doc)?;
        self.plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::clone(&p));
        Ok(p)
    }

    /// The compiled plan an instance runs (from the plan store).
    pub async fn get(
        &self,
        store: &dyn Store,
        engine: &Engine,
        rec: &InstanceRecord,
    ) -> Result<Arc<CompiledPlan>, DurableError> {
        let key = (rec.tenant.clone(), rec.plan_name.clone(), rec.plan_version);
        if let Some(p) = self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
        {
            return Ok(Arc::clone(p));
        }
        let doc = store
            .get_plan(&rec.tenant, &rec.plan_name, Some(rec.plan_version))
            .await?
            .ok_or_else(|| DurableError::NotFound {
                what: format!(
                    "plan `{}` version {} of tenant `{}` (instance {})",
                    rec.plan_name, rec.plan_version, rec.tenant, rec.id
                ),
            })?;
        self.compiled(
            engine,
            &rec.tenant,
            &rec.plan_name,
            rec.plan_version,
            doc.document,
        )
    }
}

/// The instance record, or `not_found`.
pub(crate) async fn instance_record(
    store: &dyn Store,
    instance: &str,
) -> Result<InstanceRecord, DurableError> {
    store
        .get_instance(instance)
        .await?
        .ok_or_else(|| DurableError::NotFound {
            what: format!("instance {instance}"),
        })
}

/// Reads records `from..=upto` (all from `from` when `upto` is `None`).
pub(crate) async fn read_range(
    store: &dyn Store,
    instance: &str,
    mut from: u64,
    upto: Option<u64>,
) -> Result<Vec<Record>, DurableError> {
    let mut out = Vec::new();
    loop {
        let page = store.read(instance, from, PAGE).await?;
        let full = page.len() == PAGE as usize;
        for r in page {
            if upto.is_some_and(|u| r.seq > u) {
                return Ok(out);
            }
            from = r.seq + 1;
            out.push(r);
        }
        if !full {
            return Ok(out);
        }
    }
}

/// Rebuilds an instance: latest snapshot (unless `upto` lies before it) + journal tail up
/// to `upto`. Each folded record is passed to `each` (for time travel).
pub(crate) async fn rebuild(
    store: &dyn Store,
    plan: &CompiledPlan,
    instance: &str,
    upto: Option<u64>,
    each: impl FnMut(&Record, &Entry, &Folded),
) -> Result<Folded, DurableError> {
    let snap = store.latest_snapshot(instance).await?;
    let snap = snap.filter(|s| upto.is_none_or(|u| u >= s.seq));
    let from = snap.as_ref().map_or(1, |s| s.seq + 1);
    let records = read_range(store, instance, from, upto).await?;
    // Only a compacted journal can start later than expected; ask for its base then.
    if records.first().is_none_or(|r| r.seq != from) {
        let (base, _) = store.chain_base(instance).await?;
        if from <= base {
            return Err(DurableError::NotFound {
                what: format!(
                    "records {from}..={base} of {instance} were compacted away; the earliest point is seq {base}"
                ),
            });
        }
    }
    fold_loaded(plan, instance, snap.as_ref(), &records, each)
}

/// Folds a snapshot and the records after it.
pub(crate) fn fold_loaded(
    plan: &CompiledPlan,
    instance: &str,
    snap: Option<&weft_store::Snapshot>,
    records: &[Record],
    mut each: impl FnMut(&Record, &Entry, &Folded),
) -> Result<Folded, DurableError> {
    let net = &plan.net;
    let mut folded = match snap {
        Some(s) => {
            let mut f = Folded::from_snapshot(net, &s.state)?;
            f.seq = s.seq;
            f
        }
        None => Folded::empty(),
    };
    for r in records {
        if r.seq != folded.seq + 1 {
            return Err(DurableError::Journal {
                message: format!(
                    "the journal of {instance} continues at seq {} after {}",
                    r.seq, folded.seq
                ),
            });
        }
        let e = Entry::from_record(r)?;
        folded.apply_entry(net, instance, &e)?;
        folded.seq = r.seq;
        each(r, &e, &folded);
    }
    folded.settle(net);
    Ok(folded)
}

/// An action in flight at some point of the journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InFlightAction {
    /// The firing.
    pub firing: FiringId,
    /// The step.
    pub step: String,
    /// Attempt.
    pub attempt: u32,
    /// Whether its dispatch was recorded (it may have taken effect).
    pub dispatched: bool,
    /// The args it was called with.
    pub args: Value,
}

/// One journal record, as `weft inspect` lists it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InspectEvent {
    /// Sequence number.
    pub seq: u64,
    /// Kind.
    pub kind: String,
    /// When.
    pub at_ms: i64,
    /// The record, decoded.
    pub body: Value,
    /// Tokens per event after this record (non-empty events only).
    pub marking: Vec<(String, usize)>,
    /// Status after this record.
    pub status: String,
}

/// The state of an instance at a point of its journal.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Inspection {
    /// Instance id.
    pub instance: String,
    /// Tenant.
    pub tenant: String,
    /// Plan name and version.
    pub plan: String,
    /// Plan version.
    pub plan_version: u32,
    /// The sequence number inspected (the head when not given).
    pub at: u64,
    /// The journal head.
    pub head: u64,
    /// Status at that point.
    pub status: String,
    /// Tokens per event (non-empty events only).
    pub marking: Vec<(String, usize)>,
    /// Steps that wait, with what they have and lack.
    pub waiting: Vec<Waiting>,
    /// Actions in flight.
    pub in_flight: Vec<InFlightAction>,
    /// Steps fired so far.
    pub fired: u64,
    /// The records folded (from the snapshot or the start up to `at`).
    pub events: Vec<InspectEvent>,
}

fn marking_of(plan: &CompiledPlan, f: &Folded) -> Vec<(String, usize)> {
    f.instance
        .as_ref()
        .map(|i| {
            i.marking
                .counts_by_event(f.net(&plan.net))
                .into_iter()
                .filter(|(_, n)| *n > 0)
                .collect()
        })
        .unwrap_or_default()
}

fn status_of(f: &Folded) -> String {
    f.instance
        .as_ref()
        .map_or("not_started", |i| i.status.name())
        .to_string()
}

/// Time travel: the marking, waiting steps and in-flight actions of `instance` after record
/// `at` (the head when `None`), with the marking after each record folded.
pub async fn inspect(
    store: &dyn Store,
    engine: &Engine,
    instance: &str,
    at: Option<u64>,
) -> Result<Inspection, DurableError> {
    let rec = instance_record(store, instance).await?;
    let plan = PlanCache::default().get(store, engine, &rec).await?;
    let head = store.last_seq(instance).await?;
    if let Some(a) = at
        && a > head
    {
        return Err(DurableError::NotFound {
            what: format!("seq {a} of {instance} (the journal ends at {head})"),
        });
    }
    let mut events = Vec::new();
    let folded = rebuild(store, &plan, instance, at, |r, e, f| {
        let mut body = serde_json::to_value(e).unwrap_or(Value::Null);
        if let Value::Object(m) = &mut body {
            m.remove("kind");
        }
        events.push(InspectEvent {
            seq: r.seq,
            kind: r.kind.clone(),
            at_ms: r.at_ms,
            body,
            marking: marking_of(&plan, f),
            status: status_of(f),
        });
    })
    .await?;
    let net = folded.net(&plan.net);
    let (waiting, in_flight, fired) = match &folded.instance {
        Some(i) => (
            i.waiting(net),
            i.in_flight
                .iter()
                .map(|(f, inf)| InFlightAction {
                    firing: *f,
                    step: net.step(inf.step).name.clone(),
                    attempt: inf.attempt,
                    dispatched: folded.dispatched.contains(f),
                    args: inf.args.clone(),
                })
                .collect(),
            i.fired,
        ),
        None => (Vec::new(), Vec::new(), 0),
    };
    Ok(Inspection {
        instance: instance.to_string(),
        tenant: rec.tenant,
        plan: rec.plan_name,
        plan_version: rec.plan_version,
        at: folded.seq,
        head,
        status: status_of(&folded),
        marking: marking_of(&plan, &folded),
        waiting,
        in_flight,
        fired,
        events,
    })
}

/// What [`replay`] checked.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ReplayReport {
    /// Instance id.
    pub instance: String,
    /// Records re-folded.
    pub records: u64,
    /// The snapshot compared against, if any.
    pub snapshot_seq: Option<u64>,
    /// Status of the re-folded instance.
    pub status: String,
    /// Status the instance record holds.
    pub recorded_status: String,
    /// Whether the re-folded state equals the expected one.
    pub matches: bool,
    /// What differs, when something does.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mismatch: Option<String>,
}

/// Canonical JSON of a folded state, for equality checks.
pub(crate) fn canonical(f: &Folded) -> Value {
    serde_json::to_value(&f.instance).unwrap_or(Value::Null)
}

/// Determinism check: re-folds the journal from its start (or from the oldest kept point)
/// and checks that it reproduces the latest snapshot at the snapshot's seq, the instance
/// record's status when that is final (completed, failed, stopped: a journal cut short
/// folds to an earlier status), and, when `live` is given (a running engine's copy), the
/// live state at the head.
pub async fn replay(
    store: &dyn Store,
    engine: &Engine,
    instance: &str,
    live: Option<&weft_core::Instance>,
) -> Result<ReplayReport, DurableError> {
    let rec = instance_record(store, instance).await?;
    let plan = PlanCache::default().get(store, engine, &rec).await?;
    let snap = store.latest_snapshot(instance).await?;
    let (base, _) = store.chain_base(instance).await?;
    let mut records = 0u64;
    let mut mismatch: Option<String> = None;
    let mut at_snapshot: Option<Value> = None;
    // From genesis if the journal is whole, else from the snapshot (checking only the tail).
    let folded = if base == 0 {
        let net = &plan.net;
        let mut f = Folded::empty();
        for r in read_range(store, instance, 1, None).await? {
            let e = Entry::from_record(&r)?;
            f.apply_entry(net, instance, &e)?;
            f.seq = r.seq;
            records += 1;
            if snap.as_ref().is_some_and(|s| s.seq == r.seq) {
                let mut c = f.clone();
                c.settle(net);
                at_snapshot = Some(canonical(&c));
            }
        }
        f.settle(net);
        f
    } else {
        rebuild(store, &plan, instance, None, |_, _, _| records += 1).await?
    };
    if let (Some(s), Some(got)) = (&snap, at_snapshot) {
        let mut want = Folded::from_snapshot(&plan.net, &s.state)?;
        want.settle(&plan.net);
        if canonical(&want) != got {
            mismatch = Some(format!(
                "the journal does not reproduce the snapshot at seq {}",
                s.seq
            ));
        }
    }
    let status = status_of(&folded);
    // A start that never became durable is recorded as failed with no journal at all.
    let unstarted_failure = folded.instance.is_none() && rec.status == InstanceStatus::Failed;
    if rec.status.is_terminal() && rec.status.as_str() != status && !unstarted_failure {
        mismatch.get_or_insert(format!(
            "the instance record says {} but the journal folds to {status} (records missing at its end?)",
            rec.status.as_str()
        ));
    }
    if let Some(l) = live {
        let mut l = l.clone();
        l.settle_with(folded.net(&plan.net), !folded.extras.timers.is_empty());
        if serde_json::to_value(Some(&l)).unwrap_or(Value::Null) != canonical(&folded) {
            mismatch.get_or_insert("the journal does not reproduce the live state".into());
        }
    }
    Ok(ReplayReport {
        instance: instance.to_string(),
        records,
        snapshot_seq: snap.map(|s| s.seq),
        status,
        recorded_status: rec.status.as_str().to_string(),
        matches: mismatch.is_none(),
        mismatch,
    })
}

/// Checks the instance's journal against its hash chain and against what the store
/// recorded beside it ([`Store::verify`]: `chain_broken` names the first bad record,
/// `chain_keyed` says a keyed journal cannot be checked without its key).
pub async fn verify(store: &dyn Store, instance: &str) -> Result<VerifyReport, DurableError> {
    Ok(store.verify(instance).await?)
}

/// Names the current head of an instance's journal: `cp-<sha256 of the head record>`. The
/// journal is verified first: a checkpoint of a broken journal would name a state that
/// was never recorded, so it is refused with the verification's error (`chain_broken`).
pub async fn checkpoint(store: &dyn Store, instance: &str) -> Result<String, DurableError> {
    verify(store, instance).await?;
    let (_, hash) = store
        .head(instance)
        .await?
        .ok_or_else(|| DurableError::NotFound {
            what: format!("journal of {instance}"),
        })?;
    Ok(format!("cp-{}", hash.to_hex()))
}

/// The sequence number a checkpoint names (`not_found` if it is not in the kept journal).
pub async fn checkpoint_seq(
    store: &dyn Store,
    instance: &str,
    cp: &str,
) -> Result<u64, DurableError> {
    let want = cp
        .strip_prefix("cp-")
        .and_then(Hash::from_hex)
        .ok_or_else(|| DurableError::NotFound {
            what: format!("checkpoint `{cp}` (expected cp-<64 hex digits>)"),
        })?;
    if let Some(s) = store.latest_snapshot(instance).await?
        && s.hash == want
    {
        return Ok(s.seq);
    }
    for r in read_range(store, instance, 1, None).await? {
        if r.hash == want {
            return Ok(r.seq);
        }
    }
    Err(DurableError::NotFound {
        what: format!("checkpoint {cp} in the journal of {instance}"),
    })
}

/// `plan.run` by name on a durable engine ([`weft_runtime::ChildPlans`]): the latest version
/// of the parent's tenant's stored plan when the child starts (never another tenant's),
/// compiled for that tenant. The version is given to the journal, so the child's
/// `instance.started` record and instance record name it and recovery compiles that same
/// version.
pub(crate) struct StoredPlans {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) journal: std::sync::Weak<crate::StoreJournal>,
    pub(crate) cache: PlanCache,
}

impl weft_runtime::ChildPlans for StoredPlans {
    fn resolve<'a>(
        &'a self,
        engine: &'a Engine,
        tenant: &'a str,
        name: &'a str,
    ) -> weft_tools::BoxFuture<'a, Result<Option<Arc<CompiledPlan>>, String>> {
        Box::pin(async move {
            let Some(rec) = self
                .store
                .get_plan(tenant, name, None)
                .await
                .map_err(|e| format!("[{}] {e}", e.code()))?
            else {
                return Ok(None);
            };
            let version = rec.info.version;
            let plan = self
                .cache
                .compiled(engine, tenant, name, version, rec.document)
                .map_err(|e| {
                    format!("[{}] stored plan `{name}` version {version}: {e}", e.code())
                })?;
            if let Some(j) = self.journal.upgrade() {
                j.add_plan(Arc::clone(&plan), version);
            }
            Ok(Some(plan))
        })
    }

    fn started(&self, child: &weft_runtime::InstanceHandle) {
        crate::durable::follow_child(self.journal.clone(), child.clone());
    }
}
