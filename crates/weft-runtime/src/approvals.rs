//! Human approvals in the engine: a firing that needs one waits in its tool call (the
//! `Approved` wrapper or a policy link calls [`weft_tools::ToolServices::await_approval`])
//! until a person decides through [`Engine::decide_approval`], or its deadline applies the
//! default. Requests and decisions are journaled ([`Input::ApprovalRequested`],
//! [`Input::ApprovalDecided`]) and folded into [`crate::Extras`], so they survive a restart:
//! the re-dispatched call finds its request (no second one) or its decision (no second wait).
//! The call waits before the journal gate, so an approved effect is dispatched once: a
//! pending approval has no `action.dispatched` record, and recovery simply asks again.
//!
//! Lifecycle events: `approval.requested` `{step, firing, key, reasons, deadline_ms,
//! default}` when a firing starts waiting, `approval.decided` `{step, firing, key, granted,
//! principal, comment}` when it is decided.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use serde::Serialize;
use serde_json::json;
use tokio::sync::oneshot;
use weft_core::token::FiringId;
use weft_tools::{ApprovalDecision, ApprovalRequest, BoxFuture, ToolContext, ToolError};

use crate::cell::{Cell, lock};
use crate::engine::Engine;
use crate::error::Error;
use crate::journal_hook::{Decided, Input, PendingApproval};

/// Who decides when the deadline passes.
pub(crate) const DEADLINE_PRINCIPAL: &str = "weft:deadline";

/// An approval the instance keeps while its firing is in flight, with its waiting calls.
pub(crate) struct Live {
    pub record: PendingApproval,
    waiters: Vec<oneshot::Sender<ApprovalDecision>>,
}

impl Live {
    pub(crate) fn restored(record: PendingApproval) -> Self {
        Live {
            record,
            waiters: Vec::new(),
        }
    }
}

/// An approval as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ApprovalView {
    /// The firing's idempotency key.
    pub key: String,
    /// The step.
    pub step: String,
    /// The firing.
    pub firing: FiringId,
    /// What the approver is asked.
    pub reasons: Vec<String>,
    /// When it was asked (epoch ms).
    pub requested_ms: i64,
    /// When the default decision applies (epoch ms).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deadline_ms: Option<i64>,
    /// The decision at the deadline: `grant` or `deny`.
    pub default: &'static str,
    /// The decision, once made.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub decision: Option<Decided>,
}

impl ApprovalView {
    /// The view of a recorded approval (live, or folded from a journal).
    pub fn of(key: &str, r: &PendingApproval) -> Self {
        ApprovalView {
            key: key.to_string(),
            step: r.step.clone(),
            firing: r.firing,
            reasons: r.reasons.clone(),
            requested_ms: r.requested_ms,
            deadline_ms: r.deadline_ms,
            default: if r.default_grant { "grant" } else { "deny" },
            decision: r.decision.clone(),
        }
    }
}

fn decision_of(d: &Decided) -> ApprovalDecision {
    ApprovalDecision {
        granted: d.granted,
        principal: d.principal.clone(),
        comment: d.comment.clone(),
    }
}

/// The firing number at the end of an idempotency key (`<instance>/<step>/<firing>`).
fn firing_of(key: &str) -> FiringId {
    key.rsplit('/')
        .next()
        .and_then(|f| f.parse().ok())
        .unwrap_or_default()
}

impl Cell {
    /// [`weft_tools::ToolServices::await_approval`] for this instance.
    pub(crate) fn approval_wait(
        &self,
        ctx: &ToolContext,
        request: ApprovalRequest,
    ) -> BoxFuture<'static, Result<ApprovalDecision, ToolError>> {
        let Some(cell) = self.me.upgrade() else {
            return Box::pin(async {
                Err(ToolError::fatal("instance_ended", "the instance has ended"))
            });
        };
        let key = ctx.idempotency_key.to_string();
        let rx = {
            let mut map = lock(&self.approvals);
            let live = match map.get_mut(&key) {
                Some(live) => live,
                None => {
                    let now = self.engine.clock.now_ms();
                    let record = PendingApproval {
                        step: ctx.step.to_string(),
                        firing: firing_of(&key),
                        reasons: request.reasons,
                        requested_ms: now,
                        deadline_ms: request
                            .timeout_ms
                            .map(|t| now.saturating_add(i64::try_from(t).unwrap_or(i64::MAX))),
                        default_grant: request.default_grant,
                        decision: None,
                    };
                    if let Some(j) = &self.engine.journal {
                        j.record(
                            &self.tenant,
                            &self.name,
                            &Input::ApprovalRequested {
                                key: key.clone(),
                                step: record.step.clone(),
                                firing: record.firing,
                                reasons: record.reasons.clone(),
                                deadline_ms: record.deadline_ms,
                                default_grant: record.default_grant,
                                now,
                            },
                        );
                        // Nothing is dispatched while the call waits: write the request now.
                        j.idle(&self.tenant, &self.name);
                    }
                    self.asked_approval.store(true, Ordering::Relaxed);
                    let view = ApprovalView::of(&key, &record);
                    self.publish("approval.requested", || {
                        serde_json::to_value(&view).unwrap_or_default()
                    });
                    map.entry(key.clone()).or_insert(Live {
                        record,
                        waiters: Vec::new(),
                    })
                }
            };
            if let Some(d) = &live.record.decision {
                let d = decision_of(d);
                return Box::pin(async move { Ok(d) });
            }
            let (tx, rx) = oneshot::channel();
            live.waiters.push(tx);
            (rx, live.record.deadline_ms, live.record.default_grant)
        };
        let (rx, deadline, default_grant) = rx;
        let clock = Arc::clone(&self.engine.clock);
        Box::pin(async move {
            let expired = async {
                match deadline {
                    Some(d) => {
                        let wait = d.saturating_sub(clock.now_ms()).max(0);
                        clock.sleep(u64::try_from(wait).unwrap_or(0)).await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                d = rx => d.map_err(|_| ToolError::retryable(
                    "instance_ended",
                    "the instance ended while the call waited for its approval",
                )),
                () = expired => {
                    let comment = Some("no decision before the deadline".to_string());
                    match cell.decide(&key, default_grant, DEADLINE_PRINCIPAL, comment) {
                        Ok((d, _)) => Ok(d),
                        // Decided meanwhile: that decision stands.
                        Err(_) => lock(&cell.approvals)
                            .get(&key)
                            .and_then(|l| l.record.decision.as_ref().map(decision_of))
                            .ok_or_else(|| ToolError::retryable(
                                "instance_ended",
                                "the instance ended while the call waited for its approval",
                            )),
                    }
                }
            }
        })
    }

    /// Records a decision of the pending approval `key` and wakes the calls waiting on it.
    pub(crate) fn decide(
        &self,
        key: &str,
        granted: bool,
        principal: &str,
        comment: Option<String>,
    ) -> Result<(ApprovalDecision, ApprovalView), Error> {
        let mut map = lock(&self.approvals);
        let Some(live) = map.get_mut(key) else {
            return Err(Error::NoApproval {
                instance: self.name.to_string(),
                step: key.to_string(),
            });
        };
        if let Some(d) = &live.record.decision {
            return Err(Error::AlreadyDecided {
                instance: self.name.to_string(),
                step: live.record.step.clone(),
                granted: d.granted,
                principal: d.principal.clone(),
            });
        }
        let now = self.engine.clock.now_ms();
        if let Some(j) = &self.engine.journal {
            j.record(
                &self.tenant,
                &self.name,
                &Input::ApprovalDecided {
                    key: key.to_string(),
                    granted,
                    principal: principal.to_string(),
                    comment: comment.clone(),
                    now,
                },
            );
            j.idle(&self.tenant, &self.name);
        }
        let decided = Decided {
            granted,
            principal: principal.to_string(),
            comment,
            at_ms: now,
        };
        live.record.decision = Some(decided.clone());
        let decision = decision_of(&decided);
        for w in live.waiters.drain(..) {
            let _ = w.send(decision.clone());
        }
        let view = ApprovalView::of(key, &live.record);
        drop(map);
        self.publish("approval.decided", || {
            let mut v = serde_json::to_value(&view).unwrap_or_default();
            if let Some(o) = v.as_object_mut() {
                o.remove("decision");
                o.insert("granted".into(), json!(granted));
                o.insert("principal".into(), json!(decided.principal));
                o.insert("comment".into(), json!(decided.comment));
            }
            v
        });
        Ok((decision, view))
    }

    /// Drops the approvals of `firing` once its outcome is applied.
    pub(crate) fn forget_approvals(&self, firing: FiringId) {
        if !self.asked_approval.load(Ordering::Relaxed) {
            return;
        }
        let mut map = lock(&self.approvals);
        if map.is_empty() {
            return;
        }
        let suffix = format!("/{firing}");
        map.retain(|k, _| !k.ends_with(&suffix));
    }

    /// The approvals of firings in flight, oldest first.
    pub(crate) fn approval_views(&self) -> Vec<ApprovalView> {
        let map = lock(&self.approvals);
        let mut v: Vec<ApprovalView> = map
            .iter()
            .map(|(k, l)| ApprovalView::of(k, &l.record))
            .collect();
        v.sort_by_key(|a| a.firing);
        v
    }

    /// Whether a firing waits for a person's decision.
    pub(crate) fn awaits_approval(&self) -> bool {
        let map = lock(&self.approvals);
        !map.is_empty() && map.values().any(|l| l.record.decision.is_none())
    }
}

impl Engine {
    /// The approvals of a live instance's firings in flight (pending and decided), oldest
    /// first. `None` when no such instance is live here.
    pub fn approvals(&self, instance: &str) -> Option<Vec<ApprovalView>> {
        self.handle(instance).map(|h| h.cell.approval_views())
    }

    /// Decides the oldest pending approval of `step` (or of firing `firing` of it) of a live
    /// instance: a grant lets its call go ahead, a denial fails it with `approval_denied`.
    /// The decision is journaled before the waiting call hears of it.
    pub fn decide_approval(
        &self,
        instance: &str,
        step: &str,
        firing: Option<FiringId>,
        granted: bool,
        principal: &str,
        comment: Option<String>,
    ) -> Result<ApprovalView, Error> {
        let h = self
            .handle(instance)
            .ok_or_else(|| Error::UnknownInstance(instance.to_string()))?;
        let cell = &h.cell;
        let views = cell.approval_views();
        let mine = views
            .iter()
            .filter(|a| a.step == step && firing.is_none_or(|f| a.firing == f));
        let target = mine
            .clone()
            .find(|a| a.decision.is_none())
            .or_else(|| mine.clone().next_back())
            .ok_or_else(|| Error::NoApproval {
                instance: instance.to_string(),
                step: step.to_string(),
            })?;
        // The view comes from the decision itself: the call it wakes may finish (and its
        // approval be forgotten) before this returns.
        cell.decide(&target.key, granted, principal, comment)
            .map(|(_, view)| view)
    }
}
