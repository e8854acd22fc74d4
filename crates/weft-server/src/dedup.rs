//! CloudEvent deduplication. CloudEvents identifies an event by `source` + `id`; weft
//! remembers each one it applied, per tenant, for `server.event_dedup_secs`, and answers a
//! repeat within that window with success and a `duplicates` count instead of applying it
//! again (also when the repeat is in the same batch).
//!
//! Durable through the store's idempotency records (`Store::record_effect` / `get_effect`,
//! the same table that keeps tool effects; no schema of its own): the key is
//! `ce.v2:<bucket>:<len(tenant)>:<tenant>:<len(source)>:<source>:<id>`, where the bucket is
//! the time divided by the window in 16 hex digits, and the outcome records when the event
//! was applied. A lookup reads this bucket and the one before and keeps only records younger
//! than the window, so the window is exact while a key never has to be rewritten (the first
//! outcome under a key is kept).
//!
//! Delivery is at least once: the record is written after the event's journal records are
//! durable, so a crash in between lets a retry apply the event again; never the reverse (an
//! event remembered but not applied). Two requests carrying the same event at the same time
//! do not race: the second is refused with `409 event_in_progress` until the first is done.
//!
//! Old records are deleted: the bucket leads the key with a fixed width, so every record of
//! the buckets before the previous one (all older than the window) is one key range, which
//! [`spawn_sweeper`] removes every quarter window (at least every second, at most every hour).

use std::collections::HashSet;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::http::StatusCode;
use serde_json::json;

use crate::error::ApiError;
use crate::state::AppState;

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where every deduplication key starts; nothing else in the effects table does.
const PREFIX: &str = "ce.v2:";

fn key(tenant: &str, bucket: u64, source: &str, id: &str) -> String {
    format!(
        "{PREFIX}{bucket:016x}:{}:{tenant}:{}:{source}:{id}",
        tenant.len(),
        source.len()
    )
}

/// The first key of `bucket`: every key of an earlier bucket sorts before it, byte by byte.
fn bucket_start(bucket: u64) -> String {
    format!("{PREFIX}{bucket:016x}:")
}

/// Records removed per store call.
const SWEEP_BATCH: u32 = 10_000;

/// Removes the deduplication records of buckets before `now`'s previous one: all of them
/// are older than the window, and lookups never read them. Returns how many went.
async fn sweep(store: &dyn weft_store::Store, window_ms: u64, now: u64) -> weft_store::Result<u64> {
    let bucket = now / window_ms.max(1);
    let Some(keep_from) = bucket.checked_sub(1) else {
        return Ok(0);
    };
    let to = bucket_start(keep_from);
    let mut removed = 0;
    loop {
        let n = store.delete_effects(PREFIX, &to, SWEEP_BATCH).await?;
        removed += n;
        if n < u64::from(SWEEP_BATCH) {
            return Ok(removed);
        }
    }
}

/// Starts the task that deletes expired deduplication records (nothing when deduplication
/// is off). It ends with the server's state or its shutdown.
pub(crate) fn spawn_sweeper(state: &AppState) {
    let window = state.config().dedup_window;
    if window.is_zero() {
        return;
    }
    let every = (window / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600));
    let weak = std::sync::Arc::downgrade(&state.inner);
    let mut shutdown = state.inner.shutdown.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(every) => {}
                _ = shutdown.changed() => return,
            }
            let Some(inner) = weak.upgrade() else { return };
            let store = std::sync::Arc::clone(inner.durable.store());
            drop(inner);
            let w = window.as_millis().max(1) as u64;
            match sweep(store.as_ref(), w, now_ms()).await {
                Ok(0) => {}
                Ok(n) => tracing::debug!(removed = n, "expired CloudEvent deduplication records"),
                Err(e) => tracing::warn!(error = %e, "expired deduplication records not removed"),
            }
        }
    });
}

/// The keys of one request's events, claimed against concurrent requests until dropped.
pub(crate) struct Claim {
    state: AppState,
    /// Per event: the key it is remembered under (`None`: deduplication is off).
    keys: Vec<Option<String>>,
    /// The keys this request holds in `Inner::ingesting`.
    held: Vec<String>,
    now: u64,
}

impl Drop for Claim {
    fn drop(&mut self) {
        let mut set = self
            .state
            .inner
            .ingesting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for k in &self.held {
            set.remove(k);
        }
    }
}

/// Which of `events` (`(source, id)`) were applied already: within the window, or earlier in
/// the same request. Claims the keys of the rest.
pub(crate) async fn check(
    state: &AppState,
    tenant: &str,
    events: &[(String, String)],
) -> Result<(Vec<bool>, Claim), ApiError> {
    let window = state.config().dedup_window;
    let now = now_ms();
    let mut claim = Claim {
        state: state.clone(),
        keys: Vec::with_capacity(events.len()),
        held: Vec::new(),
        now,
    };
    if window.is_zero() {
        claim.keys.resize(events.len(), None);
        return Ok((vec![false; events.len()], claim));
    }
    let w = window.as_millis().max(1) as u64;
    let bucket = now / w;
    let mut dup = vec![false; events.len()];
    let mut in_request: HashSet<(&str, &str)> = HashSet::new();
    for (k, (source, id)) in events.iter().enumerate() {
        if !in_request.insert((source, id)) {
            dup[k] = true;
        }
        claim.keys.push(Some(key(tenant, bucket, source, id)));
    }
    {
        let mut set = state
            .inner
            .ingesting
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        for (k, key) in claim.keys.iter().enumerate() {
            let Some(key) = key else { continue };
            if dup[k] {
                continue;
            }
            if !set.insert(key.clone()) {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    "event_in_progress",
                    format!(
                        "event `{}` from `{}` is being ingested by another request",
                        events[k].1, events[k].0
                    ),
                )
                .hint("retry once that request has been answered"));
            }
            claim.held.push(key.clone());
        }
    }
    let store = state.store();
    for (k, (source, id)) in events.iter().enumerate() {
        if dup[k] {
            continue;
        }
        for b in [bucket, bucket.saturating_sub(1)] {
            let got = store
                .get_effect(&key(tenant, b, source, id))
                .await
                .map_err(store_unavailable)?;
            let at = got
                .as_ref()
                .and_then(|v| v.get("at"))
                .and_then(|v| v.as_u64());
            if at.is_some_and(|at| now.saturating_sub(at) < w) {
                dup[k] = true;
                break;
            }
        }
    }
    Ok((dup, claim))
}

fn store_unavailable(e: weft_store::Error) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        format!("the store cannot be read: {e}"),
    )
    .hint("retry later; the event was not applied")
}

/// Remembers the events whose index `applied` lists (after their records are durable).
pub(crate) async fn remember(claim: &Claim, applied: impl Iterator<Item = usize>) {
    let store = claim.state.store();
    let outcome = json!({"at": claim.now});
    let writes = applied
        .filter_map(|k| claim.keys.get(k).cloned().flatten())
        .map(|key| {
            let outcome = outcome.clone();
            async move { store.record_effect(&key, outcome).await }
        });
    for r in futures::future::join_all(writes).await {
        if let Err(e) = r {
            tracing::warn!(error = %e, "CloudEvent not remembered for deduplication");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_sorts_before_the_next_ones_start_whatever_it_holds() {
        for b in [0u64, 9, 15, 255, 0xffff, u64::MAX - 1] {
            let k = key("t", b, "/s", "id");
            assert!(k < bucket_start(b + 1), "{k}");
            assert!(k >= bucket_start(b), "{k}");
            assert!(key("~~~~", b, "\u{10ffff}", "\u{10ffff}") < bucket_start(b + 1));
            assert!(PREFIX <= k.as_str());
        }
    }

    #[test]
    fn tenants_and_sources_cannot_forge_each_others_keys() {
        assert_ne!(key("a:1", 1, "b", "c"), key("a", 1, "1:b", "c"));
        assert_ne!(key("a", 1, "b:c", "d"), key("a", 1, "b", "c:d"));
    }
}
