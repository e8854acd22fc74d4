//! The engine's side of the budget stage: an instance of a plan with `limits` (or any
//! instance, when the operator sets budgets: `quota.rs`) counts every tool call before it
//! runs (`ToolServices::charge`, called by `weft_tools::Budgeted`), in its cell, journaled as
//! `Input::Charged` (folded into `Extras::usage`, so recovery goes on counting from where the
//! journal ends). A call that would pass a limit or a quota is refused with `budget_exceeded`
//! (fatal: the step's `on_fail` or a `<step>.failed` listener takes it, else the instance
//! fails; or, with budgets set to pause, the instance is paused and the call waits to be
//! charged again once it is resumed) and `budget.exceeded` is published. `max_wall_ms` is
//! checked at each call against the instance's start.

use serde_json::json;
use weft_core::PlanLimits;
use weft_tools::{ToolContext, ToolError, Usage};

use crate::cell::{Cell, lock};
use crate::journal_hook::Input;

/// An instance's count against its plan's limits.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct Budget {
    /// What its calls used so far.
    pub used: Usage,
    /// When it started (epoch ms), for `max_wall_ms`.
    pub started_ms: i64,
}

/// The first limit a call charging `charge` goes over, `used` being the count with it and
/// `wall_ms` the wall time so far: (field, used, limit). Tokens are known only after a model
/// call, so a model call is refused once the tokens already used reach the limit.
pub(crate) fn over(
    limits: &PlanLimits,
    charge: Usage,
    used: Usage,
    wall_ms: i64,
) -> Option<(&'static str, String, String)> {
    let n = |v: f64| {
        if v.fract() == 0.0 {
            format!("{}", v as i64)
        } else {
            format!("{v}")
        }
    };
    if let Some(max) = limits.max_tool_calls
        && used.tool_calls > max
    {
        return Some((
            "max_tool_calls",
            used.tool_calls.to_string(),
            max.to_string(),
        ));
    }
    if let Some(max) = limits.max_llm_calls
        && used.llm_calls > max
    {
        return Some(("max_llm_calls", used.llm_calls.to_string(), max.to_string()));
    }
    if let Some(max) = limits.max_cost
        && used.cost > max
    {
        return Some(("max_cost", n(used.cost), n(max)));
    }
    if let Some(max) = limits.max_llm_tokens
        && charge.llm_calls > 0
        && used.llm_tokens >= max
    {
        return Some((
            "max_llm_tokens",
            used.llm_tokens.to_string(),
            max.to_string(),
        ));
    }
    if let Some(max) = limits.max_wall_ms
        && wall_ms > i64::try_from(max).unwrap_or(i64::MAX)
    {
        return Some(("max_wall_ms", wall_ms.to_string(), max.to_string()));
    }
    None
}

impl Cell {
    /// Whether calls of an instance of `plan` are counted at all.
    fn counts(&self, plan: &crate::CompiledPlan) -> bool {
        plan.plan.limits.is_some()
            || self
                .engine
                .quotas
                .as_ref()
                .is_some_and(|q| q.config.counts_every_call())
    }

    /// The quota counters this instance charges: its tenant's and the plan it started as.
    fn quota_keys(&self) -> &crate::quota::QuotaKeys {
        self.quota_keys
            .get_or_init(|| crate::quota::QuotaKeys::new(&self.tenant, &self.plan_name))
    }

    /// Whether this instance's calls are counted at all.
    pub(crate) fn counted(&self) -> bool {
        self.counts(&self.plan())
    }

    /// Counts one call of `ctx`'s firing (see the module docs).
    pub(crate) fn charge_call(&self, ctx: &ToolContext, charge: Usage) -> Result<(), ToolError> {
        let plan = self.plan();
        if !self.counts(&plan) {
            return Ok(());
        }
        // The instance's own limits: its plan's, else the operator's for every instance.
        let limits = plan.plan.limits.as_ref().or_else(|| {
            self.engine
                .quotas
                .as_ref()
                .and_then(|q| q.config.instance.as_ref())
        });
        let now = self.engine.clock.now_ms();
        let mut b = lock(&self.budget);
        let next = b.used.plus(charge);
        let own = limits
            .and_then(|l| over(l, charge, next, now.saturating_sub(b.started_ms)))
            .map(|(field, used, max)| crate::quota::Over {
                scope: "instance",
                field,
                used,
                max,
            });
        let refused = match own {
            Some(o) => Some(o),
            None => self
                .engine
                .quotas
                .as_ref()
                .and_then(|q| q.charge(self.quota_keys(), charge, now).err()),
        };
        if let Some(o) = refused {
            let before = b.used;
            drop(b);
            self.publish("budget.exceeded", || {
                json!({"step": &*ctx.step, "scope": o.scope, "limit": o.field, "used": &o.used,
                    "max": &o.max, "usage": before})
            });
            let whose = match o.scope {
                "instance" if plan.plan.limits.is_some() => {
                    format!("`limits.{}` = {} of plan `{}`", o.field, o.max, plan.name)
                }
                "instance" => format!("the budget of every instance, `{}` = {}", o.field, o.max),
                "plan" => format!(
                    "the quota of plan `{}` in this period, `{}` = {}",
                    plan.name, o.field, o.max
                ),
                _ => format!(
                    "the quota of tenant `{}` in this period, `{}` = {}",
                    self.tenant, o.field, o.max
                ),
            };
            let target = if o.scope == "instance" {
                "the instance"
            } else {
                "it"
            };
            return Err(ToolError::fatal(
                "budget_exceeded",
                format!(
                    "the call of step `{}` would take {target} to {} against {whose}; it was not made",
                    ctx.step, o.used
                ),
            ));
        }
        b.used = next;
        drop(b);
        self.journal_charge(ctx, charge, now);
        Ok(())
    }

    /// [`weft_tools::ToolServices::wait_budget`]: with budgets set to pause, a call refused
    /// over one pauses the instance and waits until it is resumed (`Ok`: charge again) or
    /// stopped.
    pub(crate) fn budget_wait(
        &self,
        refusal: &ToolError,
    ) -> Option<weft_tools::BoxFuture<'static, Result<(), ToolError>>> {
        let pause = self
            .engine
            .quotas
            .as_ref()
            .is_some_and(|q| q.config.on_exceeded == crate::quota::OnExceeded::Pause);
        if !pause || refusal.code != "budget_exceeded" {
            return None;
        }
        let cell = self.me.upgrade()?;
        let reason = format!("{} (resume to try the call again)", refusal.message);
        Some(Box::pin(async move {
            let resumed = cell.resumed.notified();
            tokio::pin!(resumed);
            resumed.as_mut().enable();
            cell.submit(Input::Pause { reason });
            resumed.await;
            if cell.stopped.load(std::sync::atomic::Ordering::Acquire) {
                return Err(ToolError::fatal(
                    "budget_exceeded",
                    "the instance was stopped while its call waited over a budget",
                ));
            }
            Ok(())
        }))
    }

    /// Records `charge` of `ctx`'s firing (`Input::Charged`, folded into `Extras::usage`).
    fn journal_charge(&self, ctx: &ToolContext, charge: Usage, now: i64) {
        if let Some(j) = &self.engine.journal {
            j.record(
                &self.tenant,
                &self.name,
                &Input::Charged {
                    key: ctx.idempotency_key.to_string(),
                    charge,
                    now,
                },
            );
        }
    }

    /// Adds what a call used once it ran (see `ToolServices::record_usage`), journaled.
    pub(crate) fn add_usage(&self, ctx: &ToolContext, used: Usage) {
        if used.is_zero() || !self.counted() {
            return;
        }
        {
            let mut b = lock(&self.budget);
            b.used = b.used.plus(used);
        }
        let now = self.engine.clock.now_ms();
        if let Some(q) = &self.engine.quotas {
            q.add(self.quota_keys(), used, now);
        }
        self.journal_charge(ctx, used, now);
    }

    /// What the instance's calls used of its plan's limits (zero for a plan without any).
    pub(crate) fn usage(&self) -> Usage {
        lock(&self.budget).used
    }
}
