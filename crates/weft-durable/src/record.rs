//! Journal records: how each runtime [`Input`] is written (kind + JSON body) and read back,
//! and the fold that rebuilds an instance from them with the pure core.
//!
//! Kinds (the body of each is a JSON object):
//! - `instance.started` `{v, tenant, plan, plan_version, input, now, request_id?}` (`v` is
//!   the record schema version; a journal with a newer `v` is refused with `journal_too_new`);
//! - `token.added` `{event, payload, correlation, now, request_id?}`;
//! - `timer.set` `{timer_id, event, payload, due_ms, cron, remaining, key, now}`: written
//!   while `timer.after` / `at` / `cron` runs, before its outcome;
//! - `timer.fired` `{timer_id, event, payload, now, late_ms, next_due_ms}` (`late_ms`: how
//!   long after its due time it fired, large for a timer that came due while weft was down;
//!   `next_due_ms`: a cron timer's next occurrence, absent when it does not fire again);
//! - `context.put` `{key, value, now}`: a write to the instance's key-value context;
//! - `action.result` `{firing, result, now}` / `action.error` `{firing, error, now}`;
//! - `instance.paused` `{reason}`, `instance.resumed` `{}`, `instance.stopped`
//!   `{reason, request_id?}`;
//! - `action.dispatched` `{firing, step, key, attempt, idempotent}`: derived, written by the
//!   dispatch gate just before a tool is called; the fold ignores it for the marking but
//!   recovery needs it (a dispatched action without a result may have taken effect);
//! - `repair.applied` `{document, hash, version, marking, reason, now}`: the instance moved
//!   onto the revised plan `document` (the whole plan, so the record is self-contained);
//!   records after it name events of that plan, and the fold, snapshots and recovery
//!   continue on it ([`Folded::repaired`]);
//! - `repair.failed` `{reason}`: a repair could not be made; the instance failed.
//! - `approval.requested` `{key, step, firing, reasons, deadline_ms, default_grant, now}`:
//!   a firing waits for a person before its tool is called (written once per firing);
//! - `approval.decided` `{key, granted, principal, comment, now}`: its decision (by a
//!   person, or `weft:deadline` applying the default).
//!
//! Events are written by name, so a record stays readable without the compiled net.
//!
//! `request_id` (optional, written only when known) is the `X-Request-Id` of the HTTP
//! request that caused the record (see `Durable::start_compiled_with`, `Durable::ingest_with`, `Durable::stop_with`); it is not part of
//! the runtime input, so replay ignores it, and a record without one is byte-identical to
//! one written before the field existed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_core::token::FiringId;
use weft_core::{ActionError, Instance, Net};
use weft_runtime::{Extras, Input, Repair};
use weft_store::{NewRecord, Record};

use crate::error::DurableError;

/// Version of the record bodies this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// A decoded journal record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    /// `instance.started`.
    Started {
        /// Record schema version.
        v: u32,
        /// Tenant.
        tenant: String,
        /// Plan name.
        plan: String,
        /// Stored plan version.
        plan_version: u32,
        /// Instance input.
        input: Value,
        /// Clock time.
        now: i64,
        /// `X-Request-Id` of the request that caused it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
        /// How deep in `plan.run` children the instance is (absent: 0, started from outside).
        #[serde(default, skip_serializing_if = "is_zero")]
        depth: u32,
    },
    /// `token.added`.
    Token {
        /// Event name.
        event: String,
        /// Payload.
        payload: Value,
        /// Correlation.
        correlation: Option<String>,
        /// Clock time.
        now: i64,
        /// `X-Request-Id` of the request that caused it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// `timer.fired`.
    Timer {
        /// Timer id.
        timer_id: u64,
        /// Event name.
        event: String,
        /// Payload.
        payload: Value,
        /// Clock time.
        now: i64,
        /// How late it fired (`now - due`), when known.
        #[serde(rename = "late_ms", alias = "lateness_ms", default)]
        lateness_ms: Option<i64>,
        /// A repeating timer's next due time (absent: it does not fire again).
        #[serde(default)]
        next_due_ms: Option<i64>,
    },
    /// `action.result` / `action.error`.
    Outcome {
        /// Firing.
        firing: FiringId,
        /// The result (shared with the runtime's input, not copied) or the error.
        result: Result<Arc<Value>, ActionError>,
        /// Clock time.
        now: i64,
    },
    /// `instance.paused`.
    Paused {
        /// Why.
        reason: String,
    },
    /// `instance.resumed`.
    Resumed,
    /// `instance.stopped`.
    Stopped {
        /// Why.
        reason: String,
        /// `X-Request-Id` of the request that caused it.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        request_id: Option<String>,
    },
    /// `action.dispatched` (derived).
    Dispatched {
        /// Firing.
        firing: FiringId,
        /// Step name.
        step: String,
        /// Idempotency key.
        key: String,
        /// Attempt.
        attempt: u32,
        /// Whether the tool is idempotent.
        idempotent: bool,
    },
    /// `timer.set`.
    TimerSet {
        /// Timer id.
        timer_id: u64,
        /// Event name.
        event: String,
        /// Payload.
        payload: Value,
        /// Due time (epoch ms).
        due_ms: i64,
        /// Cron expression of a repeating timer.
        #[serde(default)]
        cron: Option<String>,
        /// How many more times it fires at most.
        #[serde(default)]
        remaining: Option<u32>,
        /// Idempotency key of the firing that set it.
        key: String,
        /// Clock time.
        now: i64,
    },
    /// `context.put`.
    ContextPut {
        /// Key.
        key: String,
        /// Value.
        value: Value,
        /// Clock time.
        now: i64,
    },
    /// `repair.applied`.
    Repaired {
        /// The revised plan document.
        document: Value,
        /// SHA-256 of the document.
        hash: String,
        /// Repairs of this instance so far (1 for the first).
        version: u32,
        /// Tokens per event after the repair.
        marking: BTreeMap<String, usize>,
        /// The failure that asked for it.
        reason: String,
        /// Clock time.
        now: i64,
    },
    /// `repair.failed`.
    RepairFailed {
        /// Why.
        reason: String,
    },
    /// `approval.requested`.
    ApprovalRequested {
        /// Idempotency key of the firing.
        key: String,
        /// Step.
        step: String,
        /// Firing.
        firing: FiringId,
        /// What the approver is asked.
        reasons: Vec<String>,
        /// When the default decision applies.
        #[serde(default)]
        deadline_ms: Option<i64>,
        /// The decision at the deadline.
        #[serde(default)]
        default_grant: bool,
        /// Clock time.
        now: i64,
    },
    /// `approval.decided`.
    ApprovalDecided {
        /// Idempotency key of the firing.
        key: String,
        /// Whether the call may go ahead.
        granted: bool,
        /// Who decided.
        principal: String,
        /// Their comment.
        #[serde(default)]
        comment: Option<String>,
        /// Clock time.
        now: i64,
    },
    /// A policy decided on a call before it ran.
    PolicyDecided {
        /// Idempotency key of the firing.
        key: String,
        /// The attempt.
        attempt: u32,
        /// What the policy decided, and why.
        decision: weft_tools::PolicyDecision,
        /// Clock time.
        now: i64,
    },
    /// A tool call of a plan with `limits` was counted against them, before it ran.
    BudgetCharged {
        /// Idempotency key of the firing.
        key: String,
        /// What the call counts for.
        charge: weft_runtime::Usage,
        /// Clock time.
        now: i64,
    },
}

/// The plan an instance runs after a repair: what the fold, snapshots and recovery need.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepairedPlan {
    /// The revised plan document.
    pub document: Value,
    /// SHA-256 of the document.
    pub hash: String,
    /// Repairs applied so far.
    pub version: u32,
}

/// Compiles a revised plan document from the journal into a net (no tool check: the plan
/// was checked against the registry when the repair was applied).
pub(crate) fn compile_document(document: &Value) -> Result<Arc<Net>, DurableError> {
    let limits = weft_core::Limits::default();
    let bad = |m: String| DurableError::Journal {
        message: format!("the repaired plan in the journal does not compile: {m}"),
    };
    let plan = weft_core::load::plan_from_value(document.clone(), &limits)
        .map_err(|e| bad(e.to_string()))?;
    let v = weft_core::validate(&plan, None, &limits);
    match v.net {
        Some(net) if !v.has_errors() => Ok(Arc::new(net)),
        _ => Err(bad(v
            .findings
            .iter()
            .filter(|f| f.is_error())
            .map(|f| format!("{} {}", f.code, f.message))
            .collect::<Vec<_>>()
            .join("; "))),
    }
}

#[derive(Serialize, Deserialize)]
struct OutcomeOk {
    firing: FiringId,
    result: Value,
    now: i64,
}

#[derive(Serialize, Deserialize)]
struct OutcomeErr {
    firing: FiringId,
    error: ActionError,
    now: i64,
}

fn event_name(net: &Net, id: weft_core::EventId) -> String {
    net.events
        .get(id as usize)
        .map_or_else(|| format!("#{id}"), |e| e.name.clone())
}

impl Entry {
    /// The record kind.
    pub fn kind(&self) -> &'static str {
        match self {
            Entry::Started { .. } => "instance.started",
            Entry::Token { .. } => "token.added",
            Entry::Timer { .. } => "timer.fired",
            Entry::Outcome { result: Ok(_), .. } => "action.result",
            Entry::Outcome { result: Err(_), .. } => "action.error",
            Entry::Paused { .. } => "instance.paused",
            Entry::Resumed => "instance.resumed",
            Entry::Stopped { .. } => "instance.stopped",
            Entry::Dispatched { .. } => "action.dispatched",
            Entry::TimerSet { .. } => "timer.set",
            Entry::ContextPut { .. } => "context.put",
            Entry::Repaired { .. } => "repair.applied",
            Entry::RepairFailed { .. } => "repair.failed",
            Entry::ApprovalRequested { .. } => "approval.requested",
            Entry::ApprovalDecided { .. } => "approval.decided",
            Entry::BudgetCharged { .. } => "budget.charged",
            Entry::PolicyDecided { .. } => "policy.decided",
        }
    }

    /// The `X-Request-Id` of the request that caused this record, if it was recorded.
    pub fn request_id(&self) -> Option<&str> {
        match self {
            Entry::Started { request_id, .. }
            | Entry::Token { request_id, .. }
            | Entry::Stopped { request_id, .. } => request_id.as_deref(),
            _ => None,
        }
    }

    /// Sets the request id on the kinds that carry one (others are left alone).
    pub fn set_request_id(&mut self, id: Option<String>) {
        if let Entry::Started { request_id, .. }
        | Entry::Token { request_id, .. }
        | Entry::Stopped { request_id, .. } = self
        {
            *request_id = id;
        }
    }

    /// The entry for a runtime input (`tenant`, `plan_version` only matter for `Start`).
    pub fn from_input(net: &Net, tenant: &str, plan_version: u32, input: &Input) -> Entry {
        match input {
            Input::Start {
                plan,
                input,
                now,
                depth,
            } => Entry::Started {
                v: RECORD_VERSION,
                tenant: tenant.to_string(),
                plan: plan.to_string(),
                plan_version,
                input: input.clone(),
                now: *now,
                request_id: None,
                depth: *depth,
            },
            Input::Token {
                event,
                payload,
                correlation,
                now,
            } => Entry::Token {
                event: event_name(net, *event),
                payload: payload.clone(),
                correlation: correlation.clone(),
                now: *now,
                request_id: None,
            },
            Input::Timer {
                id,
                event,
                payload,
                now,
                late_ms,
                next_due_ms,
            } => Entry::Timer {
                timer_id: *id,
                event: event_name(net, *event),
                payload: payload.clone(),
                now: *now,
                lateness_ms: Some(*late_ms),
                next_due_ms: *next_due_ms,
            },
            Input::Outcome {
                firing,
                result,
                now,
            } => Entry::Outcome {
                firing: *firing,
                result: result.clone(),
                now: *now,
            },
            Input::Pause { reason } => Entry::Paused {
                reason: reason.clone(),
            },
            Input::Resume => Entry::Resumed,
            Input::Stop { reason } => Entry::Stopped {
                reason: reason.clone(),
                request_id: None,
            },
            Input::TimerSet {
                id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                key,
                now,
            } => Entry::TimerSet {
                timer_id: *id,
                event: event_name(net, *event),
                payload: payload.clone(),
                due_ms: *due_ms,
                cron: cron.clone(),
                remaining: *remaining,
                key: key.clone(),
                now: *now,
            },
            Input::ContextPut { key, value, now } => Entry::ContextPut {
                key: key.clone(),
                value: value.clone(),
                now: *now,
            },
            Input::ApprovalRequested {
                key,
                step,
                firing,
                reasons,
                deadline_ms,
                default_grant,
                now,
            } => Entry::ApprovalRequested {
                key: key.clone(),
                step: step.clone(),
                firing: *firing,
                reasons: reasons.clone(),
                deadline_ms: *deadline_ms,
                default_grant: *default_grant,
                now: *now,
            },
            Input::ApprovalDecided {
                key,
                granted,
                principal,
                comment,
                now,
            } => Entry::ApprovalDecided {
                key: key.clone(),
                granted: *granted,
                principal: principal.clone(),
                comment: comment.clone(),
                now: *now,
            },
            Input::Charged { key, charge, now } => Entry::BudgetCharged {
                key: key.clone(),
                charge: *charge,
                now: *now,
            },
            Input::PolicyDecided {
                key,
                attempt,
                decision,
                now,
            } => Entry::PolicyDecided {
                key: key.clone(),
                attempt: *attempt,
                decision: decision.clone(),
                now: *now,
            },
            Input::Repair(r) => Entry::Repaired {
                document: (*r.document).clone(),
                hash: r.hash.clone(),
                version: r.version,
                marking: r.marking.clone(),
                reason: r.reason.clone(),
                now: r.now,
            },
            Input::RepairFailed { reason } => Entry::RepairFailed {
                reason: reason.clone(),
            },
        }
    }

    /// Encodes as a store record (the body without the kind, which the record carries).
    pub fn to_record(&self, at_ms: i64) -> NewRecord {
        NewRecord {
            kind: self.kind().to_string(),
            body: self.body(),
            at_ms,
        }
    }

    /// The body's bytes, serialized straight from the entry's fields in the documented key
    /// order (no intermediate `Value` is built: that copied every payload and hashed every
    /// key once more per record, on the hot path of every durable step and event).
    fn body(&self) -> Vec<u8> {
        use serde_json::to_vec;
        #[derive(Serialize)]
        struct Started<'a> {
            v: u32,
            tenant: &'a str,
            plan: &'a str,
            plan_version: u32,
            input: &'a Value,
            now: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            request_id: Option<&'a str>,
            #[serde(skip_serializing_if = "is_zero")]
            depth: u32,
        }
        #[derive(Serialize)]
        struct Token<'a> {
            event: &'a str,
            payload: &'a Value,
            correlation: Option<&'a str>,
            now: i64,
            #[serde(skip_serializing_if = "Option::is_none")]
            request_id: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Timer<'a> {
            timer_id: u64,
            event: &'a str,
            payload: &'a Value,
            now: i64,
            late_ms: Option<i64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            next_due_ms: Option<i64>,
        }
        #[derive(Serialize)]
        struct Result<'a> {
            firing: FiringId,
            result: &'a Value,
            now: i64,
        }
        #[derive(Serialize)]
        struct Error<'a> {
            firing: FiringId,
            error: &'a ActionError,
            now: i64,
        }
        #[derive(Serialize)]
        struct Reason<'a> {
            reason: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            request_id: Option<&'a str>,
        }
        #[derive(Serialize)]
        struct Repaired<'a> {
            document: &'a Value,
            hash: &'a str,
            version: u32,
            marking: &'a BTreeMap<String, usize>,
            reason: &'a str,
            now: i64,
        }
        #[derive(Serialize)]
        struct Empty {}
        #[derive(Serialize)]
        struct Dispatched<'a> {
            firing: FiringId,
            step: &'a str,
            key: &'a str,
            attempt: u32,
            idempotent: bool,
        }
        #[derive(Serialize)]
        struct TimerSet<'a> {
            timer_id: u64,
            event: &'a str,
            payload: &'a Value,
            due_ms: i64,
            cron: Option<&'a str>,
            remaining: Option<u32>,
            key: &'a str,
            now: i64,
        }
        #[derive(Serialize)]
        struct ContextPut<'a> {
            key: &'a str,
            value: &'a Value,
            now: i64,
        }
        #[derive(Serialize)]
        struct ApprovalRequested<'a> {
            key: &'a str,
            step: &'a str,
            firing: FiringId,
            reasons: &'a [String],
            deadline_ms: Option<i64>,
            default_grant: bool,
            now: i64,
        }
        #[derive(Serialize)]
        struct ApprovalDecided<'a> {
            key: &'a str,
            granted: bool,
            principal: &'a str,
            comment: Option<&'a str>,
            now: i64,
        }
        #[derive(Serialize)]
        struct PolicyDecided<'a> {
            key: &'a str,
            attempt: u32,
            decision: &'a weft_tools::PolicyDecision,
            now: i64,
        }
        #[derive(Serialize)]
        struct BudgetCharged<'a> {
            key: &'a str,
            charge: &'a weft_runtime::Usage,
            now: i64,
        }
        let body = match self {
            Entry::Started {
                v,
                tenant,
                plan,
                plan_version,
                input,
                now,
                request_id,
                depth,
            } => to_vec(&Started {
                v: *v,
                tenant,
                plan,
                plan_version: *plan_version,
                input,
                now: *now,
                request_id: request_id.as_deref(),
                depth: *depth,
            }),
            Entry::Token {
                event,
                payload,
                correlation,
                now,
                request_id,
            } => to_vec(&Token {
                event,
                payload,
                correlation: correlation.as_deref(),
                now: *now,
                request_id: request_id.as_deref(),
            }),
            Entry::Timer {
                timer_id,
                event,
                payload,
                now,
                lateness_ms,
                next_due_ms,
            } => to_vec(&Timer {
                timer_id: *timer_id,
                event,
                payload,
                now: *now,
                late_ms: *lateness_ms,
                next_due_ms: *next_due_ms,
            }),
            Entry::Outcome {
                firing,
                result: Ok(v),
                now,
            } => to_vec(&Result {
                firing: *firing,
                result: v,
                now: *now,
            }),
            Entry::Outcome {
                firing,
                result: Err(e),
                now,
            } => to_vec(&Error {
                firing: *firing,
                error: e,
                now: *now,
            }),
            Entry::Stopped { reason, request_id } => to_vec(&Reason {
                reason,
                request_id: request_id.as_deref(),
            }),
            Entry::Paused { reason } | Entry::RepairFailed { reason } => to_vec(&Reason {
                reason,
                request_id: None,
            }),
            Entry::Repaired {
                document,
                hash,
                version,
                marking,
                reason,
                now,
            } => to_vec(&Repaired {
                document,
                hash,
                version: *version,
                marking,
                reason,
                now: *now,
            }),
            Entry::Resumed => to_vec(&Empty {}),
            Entry::Dispatched {
                firing,
                step,
                key,
                attempt,
                idempotent,
            } => to_vec(&Dispatched {
                firing: *firing,
                step,
                key,
                attempt: *attempt,
                idempotent: *idempotent,
            }),
            Entry::TimerSet {
                timer_id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                key,
                now,
            } => to_vec(&TimerSet {
                timer_id: *timer_id,
                event,
                payload,
                due_ms: *due_ms,
                cron: cron.as_deref(),
                remaining: *remaining,
                key,
                now: *now,
            }),
            Entry::ContextPut { key, value, now } => to_vec(&ContextPut {
                key,
                value,
                now: *now,
            }),
            Entry::ApprovalRequested {
                key,
                step,
                firing,
                reasons,
                deadline_ms,
                default_grant,
                now,
            } => to_vec(&ApprovalRequested {
                key,
                step,
                firing: *firing,
                reasons,
                deadline_ms: *deadline_ms,
                default_grant: *default_grant,
                now: *now,
            }),
            Entry::ApprovalDecided {
                key,
                granted,
                principal,
                comment,
                now,
            } => to_vec(&ApprovalDecided {
                key,
                granted: *granted,
                principal,
                comment: comment.as_deref(),
                now: *now,
            }),
            Entry::BudgetCharged { key, charge, now } => to_vec(&BudgetCharged {
                key,
                charge,
                now: *now,
            }),
            Entry::PolicyDecided {
                key,
                attempt,
                decision,
                now,
            } => to_vec(&PolicyDecided {
                key,
                attempt: *attempt,
                decision,
                now: *now,
            }),
        };
        body.unwrap_or_default()
    }

    /// Decodes a stored record.
    pub fn from_record(r: &Record) -> Result<Entry, DurableError> {
        let bad = |e: serde_json::Error| DurableError::Journal {
            message: format!("record seq {} (`{}`) is invalid: {e}", r.seq, r.kind),
        };
        let mut body: Value = serde_json::from_slice(&r.body).map_err(bad)?;
        let entry = match r.kind.as_str() {
            "action.result" => {
                let o: OutcomeOk = serde_json::from_value(body).map_err(bad)?;
                Entry::Outcome {
                    firing: o.firing,
                    result: Ok(Arc::new(o.result)),
                    now: o.now,
                }
            }
            "action.error" => {
                let o: OutcomeErr = serde_json::from_value(body).map_err(bad)?;
                Entry::Outcome {
                    firing: o.firing,
                    result: Err(o.error),
                    now: o.now,
                }
            }
            kind => {
                let tag = match kind {
                    "instance.started" => "started",
                    "token.added" => "token",
                    "timer.fired" => "timer",
                    "instance.paused" => "paused",
                    "instance.resumed" => "resumed",
                    "instance.stopped" => "stopped",
                    "action.dispatched" => "dispatched",
                    "timer.set" => "timer_set",
                    "context.put" => "context_put",
                    "repair.applied" => "repaired",
                    "repair.failed" => "repair_failed",
                    "approval.requested" => "approval_requested",
                    "approval.decided" => "approval_decided",
                    "budget.charged" => "budget_charged",
                    "policy.decided" => "policy_decided",
                    other => {
                        return Err(DurableError::Journal {
                            message: format!(
                                "record seq {} has the unknown kind `{other}` (written by a newer weft?)",
                                r.seq
                            ),
                        });
                    }
                };
                if let Value::Object(m) = &mut body {
                    m.insert("kind".into(), Value::from(tag));
                } else if tag == "resumed" {
                    body = serde_json::json!({"kind": tag});
                }
                serde_json::from_value(body).map_err(bad)?
            }
        };
        if let Entry::Started { v, .. } = &entry
            && *v > RECORD_VERSION
        {
            return Err(DurableError::TooNew {
                found: *v,
                supported: RECORD_VERSION,
            });
        }
        Ok(entry)
    }

    /// The runtime input, if this entry is one (`None` for derived records).
    pub fn to_input(&self, net: &Net) -> Result<Option<Input>, DurableError> {
        let ev = |name: &str| {
            net.event_id(name).ok_or_else(|| DurableError::Journal {
                message: format!("the plan has no event `{name}` named in the journal"),
            })
        };
        Ok(Some(match self {
            Entry::Started {
                plan,
                input,
                now,
                depth,
                ..
            } => Input::Start {
                plan: plan.as_str().into(),
                input: input.clone(),
                now: *now,
                depth: *depth,
            },
            Entry::Token {
                event,
                payload,
                correlation,
                now,
                ..
            } => Input::Token {
                event: ev(event)?,
                payload: payload.clone(),
                correlation: correlation.clone(),
                now: *now,
            },
            Entry::Timer {
                timer_id,
                event,
                payload,
                now,
                lateness_ms,
                next_due_ms,
            } => Input::Timer {
                id: *timer_id,
                event: ev(event)?,
                payload: payload.clone(),
                now: *now,
                late_ms: lateness_ms.unwrap_or(0),
                next_due_ms: *next_due_ms,
            },
            Entry::Outcome {
                firing,
                result,
                now,
            } => Input::Outcome {
                firing: *firing,
                result: result.clone(),
                now: *now,
            },
            Entry::Paused { reason } => Input::Pause {
                reason: reason.clone(),
            },
            Entry::Resumed => Input::Resume,
            Entry::Stopped { reason, .. } => Input::Stop {
                reason: reason.clone(),
            },
            Entry::Dispatched { .. } => return Ok(None),
            Entry::TimerSet {
                timer_id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                key,
                now,
            } => Input::TimerSet {
                id: *timer_id,
                event: ev(event)?,
                payload: payload.clone(),
                due_ms: *due_ms,
                cron: cron.clone(),
                remaining: *remaining,
                key: key.clone(),
                now: *now,
            },
            Entry::ContextPut { key, value, now } => Input::ContextPut {
                key: key.clone(),
                value: value.clone(),
                now: *now,
            },
            Entry::Repaired {
                document,
                hash,
                version,
                marking,
                reason,
                now,
            } => Input::Repair(Box::new(Repair {
                net: compile_document(document)?,
                document: Arc::new(document.clone()),
                hash: hash.clone(),
                version: *version,
                marking: marking.clone(),
                reason: reason.clone(),
                now: *now,
            })),
            Entry::RepairFailed { reason } => Input::RepairFailed {
                reason: reason.clone(),
            },
            Entry::ApprovalRequested {
                key,
                step,
                firing,
                reasons,
                deadline_ms,
                default_grant,
                now,
            } => Input::ApprovalRequested {
                key: key.clone(),
                step: step.clone(),
                firing: *firing,
                reasons: reasons.clone(),
                deadline_ms: *deadline_ms,
                default_grant: *default_grant,
                now: *now,
            },
            Entry::ApprovalDecided {
                key,
                granted,
                principal,
                comment,
                now,
            } => Input::ApprovalDecided {
                key: key.clone(),
                granted: *granted,
                principal: principal.clone(),
                comment: comment.clone(),
                now: *now,
            },
            Entry::BudgetCharged { key, charge, now } => Input::Charged {
                key: key.clone(),
                charge: *charge,
                now: *now,
            },
            Entry::PolicyDecided {
                key,
                attempt,
                decision,
                now,
            } => Input::PolicyDecided {
                key: key.clone(),
                attempt: *attempt,
                decision: decision.clone(),
                now: *now,
            },
        }))
    }
}

/// The state the fold carries: the core instance plus which in-flight firings were
/// recorded as dispatched (what recovery needs). Also what a snapshot stores.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Folded {
    /// The instance (`None` before `instance.started`).
    pub instance: Option<Instance>,
    /// In-flight firings whose dispatch was recorded.
    pub dispatched: BTreeSet<FiringId>,
    /// Last record folded.
    pub seq: u64,
    /// Pending timers and the key-value context (absent in snapshots of older builds).
    #[serde(default)]
    pub extras: Extras,
    /// The plan the instance runs after its last repair (`None`: the one it started with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repaired: Option<RepairedPlan>,
    /// `repaired` compiled.
    #[serde(skip)]
    pub(crate) net: Option<Arc<Net>>,
}

impl Folded {
    /// Nothing folded yet.
    pub fn empty() -> Self {
        Folded {
            instance: None,
            dispatched: BTreeSet::new(),
            seq: 0,
            extras: Extras::default(),
            repaired: None,
            net: None,
        }
    }

    /// The net the instance runs on: the repaired plan's, else `base` (the plan it started
    /// with).
    pub fn net<'a>(&'a self, base: &'a Net) -> &'a Net {
        self.net.as_deref().unwrap_or(base)
    }

    /// The compiled repaired net, if the instance was repaired.
    pub fn repaired_net(&self) -> Option<&Arc<Net>> {
        self.net.as_ref()
    }

    /// Decodes a snapshot body (re-indexing the marking).
    pub fn from_snapshot(net: &Net, bytes: &[u8]) -> Result<Folded, DurableError> {
        let mut f: Folded = serde_json::from_slice(bytes).map_err(|e| DurableError::Journal {
            message: format!("snapshot is invalid: {e}"),
        })?;
        if let Some(r) = &f.repaired {
            f.net = Some(compile_document(&r.document)?);
        }
        let cur = f.net.clone();
        let net = cur.as_deref().unwrap_or(net);
        if let Some(i) = f.instance.as_mut() {
            i.marking.reindex(net);
        }
        Ok(f)
    }

    /// Applies one input exactly as the runtime loop does (`weft_runtime::journal_hook::replay`
    /// for a single step): apply, then fire everything enabled.
    /// `net` is the plan the instance started with; after a repair the fold continues on
    /// the repaired plan by itself.
    pub fn apply_input(&mut self, net: &Net, id: &str, input: &Input) {
        if let Input::Outcome { firing, .. } = input
            && self.instance.is_some()
        {
            self.dispatched.remove(firing);
        }
        let cur = self.net.clone();
        weft_runtime::journal_hook::fold(
            cur.as_deref().unwrap_or(net),
            id,
            &mut self.instance,
            &mut self.extras,
            input,
        );
        if let Input::Repair(r) = input {
            self.net = Some(Arc::clone(&r.net));
            self.repaired = Some(RepairedPlan {
                document: (*r.document).clone(),
                hash: r.hash.clone(),
                version: r.version,
            });
            // Firings in flight keep their numbers across a repair; nothing else changes.
        }
    }

    /// Folds one stored entry.
    pub fn apply_entry(&mut self, net: &Net, id: &str, e: &Entry) -> Result<(), DurableError> {
        if let Entry::Dispatched { firing, .. } = e {
            if self
                .instance
                .as_ref()
                .is_some_and(|i| i.in_flight.contains_key(firing))
            {
                self.dispatched.insert(*firing);
            }
            return Ok(());
        }
        let cur = self.net.clone();
        if let Some(input) = e.to_input(cur.as_deref().unwrap_or(net))? {
            self.apply_input(net, id, &input);
        }
        Ok(())
    }

    /// Settles the status (as the live loop does after a batch; a pending timer makes an
    /// instance `waiting`).
    pub fn settle(&mut self, net: &Net) {
        let cur = self.net.clone();
        let timer_pending = !self.extras.timers.is_empty();
        if let Some(i) = self.instance.as_mut() {
            i.settle_with(cur.as_deref().unwrap_or(net), timer_pending);
        }
    }
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(r: &NewRecord) -> Record {
        Record {
            seq: 1,
            kind: r.kind.clone(),
            body: r.body.clone(),
            at_ms: r.at_ms,
            prev_hash: weft_store::GENESIS,
            hash: weft_store::GENESIS,
        }
    }

    /// A reference encoder: the body as a `Value` built with `json!`, which the direct
    /// serialization must match byte for byte.
    fn reference_body(e: &Entry) -> Vec<u8> {
        use serde_json::json;
        let body = match e {
            Entry::Started {
                v,
                tenant,
                plan,
                plan_version,
                input,
                now,
                request_id,
                depth,
            } => {
                let mut b = json!({"v": v, "tenant": tenant, "plan": plan,
                    "plan_version": plan_version, "input": input, "now": now});
                if let Some(r) = request_id {
                    b["request_id"] = json!(r);
                }
                if *depth > 0 {
                    b["depth"] = json!(depth);
                }
                b
            }
            Entry::Token {
                event,
                payload,
                correlation,
                now,
                request_id,
            } => {
                let mut b = json!({"event": event, "payload": payload,
                    "correlation": correlation, "now": now});
                if let Some(r) = request_id {
                    b["request_id"] = json!(r);
                }
                b
            }
            Entry::Timer {
                timer_id,
                event,
                payload,
                now,
                lateness_ms,
                next_due_ms,
            } => {
                let mut b = json!({"timer_id": timer_id, "event": event, "payload": payload,
                    "now": now, "late_ms": lateness_ms});
                if let Some(n) = next_due_ms {
                    b["next_due_ms"] = json!(n);
                }
                b
            }
            Entry::Outcome {
                firing,
                result: Ok(v),
                now,
            } => json!({"firing": firing, "result": v, "now": now}),
            Entry::Outcome {
                firing,
                result: Err(e),
                now,
            } => json!({"firing": firing, "error": e, "now": now}),
            Entry::Stopped {
                reason,
                request_id: Some(r),
            } => json!({"reason": reason, "request_id": r}),
            Entry::Paused { reason }
            | Entry::Stopped {
                reason,
                request_id: None,
            }
            | Entry::RepairFailed { reason } => json!({"reason": reason}),
            Entry::Repaired {
                document,
                hash,
                version,
                marking,
                reason,
                now,
            } => json!({"document": document, "hash": hash, "version": version,
                "marking": marking, "reason": reason, "now": now}),
            Entry::Resumed => json!({}),
            Entry::Dispatched {
                firing,
                step,
                key,
                attempt,
                idempotent,
            } => json!({"firing": firing, "step": step, "key": key, "attempt": attempt,
                "idempotent": idempotent}),
            Entry::TimerSet {
                timer_id,
                event,
                payload,
                due_ms,
                cron,
                remaining,
                key,
                now,
            } => json!({"timer_id": timer_id, "event": event, "payload": payload,
                "due_ms": due_ms, "cron": cron, "remaining": remaining, "key": key, "now": now}),
            Entry::ContextPut { key, value, now } => {
                json!({"key": key, "value": value, "now": now})
            }
            Entry::ApprovalRequested {
                key,
                step,
                firing,
                reasons,
                deadline_ms,
                default_grant,
                now,
            } => json!({"key": key, "step": step, "firing": firing, "reasons": reasons,
                "deadline_ms": deadline_ms, "default_grant": default_grant, "now": now}),
            Entry::ApprovalDecided {
                key,
                granted,
                principal,
                comment,
                now,
            } => json!({"key": key, "granted": granted, "principal": principal,
                "comment": comment, "now": now}),
            Entry::BudgetCharged { key, charge, now } => {
                json!({"key": key, "charge": charge, "now": now})
            }
            Entry::PolicyDecided {
                key,
                attempt,
                decision,
                now,
            } => json!({"key": key, "attempt": attempt, "decision": decision, "now": now}),
        };
        serde_json::to_vec(&body).unwrap_or_default()
    }

    /// One entry of every kind, with and without the optional fields, and payloads that
    /// exercise escaping, key order, floats and nesting.
    fn every_kind() -> Vec<Entry> {
        use serde_json::json;
        let payload = json!({"z": 1, "a": [1.5, -0.0, 1e300, null, true], "s": "q\"\n\u{7f}é😀",
            "nested": {"k": {"deep": [{"x": u64::MAX}, {"y": i64::MIN}]}}});
        let mut marking = BTreeMap::new();
        marking.insert("b".to_string(), 2);
        marking.insert("a".to_string(), 1);
        let mut out = Vec::new();
        for (request_id, depth) in [(None, 0), (Some("req-\"1".to_string()), 2)] {
            out.push(Entry::Started {
                v: 1,
                tenant: "t".into(),
                plan: "p".into(),
                plan_version: 2,
                input: payload.clone(),
                now: 3,
                request_id: request_id.clone(),
                depth,
            });
            for correlation in [None, Some("c-1".to_string())] {
                out.push(Entry::Token {
                    event: "tick".into(),
                    payload: payload.clone(),
                    correlation,
                    now: -4,
                    request_id: request_id.clone(),
                });
            }
            out.push(Entry::Stopped {
                reason: "bye".into(),
                request_id,
            });
        }
        for (lateness_ms, next_due_ms) in [(None, None), (Some(7), Some(99))] {
            out.push(Entry::Timer {
                timer_id: 9,
                event: "due".into(),
                payload: payload.clone(),
                now: 5,
                lateness_ms,
                next_due_ms,
            });
        }
        out.push(Entry::Outcome {
            firing: 11,
            result: Ok(Arc::new(payload.clone())),
            now: 6,
        });
        out.push(Entry::Outcome {
            firing: 12,
            result: Err(ActionError::fatal("boom", "it \"broke\"")),
            now: 7,
        });
        out.push(Entry::Paused {
            reason: "rate".into(),
        });
        out.push(Entry::Resumed);
        out.push(Entry::Dispatched {
            firing: 13,
            step: "s".into(),
            key: "i/s/13".into(),
            attempt: 2,
            idempotent: false,
        });
        for (cron, remaining) in [(None, None), (Some("0 * * * *".to_string()), Some(3))] {
            out.push(Entry::TimerSet {
                timer_id: 4,
                event: "due".into(),
                payload: payload.clone(),
                due_ms: 1_000,
                cron,
                remaining,
                key: "k".into(),
                now: 8,
            });
        }
        out.push(Entry::ContextPut {
            key: "k".into(),
            value: payload.clone(),
            now: 9,
        });
        out.push(Entry::Repaired {
            document: payload.clone(),
            hash: "h".into(),
            version: 3,
            marking,
            reason: "fix".into(),
            now: 10,
        });
        out.push(Entry::RepairFailed {
            reason: "no".into(),
        });
        for (deadline_ms, comment) in [(None, None), (Some(5_000), Some("ok \"é\"".to_string()))] {
            out.push(Entry::ApprovalRequested {
                key: "i/s/3".into(),
                step: "s".into(),
                firing: 3,
                reasons: vec!["why".into(), "q\"\n".into()],
                deadline_ms,
                default_grant: comment.is_some(),
                now: 11,
            });
            out.push(Entry::ApprovalDecided {
                key: "i/s/3".into(),
                granted: deadline_ms.is_some(),
                principal: "ann".into(),
                comment,
                now: 12,
            });
        }
        out.push(Entry::BudgetCharged {
            key: "i/s/4".into(),
            charge: weft_runtime::Usage {
                tool_calls: 1,
                llm_calls: 1,
                cost: 0.25,
                llm_tokens: 120,
            },
            now: 13,
        });
        for reasons in [vec![], vec!["outside \"example.com\"".to_string()]] {
            out.push(Entry::PolicyDecided {
                key: "i/s/5".into(),
                attempt: 2,
                decision: weft_tools::PolicyDecision {
                    decision: if reasons.is_empty() { "allow" } else { "deny" }.into(),
                    reasons,
                },
                now: 14,
            });
        }
        out
    }

    /// The direct encoder writes exactly the bytes the `Value`-building one wrote (the hash
    /// chain covers them), and every body reads back to the entry it came from.
    #[test]
    fn direct_bodies_match_the_reference_encoder() {
        let entries = every_kind();
        let kinds: BTreeSet<&str> = entries.iter().map(|e| e.kind()).collect();
        assert_eq!(kinds.len(), 17, "every record kind is covered: {kinds:?}");
        for e in entries {
            let r = e.to_record(0);
            assert_eq!(
                String::from_utf8_lossy(&r.body),
                String::from_utf8_lossy(&reference_body(&e)),
                "{}",
                e.kind()
            );
            assert_eq!(Entry::from_record(&stored(&r)).unwrap(), e);
        }
    }

    #[test]
    fn request_ids_are_optional_and_old_bodies_are_unchanged() {
        let token = Entry::Token {
            event: "tick".into(),
            payload: serde_json::json!({"n": 1}),
            correlation: None,
            now: 5,
            request_id: None,
        };
        // Without an id the body is exactly what builds before the field wrote.
        assert_eq!(
            String::from_utf8(token.to_record(0).body).unwrap(),
            r#"{"event":"tick","payload":{"n":1},"correlation":null,"now":5}"#
        );
        let stop = Entry::Stopped {
            reason: "r".into(),
            request_id: None,
        };
        assert_eq!(stop.to_record(0).body, br#"{"reason":"r"}"#);
        let started = Entry::Started {
            v: 1,
            tenant: "t".into(),
            plan: "p".into(),
            plan_version: 2,
            input: serde_json::json!({}),
            now: 3,
            request_id: None,
            depth: 0,
        };
        assert!(
            !String::from_utf8(started.to_record(0).body)
                .unwrap()
                .contains("request_id")
        );
        for mut e in [token, stop, started] {
            assert_eq!(Entry::from_record(&stored(&e.to_record(0))).unwrap(), e);
            e.set_request_id(Some("req-1".into()));
            let r = e.to_record(0);
            assert!(String::from_utf8_lossy(&r.body).contains(r#""request_id":"req-1""#));
            let back = Entry::from_record(&stored(&r)).unwrap();
            assert_eq!(back.request_id(), Some("req-1"));
            assert_eq!(back, e);
        }
        // Kinds that never carry an id ignore it.
        let mut resumed = Entry::Resumed;
        resumed.set_request_id(Some("x".into()));
        assert_eq!(resumed.request_id(), None);
    }
}
