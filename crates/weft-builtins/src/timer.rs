//! `timer.after`, `timer.at`, `timer.cron`: put a token on an event of the calling instance
//! later.
//!
//! The tools only compute the first due time (from the engine's clock, `services.now_ms()`,
//! never the wall clock, so replays and tests are deterministic) and hand a [`TimerRequest`]
//! to the engine, which journals the timer and fires it, after a restart too. Cron
//! expressions are parsed by `croner` (5 or 6 fields, UTC) and validated here, so a bad one
//! fails the step at once with the parser's message instead of never firing.

use std::str::FromStr;
use std::sync::Arc;

use chrono::{DateTime, SecondsFormat, Utc};
use croner::Cron;
use serde::Deserialize;
use serde_json::Value;

use crate::builtin::{FnTool, builtin_spec};
use crate::support::{invalid, parse_args};
use crate::{Registry, TimerRequest, ToolContext, ToolError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AfterArgs {
    ms: u64,
    event: String,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AtArgs {
    at: String,
    event: String,
    #[serde(default)]
    data: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct CronArgs {
    cron: String,
    event: String,
    #[serde(default)]
    data: Option<Value>,
    #[serde(default)]
    count: Option<u32>,
}

/// Registers the three timer tools.
pub fn register(reg: &mut Registry) {
    reg.register(Arc::new(FnTool::new(builtin_spec("timer.after"), after)));
    reg.register(Arc::new(FnTool::new(builtin_spec("timer.at"), at)));
    reg.register(Arc::new(FnTool::new(builtin_spec("timer.cron"), cron)));
}

/// `timer.after`: `ms` milliseconds from now.
pub fn after(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    const T: &str = "timer.after";
    let a: AfterArgs = parse_args(T, args)?;
    let due = i64::try_from(a.ms)
        .ok()
        .and_then(|ms| ctx.services.now_ms().checked_add(ms))
        .filter(|d| to_datetime(*d).is_some())
        .ok_or_else(|| invalid(T, format!("ms: {} is too far in the future", a.ms)))?;
    schedule(ctx, T, a.event, a.data, due, None, None)
}

/// `timer.at`: at an RFC 3339 time (a time already past fires at once).
pub fn at(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    const T: &str = "timer.at";
    let a: AtArgs = parse_args(T, args)?;
    let at = DateTime::parse_from_rfc3339(a.at.trim())
        .map_err(|e| invalid(T, format!("at: not an RFC 3339 time ({e})")))?;
    schedule(ctx, T, a.event, a.data, at.timestamp_millis(), None, None)
}

/// `timer.cron`: at the next occurrence of a cron expression, then on every one after.
pub fn cron(ctx: &ToolContext, args: Value) -> Result<Value, ToolError> {
    const T: &str = "timer.cron";
    let a: CronArgs = parse_args(T, args)?;
    if a.count == Some(0) {
        return Err(invalid(T, "count: must be at least 1"));
    }
    let expr = a.cron.trim().to_string();
    let parsed = Cron::from_str(&expr).map_err(|e| invalid(T, format!("cron `{expr}`: {e}")))?;
    // Occurrences are whole seconds; croner would otherwise carry the clock's millis over.
    let now = to_datetime(ctx.services.now_ms().div_euclid(1000) * 1000)
        .ok_or_else(|| ToolError::fatal("clock", "the engine clock is out of range"))?;
    let next = parsed
        .find_next_occurrence(&now, false)
        .map_err(|e| invalid(T, format!("cron `{expr}` never fires: {e}")))?;
    schedule(
        ctx,
        T,
        a.event,
        a.data,
        next.timestamp_millis(),
        Some(expr),
        a.count,
    )
}

fn schedule(
    ctx: &ToolContext,
    tool: &str,
    event: String,
    data: Option<Value>,
    due_ms: i64,
    cron: Option<String>,
    count: Option<u32>,
) -> Result<Value, ToolError> {
    if event.trim().is_empty() {
        return Err(invalid(tool, "event: must not be empty"));
    }
    let due = to_datetime(due_ms)
        .ok_or_else(|| invalid(tool, "the due time is out of range"))?
        .to_rfc3339_opts(SecondsFormat::Millis, true);
    let timer_id = ctx.services.set_timer(
        ctx,
        TimerRequest {
            event,
            // A timer without data still carries an object, so guards can test fields.
            data: data.unwrap_or_else(|| Value::Object(serde_json::Map::new())),
            due_ms,
            cron,
            count,
        },
    )?;
    Ok(serde_json::json!({ "timer_id": timer_id, "due": due, "due_ms": due_ms }))
}

/// The next occurrence (epoch ms) of cron expression `expr` strictly after `after_ms`, or
/// `None` if it does not parse or never fires again: what the engine re-arms a `timer.cron`
/// timer with after each firing (`weft_runtime::EngineOptions::cron`).
pub fn next_occurrence(expr: &str, after_ms: i64) -> Option<i64> {
    let parsed = Cron::from_str(expr.trim()).ok()?;
    let after = to_datetime(after_ms.div_euclid(1000) * 1000)?;
    parsed
        .find_next_occurrence(&after, false)
        .ok()
        .map(|t| t.timestamp_millis())
}

fn to_datetime(ms: i64) -> Option<DateTime<Utc>> {
    DateTime::from_timestamp_millis(ms)
}
