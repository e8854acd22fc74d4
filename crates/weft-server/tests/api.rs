//! Router tests (in-process, `oneshot`) for every endpoint and its error paths, over a real
//! temp SQLite store: plans, instances, events, SSE, auth, tenants, limits, ops.

mod common;

use std::time::Duration;

use axum::body::Body;
use axum::http::StatusCode;
use common::*;
use futures::StreamExt as _;
use http_body_util::BodyExt as _;
use serde_json::{Value, json};
use weft_server::ServerConfig;

const A: Option<&str> = Some(TOK_A);
const B: Option<&str> = Some(TOK_B);

/// Posts `batch` as a CloudEvents batch (`application/cloudevents-batch+json`).
async fn post_batch(s: &Srv, token: Option<&str>, batch: &Value) -> (StatusCode, Value) {
    let (st, v, _) = s
        .call(
            req("POST", "/v1/events", token)
                .header("content-type", "application/cloudevents-batch+json")
                .body(Body::from(batch.to_string()))
                .expect("request"),
        )
        .await;
    (st, v)
}

/// How many `token.added` records a journal page holds.
fn tokens_added(journal: &Value) -> usize {
    journal["records"].as_array().map_or(0, |r| {
        r.iter().filter(|r| r["kind"] == "token.added").count()
    })
}

fn problem_code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ops_routes_answer_without_auth() {
    let s = sqlite(two_tenants()).await;
    assert_eq!(
        s.get("/healthz", None).await,
        (StatusCode::OK, json!({"status": "ok"}))
    );
    assert_eq!(
        s.get("/readyz", None).await,
        (StatusCode::OK, json!({"status": "ready"}))
    );
    // Prometheus text 0.0.4 unless OpenMetrics is asked for (as Prometheus does).
    let (st, v, ct) = s
        .call(req("GET", "/metrics", None).body(Body::empty()).unwrap())
        .await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8");
    let plain = v.as_str().unwrap().to_string();
    assert!(
        plain.contains("# TYPE weft_instances_started_total counter")
            && !plain.contains("# EOF")
            && !plain.contains("# UNIT"),
        "{plain}"
    );
    let (st, v, ct) = s
        .call(
            req("GET", "/metrics", None)
                .header(
                    "accept",
                    "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5",
                )
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::OK);
    assert!(ct.starts_with("application/openmetrics-text"), "{ct}");
    let text = v.as_str().unwrap();
    assert!(
        text.contains("# TYPE weft_instances_started counter") && text.ends_with("# EOF\n"),
        "{text}"
    );
    for m in [
        "weft_instances_started_total",
        "weft_steps_fired_total",
        "weft_action_latency_seconds_bucket",
        "weft_events_ingested_total",
        "weft_journal_commit_seconds_bucket",
        "weft_instances_live",
    ] {
        assert!(text.contains(m), "missing {m} in\n{text}");
    }
    let (st, ui, ct) = s
        .call(req("GET", "/", None).body(Body::empty()).unwrap())
        .await;
    assert_eq!(st, StatusCode::OK);
    assert!(ct.starts_with("text/html"), "{ct}");
    assert!(ui.as_str().unwrap().contains("<html") || ui.as_str().unwrap().contains("<!"));
    let (st, v) = s.get("/ui/no-such-asset.js", None).await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v) = s.get("/no/such/route", None).await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v, _) = s
        .call(req("DELETE", "/healthz", None).body(Body::empty()).unwrap())
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
    let (st, _, _) = s
        .call(req("DELETE", "/v1/plans", A).body(Body::empty()).unwrap())
        .await;
    assert_eq!(st, StatusCode::METHOD_NOT_ALLOWED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_is_3_1_and_covers_every_route_with_its_statuses() {
    let s = sqlite(two_tenants()).await;
    let (st, doc) = s.get("/openapi.json", None).await;
    assert_eq!(st, StatusCode::OK);
    assert!(
        doc["openapi"].as_str().unwrap().starts_with("3.1"),
        "{}",
        doc["openapi"]
    );
    let paths = doc["paths"].as_object().unwrap();
    for (p, methods) in [
        ("/healthz", vec!["get"]),
        ("/readyz", vec!["get"]),
        ("/metrics", vec!["get"]),
        ("/openapi.json", vec!["get"]),
        ("/v1/plans", vec!["get", "post"]),
        ("/v1/plans/{name}", vec!["get"]),
        ("/v1/plans/{name}/versions/{version}", vec!["get"]),
        ("/v1/plans/{name}/net", vec!["get"]),
        ("/v1/validate", vec!["post"]),
        ("/v1/analyze", vec!["post"]),
        ("/v1/generate", vec!["post"]),
        ("/v1/explain", vec!["post"]),
        ("/v1/instances", vec!["get", "post"]),
        ("/v1/instances/{id}", vec!["get"]),
        ("/v1/instances/{id}/trace", vec!["get"]),
        ("/v1/instances/{id}/journal", vec!["get"]),
        ("/v1/instances/{id}/inspect", vec!["get"]),
        ("/v1/instances/{id}/stop", vec!["post"]),
        ("/v1/instances/{id}/resume", vec!["post"]),
        ("/v1/instances/{id}/checkpoint", vec!["post"]),
        ("/v1/instances/{id}/repair", vec!["post"]),
        ("/v1/events", vec!["post"]),
        ("/v1/events/stream", vec!["get"]),
        ("/plan/react", vec!["post"]),
        ("/v1/tools", vec!["get"]),
        ("/v1/tools/{name}", vec!["get", "put", "delete"]),
    ] {
        for m in methods {
            let op = &paths[p][m];
            assert!(op.is_object(), "{m} {p} missing");
            if p.starts_with("/v1") || p.starts_with("/plan") {
                for code in ["401", "429"] {
                    assert!(op["responses"][code].is_object(), "{m} {p} lacks {code}");
                }
            }
        }
    }
    assert!(doc["components"]["securitySchemes"]["bearer"].is_object());
    // Query parameters are optional and in the query; path names carry their charset.
    let params = doc["paths"]["/v1/instances"]["get"]["parameters"]
        .as_array()
        .unwrap();
    for p in params {
        assert_eq!(p["in"], "query", "{p}");
        assert_ne!(p["required"], true, "{p}");
    }
    let limit = params.iter().find(|p| p["name"] == "limit").unwrap();
    assert_eq!(limit["schema"]["minimum"], 1, "{limit}");
    let stream = doc["paths"]["/v1/events/stream"]["get"]["parameters"]
        .as_array()
        .unwrap();
    assert!(
        stream
            .iter()
            .any(|p| p["name"] == "type" && p["in"] == "query"),
        "{stream:?}"
    );
    let id = &doc["paths"]["/v1/instances/{id}"]["get"]["parameters"][0];
    assert_eq!(id["in"], "path");
    assert!(id["schema"]["pattern"].is_string(), "{id}");
    // `analysis` may be null (a plan that does not load).
    let analyzed = doc["components"]["schemas"]["Analyzed"]["properties"]["analysis"].to_string();
    assert!(analyzed.contains("null"), "{analyzed}");
    // The plan body is the plan format's schema, its definitions resolvable.
    let body = &doc["paths"]["/v1/plans"]["post"]["requestBody"]["content"]["application/json"]["schema"]
        ["$ref"];
    assert_eq!(body, "#/components/schemas/PlanDocument");
    let plan = &doc["components"]["schemas"]["PlanDocument"];
    assert!(plan["properties"]["steps"].is_object(), "{plan}");
    let text = doc.to_string();
    assert!(!text.contains("#/$defs/"), "unresolved $defs reference");
    for r in text.split("\"#/components/schemas/").skip(1) {
        let name = r.split('"').next().unwrap();
        assert!(
            doc["components"]["schemas"][name].is_object(),
            "dangling $ref {name}"
        );
    }
    assert!(doc["components"]["schemas"]["Problem"].is_object());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plans_create_list_get_net_validate_analyze() {
    let s = sqlite(two_tenants()).await;
    let created = s.create_example("fanout.json", A).await;
    assert_eq!(created["name"], "fanout");
    assert_eq!(created["version"], 1);
    assert_eq!(created["status"], "template");
    assert_eq!(created["analysis"]["verdict"], "sound");
    // The same document again is the same version; a changed one is version 2.
    assert_eq!(s.create_example("fanout.json", A).await["version"], 1);
    let mut doc = s.get("/v1/plans/fanout", A).await.1["plan"].clone();
    doc["description"] = json!("changed");
    let (st, v) = s.post("/v1/plans", A, &doc).await;
    assert_eq!((st, v["version"].clone()), (StatusCode::CREATED, json!(2)));

    let (st, list) = s.get("/v1/plans", A).await;
    assert_eq!(st, StatusCode::OK);
    let plans = list["plans"].as_array().unwrap();
    assert_eq!(plans.len(), 1, "{list}");
    assert_eq!(plans[0]["version"], 2);
    assert_eq!(plans[0]["steps"], 11);
    assert_eq!(plans[0]["verdict"], "sound");
    assert!(plans[0]["created_at_ms"].as_i64().unwrap() > 0);

    let (st, v) = s.get("/v1/plans/fanout/versions/1", A).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["version"], 1);
    assert_ne!(v["plan"]["description"], "changed");
    let (st, v) = s.get("/v1/plans/fanout/versions/9", A).await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));

    let (st, net) = s.get("/v1/plans/fanout/net?version=1", A).await;
    assert_eq!(st, StatusCode::OK);
    let places = net["places"].as_array().unwrap();
    let kind = |id: &str| {
        places
            .iter()
            .find(|p| p["id"] == id)
            .map(|p| (p["kind"].clone(), p["initial"].clone()))
    };
    assert_eq!(kind("start"), Some((json!("input"), json!(1))));
    assert_eq!(kind("all.checked"), Some((json!("result"), json!(0))));
    assert_eq!(kind("shard_3.checked"), Some((json!("internal"), json!(0))));
    assert_eq!(net["steps"].as_array().unwrap().len(), 11);
    let arcs = net["arcs"].as_array().unwrap();
    assert!(arcs.contains(
        &json!({"from": "start", "to": "check_shard_0", "kind": "consume", "when": null})
    ));
    assert!(arcs.iter().any(|a| a["from"] == "check_shard_0"
        && a["to"] == "shard_0.checked"
        && a["kind"] == "emit"));
    assert_eq!(net["analysis"]["verdict"], "sound");

    // Validate / analyse never store.
    let (st, v) = s.post("/v1/validate", A, &ticker()).await;
    assert_eq!((st, v["ok"].clone()), (StatusCode::OK, json!(true)), "{v}");
    let (st, v) = s.post("/v1/analyze", A, &ticker()).await;
    assert_eq!(st, StatusCode::OK);
    assert!(v["analysis"].is_object(), "{v}");
    let mut bad = ticker();
    bad["steps"]["count"]["on"] = json!(["nope"]);
    let (st, v) = s.post("/v1/validate", A, &bad).await;
    assert_eq!((st, v["ok"].clone()), (StatusCode::OK, json!(false)));
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "V001"),
        "{v}"
    );
    let (st, v) = s.post("/v1/analyze", A, &bad).await;
    assert_eq!((st, v["analysis"].clone()), (StatusCode::OK, Value::Null));
    assert_eq!(s.get("/v1/plans/ticker", A).await.0, StatusCode::NOT_FOUND);

    // A plan with errors is not stored.
    let (st, v) = s.post("/v1/plans", A, &bad).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plan")
    );
    assert!(
        v["findings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["code"] == "V001")
    );
    // A plan some run of which spends more than its own `limits` is refused too, with the
    // run as witness; the analysis endpoint shows the bound.
    let over = json!({"plan_name": "pricey", "graph_type": "acyclic",
        "limits": {"max_tool_calls": 2},
        "events": {"start": {}, "a": {}, "done": {"kind": "output"}},
        "steps": {
            "one": {"on": ["start"], "action": "echo", "emits": ["a"], "retry": {"max": 1}},
            "two": {"on": ["a"], "action": "echo", "emits": ["done"]}}});
    let (st, v) = s.post("/v1/plans", A, &over).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plan"),
        "{v}"
    );
    let f = v["findings"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["code"] == "A010")
        .expect("A010");
    assert_eq!(f["witness"], json!(["one", "two"]));
    assert_eq!(s.get("/v1/plans/pricey", A).await.0, StatusCode::NOT_FOUND);
    let (st, v) = s.post("/v1/analyze", A, &over).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(
        v["analysis"]["governance"]["bound"]["tool_calls"]["max"], 3,
        "{v}"
    );

    // Not a plan at all: a load error with its location.
    let (st, v) = s.post("/v1/plans", A, &json!({"plan_name": 3})).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plan")
    );
    assert!(
        v["findings"][0]["code"].as_str().unwrap().starts_with('L'),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn net_of_a_deadlocking_plan_has_the_witness_and_its_marking() {
    let s = sqlite(two_tenants()).await;
    let created = s.create_example("broken/deadlock.json", A).await;
    let name = created["name"].as_str().unwrap().to_string();
    let (st, net) = s.get(&format!("/v1/plans/{name}/net"), A).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(net["analysis"]["verdict"], "deadlock", "{net}");
    let d = &net["analysis"]["deadlocks"][0];
    assert!(d["witness"].is_array(), "{d}");
    // `check` fired without `approved`: `finish` waits forever on `checked`.
    assert_eq!(d["witness"], json!(["check"]), "{d}");
    assert_eq!(d["marking"], json!({"checked": 1}), "{d}");
    assert_eq!(
        s.get("/v1/plans", A).await.1["plans"][0]["verdict"],
        "deadlock"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_bodies_are_clear_4xx_problems() {
    let s = sqlite(two_tenants()).await;
    // Malformed JSON.
    let (st, v, ct) = s
        .call(
            req("POST", "/v1/plans", A)
                .header("content-type", "application/json")
                .header("x-request-id", "req-123")
                .body(Body::from("{\"plan_name\": "))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_json")
    );
    assert_eq!(ct, "application/problem+json");
    assert_eq!(v["request_id"], "req-123");
    assert_eq!(v["type"], "https://weft.dev/problems/invalid_json");
    assert_eq!(v["status"], 400);
    // Wrong content type.
    let (st, v, _) = s
        .call(
            req("POST", "/v1/instances", A)
                .header("content-type", "text/plain")
                .body(Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    // Over the cap: 2 MiB on a 1 MiB route, 9 MiB on the 8 MiB plan route.
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(2 << 20));
    let (st, v, _) = s
        .call(
            req("POST", "/v1/events", A)
                .header("content-type", "application/cloudevents+json")
                .body(Body::from(big))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let big = format!("{{\"x\":\"{}\"}}", "a".repeat(9 << 20));
    let (st, _, _) = s
        .call(
            req("POST", "/v1/plans", A)
                .header("content-type", "application/json")
                .body(Body::from(big))
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    // A declared 100 MB body is refused before any of it is read: the body stream here
    // never ends, so buffering it would hang the test.
    let endless = futures::stream::repeat_with(|| {
        Ok::<_, std::io::Error>(axum::body::Bytes::from_static(&[b' '; 65536]))
    });
    let (st, v, _) = s
        .call(
            req("POST", "/v1/plans", A)
                .header("content-type", "application/json")
                .header("content-length", "100000000")
                .body(Body::from_stream(endless))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    // Chunked (no length) and endless: cut off at the cap.
    let endless = futures::stream::repeat_with(|| {
        Ok::<_, std::io::Error>(axum::body::Bytes::from_static(&[b' '; 65536]))
    });
    let (st, _, _) = s
        .call(
            req("POST", "/v1/events", A)
                .header("content-type", "application/json")
                .body(Body::from_stream(endless))
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
    // Unknown fields / wrong shapes.
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan": "x", "bogus": 1}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (st, v) = s.post("/v1/instances", A, &json!({})).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    // Every response has a request id, generated when absent.
    let res = s
        .send(req("GET", "/healthz", None).body(Body::empty()).unwrap())
        .await;
    assert_eq!(res.headers()["x-request-id"].len(), 36);
    // The server is still up.
    assert_eq!(s.get("/healthz", None).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn traversal_and_odd_names_are_refused() {
    let s = sqlite(two_tenants()).await;
    for path in [
        "/v1/plans/..%2F..%2Fetc%2Fpasswd",
        "/v1/plans/a..b",
        "/v1/plans/.hidden/net",
        "/v1/plans/%00x/versions/1",
        "/v1/instances/..%2Fi1",
        "/v1/instances/i1%2F..%2F..%2Fx/journal",
    ] {
        let (st, v) = s.get(path, A).await;
        assert_eq!(
            (st, problem_code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_name"),
            "{path}: {v}"
        );
    }
    let mut p = ticker();
    p["plan_name"] = json!("../../evil");
    let (st, v) = s.post("/v1/plans", A, &p).await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    let (st, v) = s.post("/v1/instances", A, &json!({"plan": "../x"})).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_name")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn auth_requires_a_known_token() {
    let s = sqlite(two_tenants()).await;
    for (method, path) in [
        ("GET", "/v1/plans"),
        ("POST", "/v1/plans"),
        ("GET", "/v1/instances"),
        ("GET", "/v1/instances/i1"),
        ("POST", "/v1/events"),
        ("GET", "/v1/events/stream"),
        ("POST", "/plan/react"),
    ] {
        for token in [None, Some("wrong")] {
            let (st, v, _) = s
                .call(req(method, path, token).body(Body::empty()).unwrap())
                .await;
            assert_eq!(
                (st, problem_code(&v)),
                (StatusCode::UNAUTHORIZED, "unauthorized"),
                "{method} {path} {token:?}"
            );
        }
    }
    let res = s
        .send(req("GET", "/v1/plans", None).body(Body::empty()).unwrap())
        .await;
    assert!(res.headers().contains_key("www-authenticate"));
    // ?access_token= works on GET (EventSource), not on POST.
    assert_eq!(
        s.get(&format!("/v1/plans?access_token={TOK_A}"), None)
            .await
            .0,
        StatusCode::OK
    );
    let (st, _) = s
        .post(
            &format!("/v1/validate?access_token={TOK_A}"),
            None,
            &ticker(),
        )
        .await;
    assert_eq!(st, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_tokens_everything_is_the_local_tenant() {
    let s = sqlite(ServerConfig::default()).await;
    s.create_example("fanout.json", None).await;
    let (st, v) = s.get("/v1/plans", None).await;
    assert_eq!(st, StatusCode::OK);
    assert_eq!(v["plans"][0]["name"], "fanout");
    let cfg = ServerConfig {
        listen: "0.0.0.0:8080".parse().unwrap(),
        ..ServerConfig::default()
    };
    let err = weft_server::check_listen(&cfg).unwrap_err().to_string();
    assert!(err.contains("unsafe_listen"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn instance_lifecycle_of_the_fanout_example() {
    let s = sqlite(two_tenants()).await;
    s.create_example("fanout.json", A).await;
    let (st, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "fanout", "input": {"dataset": "sales"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        (v["plan"].clone(), v["version"].clone()),
        (json!("fanout"), json!(1))
    );
    let id = v["id"].as_str().unwrap().to_string();
    let state = s.wait_status(&id, A, "completed").await;
    assert_eq!(state["fired"], 11);
    assert_eq!(state["results"][0]["event"], "all.checked");
    // Step metrics come from the metered tools: one call and one latency sample per firing.
    let (_, m, _) = s
        .call(req("GET", "/metrics", None).body(Body::empty()).unwrap())
        .await;
    let metric = |name: &str| -> Option<f64> {
        m.as_str()?
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
    };
    assert_eq!(metric("weft_steps_fired_total"), Some(11.0), "{m}");
    assert_eq!(
        metric("weft_action_latency_seconds_count"),
        Some(11.0),
        "{m}"
    );
    assert!(
        state["marking"]["all.checked"][0]["data"].is_object(),
        "{state}"
    );

    // The store's list catches up with the status.
    let mut listed = Value::Null;
    for _ in 0..200 {
        listed = s.get("/v1/instances?status=completed", A).await.1;
        if listed["instances"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(listed["instances"][0]["id"], id.as_str(), "{listed}");
    // Once the stored status is final, so is the journal (the live view may run ahead of it).
    let state = s.get(&format!("/v1/instances/{id}"), A).await.1;
    assert!(state["journal_head"].as_u64().unwrap() >= 12, "{state}");
    assert_eq!(listed["next"], Value::Null);
    assert_eq!(
        s.get("/v1/instances?status=failed", A).await.1["instances"],
        json!([])
    );
    assert_eq!(
        s.get("/v1/instances?plan=other", A).await.1["instances"],
        json!([])
    );
    let (st, v) = s.get("/v1/instances?status=bogus", A).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::BAD_REQUEST, "invalid_request")
    );
    let (st, _) = s.get("/v1/instances?limit=0", A).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);

    let (st, t) = s.get(&format!("/v1/instances/{id}/trace"), A).await;
    assert_eq!(st, StatusCode::OK);
    let steps = t["steps"].as_array().unwrap();
    assert_eq!(steps.len(), 11, "{t}");
    assert!(
        steps
            .iter()
            .all(|x| x["outcome"] == "ok" && x["attempts"] == 1)
    );
    assert_eq!(steps.last().unwrap()["step"], "merge");

    let (st, j) = s
        .get(&format!("/v1/instances/{id}/journal?limit=5"), A)
        .await;
    assert_eq!(st, StatusCode::OK);
    let recs = j["records"].as_array().unwrap();
    assert_eq!(recs.len(), 5);
    assert_eq!(recs[0]["seq"], 1);
    assert_eq!(recs[0]["kind"], "instance.started");
    assert_eq!(recs[1]["prev_hash"], recs[0]["hash"]);
    assert_eq!(j["next"], 6);
    let (_, j2) = s
        .get(&format!("/v1/instances/{id}/journal?from=6&limit=1000"), A)
        .await;
    assert_eq!(j2["next"], Value::Null);

    let (st, i) = s.get(&format!("/v1/instances/{id}/inspect?at=1"), A).await;
    assert_eq!(st, StatusCode::OK, "{i}");
    assert_eq!(i["at"], 1);
    assert_eq!(i["instance"], id.as_str());
    // After the start record every shard has fired and waits for its outcome.
    assert_eq!(i["in_flight"].as_array().map(Vec::len), Some(10), "{i}");
    assert_eq!(i["events"][0]["kind"], "instance.started");
    let (st, v) = s
        .get(&format!("/v1/instances/{id}/inspect?at=99999"), A)
        .await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));

    let (st, cp) = s
        .post(&format!("/v1/instances/{id}/checkpoint"), A, &json!({}))
        .await;
    assert_eq!(st, StatusCode::OK);
    assert!(cp["checkpoint"].as_str().unwrap().starts_with("cp-"));
    assert_eq!(cp["seq"], state["journal_head"]);

    let (st, v) = s
        .post(&format!("/v1/instances/{id}/stop"), A, &json!({}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::CONFLICT, "instance_terminal")
    );
    let (st, v) = s
        .post(&format!("/v1/instances/{id}/resume"), A, &json!({}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::CONFLICT, "instance_terminal"),
        "{v}"
    );

    let (st, v) = s.post("/v1/instances", A, &json!({"plan": "nope"})).await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan": "fanout", "version": 7}))
        .await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    let (st, v) = s.get("/v1/instances/i999999", A).await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inline_plan_start_stop_and_resume_from_a_checkpoint() {
    let s = sqlite(two_tenants()).await;
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": ticker()}))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    assert_eq!(v["version"], 1);
    assert_eq!(s.get("/v1/plans/ticker", A).await.0, StatusCode::OK);
    let (st, r, _) = s
        .call(
            req("POST", "/v1/events", A)
                .header("content-type", "application/cloudevents+json")
                .body(Body::from(cloud_event("tick", 1, Some(&id)).to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{r}");
    assert_eq!(r, json!({"accepted": 1, "routed": 1, "duplicates": 0}));
    for _ in 0..200 {
        if s.get(&format!("/v1/instances/{id}"), A).await.1["marking"]["seen"].is_array() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let (_, cp) = s
        .post(&format!("/v1/instances/{id}/checkpoint"), A, &json!({}))
        .await;
    let (st, v) = s
        .post(&format!("/v1/instances/{id}/stop"), A, &json!({}))
        .await;
    assert_eq!(
        (st, v["status"].clone()),
        (StatusCode::OK, json!("stopped")),
        "{v}"
    );
    // Events for a stopped instance are refused.
    let (st, v, _) = s
        .call(
            req("POST", "/v1/events", A)
                .header("content-type", "application/cloudevents+json")
                .body(Body::from(cloud_event("tick", 2, Some(&id)).to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::CONFLICT, "instance_terminal"),
        "{v}"
    );
    // Resuming from the checkpoint forks a new, live instance.
    let (st, v) = s
        .post(
            &format!("/v1/instances/{id}/resume"),
            A,
            &json!({"from": cp["checkpoint"]}),
        )
        .await;
    assert_eq!(st, StatusCode::OK, "{v}");
    let fork = v["id"].as_str().unwrap().to_string();
    assert_ne!(fork, id);
    assert_eq!(v["status"], "running");
    let (st, v) = s.get(&format!("/v1/instances/{fork}"), A).await;
    assert_eq!(
        (st, v["live"].clone()),
        (StatusCode::OK, json!(true)),
        "{v}"
    );
    assert_eq!(
        v["marking"]["seen"].as_array().map(Vec::len),
        Some(1),
        "{v}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn events_single_batch_routing_and_invalid_cloudevents() {
    let s = sqlite(two_tenants()).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (st, v) = s
            .post("/v1/instances", A, &json!({"plan_inline": ticker()}))
            .await;
        assert_eq!(st, StatusCode::CREATED);
        ids.push(v["id"].as_str().unwrap().to_string());
    }
    // Routed by (tenant, type) to every waiting instance.
    let (st, v) = s.post("/v1/events", A, &cloud_event("tick", 1, None)).await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "routed": 3, "duplicates": 0})
        )
    );
    // Batch.
    let batch: Vec<Value> = (0..10)
        .map(|n| cloud_event("tick", n, Some(&ids[0])))
        .collect();
    let (st, v) = post_batch(&s, A, &Value::Array(batch)).await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 10, "routed": 10, "duplicates": 0})
        )
    );
    // Every accepted event is in the journal once it was acknowledged.
    let (_, j) = s
        .get(&format!("/v1/instances/{}/journal?limit=1000", ids[0]), A)
        .await;
    assert_eq!(tokens_added(&j), 11, "{j}");
    // Another tenant's events reach none of them.
    let (st, v) = s.post("/v1/events", B, &cloud_event("tick", 1, None)).await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "routed": 0, "duplicates": 0})
        )
    );
    // Invalid CloudEvents.
    for bad in [
        json!([1]),
        json!("x"),
        json!({"id": "1", "source": "/s", "type": "tick"}),
        json!({"specversion": "0.3", "id": "1", "source": "/s", "type": "tick"}),
        json!({"specversion": "1.0", "source": "/s", "type": "tick"}),
        json!({"specversion": "1.0", "id": "", "source": "/s", "type": "tick"}),
        json!({"specversion": "1.0", "id": "1", "source": "/s"}),
        json!({"specversion": "1.0", "id": 1, "source": "/s", "type": "tick"}),
        json!({"specversion": "1.0", "id": "1", "source": "/s", "type": "tick", "data_base64": "AA=="}),
        json!({"specversion": "1.0", "id": "1", "source": "/s", "type": "tick", "weftinstance": "../i1"}),
    ] {
        let (st, v, _) = s
            .call(
                req("POST", "/v1/events", A)
                    .header("content-type", "application/cloudevents+json")
                    .body(Body::from(bad.to_string()))
                    .unwrap(),
            )
            .await;
        assert_eq!(
            (st, problem_code(&v)),
            (StatusCode::BAD_REQUEST, "invalid_cloudevent"),
            "{bad}"
        );
    }
    let (st, v, _) = s
        .call(
            req("POST", "/v1/events", A)
                .header("content-type", "application/xml")
                .body(Body::from("<e/>"))
                .unwrap(),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNSUPPORTED_MEDIA_TYPE, "unsupported_media_type")
    );
    // An event the plan does not take, to one instance.
    let (st, v) = s
        .post("/v1/events", A, &cloud_event("seen", 1, Some(&ids[1])))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "event_not_accepted")
    );
    let (st, v) = s
        .post("/v1/events", A, &cloud_event("tick", 1, Some("i424242")))
        .await;
    assert_eq!((st, problem_code(&v)), (StatusCode::NOT_FOUND, "not_found"));
    // A batch with one bad target is refused whole: nothing of it is ingested.
    let journal_len = |v: Value| v["records"].as_array().map_or(0, Vec::len);
    let before = journal_len(
        s.get(&format!("/v1/instances/{}/journal?limit=1000", ids[2]), A)
            .await
            .1,
    );
    for (batch, status, code) in [
        (
            json!([
                cloud_event("tick", 7, Some(&ids[2])),
                cloud_event("tick", 8, Some("i424242"))
            ]),
            StatusCode::NOT_FOUND,
            "not_found",
        ),
        (
            json!([
                cloud_event("tick", 7, Some(&ids[2])),
                cloud_event("seen", 8, Some(&ids[2]))
            ]),
            StatusCode::UNPROCESSABLE_ENTITY,
            "event_not_accepted",
        ),
    ] {
        let (st, v) = post_batch(&s, A, &batch).await;
        assert_eq!((st, problem_code(&v)), (status, code), "{v}");
        assert!(
            v["detail"].as_str().unwrap().starts_with("event 1: "),
            "{v}"
        );
    }
    let after = journal_len(
        s.get(&format!("/v1/instances/{}/journal?limit=1000", ids[2]), A)
            .await
            .1,
    );
    assert_eq!(before, after, "a refused batch must not reach the journal");
    // Metrics counted them.
    let (_, m) = s.get("/metrics", None).await;
    assert!(
        m.as_str()
            .unwrap()
            .contains("weft_events_ingested_total 12"),
        "{m}"
    );
}

/// An input or an event whose payload does not match its event's `schema` is refused with
/// the place and the reason, before anything is started or journaled; the refused event's id
/// stays free, so the sender can send it again corrected.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payloads_that_do_not_match_their_event_schemas_are_refused_and_nothing_is_lost() {
    let s = sqlite(two_tenants()).await;
    let mut plan = ticker();
    plan["plan_name"] = json!("typed-ticker");
    plan["events"]["start"] = json!({"schema": {"type": "object", "required": ["who"]}});
    plan["events"]["tick"]["schema"] =
        json!({"type": "object", "required": ["n"], "properties": {"n": {"type": "integer"}}});
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": plan}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "input_invalid"),
        "{v}"
    );
    let detail = v["detail"].as_str().unwrap_or_default();
    assert!(detail.contains("`start`") && detail.contains("who"), "{v}");
    assert!(v["hint"].is_string(), "{v}");
    let (_, list) = s.get("/v1/instances", A).await;
    assert_eq!(
        list["instances"].as_array().map(Vec::len),
        Some(0),
        "{list}"
    );
    let (st, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "typed-ticker", "input": {"who": "me"}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    let journal = format!("/v1/instances/{id}/journal?limit=1000");
    let before = tokens_added(&s.get(&journal, A).await.1);
    // One event, addressed or routed.
    let mut bad = cloud_event("tick", 1, None);
    bad["data"] = json!({"n": "one"});
    for target in [Some(id.as_str()), None] {
        let mut e = bad.clone();
        if let Some(t) = target {
            e["weftinstance"] = json!(t);
        }
        let (st, v) = s.post("/v1/events", A, &e).await;
        assert_eq!(
            (st, problem_code(&v)),
            (StatusCode::UNPROCESSABLE_ENTITY, "payload_invalid"),
            "{v}"
        );
        let detail = v["detail"].as_str().unwrap_or_default();
        assert!(detail.contains("`tick`") && detail.contains("`/n`"), "{v}");
    }
    // A batch with one such event is refused whole.
    let mut second = cloud_event("tick", 2, Some(&id));
    second["data"] = json!({});
    let batch = json!([cloud_event("tick", 3, Some(&id)), second]);
    let (st, v) = post_batch(&s, A, &batch).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "payload_invalid"),
        "{v}"
    );
    assert!(
        v["detail"].as_str().unwrap().starts_with("event 1: "),
        "{v}"
    );
    assert_eq!(
        tokens_added(&s.get(&journal, A).await.1),
        before,
        "nothing refused is journaled"
    );
    // The refused event's id was not used up: corrected, it is applied.
    let mut fixed = bad.clone();
    fixed["data"] = json!({"n": 1});
    let (st, v) = s.post("/v1/events", A, &fixed).await;
    assert_eq!(
        (st, v),
        (
            StatusCode::ACCEPTED,
            json!({"accepted": 1, "routed": 1, "duplicates": 0})
        )
    );
    assert!(
        tokens_added(&s.get(&journal, A).await.1) > before,
        "the tick is journaled"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tenants_cannot_see_each_others_anything() {
    let s = sqlite(two_tenants()).await;
    s.create_example("fanout.json", A).await;
    let (_, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "fanout", "input": {"dataset": "a"}}),
        )
        .await;
    let done = v["id"].as_str().unwrap().to_string();
    s.wait_status(&done, A, "completed").await;
    let (_, v) = s
        .post("/v1/instances", A, &json!({"plan_inline": ticker()}))
        .await;
    let live = v["id"].as_str().unwrap().to_string();

    // Lists are empty for B.
    assert_eq!(s.get("/v1/plans", B).await.1, json!({"plans": []}));
    assert_eq!(s.get("/v1/instances", B).await.1["instances"], json!([]));
    // Every plan route is 404 for B.
    for path in [
        "/v1/plans/fanout",
        "/v1/plans/fanout/versions/1",
        "/v1/plans/fanout/net",
    ] {
        let (st, v) = s.get(path, B).await;
        assert_eq!(
            (st, problem_code(&v)),
            (StatusCode::NOT_FOUND, "not_found"),
            "{path}"
        );
    }
    let (st, _) = s.post("/v1/instances", B, &json!({"plan": "fanout"})).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let (st, _) = s.post("/v1/explain", B, &json!({"name": "fanout"})).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    // Every instance route is 404 for B, live or finished.
    for id in [&done, &live] {
        for sub in ["", "/trace", "/journal", "/inspect"] {
            let (st, v) = s.get(&format!("/v1/instances/{id}{sub}"), B).await;
            assert_eq!(
                (st, problem_code(&v)),
                (StatusCode::NOT_FOUND, "not_found"),
                "GET {id}{sub}"
            );
        }
        for sub in ["/stop", "/resume", "/checkpoint", "/repair"] {
            let (st, v) = s
                .post(&format!("/v1/instances/{id}{sub}"), B, &json!({}))
                .await;
            assert_eq!(
                (st, problem_code(&v)),
                (StatusCode::NOT_FOUND, "not_found"),
                "POST {id}{sub}"
            );
        }
        let (st, _) = s.get(&format!("/v1/events/stream?instance={id}"), B).await;
        assert_eq!(st, StatusCode::NOT_FOUND);
    }
    let (st, _) = s
        .post("/v1/events", B, &cloud_event("tick", 1, Some(&live)))
        .await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    // B's plan of the same name is its own, version 1, and A's is untouched.
    let mut other = ticker();
    other["plan_name"] = json!("fanout");
    let (st, v) = s.post("/v1/plans", B, &other).await;
    assert_eq!((st, v["version"].clone()), (StatusCode::CREATED, json!(1)));
    assert_eq!(
        s.get("/v1/plans/fanout", A).await.1["plan"]["graph_type"],
        "acyclic"
    );
    // A still sees its own.
    assert_eq!(
        s.get(&format!("/v1/instances/{live}"), A).await.0,
        StatusCode::OK
    );
}

/// Reads SSE frames from a response body until `until` matches an event type.
async fn sse_events(body: Body, until: &str) -> Vec<(String, Value)> {
    let mut stream = body.into_data_stream();
    let mut buf = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        let chunk = tokio::time::timeout_at(deadline, stream.next())
            .await
            .expect("SSE timed out")
            .expect("stream ended")
            .expect("chunk");
        buf.push_str(&String::from_utf8_lossy(&chunk));
        while let Some(end) = buf.find("\n\n") {
            let frame: String = buf.drain(..end + 2).collect();
            let mut ty = String::new();
            let mut data = String::new();
            for line in frame.lines() {
                if let Some(t) = line.strip_prefix("event:") {
                    ty = t.trim().to_string();
                } else if let Some(d) = line.strip_prefix("data:") {
                    data.push_str(d.trim_start());
                }
            }
            if ty.is_empty() {
                continue;
            }
            let done = ty == until;
            out.push((ty, serde_json::from_str(&data).unwrap_or(Value::Null)));
            if done {
                return out;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_delivers_the_fanout_lifecycle_in_order() {
    let s = sqlite(two_tenants()).await;
    s.create_example("fanout.json", A).await;
    let res = s
        .send(
            req(
                "GET",
                &format!("/v1/events/stream?access_token={TOK_A}"),
                None,
            )
            .body(Body::empty())
            .unwrap(),
        )
        .await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["content-type"], "text/event-stream");
    // Another tenant's stream, filtered to completions: it must see nothing of A.
    let res_b = s
        .send(
            req("GET", "/v1/events/stream?type=plan.completed", B)
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    let (_, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "fanout", "input": {"dataset": "x"}}),
        )
        .await;
    let id = v["id"].as_str().unwrap().to_string();
    let events = sse_events(res.into_body(), "dev.weft.plan.completed").await;
    let types: Vec<&str> = events.iter().map(|(t, _)| t.as_str()).collect();
    assert_eq!(types.first(), Some(&"dev.weft.plan.started"), "{types:?}");
    assert_eq!(types.last(), Some(&"dev.weft.plan.completed"));
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "dev.weft.plan.step.started")
            .count(),
        11,
        "{types:?}"
    );
    assert_eq!(
        types
            .iter()
            .filter(|t| **t == "dev.weft.plan.step.finished")
            .count(),
        11
    );
    // Each step finishes after it starts; the join (merge) starts after all ten shards finished.
    let pos = |ty: &str, step: &str| {
        events
            .iter()
            .position(|(t, v)| t == ty && v["data"]["step"] == step)
            .unwrap_or_else(|| panic!("{ty} {step} missing"))
    };
    for k in 0..10 {
        let step = format!("check_shard_{k}");
        assert!(
            pos("dev.weft.plan.step.started", &step) < pos("dev.weft.plan.step.finished", &step)
        );
        assert!(
            pos("dev.weft.plan.step.finished", &step) < pos("dev.weft.plan.step.started", "merge")
        );
    }
    for (_, v) in &events {
        assert_eq!(v["weftinstance"], id.as_str());
        assert_eq!(v["wefttenant"], "tenant-a");
        assert_eq!(v["specversion"], "1.0");
    }
    // B's stream got nothing: wait briefly for any frame.
    let mut b = res_b.into_body().into_data_stream();
    let got = tokio::time::timeout(Duration::from_millis(300), b.next()).await;
    assert!(got.is_err(), "tenant B received {got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_tenant_rate_limit_answers_429_with_retry_after() {
    let s = sqlite(ServerConfig {
        rate_per_sec: 0.5,
        rate_burst: 3.0,
        ..two_tenants()
    })
    .await;
    for _ in 0..3 {
        assert_eq!(s.get("/v1/plans", A).await.0, StatusCode::OK);
    }
    let res = s
        .send(req("GET", "/v1/plans", A).body(Body::empty()).unwrap())
        .await;
    assert_eq!(res.status(), StatusCode::TOO_MANY_REQUESTS);
    let retry: u64 = res.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=2).contains(&retry), "{retry}");
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let v: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(problem_code(&v), "rate_limited");
    // Tenant B has its own bucket; health checks are not limited.
    assert_eq!(s.get("/v1/plans", B).await.0, StatusCode::OK);
    assert_eq!(s.get("/healthz", None).await.0, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn llm_routes_without_a_model() {
    let s = sqlite(two_tenants()).await;
    let (st, v) = s
        .post("/v1/generate", A, &json!({"instruction": "do x"}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable")
    );
    let seed: Value = json!({
        "caller": "debug-shell",
        "goal": {"type": "analysis", "description": "Summarize.", "metadata": {}},
        "context": {"conversation_history": [], "orion_state_snapshot": {}, "external_facts": {}},
        "toolset": [],
        "limits": {"max_steps": 2, "max_tokens_reason": 256, "max_tokens_answer": 256, "timeout_seconds": 10},
        "preferences": {"style": "concise", "allow_internal_thought_logging": true, "return_trace": true}
    });
    let (st, v) = s.post("/plan/react", A, &seed).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable"),
        "{v}"
    );
    // A toolset naming a tool this server does not have is refused before any model call.
    let mut unknown = seed.clone();
    unknown["toolset"] = json!([{"tool_id": "extract_facts", "input_schema": {"type": "object"}}]);
    let (st, v) = s.post("/plan/react", A, &unknown).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "unknown_tool"),
        "{v}"
    );
    assert!(
        v["detail"]
            .as_str()
            .unwrap_or("")
            .contains("`extract_facts`"),
        "{v}"
    );
    // Declared in the node's configuration, the same request gets past the toolset check.
    let mut node = weft_node::Config::default();
    node.tools.declared = vec![
        serde_json::from_value(json!({"name": "extract_facts", "effect": "read",
            "source": {"kind": "fixed", "result": {"facts": []}}}))
        .unwrap(),
    ];
    let declared = sqlite_with(node, two_tenants()).await;
    let (st, v) = declared.post("/plan/react", A, &unknown).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable"),
        "{v}"
    );
    // Explain works from the template without a model, by document or by name.
    s.create_example("fanout.json", A).await;
    let (st, v) = s.post("/v1/explain", A, &json!({"name": "fanout"})).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert!(v["text"].as_str().unwrap().contains("check_shard_0"), "{v}");
    let (st, v) = s.post("/v1/explain", A, &json!({"plan": ticker()})).await;
    assert_eq!(
        (st, v["source"].clone()),
        (StatusCode::OK, json!("template"))
    );
    let (st, v) = s
        .post("/v1/explain", A, &json!({"plan": ticker(), "llm": true}))
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable")
    );
    let (_, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "fanout", "input": {"dataset": "d"}}),
        )
        .await;
    let (st, v) = s
        .post(
            &format!("/v1/instances/{}/repair", v["id"].as_str().unwrap()),
            A,
            &json!({}),
        )
        .await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::SERVICE_UNAVAILABLE, "llm_unavailable")
    );
}

/// The `request_id`s on an instance's journal records, by kind, in order.
async fn record_ids(s: &Srv, id: &str) -> Vec<(String, Option<String>)> {
    let (st, j) = s
        .get(&format!("/v1/instances/{id}/journal?limit=1000"), A)
        .await;
    assert_eq!(st, StatusCode::OK, "{j}");
    j["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| {
            (
                r["kind"].as_str().unwrap_or_default().to_string(),
                r["body"]["request_id"].as_str().map(str::to_string),
            )
        })
        .collect()
}

async fn post_with_id(
    s: &Srv,
    uri: &str,
    ct: &str,
    body: &Value,
    rid: Option<&str>,
) -> (StatusCode, Value, String) {
    let mut r = req("POST", uri, A).header("content-type", ct);
    if let Some(rid) = rid {
        r = r.header("x-request-id", rid);
    }
    let res = s
        .send(r.body(Body::from(body.to_string())).expect("request"))
        .await;
    let st = res.status();
    let echoed = res
        .headers()
        .get("x-request-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = axum::body::to_bytes(res.into_body(), usize::MAX)
        .await
        .expect("body");
    (
        st,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        echoed,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn request_ids_reach_the_journal_records_they_cause() {
    let s = sqlite(two_tenants()).await;
    let json_ct = "application/json";
    let (st, v, _) = post_with_id(
        &s,
        "/v1/instances",
        json_ct,
        &json!({"plan_inline": ticker()}),
        Some("req-start-1"),
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    // A second instance, started without an id: the generated one lands on its record.
    let (st, v, generated) = post_with_id(
        &s,
        "/v1/instances",
        json_ct,
        &json!({"plan_inline": ticker()}),
        None,
    )
    .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let other = v["id"].as_str().unwrap().to_string();
    assert_eq!(generated.len(), 36, "a UUID is generated: {generated}");
    // One event to the instance, one routed by type to both, one batch of three.
    let (st, v, _) = post_with_id(
        &s,
        "/v1/events",
        "application/cloudevents+json",
        &cloud_event("tick", 1, Some(&id)),
        Some("req-event-1"),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let (st, v, routed_id) = post_with_id(
        &s,
        "/v1/events",
        json_ct,
        &cloud_event("tick", 2, None),
        None,
    )
    .await;
    assert_eq!((st, v["routed"].clone()), (StatusCode::ACCEPTED, json!(2)));
    let batch: Vec<Value> = (3..6).map(|n| cloud_event("tick", n, Some(&id))).collect();
    let (st, v, _) = post_with_id(
        &s,
        "/v1/events",
        "application/cloudevents-batch+json",
        &Value::Array(batch),
        Some("req-batch-1"),
    )
    .await;
    assert_eq!(st, StatusCode::ACCEPTED, "{v}");
    let (st, v, _) = post_with_id(
        &s,
        &format!("/v1/instances/{id}/stop"),
        json_ct,
        &json!({}),
        Some("req-stop-1"),
    )
    .await;
    assert_eq!(st, StatusCode::OK, "{v}");

    let ids = record_ids(&s, &id).await;
    let carried: Vec<(&str, Option<&str>)> = ids
        .iter()
        .filter(|(k, _)| {
            matches!(
                k.as_str(),
                "instance.started" | "token.added" | "instance.stopped"
            )
        })
        .map(|(k, r)| (k.as_str(), r.as_deref()))
        .collect();
    assert_eq!(
        carried,
        vec![
            ("instance.started", Some("req-start-1")),
            ("token.added", Some("req-event-1")),
            ("token.added", Some(routed_id.as_str())),
            ("token.added", Some("req-batch-1")),
            ("token.added", Some("req-batch-1")),
            ("token.added", Some("req-batch-1")),
            ("instance.stopped", Some("req-stop-1")),
        ],
        "{ids:?}"
    );
    // Records no request caused carry none.
    assert!(
        ids.iter()
            .filter(|(k, _)| k.starts_with("action."))
            .all(|(_, r)| r.is_none()),
        "{ids:?}"
    );
    let ids = record_ids(&s, &other).await;
    assert_eq!(
        ids[0],
        ("instance.started".into(), Some(generated)),
        "{ids:?}"
    );
    assert_eq!(ids[1], ("token.added".into(), Some(routed_id)), "{ids:?}");
    // The journal still verifies (the id is inside the hashed body).
    let report = weft_durable::verify(s.state.durable().store().as_ref(), &id)
        .await
        .expect("the chain verifies");
    assert_eq!(report.records as usize, record_ids(&s, &id).await.len());
}
