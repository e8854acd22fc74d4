//! What callers read back from an instance: its [`Outcome`] when it settles, a live
//! [`StateSnapshot`] at any time, and the optional per-firing [`TraceEntry`] list that
//! `weft run` prints as a readable trace.

use std::sync::Arc;

use serde::Serialize;
use serde_json::Value;
use weft_core::instance::Waiting;
use weft_core::token::{FiringId, TokenId};
use weft_core::{ActionError, Status};

/// The tokens left on one output event.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ResultTokens {
    /// Event name.
    pub event: String,
    /// Payloads, oldest first.
    pub payloads: Vec<Arc<Value>>,
}

/// What a `waiting` instance waits for (see [`Status`]): a token on one of `events`, or a
/// timer coming due.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Awaits {
    /// The declared input events (`kind: input`) a token on which could enable a step.
    pub events: Vec<String>,
    /// When its pending timers are next due (epoch ms), earliest first.
    pub timers_due_ms: Vec<i64>,
}

/// How an instance ended (or where it settled: waiting, stuck, paused).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Outcome {
    /// Instance id.
    pub instance: String,
    /// Final status.
    pub status: Status,
    /// Why it stopped, for `stopped` (request, idle expiry).
    pub reason: Option<String>,
    /// Tokens on output events.
    pub results: Vec<ResultTokens>,
    /// For `stuck` and `waiting`: which step lacks what.
    pub waiting: Vec<Waiting>,
    /// For `waiting`: what from outside can still move it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaits: Option<Awaits>,
    /// Firings, when tracing was on.
    pub trace: Option<Vec<TraceEntry>>,
}

impl Outcome {
    /// Results as one JSON object: `{event: payload}` for one token, `{event: [payloads]}`
    /// for several (the shape `plan.run` hands to a parent).
    pub fn results_json(&self) -> Value {
        results_object(self.results.iter().map(|r| {
            let payloads = r.payloads.iter().map(|p| (**p).clone());
            (r.event.clone(), payloads)
        }))
    }

    /// [`Outcome::results_json`], taking the outcome: a payload that nothing else holds any
    /// more (the instance's handles and the engine have let it go) is moved, not copied.
    pub fn into_results_json(self) -> Value {
        results_object(
            self.results
                .into_iter()
                .map(|r| (r.event, r.payloads.into_iter().map(Arc::unwrap_or_clone))),
        )
    }

    /// The first payload on `event`.
    pub fn result(&self, event: &str) -> Option<&Arc<Value>> {
        self.results
            .iter()
            .find(|r| r.event == event)
            .and_then(|r| r.payloads.first())
    }
}

/// The results object of [`Outcome::results_json`]: each event's one payload as it is, or
/// its several payloads as an array.
fn results_object<P: ExactSizeIterator<Item = Value>>(
    results: impl ExactSizeIterator<Item = (String, P)>,
) -> Value {
    let mut m = serde_json::Map::with_capacity(results.len());
    for (event, mut payloads) in results {
        let v = match payloads.len() {
            1 => payloads.next().unwrap_or(Value::Null),
            _ => Value::Array(payloads.collect()),
        };
        m.insert(event, v);
    }
    Value::Object(m)
}

/// A firing whose action has not finished.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct InFlightInfo {
    /// Firing number.
    pub firing: FiringId,
    /// Step name.
    pub step: String,
    /// Current attempt.
    pub attempt: u32,
}

/// The live state of an instance.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StateSnapshot {
    /// Instance id.
    pub instance: String,
    /// Tenant.
    pub tenant: String,
    /// Plan name.
    pub plan: String,
    /// Status.
    pub status: Status,
    /// Stop reason, if stopped.
    pub reason: Option<String>,
    /// Token count per event.
    pub marking: Vec<(String, usize)>,
    /// Steps that hold some inputs but cannot fire, and what they lack.
    pub waiting: Vec<Waiting>,
    /// For `waiting`: what from outside can still move it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub awaits: Option<Awaits>,
    /// Actions in flight.
    pub in_flight: Vec<InFlightInfo>,
    /// Firings so far.
    pub fired: u64,
    /// Whether a firing waits for a person's approval.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub awaiting_approval: bool,
    /// What its calls used of the plan's `limits`, when the plan sets some.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<weft_tools::Usage>,
}

impl StateSnapshot {
    /// The status as people see it: `waiting_approval` for a running instance whose firing
    /// waits for a person, else the status's name.
    pub fn status_name(&self) -> &'static str {
        if self.awaiting_approval && self.status == Status::Running {
            "waiting_approval"
        } else {
            self.status.name()
        }
    }
}

/// One firing, for the readable trace.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TraceEntry {
    /// Firing number.
    pub firing: FiringId,
    /// Step name.
    pub step: String,
    /// The binding: `(token id, event, payload)` per input.
    pub binding: Vec<(TokenId, String, Arc<Value>)>,
    /// Rendered args (or why they could not be rendered).
    pub args: Result<Value, String>,
    /// Attempts made.
    pub attempts: u32,
    /// The last outcome.
    pub outcome: Option<Result<Value, ActionError>>,
    /// Token ids emitted (including an error token).
    pub emitted: Vec<TokenId>,
    /// The event each of `emitted` went to, in the same order (read off the marking when the
    /// outcome is applied; `None` only if a token was already gone).
    pub emitted_events: Vec<Option<String>>,
    /// Clock time the firing started.
    pub started_ms: i64,
    /// Clock time of the outcome.
    pub finished_ms: Option<i64>,
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use serde_json::{Value, json};
    use weft_core::Status;

    use super::{Outcome, ResultTokens};

    fn outcome(results: Vec<ResultTokens>) -> Outcome {
        Outcome {
            instance: "i".into(),
            status: Status::Completed,
            reason: None,
            results,
            waiting: Vec::new(),
            awaits: None,
            trace: None,
        }
    }

    /// Taken, an outcome gives the same JSON as read in place; a payload nothing else holds
    /// is moved (its string is the same allocation), a shared one is copied and stays.
    #[test]
    fn results_taken_are_moved_where_nothing_else_holds_them() {
        let alone = Arc::new(Value::String("a long enough payload".into()));
        let Value::String(s) = &*alone else {
            unreachable!()
        };
        let alone_at = s.as_ptr();
        let shared = Arc::new(json!({"n": 1}));
        let o = outcome(vec![
            ResultTokens {
                event: "done".into(),
                payloads: vec![alone],
            },
            ResultTokens {
                event: "many".into(),
                payloads: vec![Arc::clone(&shared), Arc::new(json!(2))],
            },
        ]);
        let read = o.results_json();
        let taken = o.into_results_json();
        assert_eq!(read, taken);
        assert_eq!(
            taken,
            json!({"done": "a long enough payload", "many": [{"n": 1}, 2]})
        );
        let Value::String(s) = &taken["done"] else {
            panic!("not a string: {taken}")
        };
        assert_eq!(s.as_ptr(), alone_at, "the payload held once was moved");
        assert_eq!(
            *shared,
            json!({"n": 1}),
            "the shared payload is still there"
        );
        assert_eq!(Arc::strong_count(&shared), 1);
    }
}
