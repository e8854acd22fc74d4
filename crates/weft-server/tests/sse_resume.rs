//! `GET /v1/events/stream` with `Last-Event-ID`: a client that disconnects and reconnects
//! with the header gets exactly the events it missed (those a stream that stayed connected
//! got after that id, in the same order), then the live ones; an id the server no longer
//! keeps gets one `weft.lagged` frame.

mod common;

use std::time::Duration;

use axum::body::{Body, BodyDataStream};
use axum::http::StatusCode;
use common::*;
use futures::StreamExt as _;
use serde_json::{Value, json};

const A: Option<&str> = Some(TOK_A);

/// One SSE frame: its id (if any), its event type and its data.
type Frame = (Option<String>, String, Value);

struct Frames {
    body: BodyDataStream,
    buf: String,
}

impl Frames {
    async fn open(s: &Srv, instance: &str, last_event_id: Option<&str>) -> Frames {
        let mut r = req("GET", &format!("/v1/events/stream?instance={instance}"), A);
        if let Some(id) = last_event_id {
            r = r.header("last-event-id", id);
        }
        let res = s.send(r.body(Body::empty()).expect("request")).await;
        assert_eq!(res.status(), StatusCode::OK);
        Frames {
            body: res.into_body().into_data_stream(),
            buf: String::new(),
        }
    }

    /// The next frame with an event type (keep-alive comments skipped). The deadline only
    /// turns a missing frame into a failure instead of a hang.
    async fn next(&mut self) -> Frame {
        loop {
            if let Some(end) = self.buf.find("\n\n") {
                let frame: String = self.buf.drain(..end + 2).collect();
                let (mut id, mut ty, mut data) = (None, String::new(), String::new());
                for line in frame.lines() {
                    if let Some(v) = line.strip_prefix("id:") {
                        id = Some(v.trim().to_string());
                    } else if let Some(v) = line.strip_prefix("event:") {
                        ty = v.trim().to_string();
                    } else if let Some(v) = line.strip_prefix("data:") {
                        data.push_str(v.trim_start());
                    }
                }
                if !ty.is_empty() {
                    return (id, ty, serde_json::from_str(&data).unwrap_or(Value::Null));
                }
                continue;
            }
            let chunk = tokio::time::timeout(Duration::from_secs(20), self.body.next())
                .await
                .expect("no SSE frame within 20 s")
                .expect("the stream ended")
                .expect("chunk");
            self.buf.push_str(&String::from_utf8_lossy(&chunk));
        }
    }

    /// Frames up to and including the `n`-th `plan.step.finished`.
    async fn until_finished(&mut self, n: usize) -> Vec<Frame> {
        let mut out = Vec::new();
        let mut seen = 0;
        while seen < n {
            let f = self.next().await;
            seen += usize::from(f.1 == "dev.weft.plan.step.finished");
            out.push(f);
        }
        out
    }
}

/// A reactive plan: every `ping` runs one step.
async fn waiting_instance(s: &Srv) -> String {
    let plan = json!({"plan_name": "resume", "graph_type": "reactive",
        "events": {"ping": {"kind": "input"}, "seen": {"kind": "output"}},
        "steps": {"see": {"on": ["ping"], "action": "echo", "args": {"n": "${ping.n}"},
            "emits": ["seen"]}}});
    assert_eq!(s.post("/v1/plans", A, &plan).await.0, StatusCode::CREATED);
    let (st, v) = s.post("/v1/instances", A, &json!({"plan": "resume"})).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v["id"].as_str().expect("id").to_string()
}

async fn ping(s: &Srv, instance: &str, n: u32) {
    let ev = json!({"specversion": "1.0", "id": format!("ping-{n}"), "source": "test",
        "type": "ping", "weftinstance": instance, "data": {"n": n}});
    let (st, v) = s.post("/v1/events", A, &ev).await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
}

fn ids(frames: &[Frame]) -> Vec<String> {
    frames
        .iter()
        .map(|(id, ty, _)| format!("{ty} {}", id.as_deref().unwrap_or("-")))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reconnecting_stream_gets_exactly_the_events_it_missed() {
    let s = sqlite(two_tenants()).await;
    let id = waiting_instance(&s).await;
    // A stream that stays connected throughout: what the reconnecting one must match.
    let mut control = Frames::open(&s, &id, None).await;
    let mut client = Frames::open(&s, &id, None).await;
    ping(&s, &id, 1).await;
    let before = client.until_finished(1).await;
    let last = before
        .last()
        .and_then(|f| f.0.clone())
        .expect("an event id");
    drop(client);
    // Missed while disconnected.
    ping(&s, &id, 2).await;
    ping(&s, &id, 3).await;
    let mut again = Frames::open(&s, &id, Some(&last)).await;
    ping(&s, &id, 4).await;

    let all = control.until_finished(4).await;
    let cut = all
        .iter()
        .position(|f| f.0.as_deref() == Some(last.as_str()))
        .expect("the control stream saw the last id");
    assert_eq!(
        ids(&all[..=cut]),
        ids(&before),
        "the first connection's frames"
    );
    let expected = &all[cut + 1..];
    let mut got = Vec::new();
    while got.len() < expected.len() {
        got.push(again.next().await);
    }
    assert_eq!(ids(&got), ids(expected));
    // The steps of pings 2, 3 (missed) and 4 (live), each once.
    let firings: Vec<&Value> = got
        .iter()
        .filter(|f| f.1 == "dev.weft.plan.step.finished")
        .map(|f| &f.2["data"]["firing"])
        .collect();
    assert_eq!(firings.len(), 3, "{got:#?}");
    assert!(firings.windows(2).all(|w| w[0] != w[1]), "{firings:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_id_no_longer_kept_gets_a_lagged_frame_then_the_live_events() {
    let s = sqlite(two_tenants()).await;
    let id = waiting_instance(&s).await;
    let mut stream = Frames::open(&s, &id, Some("i99-12345")).await;
    let (fid, ty, data) = stream.next().await;
    assert_eq!((fid, ty.as_str()), (None, "weft.lagged"));
    assert_eq!(data, json!({"missed": null}));
    ping(&s, &id, 1).await;
    let live = stream.until_finished(1).await;
    assert!(
        live.iter().all(|f| f.1.starts_with("dev.weft.plan.")),
        "{live:#?}"
    );
}
