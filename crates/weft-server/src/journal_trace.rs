//! The firing trace of an instance rebuilt from its journal, for `GET /v1/instances/{id}/trace`
//! when no engine in this process kept one (the instance ran before a restart, or on another
//! node). The journal holds no "fired" record: a firing is what the pure core does when an
//! input is folded, so the trace is read off the fold itself: a firing that appears in flight
//! after a record started then, `action.dispatched` raises its attempt, and its
//! `action.result` / `action.error` finishes it. An engine that recovered the instance keeps a
//! trace from its first firing after the restart; [`merged`] completes it with the journal's
//! firings. Records compacted into a snapshot are gone;
//! firings before the snapshot are then missing, and the ones in flight in it start at its seq.
//! A record that cannot be decoded or folded ends the trace there (what was read is returned):
//! a damaged journal must not make the timeline an error.

use std::collections::BTreeMap;

use serde_json::Value;
use weft_core::token::FiringId;
use weft_durable::{Entry, Folded, PlanCache};
use weft_runtime::{Engine, TraceEntry};
use weft_store::Store;

const PAGE: u32 = 1_000;

/// The firings of `instance` as its journal records them, oldest first; `None` when it has no
/// instance record or its plan cannot be compiled.
pub(crate) async fn from_journal(
    store: &dyn Store,
    engine: &Engine,
    instance: &str,
) -> Option<Vec<TraceEntry>> {
    let rec = store.get_instance(instance).await.ok()??;
    let plan = PlanCache::default().get(store, engine, &rec).await.ok()?;
    let base = &plan.net;
    let snap = store.latest_snapshot(instance).await.ok().flatten();
    let (mut folded, mut from) = match snap {
        Some(s) => match Folded::from_snapshot(base, &s.state) {
            Ok(f) => (f, s.seq + 1),
            Err(_) => (Folded::empty(), 1),
        },
        None => (Folded::empty(), 1),
    };
    let mut trace: BTreeMap<FiringId, TraceEntry> = BTreeMap::new();
    let snap_at = rec.created_at_ms;
    note_in_flight(&folded, base, snap_at, &mut trace);
    'pages: loop {
        let Ok(page) = store.read(instance, from, PAGE).await else {
            break;
        };
        let full = page.len() == PAGE as usize;
        for r in &page {
            from = r.seq + 1;
            let Ok(e) = Entry::from_record(r) else {
                break 'pages;
            };
            if folded.apply_entry(base, instance, &e).is_err() {
                break 'pages;
            }
            match &e {
                Entry::Dispatched {
                    firing, attempt, ..
                } => {
                    if let Some(t) = trace.get_mut(firing) {
                        t.attempts = t.attempts.max(*attempt);
                    }
                }
                Entry::Outcome {
                    firing,
                    result,
                    now,
                } => {
                    if let Some(t) = trace.get_mut(firing) {
                        t.outcome = Some(result.clone().map(|v| (*v).clone()));
                        t.finished_ms = Some(*now);
                    }
                }
                _ => {}
            }
            note_in_flight(&folded, base, clock_of(&e).unwrap_or(r.at_ms), &mut trace);
        }
        if !full {
            break;
        }
    }
    Some(trace.into_values().collect())
}

/// `live` (the trace an engine of this process kept, from its first firing after a restart)
/// completed with the journal's firings it does not have, in firing order.
pub(crate) fn merged(journal: Vec<TraceEntry>, live: Vec<TraceEntry>) -> Vec<TraceEntry> {
    let mut by_firing: BTreeMap<FiringId, TraceEntry> =
        journal.into_iter().map(|e| (e.firing, e)).collect();
    by_firing.extend(live.into_iter().map(|e| (e.firing, e)));
    by_firing.into_values().collect()
}

/// The clock reading an entry was applied at (firings it enables start then), when it has one.
fn clock_of(e: &Entry) -> Option<i64> {
    match e {
        Entry::Started { now, .. }
        | Entry::Token { now, .. }
        | Entry::Timer { now, .. }
        | Entry::Outcome { now, .. }
        | Entry::TimerSet { now, .. }
        | Entry::ContextPut { now, .. }
        | Entry::Repaired { now, .. }
        | Entry::ApprovalRequested { now, .. }
        | Entry::ApprovalDecided { now, .. }
        | Entry::PolicyDecided { now, .. }
        | Entry::BudgetCharged { now, .. } => Some(*now),
        _ => None,
    }
}

/// Adds the firings in flight in `folded` that `trace` does not know yet (started at `at_ms`)
/// and raises the attempt of those it knows.
fn note_in_flight(
    folded: &Folded,
    base: &weft_core::Net,
    at_ms: i64,
    trace: &mut BTreeMap<FiringId, TraceEntry>,
) {
    let Some(inst) = folded.instance.as_ref() else {
        return;
    };
    let net = folded.net(base);
    for (firing, inf) in inst.in_flight.iter() {
        if let Some(t) = trace.get_mut(firing) {
            t.attempts = t.attempts.max(inf.attempt);
            continue;
        }
        if inf.step as usize >= net.steps.len() {
            continue;
        }
        let binding = inf
            .tokens
            .iter()
            .filter(|t| (t.event as usize) < net.events.len())
            .map(|t| (t.id, net.event(t.event).name.clone(), t.payload.clone()))
            .collect();
        trace.insert(
            *firing,
            TraceEntry {
                firing: *firing,
                step: net.step(inf.step).name.clone(),
                binding,
                args: match &inf.args {
                    Value::Null => Err("not kept in the journal".into()),
                    a => Ok(a.clone()),
                },
                attempts: inf.attempt.max(1),
                outcome: None,
                emitted: Vec::new(),
                emitted_events: Vec::new(),
                started_ms: at_ms,
                finished_ms: None,
            },
        );
    }
}
