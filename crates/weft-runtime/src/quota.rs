//! Budgets set by the operator rather than the plan: limits for every instance whose plan sets
//! none, and quotas shared by all instances of one plan, or of one tenant, within a period
//! (say a day). They are counted at the budget stage with a plan's own `limits`
//! (`Cell::charge_call`), before a call runs. What happens to a call over a budget is the
//! operator's choice too: it fails (`budget_exceeded`, as for a plan's own limits) or the
//! instance is paused until someone resumes it, when the call is charged again (a quota may
//! have a new period by then).
//!
//! The shared counts are this process's: they start at zero when it starts and when a new
//! period begins (periods are aligned on the epoch), and several processes count apart.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use weft_core::PlanLimits;
use weft_tools::Usage;

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

/// One tenant's counts in their periods: its own, and each of its plans'.
#[derive(Debug, Default)]
struct Counts {
    tenant: (u64, Usage),
    plans: HashMap<Arc<str>, (u64, Usage)>,
}

/// `used` in `period`, or nothing when it counted an earlier period.
fn in_period(c: Option<&(u64, Usage)>, period: u64) -> Usage {
    c.filter(|(p, _)| *p == period)
        .map_or(Usage::default(), |(_, u)| *u)
}

/// Adds `add` to `c` in `period` (starting it again when it counted an earlier one).
fn count(c: &mut (u64, Usage), period: u64, add: Usage) {
    if c.0 != period {
        *c = (period, Usage::default());
    }
    c.1 = c.1.plus(add);
}

/// The shared counts (see the module docs).
#[derive(Debug)]
pub struct Quotas {
    /// The configuration.
    pub config: QuotaConfig,
    used: Mutex<HashMap<Arc<str>, Counts>>,
}

impl Quotas {
    /// Counts for `config`.
    pub fn new(config: QuotaConfig) -> Quotas {
        Quotas {
            config,
            used: Mutex::new(HashMap::new()),
        }
    }

    fn period(&self, now_ms: i64) -> u64 {
        u64::try_from(now_ms).unwrap_or(0) / self.config.period_ms.max(1)
    }

    /// Charges `charge` to `tenant`'s and `plan`'s quotas at `now_ms`, unless that passes one
    /// (then nothing is charged).
    pub(crate) fn charge(
        &self,
        tenant: &str,
        plan: &str,
        charge: Usage,
        now_ms: i64,
    ) -> Result<(), Over> {
        let c = &self.config;
        if c.plan.is_none() && c.tenant.is_none() {
            return Ok(());
        }
        let period = self.period(now_ms);
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let counts = used.get(tenant);
        let tenant_now = in_period(counts.map(|k| &k.tenant), period);
        let plan_now = in_period(counts.and_then(|k| k.plans.get(plan)), period);
        for (scope, limits, now) in [
            ("tenant", c.tenant.as_ref(), tenant_now),
            ("plan", c.plan.as_ref(), plan_now),
        ] {
            let Some(limits) = limits else { continue };
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
        self.add_locked(&mut used, tenant, plan, charge, period);
        Ok(())
    }

    fn add_locked(
        &self,
        used: &mut HashMap<Arc<str>, Counts>,
        tenant: &str,
        plan: &str,
        add: Usage,
        period: u64,
    ) {
        let counts = match used.get_mut(tenant) {
            Some(k) => k,
            None => used.entry(Arc::from(tenant)).or_default(),
        };
        if self.config.tenant.is_some() {
            count(&mut counts.tenant, period, add);
        }
        if self.config.plan.is_some() {
            let p = match counts.plans.get_mut(plan) {
                Some(p) => p,
                None => counts.plans.entry(Arc::from(plan)).or_default(),
            };
            count(p, period, add);
        }
    }

    /// Adds what a call used once it ran (model tokens) to the quotas; refuses nothing.
    pub(crate) fn add(&self, tenant: &str, plan: &str, used_now: Usage, now_ms: i64) {
        if self.config.plan.is_none() && self.config.tenant.is_none() {
            return;
        }
        let period = self.period(now_ms);
        let mut used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        self.add_locked(&mut used, tenant, plan, used_now, period);
    }

    /// What `tenant` (and with `plan`, that plan) used in the period of `now_ms`.
    pub fn used(&self, tenant: &str, plan: Option<&str>, now_ms: i64) -> Usage {
        let period = self.period(now_ms);
        let used = self.used.lock().unwrap_or_else(|e| e.into_inner());
        let counts = used.get(tenant);
        match plan {
            None => in_period(counts.map(|k| &k.tenant), period),
            Some(p) => in_period(counts.and_then(|k| k.plans.get(p)), period),
        }
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
        assert_eq!(q.charge("t", "a", one(), 10), Ok(()));
        assert_eq!(q.charge("t", "a", one(), 20), Ok(()));
        let over = q.charge("t", "a", one(), 30).unwrap_err();
        assert_eq!(
            (over.scope, over.field, over.used.as_str()),
            ("plan", "max_tool_calls", "3")
        );
        // Refused calls are not counted: another plan of the tenant still has one call.
        assert_eq!(q.charge("t", "b", one(), 40), Ok(()));
        let over = q.charge("t", "b", one(), 50).unwrap_err();
        assert_eq!((over.scope, over.max.as_str()), ("tenant", "3"));
        // Other tenants count apart; a new period starts from zero.
        assert_eq!(q.charge("u", "a", one(), 60), Ok(()));
        assert_eq!(q.charge("t", "a", one(), 1_000), Ok(()));
        assert_eq!(q.used("t", None, 1_000).tool_calls, 1);
        assert_eq!(q.used("t", Some("a"), 999).tool_calls, 0);
    }
}
