//! Tracing spans of the server, seen by a capturing subscriber: a request's `http.request`
//! span carries its request id, and each step of an instance gets a `weft.step` span with
//! tenant, instance, step, action, firing, attempt, idempotency key and outcome, opened
//! inside the request that caused it.

mod common;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::StatusCode;
use common::*;
use serde_json::json;
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id, Record};
use tracing_subscriber::layer::{Context, SubscriberExt as _};
use tracing_subscriber::registry::LookupSpan;

/// One captured span: name, fields, parent span name.
#[derive(Debug, Clone, Default)]
struct Captured {
    name: String,
    fields: BTreeMap<String, String>,
    parent: Option<String>,
}

struct Fields<'a>(&'a mut BTreeMap<String, String>);

impl Visit for Fields<'_> {
    fn record_debug(&mut self, f: &Field, v: &dyn std::fmt::Debug) {
        self.0.insert(f.name().to_string(), format!("{v:?}"));
    }
    fn record_str(&mut self, f: &Field, v: &str) {
        self.0.insert(f.name().to_string(), v.to_string());
    }
}

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<BTreeMap<u64, Captured>>>);

impl<S: tracing::Subscriber + for<'a> LookupSpan<'a>> tracing_subscriber::Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, id: &Id, ctx: Context<'_, S>) {
        let mut c = Captured {
            name: attrs.metadata().name().to_string(),
            parent: ctx
                .span(id)
                .and_then(|s| s.parent())
                .map(|p| p.name().to_string()),
            ..Captured::default()
        };
        attrs.record(&mut Fields(&mut c.fields));
        self.0
            .lock()
            .expect("captured spans")
            .insert(id.into_u64(), c);
    }
    fn on_record(&self, id: &Id, values: &Record<'_>, _: Context<'_, S>) {
        if let Some(c) = self
            .0
            .lock()
            .expect("captured spans")
            .get_mut(&id.into_u64())
        {
            values.record(&mut Fields(&mut c.fields));
        }
    }
}

#[test]
fn step_spans_carry_their_fields_inside_the_request_span() {
    let cap = Capture::default();
    let sub = tracing_subscriber::registry()
        .with(cap.clone())
        .with(tracing_subscriber::filter::LevelFilter::INFO);
    let _g = tracing::subscriber::set_default(sub);
    // One thread: everything (requests, the instance's loop) runs under this subscriber.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let id = rt.block_on(async {
        let s = sqlite(two_tenants()).await;
        let (st, v) = s
            .post(
                "/v1/instances",
                Some(TOK_A),
                &json!({"plan_inline": ticker()}),
            )
            .await;
        assert_eq!(st, StatusCode::CREATED, "{v}");
        let id = v["id"].as_str().unwrap().to_string();
        let (st, v, _) = s
            .call(
                req("POST", "/v1/events", Some(TOK_A))
                    .header("content-type", "application/cloudevents+json")
                    .header("x-request-id", "req-span-1")
                    .body(Body::from(cloud_event("tick", 7, Some(&id)).to_string()))
                    .unwrap(),
            )
            .await;
        assert_eq!(st, StatusCode::ACCEPTED, "{v}");
        id
    });
    let spans: Vec<Captured> = cap.0.lock().unwrap().values().cloned().collect();
    let request = spans
        .iter()
        .find(|c| {
            c.name == "http.request"
                && c.fields.get("request_id").map(String::as_str) == Some("req-span-1")
        })
        .unwrap_or_else(|| panic!("no request span with the id: {spans:#?}"));
    assert_eq!(
        request.fields.get("tenant").map(String::as_str),
        Some("tenant-a")
    );
    assert_eq!(
        request.fields.get("status").map(String::as_str),
        Some("202")
    );
    let steps: Vec<&Captured> = spans.iter().filter(|c| c.name == "weft.step").collect();
    assert_eq!(steps.len(), 1, "one step fired: {steps:#?}");
    let f = &steps[0].fields;
    assert_eq!(f.get("tenant").map(String::as_str), Some("tenant-a"));
    assert_eq!(f.get("instance"), Some(&id));
    assert_eq!(f.get("step").map(String::as_str), Some("count"));
    assert_eq!(f.get("action").map(String::as_str), Some("echo"));
    assert_eq!(f.get("attempt").map(String::as_str), Some("1"));
    assert_eq!(f.get("outcome").map(String::as_str), Some("ok"));
    let key = f.get("idempotency_key").cloned().unwrap_or_default();
    assert!(key.starts_with(&format!("{id}/count/")), "{key}");
    assert_eq!(
        steps[0].parent.as_deref(),
        Some("http.request"),
        "the step ran inside the request that delivered its token"
    );
}
