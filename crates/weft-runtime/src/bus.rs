//! The event bus seam: lifecycle events out, as CloudEvents 1.0, to whoever subscribes.
//!
//! [`Bus`] is the trait a NATS implementation will fill later; [`InProcessBus`] is the
//! default, on a bounded `tokio::sync::broadcast` channel: a slow subscriber is told how many
//! events it missed ([`Delivery::Lagged`]) instead of growing memory without bound. The
//! engine asks [`Bus::wants`] before building an event, so lifecycle events cost one atomic
//! load when nobody listens.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::Stream;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::broadcast;

/// What every event type weft publishes starts with: CloudEvents recommends a reverse-DNS
/// prefix, so `plan.step.finished` goes out as `dev.weft.plan.step.finished`.
pub const TYPE_PREFIX: &str = "dev.weft.";

/// The published type of lifecycle event `name` (`plan.completed` →
/// `dev.weft.plan.completed`).
pub fn event_type(name: &str) -> String {
    let mut ty = String::with_capacity(TYPE_PREFIX.len() + name.len());
    ty.push_str(TYPE_PREFIX);
    ty.push_str(name);
    ty
}

/// The short name a published type also answers to (`dev.weft.plan.completed` →
/// `plan.completed`): the names weft published before its types had the prefix stay
/// aliases in every type filter (SSE `types`, bus subscriptions) for this version.
pub fn type_alias(ty: &str) -> Option<&str> {
    ty.strip_prefix(TYPE_PREFIX)
}

/// Does `ty` match `pattern` (a type, or a prefix ending in `*`), by its full name or its
/// alias?
pub fn type_matches(pattern: &str, ty: &str) -> bool {
    let one = |t: &str| match pattern.strip_suffix('*') {
        Some(prefix) => t.starts_with(prefix),
        None => pattern == t,
    };
    one(ty) || type_alias(ty).is_some_and(one)
}

/// A CloudEvents 1.0 event in the JSON format, with weft's extensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// Unique per source.
    pub id: String,
    /// `weft://<tenant>/<plan>/<instance>`.
    pub source: String,
    /// `dev.weft.plan.started`, `dev.weft.plan.step.finished`, … ([`event_type`]).
    #[serde(rename = "type")]
    pub ty: String,
    /// RFC 3339.
    pub time: String,
    /// Always `application/json`.
    pub datacontenttype: String,
    /// Event data.
    pub data: Value,
    /// Extension: tenant.
    pub tenant: String,
    /// Extension: instance id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub instance: Option<String>,
    /// Extension: correlation id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation: Option<String>,
}

/// Which events a subscriber wants. Empty fields match everything.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Type prefix, e.g. `dev.weft.plan.step.`, or of the alias, `plan.step.`.
    pub type_prefix: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only this instance.
    pub instance: Option<String>,
}

impl Filter {
    /// Does `ev` pass?
    pub fn matches(&self, ev: &CloudEvent) -> bool {
        self.type_prefix.as_deref().is_none_or(|p| {
            ev.ty.starts_with(p) || type_alias(&ev.ty).is_some_and(|a| a.starts_with(p))
        }) && self.tenant.as_deref().is_none_or(|t| ev.tenant == t)
            && self
                .instance
                .as_deref()
                .is_none_or(|i| ev.instance.as_deref() == Some(i))
    }
}

/// What a subscription yields.
#[derive(Debug, Clone, PartialEq)]
pub enum Delivery {
    /// An event that passed the filter.
    Event(Arc<CloudEvent>),
    /// The subscriber fell behind and `n` events were dropped for it.
    Lagged(u64),
}

/// A stream of deliveries; ends when the bus is dropped.
pub struct Subscription {
    inner: Pin<Box<dyn Stream<Item = Delivery> + Send>>,
}

impl std::fmt::Debug for Subscription {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Subscription")
    }
}

impl Subscription {
    /// Wraps any stream of deliveries (for other bus implementations).
    pub fn new(inner: Pin<Box<dyn Stream<Item = Delivery> + Send>>) -> Self {
        Subscription { inner }
    }
    /// The next delivery, or `None` when the bus is gone.
    pub async fn recv(&mut self) -> Option<Delivery> {
        self.inner.next().await
    }
}

impl Stream for Subscription {
    type Item = Delivery;
    fn poll_next(
        mut self: Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Delivery>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// Publish/subscribe for CloudEvents.
pub trait Bus: Send + Sync {
    /// Publishes an event (best effort: no subscriber, no delivery).
    fn publish(&self, event: CloudEvent);
    /// Subscribes with a filter.
    fn subscribe(&self, filter: Filter) -> Subscription;
    /// Whether anyone might receive an event now (lets the engine skip building it).
    fn wants(&self) -> bool {
        true
    }
}

/// The in-process bus on a bounded broadcast channel.
#[derive(Debug, Clone)]
pub struct InProcessBus {
    tx: broadcast::Sender<Arc<CloudEvent>>,
    /// Live subscriptions: one relaxed load on the hot path (`receiver_count` takes a lock).
    subscribers: Arc<AtomicUsize>,
}

/// Decrements the subscriber count when a subscription is dropped.
struct Counted(Arc<AtomicUsize>);

impl Drop for Counted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl InProcessBus {
    /// A bus that buffers up to `capacity` events per slow subscriber.
    pub fn new(capacity: usize) -> Self {
        let (tx, _) = broadcast::channel(capacity.max(1));
        InProcessBus {
            tx,
            subscribers: Arc::new(AtomicUsize::new(0)),
        }
    }
}

impl Default for InProcessBus {
    fn default() -> Self {
        Self::new(4096)
    }
}

impl Bus for InProcessBus {
    fn publish(&self, event: CloudEvent) {
        let _ = self.tx.send(Arc::new(event));
    }
    fn subscribe(&self, filter: Filter) -> Subscription {
        let rx = self.tx.subscribe();
        self.subscribers.fetch_add(1, Ordering::Relaxed);
        let counted = Counted(Arc::clone(&self.subscribers));
        let state = (rx, filter, counted);
        let stream = futures::stream::unfold(state, |(mut rx, filter, counted)| async move {
            loop {
                match rx.recv().await {
                    Ok(ev) if filter.matches(&ev) => {
                        return Some((Delivery::Event(ev), (rx, filter, counted)));
                    }
                    Ok(_) => continue,
                    Err(broadcast::error::RecvError::Lagged(n)) => {
                        return Some((Delivery::Lagged(n), (rx, filter, counted)));
                    }
                    Err(broadcast::error::RecvError::Closed) => return None,
                }
            }
        });
        Subscription::new(Box::pin(stream))
    }
    fn wants(&self) -> bool {
        self.subscribers.load(Ordering::Relaxed) > 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn published_types_are_reverse_dns_and_answer_to_their_alias() {
        let ty = event_type("plan.step.finished");
        assert_eq!(ty, "dev.weft.plan.step.finished");
        assert_eq!(type_alias(&ty), Some("plan.step.finished"));
        for p in [
            "dev.weft.plan.step.finished",
            "plan.step.finished",
            "plan.step.*",
            "dev.weft.*",
            "*",
        ] {
            assert!(type_matches(p, &ty), "{p}");
        }
        for p in [
            "plan.step.error",
            "plan.step",
            "weft.plan.step.finished",
            "step.*",
        ] {
            assert!(!type_matches(p, &ty), "{p}");
        }
        // A type from outside keeps its own name only.
        assert!(type_matches("order.*", "order.placed"));
        assert!(!type_matches("placed", "order.placed"));
    }

    #[test]
    fn a_filter_prefix_matches_the_alias_too() {
        let ev = |ty: &str| CloudEvent {
            specversion: "1.0".into(),
            id: "1".into(),
            source: "weft://t/p/i".into(),
            ty: ty.into(),
            time: String::new(),
            datacontenttype: "application/json".into(),
            data: Value::Null,
            tenant: "t".into(),
            instance: None,
            correlation: None,
        };
        let f = |p: &str| Filter {
            type_prefix: Some(p.into()),
            ..Filter::default()
        };
        let done = ev(&event_type("plan.completed"));
        assert!(f("plan.").matches(&done));
        assert!(f("dev.weft.plan.").matches(&done));
        assert!(!f("plan.step.").matches(&done));
        assert!(!f("plan.").matches(&ev("order.placed")));
    }
}
