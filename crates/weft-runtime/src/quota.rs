//! Budgets set by the operator rather than the plan: limits for every instance whose plan sets
//! none, and quotas shared by all instances of one plan, or of one tenant, within a period
//! (say a day). They are counted at the budget stage with a plan's own `limits`
//! (`Cell::charge_call`), before a call runs. What happens to a call over a budget is the
//! operator's choice too: it fails (`budget_exceeded`, as for a plan's own limits) or the
//! instance is paused until someone resumes it, when the call is charged again (a quota may
//! have a new period by then).
//!
//! The quotas are counted in [`SharedCounts`] (keys `tenant/<tenant>` and
//! `plan/<tenant>/<plan>`), which the assembly point syncs with the store so that every
//! process sharing it counts together and a restart goes on from the store's totals; without
//! a store they are this process's alone. A new period (aligned on the epoch) starts at zero.

use std::sync::Arc;

use weft_core::PlanLimits;
use weft_tools::shared::{plan_key, tenant_key};
use weft_tools::{SharedCounts, Usage};

/// What to do with a call over a budget.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum OnExceeded {
    /// Refuse it: `budget_exceeded`, fatal (the step's `on_fail` or a `<step>.failed`
    /// listener takes it, else the instance fails).
    #[default]
    Fail,
    /// Pause the instance; the call waits and is charged again once it is resumed.
    Pause,
}

/// The operator's budgets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuotaConfig {
    /// Limits of each instance whose plan sets no `limits`.
    pub instance: Option<PlanLimits>,
    /// Quota of all instances of one plan (per tenant and plan name) within a period.
    pub plan: Option<PlanLimits>,
    /// Quota of all instances of one tenant within a period.
    pub tenant: Option<PlanLimits>,
    /// The quotas' period, in milliseconds (at least 1).
    pub period_ms: u64,
    /// A call over any budget, the plan's own `limits` included.
    pub on_exceeded: OnExceeded,
}

impl QuotaConfig {
    /// Whether calls of plans without `limits` must be counted.
    pub fn counts_every_call(&self) -> bool {
        self.instance.is_some() || self.plan.is_some() || self.tenant.is_some()
    }
}

/// A quota a call would pass: which, the field, the count with the call and the limit.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Over {
    pub scope: &'static str,
    pub field: &'static str,
    pub used: String,
    pub max: String,
}

/// The counters one instance charges: its tenant's and its plan's (made once per instance,
/// so a charge formats no key).
#[derive(Debug, Clone)]
pub struct QuotaKeys {
    tenant: String,
    plan: String,
}

impl QuotaKeys {
    /// The keys of `tenant`'s quota and of its plan `plan`'s.
    pub fn new(tenant: &str, plan: &str) -> QuotaKeys {
        QuotaKeys {
            tenant: tenant_key(tenant),
            plan: plan_key(tenant, plan),
        }
    }
}

/// The shared counts (see the module docs).
#[derive(Debug)]
pub struct Quotas {
    /// The configuration.
    pub config: QuotaConfig,
    counts: Arc<SharedCounts>,
}

impl Quotas {
    /// Counts for `config`, in this process alone until something syncs
    /// [`Quotas::counts`] with a store.
    pub fn new(config: QuotaConfig) -> Quotas {
        Quotas::with_counts(config, Arc::new(SharedCounts::new()))
    }

    /// Counts for `config` in `counts` (which the assembly point may share with other
    /// counters and sync with a store).
    pub fn with_counts(config: QuotaConfig, counts: Arc<SharedCounts>) -> Quotas {
        Quotas { config, counts }
    }

    /// The counters behind the quotas, for the assembly point to share through a store.
    pub fn counts(&self) -> &Arc<SharedCounts> {
        &self.counts
    }

    /// The period `now_ms` is in, and when it ends.
    fn period(&self, now_ms: i64) -> (u64, i64) {
        weft_tools::shared::period_of(self.config.period_ms, now_ms)
    }

    /// Charges `charge` to the quotas of `keys` at `now_ms`, unless that passes one (then
    /// nothing is charged).
    pub(crate) fn charge(&self, keys: &QuotaKeys, charge: Usage, now_ms: i64) -> Result<(), Over> {
        let c = &self.config;
        if c.plan.is_none() && c.tenant.is_none() {
            return Ok(());
        }
        let (period, ends) = self.period(now_ms);
        let (tk, pk) = (&keys.tenant, &keys.plan);
        let mut counts = self.counts.lock();
        for (scope, limits, key) in [
            ("tenant", c.tenant.as_ref(), &tk),
            ("plan", c.plan.as_ref(), &pk),
        ] {
            let Some(limits) = limits else { continue };
            let now = counts.total(key, period);
            if let Some((field, u, max)) = crate::budget::over(limits, charge, now.plus(charge), 0)
            {
                return Err(Over {
                    scope,
                    field,
                    used: u,
                    max,
                });
            }
        }
        self.add_locked(&mut counts, tk, pk, charge, (period, ends));
        Ok(())
    }

    fn add_locked(
        &self,
        counts: &mut weft_tools::shared::Counting<'_>,
        tenant_key: &str,
        plan_key: &str,
        add: Usage,
        (period, ends): (u64, i64),
    ) {
        if self.config.tenant.is_some() {
            counts.add(tenant_key, period, ends, add);
        }
        if self.config.plan.is_some() {
            counts.add(plan_key, period, ends, add);
        }
    }

    /// Adds what a call used once it ran (model tokens) to the quotas; refuses nothing.
    pub(crate) fn add(&self, keys: &QuotaKeys, used_now: Usage, now_ms: i64) {
        if self.config.plan.is_none() && self.config.tenant.is_none() {
            return;
        }
        let mut counts = self.counts.lock();
        self.add_locked(
            &mut counts,
            &keys.tenant,
            &keys.plan,
            used_now,
            self.period(now_ms),
        );
    }

    /// What `tenant` (and with `plan`, that plan) used in the period of `now_ms`.
    pub fn used(&self, tenant: &str, plan: Option<&str>, now_ms: i64) -> Usage {
        let key = match plan {
            None => tenant_key(tenant),
            Some(p) => plan_key(tenant, p),
        };
        self.counts.lock().total(&key, self.period(now_ms).0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn calls(n: u64) -> PlanLimits {
        PlanLimits {
            max_tool_calls: Some(n),
            ..PlanLimits::default()
        }
    }

    fn one() -> Usage {
        Usage {
            tool_calls: 1,
            ..Usage::default()
        }
    }

    #[test]
    fn quotas_are_shared_per_tenant_and_plan_and_start_again_each_period() {
        let q = Quotas::new(QuotaConfig {
            tenant: Some(calls(3)),
            plan: Some(calls(2)),
            period_ms: 1_000,
            ..QuotaConfig::default()
        });
        assert_eq!(q.charge(&QuotaKeys::new("t", "a"), one(), 10), Ok(()));
        assert_eq!(q.charge(&QuotaKeys::new("t", "a"), one(), 20), Ok(()));
        let over = q.charge(&QuotaKeys::new("t", "a"), one(), 30).unwrap_err();
        assert_eq!(
            (over.scope, over.field, over.used.as_str()),
            ("plan", "max_tool_calls", "3")
        );
        // Refused calls are not counted: another plan of the tenant still has one call.
        assert_eq!(q.charge(&QuotaKeys::new("t", "b"), one(), 40), Ok(()));
        let over = q.charge(&QuotaKeys::new("t", "b"), one(), 50).unwrap_err();
        assert_eq!((over.scope, over.max.as_str()), ("tenant", "3"));
        // Other tenants count apart; a new period starts from zero.
        assert_eq!(q.charge(&QuotaKeys::new("u", "a"), one(), 60), Ok(()));
        assert_eq!(q.charge(&QuotaKeys::new("t", "a"), one(), 1_000), Ok(()));
        assert_eq!(q.used("t", None, 1_000).tool_calls, 1);
        assert_eq!(q.used("t", Some("a"), 999).tool_calls, 0);
    }
}
