//! Replaying a recorded transcript: the [`ReplayProvider`] serves the recorded replies in order
//! and fails loudly the moment a request differs from the recorded one, so a replayed planner
//! test proves the code asked exactly what it asked when the transcript was recorded.

use std::sync::Mutex;

use serde_json::Value;

use crate::chat::{ChatRequest, ChatResponse};
use crate::error::{Error, Result};
use crate::provider::{BoxFuture, ChatProvider};
use crate::transcript::Exchange;

/// Serves a recorded transcript.
#[derive(Debug)]
pub struct ReplayProvider {
    exchanges: Vec<Exchange>,
    next: Mutex<usize>,
}

impl ReplayProvider {
    /// From recorded exchanges (in recording order).
    pub fn new(exchanges: Vec<Exchange>) -> Self {
        ReplayProvider {
            exchanges,
            next: Mutex::new(0),
        }
    }

    /// Exchanges not yet replayed (a finished test expects 0).
    pub fn remaining(&self) -> usize {
        let used = self.next.lock().map(|n| *n).unwrap_or(0);
        self.exchanges.len().saturating_sub(used)
    }

    fn serve(&self, req: &ChatRequest) -> Result<ChatResponse> {
        let mut next = self
            .next
            .lock()
            .map_err(|_| Error::Decode("replay provider lock poisoned".into()))?;
        let index = *next;
        let ex = self
            .exchanges
            .get(index)
            .ok_or_else(|| Error::ReplayDivergence {
                index,
                detail: format!(
                    "the recording has only {} exchange(s) but another request was made",
                    self.exchanges.len()
                ),
            })?;
        if let Some(detail) = first_difference(&ex.request, req) {
            return Err(Error::ReplayDivergence { index, detail });
        }
        *next += 1;
        match (&ex.response, &ex.error) {
            (Some(r), _) => Ok(r.clone()),
            (None, Some(e)) => Err(Error::Decode(format!("recorded error replayed: {e}"))),
            (None, None) => Err(Error::ReplayDivergence {
                index,
                detail: "the recorded exchange has neither a response nor an error".into(),
            }),
        }
    }
}

/// The first place two requests differ, as a JSON pointer and both values.
fn first_difference(recorded: &ChatRequest, actual: &ChatRequest) -> Option<String> {
    let a = serde_json::to_value(recorded).unwrap_or(Value::Null);
    let b = serde_json::to_value(actual).unwrap_or(Value::Null);
    diff(&a, &b, String::new())
}

fn short(v: Option<&Value>) -> String {
    let s = v.map_or_else(|| "(absent)".to_string(), Value::to_string);
    if s.chars().count() > 200 {
        format!("{}…", s.chars().take(200).collect::<String>())
    } else {
        s
    }
}

fn diff(a: &Value, b: &Value, at: String) -> Option<String> {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for k in x.keys().chain(y.keys()) {
                let p = format!("{at}/{k}");
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = diff(va, vb, p) {
                            return Some(d);
                        }
                    }
                    (va, vb) => {
                        return Some(format!(
                            "request{p}: recorded {}, now {}",
                            short(va),
                            short(vb)
                        ));
                    }
                }
            }
            None
        }
        (Value::Array(x), Value::Array(y)) => {
            for i in 0..x.len().max(y.len()) {
                let p = format!("{at}/{i}");
                match (x.get(i), y.get(i)) {
                    (Some(va), Some(vb)) => {
                        if let Some(d) = diff(va, vb, p) {
                            return Some(d);
                        }
                    }
                    (va, vb) => {
                        return Some(format!(
                            "request{p}: recorded {}, now {}",
                            short(va),
                            short(vb)
                        ));
                    }
                }
            }
            None
        }
        _ if a == b => None,
        _ => Some(format!(
            "request{at}: recorded {}, now {}",
            short(Some(a)),
            short(Some(b))
        )),
    }
}

impl ChatProvider for ReplayProvider {
    fn name(&self) -> &str {
        "replay"
    }
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>> {
        Box::pin(std::future::ready(self.serve(request)))
    }
}
