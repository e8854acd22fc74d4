//! The engine's side of the budget stage: an instance of a plan with `limits` counts every
//! tool call before it runs (`ToolServices::charge`, called by `weft_tools::Budgeted`), in
//! its cell, journaled as `Input::Charged` (folded into `Extras::usage`, so recovery goes on
//! counting from where the journal ends). A call that would pass a limit is refused with
//! `budget_exceeded` (fatal: the step's `on_fail` or a `<step>.failed` listener takes it, else
//! the instance fails) and `budget.exceeded` is published. `max_wall_ms` is checked at each
//! call against the instance's start.

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
fn over(
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
    /// Counts one call of `ctx`'s firing (see the module docs).
    pub(crate) fn charge_call(&self, ctx: &ToolContext, charge: Usage) -> Result<(), ToolError> {
        let plan = self.plan();
        let Some(limits) = plan.plan.limits.as_ref() else {
            return Ok(());
        };
        let now = self.engine.clock.now_ms();
        let mut b = lock(&self.budget);
        let next = b.used.plus(charge);
        if let Some((field, used, max)) =
            over(limits, charge, next, now.saturating_sub(b.started_ms))
        {
            let before = b.used;
            drop(b);
            self.publish("budget.exceeded", || {
                json!({"step": &*ctx.step, "limit": field, "used": used, "max": max,
                    "usage": before})
            });
            return Err(ToolError::fatal(
                "budget_exceeded",
                format!(
                    "the call of step `{}` would take the instance to {used} against `limits.{field}` = {max} of plan `{}`; it was not made",
                    ctx.step, plan.name
                ),
            ));
        }
        b.used = next;
        drop(b);
        self.journal_charge(ctx, charge, now);
        Ok(())
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
        if used.is_zero() || self.plan().plan.limits.is_none() {
            return;
        }
        {
            let mut b = lock(&self.budget);
            b.used = b.used.plus(used);
        }
        self.journal_charge(ctx, used, self.engine.clock.now_ms());
    }

    /// What the instance's calls used of its plan's limits (zero for a plan without any).
    pub(crate) fn usage(&self) -> Usage {
        lock(&self.budget).used
    }
}
