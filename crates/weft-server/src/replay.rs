//! What `GET /v1/events/stream` sends, kept so a reconnecting client misses nothing: a
//! client that comes back with `Last-Event-ID` (browsers' `EventSource` sends it by itself)
//! first gets the events after that one, then the live ones, with no gap and no duplicate.
//!
//! Why a buffer and not the journal: lifecycle events are made by the engine as it runs, not
//! recorded, so a journal replay could not give the same events with the same ids. The buffer
//! is the retention, bounded per tenant: the last [`RETAIN_EVENTS`] events or
//! [`RETAIN_BYTES`] of their JSON, whichever is smaller, in this server process (a restart
//! forgets them). One task (the pump, started by the first stream; from then on the engine
//! builds lifecycle events even while no stream is open) reads the engine's bus into the
//! buffer, and every stream reads the buffer after its cursor, so live delivery, replay and
//! catching up after a slow read are one path. Events older than the retention are reported
//! as one `weft.lagged` frame (`{"missed": n}`, `n` counting the tenant's events, or `null`
//! when the `Last-Event-ID` is unknown: evicted, from another process, or never sent).

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use futures::{Stream, StreamExt};
use tokio::sync::watch;
use weft_runtime::{CloudEvent, Delivery, Engine, Filter};

/// Most events kept per tenant.
pub(crate) const RETAIN_EVENTS: usize = 4096;
/// Most bytes of event JSON kept per tenant.
pub(crate) const RETAIN_BYTES: usize = 8 << 20;
/// Most entries handed to a stream per read of the buffer.
const BATCH: usize = 256;

/// One entry of a tenant's buffer, numbered in the tenant's order.
#[derive(Debug)]
pub(crate) enum Entry {
    /// A lifecycle event and its JSON as sent.
    Event {
        seq: u64,
        ev: Arc<CloudEvent>,
        json: String,
    },
    /// The pump fell behind the bus: `n` events (of any tenant) never reached the buffer.
    Lost { seq: u64, n: u64 },
}

impl Entry {
    fn seq(&self) -> u64 {
        match self {
            Entry::Event { seq, .. } | Entry::Lost { seq, .. } => *seq,
        }
    }
    fn bytes(&self) -> usize {
        match self {
            Entry::Event { json, .. } => json.len(),
            Entry::Lost { .. } => 0,
        }
    }
}

/// What a stream gets on each read.
#[derive(Debug)]
pub(crate) enum Item {
    Entry(Arc<Entry>),
    /// `n` of the tenant's events after the cursor are no longer kept (`None`: unknown).
    Missed(Option<u64>),
}

#[derive(Debug, Default)]
struct Ring {
    entries: VecDeque<Arc<Entry>>,
    bytes: usize,
    /// The tenant's last sequence number given.
    last: u64,
}

impl Ring {
    fn push(&mut self, entry: Entry) {
        self.bytes += entry.bytes();
        self.entries.push_back(Arc::new(entry));
        while self.entries.len() > RETAIN_EVENTS
            || (self.bytes > RETAIN_BYTES && self.entries.len() > 1)
        {
            if let Some(old) = self.entries.pop_front() {
                self.bytes -= old.bytes();
            }
        }
    }
    fn next_seq(&mut self) -> u64 {
        self.last += 1;
        self.last
    }
}

/// Up to [`BATCH`] of the tenant's entries after `cursor`, oldest first, preceded by a
/// [`Item::Missed`] when some after it are no longer kept.
fn after(rings: &Mutex<HashMap<String, Ring>>, tenant: &str, cursor: u64) -> Vec<Item> {
    let rings = lock(rings);
    let Some(ring) = rings.get(tenant) else {
        return Vec::new();
    };
    let start = ring.entries.partition_point(|e| e.seq() <= cursor);
    let mut out = Vec::new();
    if let Some(first) = ring.entries.get(start)
        && first.seq() > cursor + 1
    {
        out.push(Item::Missed(Some(first.seq() - cursor - 1)));
    } else if ring.entries.is_empty() && ring.last > cursor {
        out.push(Item::Missed(Some(ring.last - cursor)));
    }
    out.extend(
        ring.entries
            .range(start..)
            .take(BATCH)
            .map(|e| Item::Entry(Arc::clone(e))),
    );
    out
}

/// The buffer of every tenant's recent lifecycle events.
#[derive(Debug)]
pub(crate) struct Replay {
    rings: Arc<Mutex<HashMap<String, Ring>>>,
    /// Bumped after every push: streams wait on it.
    tick: watch::Sender<u64>,
    pump: OnceLock<()>,
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            rings: Arc::default(),
            tick: watch::channel(0).0,
            pump: OnceLock::new(),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Replay {
    /// Starts the pump once: subscribes to `engine`'s bus now (so no event published after
    /// this call is missed) and reads it into the buffer until `stop` resolves.
    pub(crate) fn start(
        &self,
        engine: &Engine,
        stop: impl std::future::Future<Output = ()> + Send + 'static,
    ) {
        self.pump.get_or_init(|| {
            let sub = engine.subscribe(Filter::default());
            let rings = Arc::clone(&self.rings);
            let tick = self.tick.clone();
            tokio::spawn(async move {
                let mut sub = std::pin::pin!(sub.take_until(stop));
                while let Some(d) = sub.next().await {
                    match d {
                        Delivery::Event(ev) => {
                            let json = crate::events::event_json(&ev).to_string();
                            let mut rings = lock(&rings);
                            let ring = rings.entry(ev.tenant.clone()).or_default();
                            let seq = ring.next_seq();
                            ring.push(Entry::Event { seq, ev, json });
                        }
                        Delivery::Lagged(n) => {
                            for ring in lock(&rings).values_mut() {
                                let seq = ring.next_seq();
                                ring.push(Entry::Lost { seq, n });
                            }
                        }
                    }
                    tick.send_modify(|t| *t += 1);
                }
            });
        });
    }

    /// The tenant's cursor to start a stream at: after `last_event_id` when it is still
    /// kept (`Err(cursor)` when it is not: the stream starts now and reports the gap), else
    /// now.
    pub(crate) fn cursor(&self, tenant: &str, last_event_id: Option<&str>) -> Result<u64, u64> {
        let rings = lock(&self.rings);
        let now = rings.get(tenant).map_or(0, |r| r.last);
        let Some(id) = last_event_id else {
            return Ok(now);
        };
        let found = rings.get(tenant).and_then(|r| {
            r.entries.iter().rev().find_map(|e| match &**e {
                Entry::Event { seq, ev, .. } if ev.id == id => Some(*seq),
                _ => None,
            })
        });
        found.ok_or(now)
    }

    #[cfg(test)]
    fn after(&self, tenant: &str, cursor: u64) -> Vec<Item> {
        after(&self.rings, tenant, cursor)
    }

    /// The tenant's entries after `cursor`, then each new one as it arrives; a `gap` first
    /// ([`Replay::cursor`]'s `Err`) is sent as `Missed(None)`.
    pub(crate) fn follow(
        &self,
        tenant: String,
        cursor: u64,
        gap: bool,
    ) -> impl Stream<Item = Item> + Send + use<> {
        let rings = Arc::clone(&self.rings);
        let tick = self.tick.subscribe();
        let pending: VecDeque<Item> = if gap {
            VecDeque::from([Item::Missed(None)])
        } else {
            VecDeque::new()
        };
        futures::stream::unfold(
            (rings, tick, tenant, cursor, pending),
            |(rings, mut tick, tenant, mut cursor, mut pending)| async move {
                loop {
                    if let Some(item) = pending.pop_front() {
                        return Some((item, (rings, tick, tenant, cursor, pending)));
                    }
                    // Mark the tick seen before reading, so a push after the read wakes us.
                    tick.borrow_and_update();
                    let batch = after(&rings, &tenant, cursor);
                    if batch.is_empty() {
                        tick.changed().await.ok()?;
                        continue;
                    }
                    for item in batch {
                        match &item {
                            Item::Entry(e) => cursor = e.seq(),
                            Item::Missed(Some(n)) => cursor += n,
                            Item::Missed(None) => {}
                        }
                        pending.push_back(item);
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(id: &str, tenant: &str) -> Arc<CloudEvent> {
        Arc::new(CloudEvent {
            specversion: "1.0".into(),
            id: id.into(),
            source: "weft://t/p/i".into(),
            ty: "plan.step.finished".into(),
            time: String::new(),
            datacontenttype: "application/json".into(),
            data: serde_json::Value::Null,
            tenant: tenant.into(),
            instance: Some("i".into()),
            correlation: None,
        })
    }

    fn push(r: &Replay, id: &str, tenant: &str) {
        let mut rings = lock(&r.rings);
        let ring = rings.entry(tenant.into()).or_default();
        let seq = ring.next_seq();
        ring.push(Entry::Event {
            seq,
            ev: ev(id, tenant),
            json: "{}".into(),
        });
    }

    fn ids(items: &[Item]) -> Vec<String> {
        items
            .iter()
            .map(|i| match i {
                Item::Entry(e) => match &**e {
                    Entry::Event { ev, .. } => ev.id.clone(),
                    Entry::Lost { n, .. } => format!("lost {n}"),
                },
                Item::Missed(n) => format!("missed {n:?}"),
            })
            .collect()
    }

    #[test]
    fn a_cursor_resumes_after_the_last_event_id_within_its_tenant() {
        let r = Replay::default();
        for (id, t) in [("a1", "a"), ("b1", "b"), ("a2", "a"), ("a3", "a")] {
            push(&r, id, t);
        }
        let c = r.cursor("a", Some("a1")).expect("kept");
        assert_eq!(ids(&r.after("a", c)), ["a2", "a3"]);
        // Another tenant's id is unknown here; no id means "from now".
        assert_eq!(r.cursor("a", Some("b1")), Err(3));
        assert_eq!(r.cursor("a", None), Ok(3));
        assert!(r.after("a", 3).is_empty());
    }

    #[test]
    fn evicted_events_are_reported_as_missed() {
        let r = Replay::default();
        for k in 0..RETAIN_EVENTS + 10 {
            push(&r, &format!("e{k}"), "a");
        }
        assert_eq!(lock(&r.rings)["a"].entries.len(), RETAIN_EVENTS);
        assert!(r.cursor("a", Some("e5")).is_err(), "e5 was evicted");
        let got = ids(&r.after("a", 5));
        assert_eq!(got[0], "missed Some(5)");
        assert_eq!(got[1], "e10");
        assert_eq!(got.len(), 1 + BATCH);
    }
}
