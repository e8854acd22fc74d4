//! Every example plan in `examples/` runs to its expected outcome with the real tools
//! registry (network and LLM replaced by offline stand-ins).

mod common;

use common::harness;
use serde_json::{Value, json};
use weft_core::Status;

/// Lets tasks (and blocking I/O of write tools) run until `done`, moving the clock a second
/// every thousand turns so retry backoffs elapse; bounded, never sleeps.
async fn until(
    h: &common::Harness,
    i: &weft_runtime::InstanceHandle,
    done: impl Fn(&weft_runtime::InstanceHandle) -> bool,
) {
    for n in 1..2_000_000u32 {
        if done(i) {
            return;
        }
        if n % 1000 == 0 {
            h.clock.advance(1_000);
        }
        tokio::task::yield_now().await;
    }
    panic!("{} did not get there: {:?}", i.id(), i.state());
}

fn load(name: &str) -> Value {
    let path = format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("example exists")).expect("json")
}

#[tokio::test]
async fn every_example_runs_to_its_expected_outcome() {
    let h = harness();
    let cases: &[(&str, Value, &str)] = &[
        ("sample.json", json!({}), "completed"),
        ("join.json", json!({"customer_id": 7}), "completed"),
        // `merge` reads the dataset from a branch's token (`start` is not one of its inputs).
        ("fanout.json", json!({"dataset": "d"}), "completed"),
        (
            "guard-branching.json",
            json!({"id": "o-1", "amount": 50, "customer": "c"}),
            "completed",
        ),
        (
            "guard-branching.json",
            json!({"id": "o-2", "amount": 50000, "customer": "c"}),
            "completed",
        ),
        (
            "failure-handling.json",
            json!({"order": "o1", "email": "a@example.com"}),
            "completed",
        ),
        ("subplan.json", json!({}), "completed"),
        // `collect` has `task` and waits for a `reply` (declared `kind: input`).
        ("channel-passing.json", json!({"job": "j"}), "waiting"),
        ("timer.json", json!({"email": "a@example.com"}), "running"),
        ("reactive-loop.json", json!({}), "running"),
    ];
    for (file, _, _) in cases {
        let doc = load(file);
        h.plan(doc);
    }
    for (file, input, expected) in cases {
        let name = load(file)["plan_name"].as_str().expect("name").to_string();
        let i = h.engine.start("t", &name, input.clone()).expect("starts");
        let live = *expected == "running";
        until(&h, &i, |i| {
            if live {
                i.state().in_flight.is_empty()
            } else {
                i.outcome_now().is_some()
            }
        })
        .await;
        let status = i.outcome_now().map_or("running", |o| o.status.name());
        assert_eq!(status, *expected, "{file}: {:?}", i.state());
        h.check_replay(&i);
        match *file {
            "channel-passing.json" => {
                let tid = format!("{}.0", i.id());
                h.engine
                    .ingest(
                        "t",
                        "reply",
                        json!({"task_id": tid, "result": 42}),
                        None,
                        Some(i.id()),
                    )
                    .expect("reply");
                let o = i.wait().await;
                assert_eq!(o.status, Status::Completed, "{o:?}");
                assert_eq!(
                    o.result("done").map(|v| v["result"].clone()),
                    Some(json!(42))
                );
            }
            "reactive-loop.json" => {
                h.engine
                    .ingest(
                        "t",
                        "message",
                        json!({"text": "hi", "from": "b@example.com"}),
                        None,
                        Some(i.id()),
                    )
                    .expect("message");
                until(&h, &i, |i| {
                    i.state().marking.contains(&("replied".to_string(), 1))
                })
                .await;
                let st = i.state();
                assert!(st.marking.contains(&("replied".to_string(), 1)), "{st:?}");
                i.stop();
            }
            "timer.json" => {
                // Waiting for the timer (and the `reminder.due` it puts on the net).
                let st = i.state();
                assert_eq!(st.status, Status::Waiting, "{st:?}");
                let a = st.awaits.expect("what it waits for");
                assert_eq!(a.events, vec!["reminder.due".to_string()]);
                assert_eq!(a.timers_due_ms.len(), 1, "{a:?}");
                h.advance(3_600_000).await;
                assert_eq!(i.wait().await.status, Status::Completed);
            }
            _ => {}
        }
        h.check_replay(&i);
    }
}
