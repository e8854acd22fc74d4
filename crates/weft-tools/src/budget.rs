//! The budget stage of the chain: every call of a plan that sets `limits` is counted against
//! them before it runs ([`crate::ToolServices::charge`]), so a call that would go over is refused
//! (`budget_exceeded`, not retried) and never reaches the tool. The engine keeps the count
//! per instance and journals each charge, so it survives a restart.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

/// What an instance's tool calls have used of its plan's `limits`, or what one call counts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Usage {
    /// Tool calls (every attempt).
    #[serde(default)]
    pub tool_calls: u64,
    /// Calls of tools that ask a language model.
    #[serde(default)]
    pub llm_calls: u64,
    /// Sum of the declared costs.
    #[serde(default)]
    pub cost: f64,
    /// Language-model tokens (prompt and completion), known only after a model call.
    #[serde(default, skip_serializing_if = "is_zero_u64")]
    pub llm_tokens: u64,
}

fn is_zero_u64(n: &u64) -> bool {
    *n == 0
}

impl Usage {
    /// What one call of the tool `spec` describes counts.
    pub fn of_call(spec: &ToolSpec) -> Usage {
        Usage {
            tool_calls: 1,
            llm_calls: u64::from(spec.llm),
            cost: spec.cost.unwrap_or(0.0),
            llm_tokens: 0,
        }
    }

    /// Nothing used.
    pub fn is_zero(&self) -> bool {
        *self == Usage::default()
    }

    /// `self` plus `other`.
    #[must_use]
    pub fn plus(self, other: Usage) -> Usage {
        Usage {
            tool_calls: self.tool_calls.saturating_add(other.tool_calls),
            llm_calls: self.llm_calls.saturating_add(other.llm_calls),
            cost: self.cost + other.cost,
            llm_tokens: self.llm_tokens.saturating_add(other.llm_tokens),
        }
    }
}

/// A step's tool in a plan with `limits`, or any tool when the node sets budgets: each call
/// is charged first, on every path (async, immediate, inline). It is immediate when the tool
/// inside is, unless a refused call may wait for the instance to be resumed ([`Budgeted::pausing`]).
pub struct Budgeted {
    inner: Arc<dyn Tool>,
    charge: Usage,
    pausing: bool,
}

impl Budgeted {
    /// `inner`, charging each call before it runs; a refused call fails.
    pub fn wrap(inner: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Budgeted::with(inner, false)
    }

    /// `inner`, charging each call before it runs; a refused call waits while its instance is
    /// paused ([`crate::ToolServices::wait_budget`]) and is charged again once it is resumed.
    pub fn pausing(inner: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Budgeted::with(inner, true)
    }

    fn with(inner: Arc<dyn Tool>, pausing: bool) -> Arc<dyn Tool> {
        let charge = Usage::of_call(inner.spec());
        Arc::new(Budgeted {
            inner,
            charge,
            pausing,
        })
    }
}

/// The chain's budget stage: wraps every tool in [`Budgeted`] (for calls of instances only).
pub struct BudgetLink {
    /// A refused call waits while its instance is paused ([`Budgeted::pausing`]).
    pub pausing: bool,
    /// What `weft config` says of the link.
    pub what: &'static str,
}

impl crate::Interceptor for BudgetLink {
    fn describe(&self) -> String {
        self.what.into()
    }
    fn wrap(&self, tool: Arc<dyn Tool>) -> Arc<dyn Tool> {
        Budgeted::with(tool, self.pausing)
    }
    fn instance_only(&self) -> bool {
        true
    }
}

impl Tool for Budgeted {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn profile_needs(&self) -> Option<crate::Needs> {
        self.inner.profile_needs()
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let refusal = match ctx.services.charge(&ctx, self.charge) {
            Ok(()) => return self.inner.call(ctx, args),
            Err(e) => e,
        };
        let wait = if self.pausing {
            ctx.services.wait_budget(&ctx, &refusal)
        } else {
            None
        };
        let Some(mut wait) = wait else {
            return Box::pin(async move { Err(refusal) });
        };
        let (inner, charge) = (Arc::clone(&self.inner), self.charge);
        Box::pin(async move {
            loop {
                wait.await?;
                match ctx.services.charge(&ctx, charge) {
                    Ok(()) => return inner.call(ctx, args).await,
                    Err(e) => match ctx.services.wait_budget(&ctx, &e) {
                        Some(next) => wait = next,
                        None => return Err(e),
                    },
                }
            }
        })
    }

    // The charge is synchronous: an immediate tool stays immediate (the runtime's inline
    // paths call `call_now` through the default `call_inline`, which charges first), unless a
    // refused call may wait.
    fn is_immediate(&self) -> bool {
        !self.pausing && self.inner.is_immediate()
    }

    // A call that may wait goes the asynchronous way, where the gate waits for the journal
    // itself.
    fn waits_for_journal(&self) -> bool {
        !self.pausing && self.inner.waits_for_journal()
    }

    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        ctx.services.charge(&ctx, self.charge)?;
        self.inner.call_now(ctx, args)
    }
}
