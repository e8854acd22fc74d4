//! The budget stage of the chain: every call of a plan that sets `limits` is counted against
//! them before it runs ([`crate::ToolServices::charge`]), so a call that would go over is refused
//! (`budget_exceeded`, not retried) and never reaches the tool. The engine keeps the count
//! per instance and journals each charge, so it survives a restart.

use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::{BoxFuture, InlineArgs, InlineContext, Tool, ToolContext, ToolError, ToolSpec};

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

/// A step's tool in a plan with `limits`: each call is charged first, on every path (async,
/// immediate, inline); it is immediate when the tool inside is.
pub struct Budgeted {
    inner: Arc<dyn Tool>,
    charge: Usage,
}

impl Budgeted {
    /// `inner`, charging each call before it runs.
    pub fn wrap(inner: Arc<dyn Tool>) -> Arc<dyn Tool> {
        let charge = Usage::of_call(inner.spec());
        Arc::new(Budgeted { inner, charge })
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
        if let Err(e) = ctx.services.charge(&ctx, self.charge) {
            return Box::pin(async move { Err(e) });
        }
        self.inner.call(ctx, args)
    }

    // The charge is synchronous: an immediate tool stays immediate (the runtime's inline
    // paths call `call_inline`, which charges first).
    fn is_immediate(&self) -> bool {
        self.inner.is_immediate()
    }

    fn waits_for_journal(&self) -> bool {
        self.inner.waits_for_journal()
    }

    fn call_inline(
        &self,
        ctx: InlineContext<'_>,
        args: InlineArgs<'_>,
    ) -> Result<Value, ToolError> {
        self.call_now(ctx.into_context(), args.into_value())
    }

    fn call_now(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        ctx.services.charge(&ctx, self.charge)?;
        self.inner.call_now(ctx, args)
    }
}
