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

/// A CloudEvents 1.0 event in the JSON format, with weft's extensions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CloudEvent {
    /// Always `1.0`.
    pub specversion: String,
    /// Unique per source.
    pub id: String,
    /// `weft://<tenant>/<plan>/<instance>`.
    pub source: String,
    /// `plan.started`, `plan.step.finished`, …
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
    /// Type prefix, e.g. `plan.step.`.
    pub type_prefix: Option<String>,
    /// Only this tenant.
    pub tenant: Option<String>,
    /// Only this instance.
    pub instance: Option<String>,
}

impl Filter {
    /// Does `ev` pass?
    pub fn matches(&self, ev: &CloudEvent) -> bool {
        self.type_prefix
            .as_deref()
            .is_none_or(|p| ev.ty.starts_with(p))
            && self.tenant.as_deref().is_none_or(|t| ev.tenant == t)
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
