//! Human approvals at the tool interface: what a call asks a person ([`ApprovalRequest`]),
//! what the person decided ([`ApprovalDecision`]), and [`Approved`], the wrapper that waits
//! for a grant before it calls the tool inside. The engine keeps and journals the requests
//! and decisions ([`crate::ToolServices::await_approval`]); this module only says how a
//! call waits for one, so a plan's `approval` and a policy's `require_approval` wait the
//! same way.

use std::sync::Arc;

use serde_json::Value;

use crate::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

/// What a call asks a person.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApprovalRequest {
    /// Why an approval is needed (the plan's `approval.reason`, the policy's reasons).
    pub reasons: Vec<String>,
    /// How long to wait before `default_grant` decides, in milliseconds; `None`: no limit.
    pub timeout_ms: Option<u64>,
    /// The decision when the wait runs out.
    pub default_grant: bool,
}

/// What a person (or the deadline) decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApprovalDecision {
    /// Whether the call may go ahead.
    pub granted: bool,
    /// Who decided (the API caller's principal, or `weft:deadline`).
    pub principal: String,
    /// The decider's comment.
    pub comment: Option<String>,
}

impl ApprovalDecision {
    /// The step error of a denial: `approval_denied`, not retried.
    pub fn denied_error(&self, step: &str) -> ToolError {
        ToolError::fatal(
            "approval_denied",
            format!(
                "step `{step}` was denied by {}{}",
                self.principal,
                self.comment
                    .as_deref()
                    .map(|c| format!(": {c}"))
                    .unwrap_or_default()
            ),
        )
    }
}

/// Waits for the approval of this call, then calls `inner`; a denial is `approval_denied`.
pub fn approve_then_call(
    inner: Arc<dyn Tool>,
    request: ApprovalRequest,
    ctx: ToolContext,
    args: Value,
) -> BoxFuture<'static, Result<Value, ToolError>> {
    Box::pin(async move {
        let decision = ctx.services.await_approval(&ctx, request).await?;
        if !decision.granted {
            return Err(decision.denied_error(&ctx.step));
        }
        inner.call(ctx, args).await
    })
}

/// A step's tool behind the step's `approval`: every call waits for a person first. Never
/// immediate (the wait is a future), whatever the tool inside is.
pub struct Approved {
    inner: Arc<dyn Tool>,
    request: ApprovalRequest,
}

impl Approved {
    /// `inner`, asking `request` before every call.
    pub fn wrap(inner: Arc<dyn Tool>, request: ApprovalRequest) -> Arc<dyn Tool> {
        Arc::new(Approved { inner, request })
    }
}

impl Tool for Approved {
    fn spec(&self) -> &ToolSpec {
        self.inner.spec()
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        approve_then_call(Arc::clone(&self.inner), self.request.clone(), ctx, args)
    }

    fn is_immediate(&self) -> bool {
        false
    }

    fn waits_for_journal(&self) -> bool {
        false
    }

    fn profile_needs(&self) -> Option<crate::Needs> {
        self.inner.profile_needs()
    }
}
