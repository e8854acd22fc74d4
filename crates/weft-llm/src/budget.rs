//! Budgets (seed 001's quotas): caps on tokens and calls per plan, per instance and per tenant,
//! and an optional per-tenant call rate. A call is checked *before* it is sent: the ledger
//! reserves the worst case (prompt estimate + `max_tokens`) and refuses when that would cross a
//! cap, so nothing is ever silently truncated; after the call the reservation is settled with
//! the real usage. Thread-safe: one ledger is shared by every planner, tool and instance.
//! With a `period`, the caps are quotas: what was used counts until the period (aligned on
//! the Unix epoch, as the runtime's tool-call quotas are) ends, then the count starts again.
//! With [`Budget::shared`], each tenant's calls and tokens are counted in
//! [`weft_tools::SharedCounts`] (key `planner/<tenant>`), which the assembly point syncs
//! with the store: every process sharing it counts together, and a restart goes on counting.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use weft_tools::{SharedCounts, Usage};

use crate::error::{Error, Result};
use crate::ids::Correlation;

/// A cap on tokens and calls (`None` = unlimited).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Limit {
    /// Most tokens (prompt + completion).
    pub max_tokens: Option<u64>,
    /// Most LLM calls.
    pub max_calls: Option<u64>,
}

impl Limit {
    /// No limit.
    pub const NONE: Limit = Limit {
        max_tokens: None,
        max_calls: None,
    };
    /// A cap.
    pub fn new(max_tokens: Option<u64>, max_calls: Option<u64>) -> Self {
        Limit {
            max_tokens,
            max_calls,
        }
    }
}

/// The limits a ledger enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BudgetLimits {
    /// Per plan name (all its instances and planning runs).
    pub per_plan: Limit,
    /// Per instance.
    pub per_instance: Limit,
    /// Per tenant.
    pub per_tenant: Limit,
    /// Per tenant: most calls in any `rate_window` (exceeding it is *throttled*, not rejected).
    pub tenant_calls_per_window: Option<u32>,
    /// The rate window (default one minute).
    pub rate_window: Option<Duration>,
    /// The caps' period: usage is forgotten when it ends (`None`: never).
    pub period: Option<Duration>,
}

#[derive(Debug, Clone, Copy, Default)]
struct Used {
    tokens: u64,
    calls: u64,
    reserved: u64,
}

#[derive(Debug, Default)]
struct State {
    used: HashMap<(u8, String), Used>,
    recent: HashMap<String, Vec<Instant>>,
    /// The period `used` counts (its index since the Unix epoch).
    period: u64,
}

/// The index of the period `now` is in (0 without a period).
fn period_index(period: Option<Duration>) -> u64 {
    period_bounds(period).0
}

/// The index of the period `now` is in and when it ends, epoch ms (0 and never without a
/// period).
fn period_bounds(period: Option<Duration>) -> (u64, i64) {
    let Some(len) = period.map(|p| u64::try_from(p.as_millis()).unwrap_or(u64::MAX)) else {
        return (0, i64::MAX);
    };
    weft_tools::shared::period_of(len, crate::ids::now_ms())
}

impl State {
    /// Forgets the usage of a period that has ended (reservations of calls still in flight
    /// are kept: they settle into the new period).
    fn roll(&mut self, period: Option<Duration>) {
        let now = period_index(period);
        if now != self.period {
            self.period = now;
            self.used.retain(|_, u| {
                (u.tokens, u.calls) = (0, 0);
                u.reserved > 0
            });
        }
    }
}

/// The budget ledger.
#[derive(Debug, Default)]
pub struct Budget {
    limits: BudgetLimits,
    state: Mutex<State>,
    /// Where tenants' calls and tokens are counted, when shared with other processes.
    shared: Option<Arc<SharedCounts>>,
}

/// A granted reservation; settle it with the real usage.
#[derive(Debug)]
#[must_use = "settle the reservation with the real usage"]
pub struct Reservation {
    keys: Vec<(u8, String)>,
    reserved: u64,
}

/// What a scope has used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Spent {
    /// Tokens charged.
    pub tokens: u64,
    /// Calls charged.
    pub calls: u64,
}

const TENANT: u8 = 0;

const PLAN: u8 = 1;
const INSTANCE: u8 = 2;

fn scope_name(kind: u8, id: &str) -> String {
    match kind {
        TENANT => format!("tenant {id:?}"),
        PLAN => format!("plan {id:?}"),
        _ => format!("instance {id:?}"),
    }
}

impl Budget {
    /// A ledger enforcing `limits`.
    pub fn new(limits: BudgetLimits) -> Self {
        Budget {
            limits,
            state: Mutex::new(State::default()),
            shared: None,
        }
    }

    /// Counts each tenant's calls and tokens in `counts` (see the module docs); the rate
    /// limit, plans' and instances' caps and reservations stay this ledger's.
    #[must_use]
    pub fn shared(mut self, counts: Arc<SharedCounts>) -> Self {
        self.shared = Some(counts);
        self
    }

    /// `u` with the tenant's shared counts in place of the ledger's own.
    fn with_shared(&self, key: &(u8, String), mut u: Used) -> Used {
        if let (TENANT, Some(shared)) = (key.0, &self.shared) {
            let total = shared.lock().total(
                &weft_tools::shared::planner_key(&key.1),
                period_index(self.limits.period),
            );
            (u.calls, u.tokens) = (total.llm_calls, total.llm_tokens);
        }
        u
    }

    /// Counts `calls` and `tokens` to `key`: in the shared counts instead for a tenant when
    /// shared.
    fn count(&self, st: &mut State, key: (u8, String), calls: u64, tokens: u64) {
        if let (TENANT, Some(shared)) = (key.0, &self.shared) {
            let (period, ends) = period_bounds(self.limits.period);
            let add = Usage {
                llm_calls: calls,
                llm_tokens: tokens,
                ..Usage::default()
            };
            shared
                .lock()
                .add(&weft_tools::shared::planner_key(&key.1), period, ends, add);
            // The ledger's own entry keeps the tenant's reservations only.
            return;
        }
        let u = st.used.entry(key).or_default();
        u.calls += calls;
        u.tokens += tokens;
    }

    /// The limits.
    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    fn scopes(&self, c: &Correlation) -> Vec<((u8, String), Limit)> {
        let mut v = vec![((TENANT, c.tenant.clone()), self.limits.per_tenant)];
        if let Some(p) = &c.plan {
            v.push(((PLAN, p.clone()), self.limits.per_plan));
        }
        if let Some(i) = &c.instance {
            v.push(((INSTANCE, i.clone()), self.limits.per_instance));
        }
        v
    }

    /// Reserves one call of up to `tokens` tokens for `c`, or refuses it.
    pub fn reserve(&self, c: &Correlation, tokens: u64) -> Result<Reservation> {
        let mut st = self
            .state
            .lock()
            .map_err(|_| Error::Config("budget ledger lock poisoned".into()))?;
        st.roll(self.limits.period);
        if let Some(max) = self.limits.tenant_calls_per_window {
            let window = self.limits.rate_window.unwrap_or(Duration::from_secs(60));
            let now = Instant::now();
            let recent = st.recent.entry(c.tenant.clone()).or_default();
            recent.retain(|t| now.duration_since(*t) < window);
            if recent.len() >= max as usize {
                return Err(Error::BudgetExceeded {
                    scope: scope_name(TENANT, &c.tenant),
                    detail: format!(
                        "{} calls in the last {} s reach the rate limit of {max}; retry later",
                        recent.len(),
                        window.as_secs()
                    ),
                    throttled: true,
                });
            }
        }
        let scopes = self.scopes(c);
        for (key, limit) in &scopes {
            let u = self.with_shared(key, st.used.get(key).copied().unwrap_or_default());
            if let Some(max) = limit.max_calls
                && u.calls + 1 > max
            {
                {
                    return Err(Error::BudgetExceeded {
                        scope: scope_name(key.0, &key.1),
                        detail: format!(
                            "{} of {max} calls used; this call would exceed the cap",
                            u.calls
                        ),
                        throttled: false,
                    });
                }
            }
            if let Some(max) = limit.max_tokens
                && u.tokens + u.reserved + tokens > max
            {
                {
                    return Err(Error::BudgetExceeded {
                        scope: scope_name(key.0, &key.1),
                        detail: format!(
                            "{} of {max} tokens used ({} reserved by calls in flight); this call may need up to {tokens}",
                            u.tokens, u.reserved
                        ),
                        throttled: false,
                    });
                }
            }
        }
        if self.limits.tenant_calls_per_window.is_some() {
            st.recent
                .entry(c.tenant.clone())
                .or_default()
                .push(Instant::now());
        }
        let mut keys = Vec::new();
        for (key, _) in scopes {
            st.used.entry(key.clone()).or_default().reserved += tokens;
            self.count(&mut st, key.clone(), 1, 0);
            keys.push(key);
        }
        Ok(Reservation {
            keys,
            reserved: tokens,
        })
    }

    /// Replaces the reservation with the tokens really used.
    pub fn settle(&self, r: Reservation, used_tokens: u64) {
        if let Ok(mut st) = self.state.lock() {
            for key in r.keys {
                let u = st.used.entry(key.clone()).or_default();
                u.reserved = u.reserved.saturating_sub(r.reserved);
                self.count(&mut st, key, 0, used_tokens);
            }
        }
    }

    fn spent(&self, kind: u8, id: &str) -> Spent {
        self.state
            .lock()
            .ok()
            .map(|mut st| {
                st.roll(self.limits.period);
                let key = (kind, id.to_string());
                self.with_shared(&key, st.used.get(&key).copied().unwrap_or_default())
            })
            .map(|u| Spent {
                tokens: u.tokens,
                calls: u.calls,
            })
            .unwrap_or_default()
    }
    /// What `tenant` has used.
    pub fn spent_by_tenant(&self, tenant: &str) -> Spent {
        self.spent(TENANT, tenant)
    }
    /// What `plan` has used.
    pub fn spent_by_plan(&self, plan: &str) -> Spent {
        self.spent(PLAN, plan)
    }
    /// What `instance` has used.
    pub fn spent_by_instance(&self, instance: &str) -> Spent {
        self.spent(INSTANCE, instance)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn caps_refuse_before_and_settle_after() {
        let b = Budget::new(BudgetLimits {
            per_plan: Limit::new(Some(100), None),
            per_tenant: Limit::new(None, Some(3)),
            ..BudgetLimits::default()
        });
        let c = Correlation::new("t").with_plan("p");
        let r = b.reserve(&c, 60).unwrap();
        // a second call in flight could push the plan over 100
        assert!(b.reserve(&c, 60).is_err());
        b.settle(r, 30);
        assert_eq!(
            b.spent_by_plan("p"),
            Spent {
                tokens: 30,
                calls: 1
            }
        );
        let r = b.reserve(&c, 60).unwrap();
        b.settle(r, 10);
        let r = b.reserve(&c, 10).unwrap();
        b.settle(r, 10);
        let e = b.reserve(&c, 1).unwrap_err().to_string();
        assert!(e.contains("3 of 3 calls"), "{e}");
    }

    #[test]
    fn a_period_that_ends_forgets_the_usage() {
        let b = Budget::new(BudgetLimits {
            per_tenant: Limit::new(None, Some(1)),
            period: Some(Duration::from_millis(300)),
            ..BudgetLimits::default()
        });
        let c = Correlation::new("t");
        // Start early in a period, so that both calls below fall in it.
        let into_period = || {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_millis()
                % 300
        };
        while into_period() > 100 {
            std::thread::sleep(Duration::from_millis(5));
        }
        let r = b.reserve(&c, 1).unwrap();
        b.settle(r, 1);
        assert!(b.reserve(&c, 1).is_err(), "one call per period");
        let first = period_index(b.limits.period);
        while period_index(b.limits.period) == first {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(b.spent_by_tenant("t"), Spent::default());
        let r = b.reserve(&c, 1).expect("a new period");
        b.settle(r, 1);
    }

    #[test]
    fn rate_limit_throttles() {
        let b = Budget::new(BudgetLimits {
            tenant_calls_per_window: Some(1),
            ..BudgetLimits::default()
        });
        let c = Correlation::new("t");
        let r = b.reserve(&c, 1).unwrap();
        b.settle(r, 1);
        assert!(matches!(
            b.reserve(&c, 1),
            Err(Error::BudgetExceeded {
                throttled: true,
                ..
            })
        ));
    }
}
