//! Per-tenant rate limit: a token bucket per tenant (refill `rate` per second up to
//! `burst`); an empty bucket means `429 rate_limited` with `Retry-After`.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Instant;

use crate::state::lock;

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Token buckets by tenant.
pub(crate) struct RateLimiter {
    rate: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, Bucket>>,
}

impl RateLimiter {
    /// `rate` requests per second per tenant, bursts of `burst`; `rate <= 0` disables it.
    pub(crate) fn new(rate: f64, burst: f64) -> Self {
        RateLimiter {
            rate,
            burst: burst.max(1.0),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Takes one token for `tenant`: `Ok(())`, or `Err(seconds to wait)`.
    pub(crate) fn take(&self, tenant: &str) -> Result<(), u64> {
        if self.rate <= 0.0 {
            return Ok(());
        }
        let now = Instant::now();
        let mut g = lock(&self.buckets);
        let b = match g.get_mut(tenant) {
            Some(b) => b,
            None => g.entry(tenant.to_string()).or_insert(Bucket {
                tokens: self.burst,
                at: now,
            }),
        };
        let dt = now.duration_since(b.at).as_secs_f64();
        b.tokens = (b.tokens + dt * self.rate).min(self.burst);
        b.at = now;
        if b.tokens >= 1.0 {
            b.tokens -= 1.0;
            Ok(())
        } else {
            let wait = (1.0 - b.tokens) / self.rate;
            Err(wait.ceil().max(1.0) as u64)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empties_then_refuses_per_tenant() {
        let l = RateLimiter::new(0.5, 2.0);
        assert!(l.take("a").is_ok());
        assert!(l.take("a").is_ok());
        assert_eq!(l.take("a"), Err(2));
        assert!(l.take("b").is_ok(), "another tenant has its own bucket");
        assert!(RateLimiter::new(0.0, 1.0).take("a").is_ok());
    }
}
