//! The one source of time for the engine. Nothing in the runtime reads the wall clock
//! directly: token timestamps, timers, retry backoff and timeouts all go through [`Clock`],
//! so tests can drive time by hand ([`ManualClock`]) and journals record exact `now` values.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use weft_tools::BoxFuture;

/// Time for the engine: "now" in Unix epoch milliseconds, and sleeping.
pub trait Clock: Send + Sync {
    /// Current time, Unix epoch milliseconds.
    fn now_ms(&self) -> i64;
    /// A future that resolves once `ms` milliseconds of this clock have passed.
    fn sleep(&self, ms: u64) -> BoxFuture<'static, ()>;
}

/// The system clock; sleeps on tokio's timer (so `tokio::time::pause` also applies).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
    fn sleep(&self, ms: u64) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
    }
}

/// A clock that only moves when told to; sleepers wake when [`ManualClock::advance`] passes
/// their due time.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<AtomicI64>,
    tx: Arc<tokio::sync::watch::Sender<i64>>,
}

impl ManualClock {
    /// A manual clock starting at `start_ms`.
    pub fn new(start_ms: i64) -> Self {
        let (tx, _) = tokio::sync::watch::channel(start_ms);
        ManualClock {
            now: Arc::new(AtomicI64::new(start_ms)),
            tx: Arc::new(tx),
        }
    }
    /// Moves time forward by `ms` and wakes every sleeper that is now due.
    pub fn advance(&self, ms: u64) {
        let now = self.now.fetch_add(ms as i64, Ordering::SeqCst) + ms as i64;
        self.tx.send_replace(now);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
    fn sleep(&self, ms: u64) -> BoxFuture<'static, ()> {
        let target = self.now_ms().saturating_add(ms as i64);
        let mut rx = self.tx.subscribe();
        Box::pin(async move {
            while *rx.borrow_and_update() < target {
                if rx.changed().await.is_err() {
                    std::future::pending::<()>().await;
                }
            }
        })
    }
}

/// RFC 3339 UTC timestamp (millisecond precision) for epoch milliseconds.
pub fn rfc3339(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let milli = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil-from-days (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{milli:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

#[cfg(test)]
mod tests {
    use super::rfc3339;

    #[test]
    fn formats_epoch_times() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
    }
}
