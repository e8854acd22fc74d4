//! The scripted provider: a file (JSON array or JSONL) of expected exchanges served in order,
//! deterministically, for tests and offline demos. Each exchange may check a substring of the
//! last user / system / non-assistant message, and gives the reply: text or a tool call, with
//! usage. Running out of script or a failed match is a clear error, never a guess.
//!
//! ```json
//! {"match": {"last": "CRITIC: "}, "reply": {"tool_call": {"name": "create_plan", "arguments": {}},
//!  "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}}}
//! ```

use std::path::Path;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::chat::{ChatRequest, ChatResponse, Message, Role, ToolCall, Usage};
use crate::error::{Error, Result};
use crate::provider::{BoxFuture, ChatProvider};

/// Substrings the request must contain.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptMatch {
    /// In the last user message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user: Option<String>,
    /// In the last system message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub system: Option<String>,
    /// In the last message that is not the model's (user, system or tool result).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

/// A scripted tool call. `arguments` may be a JSON value or a string (possibly invalid JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptToolCall {
    /// Function name.
    pub name: String,
    /// Arguments.
    #[serde(default)]
    pub arguments: Value,
}

/// The scripted reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptReply {
    /// Text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    /// One tool call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call: Option<ScriptToolCall>,
    /// Finish reason (default `tool_calls` with a call, else `stop`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
    /// Usage to report.
    #[serde(default)]
    pub usage: Usage,
}

/// One expected exchange.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptedExchange {
    /// Optional checks on the request.
    #[serde(default, rename = "match", skip_serializing_if = "Option::is_none")]
    pub matches: Option<ScriptMatch>,
    /// The reply.
    pub reply: ScriptReply,
}

impl ScriptedExchange {
    /// A text reply.
    pub fn content(text: impl Into<String>) -> Self {
        ScriptedExchange {
            matches: None,
            reply: ScriptReply {
                content: Some(text.into()),
                ..ScriptReply::default()
            },
        }
    }
    /// A tool-call reply; a string `arguments` is sent verbatim (it may be invalid JSON).
    pub fn tool_call(name: impl Into<String>, arguments: Value) -> Self {
        ScriptedExchange {
            matches: None,
            reply: ScriptReply {
                tool_call: Some(ScriptToolCall {
                    name: name.into(),
                    arguments,
                }),
                ..ScriptReply::default()
            },
        }
    }
    /// Requires the last non-assistant message to contain `s`.
    pub fn when_last(mut self, s: impl Into<String>) -> Self {
        self.matches.get_or_insert_with(ScriptMatch::default).last = Some(s.into());
        self
    }
    /// Requires the last user message to contain `s`.
    pub fn when_user(mut self, s: impl Into<String>) -> Self {
        self.matches.get_or_insert_with(ScriptMatch::default).user = Some(s.into());
        self
    }
    /// Reports this usage.
    pub fn with_usage(mut self, prompt: u64, completion: u64) -> Self {
        self.reply.usage = Usage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        };
        self
    }
}

/// Serves a script in order.
#[derive(Debug, Default)]
pub struct ScriptedProvider {
    script: Vec<ScriptedExchange>,
    next: Mutex<usize>,
}

impl ScriptedProvider {
    /// From exchanges.
    pub fn new(script: Vec<ScriptedExchange>) -> Self {
        ScriptedProvider {
            script,
            next: Mutex::new(0),
        }
    }

    /// From a JSON array or JSONL text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Self> {
        let file_err = |line: usize, e: serde_json::Error| Error::File {
            path: origin.to_string(),
            line,
            message: e.to_string(),
        };
        if text.trim_start().starts_with('[') {
            let v: Vec<ScriptedExchange> =
                serde_json::from_str(text).map_err(|e| file_err(e.line(), e))?;
            return Ok(Self::new(v));
        }
        let mut v = Vec::new();
        for (i, line) in text.lines().enumerate() {
            if line.trim().is_empty() || line.trim_start().starts_with("//") {
                continue;
            }
            v.push(serde_json::from_str(line).map_err(|e| file_err(i + 1, e))?);
        }
        Ok(Self::new(v))
    }

    /// Reads a script file.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| Error::File {
            path: path.display().to_string(),
            line: 0,
            message: e.to_string(),
        })?;
        Self::parse(&text, &path.display().to_string())
    }

    /// Exchanges served so far.
    pub fn used(&self) -> usize {
        self.next.lock().map(|n| *n).unwrap_or(0)
    }

    /// Exchanges left.
    pub fn remaining(&self) -> usize {
        self.script.len().saturating_sub(self.used())
    }

    fn serve(&self, req: &ChatRequest) -> Result<ChatResponse> {
        let mut next = self
            .next
            .lock()
            .map_err(|_| Error::Decode("scripted provider lock poisoned".into()))?;
        let index = *next;
        let Some(ex) = self.script.get(index) else {
            return Err(Error::ScriptExhausted {
                used: index,
                last_message: req
                    .messages
                    .last()
                    .map(|m| m.content_str().to_string())
                    .unwrap_or_default(),
            });
        };
        if let Some(m) = &ex.matches {
            check(index, "user", m.user.as_deref(), req.last_of(Role::User))?;
            check(
                index,
                "system",
                m.system.as_deref(),
                req.last_of(Role::System),
            )?;
            check(index, "last", m.last.as_deref(), req.last_input())?;
        }
        *next += 1;
        Ok(reply(index, &ex.reply))
    }
}

fn check(index: usize, role: &str, want: Option<&str>, msg: Option<&Message>) -> Result<()> {
    let Some(want) = want else { return Ok(()) };
    let got = msg.map(Message::content_str).unwrap_or("");
    if got.contains(want) {
        Ok(())
    } else {
        Err(Error::ScriptMismatch {
            index,
            role: role.to_string(),
            expected: want.to_string(),
            got: got.to_string(),
        })
    }
}

fn reply(index: usize, r: &ScriptReply) -> ChatResponse {
    let tool_calls: Vec<ToolCall> = r
        .tool_call
        .iter()
        .map(|c| ToolCall {
            id: format!("call_{index}"),
            name: c.name.clone(),
            arguments: match &c.arguments {
                Value::String(s) => s.clone(),
                other => other.to_string(),
            },
        })
        .collect();
    let finish = r.finish_reason.clone().unwrap_or_else(|| {
        if tool_calls.is_empty() {
            "stop".into()
        } else {
            "tool_calls".into()
        }
    });
    let mut usage = r.usage;
    usage.total_tokens = usage.total();
    ChatResponse {
        content: r.content.clone(),
        tool_calls,
        usage,
        finish_reason: Some(finish),
        latency_ms: 0,
        model: Some("scripted".into()),
    }
}

impl ChatProvider for ScriptedProvider {
    fn name(&self) -> &str {
        "scripted"
    }
    fn chat<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse>> {
        Box::pin(std::future::ready(self.serve(request)))
    }
}
