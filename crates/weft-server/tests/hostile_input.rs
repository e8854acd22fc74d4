//! The smaller hostile-input defects of issue #27, each against the in-process app: security
//! headers on every response, binary-mode CloudEvents (checked and deduplicated like
//! structured ones), error messages that name no Rust type, and opaque instance ids that
//! reveal no counter across tenants (and survive a restart on the same store).

mod common;

use axum::body::Body;
use axum::http::StatusCode;
use common::*;
use serde_json::{Value, json};

const A: Option<&str> = Some(TOK_A);
const B: Option<&str> = Some(TOK_B);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_response_sends_nosniff_and_a_content_security_policy() {
    let s = sqlite(two_tenants()).await;
    for (uri, token) in [
        ("/", None),
        ("/ui/", None),
        ("/ui/app.js", None),
        ("/healthz", None),
        ("/v1/plans", None),
        ("/v1/plans", A),
        ("/no/such/route", A),
    ] {
        let res = s
            .send(req("GET", uri, token).body(Body::empty()).expect("request"))
            .await;
        let h = res.headers();
        assert_eq!(
            h.get("x-content-type-options")
                .and_then(|v| v.to_str().ok()),
            Some("nosniff"),
            "{uri}"
        );
        let csp = h
            .get("content-security-policy")
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default();
        for part in [
            "frame-ancestors 'none'",
            "script-src 'self'",
            "default-src 'self'",
        ] {
            assert!(csp.contains(part), "{uri}: {csp}");
        }
        assert!(!csp.contains("unsafe-inline"), "{csp}");
    }
}

/// A binary-mode event: attributes in `ce-*` headers, `data` as the body.
fn binary(headers: &[(&str, &str)], content_type: &str, body: &str) -> axum::http::Request<Body> {
    let mut r = req("POST", "/v1/events", A).header("content-type", content_type);
    for (n, v) in headers {
        r = r.header(*n, *v);
    }
    r.body(Body::from(body.to_string())).expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_cloudevents_are_accepted_checked_and_deduplicated() {
    let s = sqlite(two_tenants()).await;
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": ticker()}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let attrs = [
        ("ce-specversion", "1.0"),
        ("ce-id", "bin-1"),
        ("ce-source", "/binary"),
        ("ce-type", "tick"),
        ("ce-weftinstance", id.as_str()),
    ];
    let (st, v, _) = s
        .call(binary(&attrs, "application/json", r#"{"n": 7}"#))
        .await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "routed": 1, "duplicates": 0})
        )
    );
    // The same `ce-source` + `ce-id` again: a duplicate, not applied.
    let (st, v, _) = s
        .call(binary(&attrs, "application/json", r#"{"n": 8}"#))
        .await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "routed": 0, "duplicates": 1})
        )
    );
    // ... also when it comes back in structured mode.
    let structured = json!({"specversion": "1.0", "id": "bin-1", "source": "/binary", "type": "tick", "weftinstance": id, "data": {"n": 9}});
    let (_, v) = s.post("/v1/events", A, &structured).await;
    assert_eq!(v["duplicates"], 1, "{v}");
    // Missing required attributes are refused by name.
    for missing in ["ce-specversion", "ce-id", "ce-source", "ce-type"] {
        let some: Vec<(&str, &str)> = attrs
            .iter()
            .copied()
            .filter(|(n, _)| *n != missing)
            .collect();
        let (st, v, _) = s.call(binary(&some, "application/json", "{}")).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{missing}: {v}");
        assert_eq!(v["code"], "invalid_cloudevent", "{v}");
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(&format!("`{missing}` header is missing")),
            "{detail}"
        );
    }
    // Data weft cannot take, and data that is not the JSON it claims to be.
    let other = [
        ("ce-specversion", "1.0"),
        ("ce-id", "bin-2"),
        ("ce-source", "/binary"),
        ("ce-type", "tick"),
        ("ce-weftinstance", id.as_str()),
    ];
    let (st, v, _) = s.call(binary(&other, "image/png", "x")).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("unsupported_media_type")
        )
    );
    let (st, v, _) = s.call(binary(&other, "application/json", "{")).await;
    assert_eq!(
        (st, v["code"].as_str()),
        (StatusCode::BAD_REQUEST, Some("invalid_json"))
    );
    // Exactly one event reached the instance.
    let (_, j) = s
        .get(&format!("/v1/instances/{id}/journal?limit=1000"), A)
        .await;
    let tokens: Vec<&Value> = j["records"]
        .as_array()
        .expect("records")
        .iter()
        .filter(|r| r["kind"] == "token.added")
        .collect();
    assert_eq!(tokens.len(), 1, "{j}");
    assert!(tokens[0].to_string().contains('7'), "{}", tokens[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn error_messages_name_no_rust_type() {
    let s = sqlite(two_tenants()).await;
    let mut details = Vec::new();
    // A JSON body of the wrong shape: serde says `expected struct StartRequest`.
    for body in [json!([]), json!("x")] {
        let (st, v) = s.post("/v1/instances", A, &body).await;
        assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
        details.push(v["detail"].as_str().unwrap_or_default().to_string());
    }
    // A plan that is not an object: the loader says `expected struct Plan` (422, L004).
    let (st, v) = s.post("/v1/instances", A, &json!({"plan_inline": 1})).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    details.push(format!("{} {}", v["detail"], v["findings"]));
    // A path parameter that is not a number: axum says ``Cannot parse `abc` to a `u32` ``.
    let (st, v) = s.get("/v1/plans/sample/versions/abc", A).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    details.push(v["detail"].as_str().unwrap_or_default().to_string());
    let (st, v) = s.get("/v1/instances?limit=-1", A).await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    details.push(v["detail"].as_str().unwrap_or_default().to_string());
    for d in &details {
        for rust in [
            "struct ", "enum ", "`u32`", "u32", "usize", "u64", "::", "Some(", "Error {",
        ] {
            assert!(!d.contains(rust), "`{rust}` in: {d}");
        }
    }
    assert!(
        details[2].contains("expected a JSON object"),
        "{}",
        details[2]
    );
    assert!(
        details[3].contains("non-negative integer"),
        "{}",
        details[3]
    );
}

/// Starts a ticker for `token`; returns its id.
async fn start(s: &Srv, token: Option<&str>) -> String {
    let (st, v) = s
        .post("/v1/instances", token, &json!({"plan_inline": ticker()}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    v["id"].as_str().expect("id").to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_ids_are_opaque_and_reveal_no_counter_across_tenants() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weft.db");
    let s = sqlite_at(&path, two_tenants()).await;
    // Tenant A's instances, with tenant B creating some in between.
    let mut a = Vec::new();
    for k in 0..12 {
        a.push(start(&s, A).await);
        if k % 3 == 0 {
            start(&s, B).await;
        }
    }
    for id in &a {
        assert_eq!(id.len(), 14, "{id}");
        assert!(id.starts_with('i'), "{id}");
        assert!(
            id[1..]
                .bytes()
                .all(|b| b"0123456789abcdefghjkmnpqrstvwxyz".contains(&b)),
            "{id}"
        );
        // Each resolves for its tenant, and for nobody else.
        assert_eq!(
            s.get(&format!("/v1/instances/{id}"), A).await.0,
            StatusCode::OK
        );
        assert_eq!(
            s.get(&format!("/v1/instances/{id}"), B).await.0,
            StatusCode::NOT_FOUND
        );
    }
    let distinct: std::collections::HashSet<&String> = a.iter().collect();
    assert_eq!(distinct.len(), a.len());
    // Consecutive creations give no ordered names, so neither their order nor their gaps
    // (the other tenant's instances) can be read off.
    let ups = a.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(ups > 0 && ups < a.len() - 1, "ordered names: {a:?}");
    // The readable spelling of an engine number does not resolve.
    for n in 1..=20 {
        assert_eq!(
            s.get(&format!("/v1/instances/i{n}"), A).await.0,
            StatusCode::NOT_FOUND
        );
    }
    // After a restart on the same store, the same names (the key lives in the store) and
    // new names of the same shape.
    s.state.durable().shutdown().await.expect("shutdown");
    drop(s);
    let s = sqlite_at(&path, two_tenants()).await;
    for id in &a {
        let (st, v) = s.get(&format!("/v1/instances/{id}"), A).await;
        assert_eq!(st, StatusCode::OK, "{id}: {v}");
        assert_eq!(v["id"], json!(id));
    }
    let fresh = start(&s, A).await;
    assert_eq!(fresh.len(), 14, "{fresh}");
    assert!(!a.contains(&fresh));
    let (st, _) = s
        .post("/v1/events", A, &cloud_event("tick", 1, Some(&fresh)))
        .await;
    assert_eq!(st, StatusCode::ACCEPTED);
}
