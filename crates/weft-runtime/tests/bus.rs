//! A subscriber that stops reading must neither block the engine nor make the bus grow: it
//! is told how many events it missed and then gets the newest ones, while a subscriber that
//! keeps up sees everything in order.

mod common;

use std::sync::Arc;

use common::harness_with;
use serde_json::{Value, json};
use weft_core::Status;
use weft_runtime::{Delivery, Filter, InProcessBus};

/// A 30-step chain: one `plan.started`, 30 × (`plan.step.started`, `plan.step.finished`),
/// one `plan.completed`.
fn chain(n: usize) -> Value {
    let mut events = serde_json::Map::new();
    let mut steps = serde_json::Map::new();
    events.insert("start".into(), json!({}));
    for i in 1..=n {
        events.insert(format!("e{i}"), json!({}));
        steps.insert(
            format!("s{i}"),
            json!({"on":[if i == 1 { "start".to_string() } else { format!("e{}", i - 1) }],"action":"noop","args":{},"emits":[format!("e{i}")]}),
        );
    }
    json!({"plan_name":"chain","graph_type":"acyclic","events":events,"steps":steps})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lagging_subscriber_is_told_what_it_missed_and_never_blocks_the_engine() {
    const CAPACITY: usize = 8;
    let h = harness_with(|o| o.bus = Arc::new(InProcessBus::new(CAPACITY)));
    let p = h.plan(chain(30));
    let mut slow = h.engine.subscribe(Filter::default());
    let mut fast = h.engine.subscribe(Filter::default());
    let reader = tokio::spawn(async move {
        let (mut seen, mut missed) = (Vec::new(), 0u64);
        while let Some(d) = fast.recv().await {
            match d {
                Delivery::Event(e) => {
                    let done = e.ty == "dev.weft.plan.completed";
                    seen.push(e.ty.clone());
                    if done {
                        break;
                    }
                }
                Delivery::Lagged(n) => missed += n,
            }
        }
        (seen, missed)
    });

    let i = h.engine.start("t", &p, json!({})).expect("starts");
    let o = tokio::time::timeout(std::time::Duration::from_secs(10), i.wait())
        .await
        .expect("the engine is not held up by a subscriber that reads nothing");
    assert_eq!(o.status, Status::Completed);
    let (seen, fast_missed) = reader.await.expect("reader");
    let total = 2 + 2 * 30;

    // The slow subscriber: first how many it missed, then at most CAPACITY newest events,
    // ending with the completion.
    let first = slow.recv().await.expect("a delivery");
    let Delivery::Lagged(missed) = first else {
        panic!("expected a lag notice first, got {first:?}");
    };
    let mut tail = Vec::new();
    while let Ok(Some(d)) =
        tokio::time::timeout(std::time::Duration::from_millis(50), slow.recv()).await
    {
        match d {
            Delivery::Event(e) => tail.push(e.ty.clone()),
            Delivery::Lagged(n) => panic!("a second lag of {n} with nothing published"),
        }
    }
    assert!(tail.len() <= CAPACITY, "{} buffered", tail.len());
    assert_eq!(
        missed as usize + tail.len(),
        total,
        "missed + received = published"
    );
    assert_eq!(
        tail.last().map(String::as_str),
        Some("dev.weft.plan.completed")
    );

    // The reader that kept up: everything accounted for, in order.
    assert_eq!(seen.len() + fast_missed as usize, total);
    if fast_missed == 0 {
        assert_eq!(
            seen.first().map(String::as_str),
            Some("dev.weft.plan.started")
        );
        let steps = seen
            .iter()
            .filter(|t| *t == "dev.weft.plan.step.finished")
            .count();
        assert_eq!(steps, 30);
    }
    // Its tail is the slow one's tail: both got the newest events in publication order.
    assert!(seen.ends_with(&tail), "{seen:?} vs {tail:?}");
}
