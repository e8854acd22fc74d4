//! Timer tools: due times from the engine clock, recorded requests, and bad input.

use std::sync::Arc;

use serde_json::{Value, json};
use weft_builtins::default_registry;
use weft_tools::ToolError;

use crate::common::{FakeServices, NOW_MS, call, ctx_with};

async fn timer(tool: &str, args: Value) -> (Result<Value, ToolError>, Arc<FakeServices>) {
    let services = Arc::new(FakeServices::default());
    let r = call(
        &default_registry(),
        tool,
        ctx_with(Arc::clone(&services), "k"),
        args,
    )
    .await;
    (r, services)
}

#[tokio::test]
async fn after_is_relative_to_the_engine_clock() {
    let (r, s) = timer(
        "timer.after",
        json!({"ms": 1500, "event": "tick", "data": {"n": 1}}),
    )
    .await;
    let r = r.unwrap();
    assert_eq!(r["timer_id"], "t1");
    assert_eq!(r["due"], "2024-01-02T03:04:07.178Z");
    let t = &s.timers.lock().unwrap()[0];
    assert_eq!(t.due_ms, NOW_MS + 1500);
    assert_eq!((t.event.as_str(), &t.data), ("tick", &json!({"n": 1})));
    assert_eq!((t.cron.clone(), t.count), (None, None));
}

#[tokio::test]
async fn data_defaults_to_an_empty_object() {
    let (r, s) = timer("timer.after", json!({"ms": 0, "event": "tick"})).await;
    assert_eq!(r.unwrap()["due"], "2024-01-02T03:04:05.678Z");
    assert_eq!(s.timers.lock().unwrap()[0].data, json!({}));
}

#[tokio::test]
async fn at_parses_rfc3339_with_offsets() {
    let (r, s) = timer(
        "timer.at",
        json!({"at": "2024-06-01T12:00:00+02:00", "event": "go"}),
    )
    .await;
    assert_eq!(r.unwrap()["due"], "2024-06-01T10:00:00.000Z");
    assert_eq!(s.timers.lock().unwrap()[0].due_ms, 1_717_236_000_000);
}

#[tokio::test]
async fn cron_computes_the_next_occurrence_after_now() {
    // Every day at 09:30 UTC: next after 2024-01-02T03:04:05Z is the same day.
    let (r, s) = timer(
        "timer.cron",
        json!({"cron": "30 9 * * *", "event": "daily", "count": 3}),
    )
    .await;
    assert_eq!(r.unwrap()["due"], "2024-01-02T09:30:00.000Z");
    let t = s.timers.lock().unwrap()[0].clone();
    assert_eq!(t.cron.as_deref(), Some("30 9 * * *"));
    assert_eq!(t.count, Some(3));
    // Six fields: seconds first.
    let (r, _) = timer(
        "timer.cron",
        json!({"cron": "*/10 * * * * *", "event": "e"}),
    )
    .await;
    assert_eq!(r.unwrap()["due"], "2024-01-02T03:04:10.000Z");
}

#[tokio::test]
async fn bad_times_and_expressions_are_fatal_args_invalid() {
    let huge = "9".repeat(100_000);
    for (tool, args) in [
        ("timer.after", json!({"ms": -1, "event": "e"})),
        ("timer.after", json!({"ms": "10", "event": "e"})),
        ("timer.after", json!({"ms": u64::MAX, "event": "e"})),
        ("timer.after", json!({"ms": 1, "event": ""})),
        ("timer.after", json!({"ms": 1})),
        ("timer.at", json!({"at": "tomorrow", "event": "e"})),
        (
            "timer.at",
            json!({"at": "2024-13-01T00:00:00Z", "event": "e"}),
        ),
        ("timer.at", json!({"at": huge, "event": "e"})),
        ("timer.cron", json!({"cron": "61 * * * *", "event": "e"})),
        ("timer.cron", json!({"cron": "not cron", "event": "e"})),
        ("timer.cron", json!({"cron": huge, "event": "e"})),
        (
            "timer.cron",
            json!({"cron": "* * * * *", "event": "e", "count": 0}),
        ),
        ("timer.cron", json!({"cron": "0 0 30 2 *", "event": "e"})),
        (
            "timer.cron",
            json!({"cron": "* * * * *", "event": "e", "every": 1}),
        ),
    ] {
        let (r, s) = timer(tool, args.clone()).await;
        let e = r.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("args_invalid", false),
            "{tool} {e}"
        );
        assert!(s.timers.lock().unwrap().is_empty());
    }
    let (r, _) = timer("timer.cron", json!({"cron": "61 * * * *", "event": "e"})).await;
    assert!(r.unwrap_err().message.contains("61 * * * *"));
}

#[tokio::test]
async fn without_an_engine_timers_are_unsupported() {
    let r = call(
        &default_registry(),
        "timer.after",
        weft_tools::ToolContext::detached("s"),
        json!({"ms": 1, "event": "e"}),
    )
    .await;
    assert_eq!(r.unwrap_err().code, "unsupported");
}
