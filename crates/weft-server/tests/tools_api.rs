//! Tenants' own tools through the API (`/v1/tools`): versions, tenant isolation, validation
//! against the declared schema, runs, what an API caller may not declare, deletion, and
//! survival across a restart (recovery compiles a tenant's plans with its tools).

mod common;

use std::sync::Arc;

use axum::body::Body;
use axum::http::StatusCode;
use serde_json::{Value, json};
use weft_server::AppState;
use weft_store::Store;

use common::*;

const A: Option<&str> = Some(TOK_A);
const B: Option<&str> = Some(TOK_B);

fn problem_code(v: &Value) -> &str {
    v["code"].as_str().unwrap_or_default()
}

/// A `fixed` tool answering `result`, whose args need a string `text`.
fn fixed_tool(name: &str, result: Value) -> Value {
    json!({
        "name": name,
        "description": "Answers with a fixed result",
        "input_schema": {
            "type": "object",
            "properties": {"text": {"type": "string"}},
            "required": ["text"]
        },
        "effect": "read",
        "idempotent": true,
        "source": {"kind": "fixed", "result": result}
    })
}

/// `start → call(tool) → done`, or waiting for `go` first when `wait`.
fn plan_calling(tool: &str, args: Value, wait: bool) -> Value {
    let mut on = vec!["start"];
    let mut events = json!({"start": {}, "done": {}});
    if wait {
        on.push("go");
        events["go"] = json!({"kind": "input"});
    }
    json!({
        "plan_name": format!("uses-{tool}"),
        "graph_type": "acyclic",
        "events": events,
        "steps": {"call": {"on": on, "action": tool, "args": args, "emits": ["done"]}}
    })
}

impl Srv {
    async fn put_tool(&self, name: &str, token: Option<&str>, body: &Value) -> (StatusCode, Value) {
        let (s, v, _) = self
            .call(
                req("PUT", &format!("/v1/tools/{name}"), token)
                    .header("content-type", "application/json")
                    .body(Body::from(body.to_string()))
                    .expect("request"),
            )
            .await;
        (s, v)
    }

    async fn delete_tool(&self, name: &str, token: Option<&str>) -> (StatusCode, Value) {
        let (s, v, _) = self
            .call(
                req("DELETE", &format!("/v1/tools/{name}"), token)
                    .body(Body::empty())
                    .expect("request"),
            )
            .await;
        (s, v)
    }

    /// Starts `plan` and waits until it completes; returns the marking's `done` token.
    async fn run_to_done(&self, plan: &str, token: Option<&str>) -> Value {
        let (s, v) = self
            .post("/v1/instances", token, &json!({"plan": plan, "input": {}}))
            .await;
        assert_eq!(s, StatusCode::CREATED, "{v}");
        let id = v["id"].as_str().expect("id").to_string();
        self.wait_status(&id, token, "completed").await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tenant_declares_versions_and_uses_its_own_tools() {
    let s = sqlite(two_tenants()).await;
    let (st, v) = s
        .put_tool("crm.lookup", A, &fixed_tool("crm.lookup", json!({"v": 1})))
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    assert_eq!(
        (v["source"].as_str(), v["version"].as_u64()),
        (Some("api"), Some(1))
    );
    // The same definition again changes nothing; a new one is version 2.
    let (st, v) = s
        .put_tool("crm.lookup", A, &fixed_tool("crm.lookup", json!({"v": 1})))
        .await;
    assert_eq!(
        (st, v["version"].as_u64()),
        (StatusCode::OK, Some(1)),
        "{v}"
    );
    let (st, v) = s
        .put_tool("crm.lookup", A, &fixed_tool("crm.lookup", json!({"v": 2})))
        .await;
    assert_eq!(
        (st, v["version"].as_u64()),
        (StatusCode::CREATED, Some(2)),
        "{v}"
    );
    let (st, v) = s.get("/v1/tools/crm.lookup", A).await;
    assert_eq!(st, StatusCode::OK, "{v}");
    assert_eq!(v["definition"]["source"]["result"], json!({"v": 2}));
    assert_eq!(v["input_schema"]["required"], json!(["text"]));
    let (_, list) = s.get("/v1/tools", A).await;
    let names: Vec<(&str, &str)> = list["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| (t["name"].as_str().unwrap(), t["source"].as_str().unwrap()))
        .collect();
    assert!(names.contains(&("crm.lookup", "api")), "{names:?}");
    assert!(names.contains(&("echo", "node")), "{names:?}");

    // Another tenant does not see it: not listed, not found, and its plan naming it is invalid.
    let (_, list_b) = s.get("/v1/tools", B).await;
    assert!(!list_b.to_string().contains("crm.lookup"), "{list_b}");
    let (st, _) = s.get("/v1/tools/crm.lookup", B).await;
    assert_eq!(st, StatusCode::NOT_FOUND);
    let good = plan_calling("crm.lookup", json!({"text": "hi"}), false);
    let (st, v) = s.post("/v1/plans", B, &good).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_plan"),
        "{v}"
    );

    // The owner's plans validate against the declared input schema, and run the tool.
    let bad = plan_calling("crm.lookup", json!({"text": 5}), false);
    let (st, v) = s.post("/v1/validate", A, &bad).await;
    assert_eq!(
        (st, v["ok"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    let (st, v) = s.post("/v1/plans", A, &good).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let done = s.run_to_done("uses-crm.lookup", A).await;
    assert!(done.to_string().contains(r#"{"v":2}"#), "{done}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_an_api_caller_may_not_declare_is_refused_with_a_reason() {
    let mut node = weft_node::Config::default();
    node.tools.http.allow_hosts = vec!["api.example.com".into()];
    node.tools.api_max_tools = 2;
    let s = sqlite_with(node, two_tenants()).await;
    let cases = [
        (
            "run",
            json!({"name": "run", "source": {"kind": "command", "program": "/bin/sh"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "source_not_allowed",
        ),
        (
            "inner",
            json!({"name": "inner", "source": {"kind": "http", "url": "http://127.0.0.1:5432/"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "host_not_allowed",
        ),
        (
            "metadata",
            json!({"name": "metadata", "source": {"kind": "http", "url": "https://api.example.com/x",
                "allow_hosts": ["169.254.169.254"]}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "host_not_allowed",
        ),
        (
            "secret",
            json!({"name": "secret", "source": {"kind": "http", "url": "https://api.example.com/x",
                "headers": {"authorization": "env:WEFT_STORE_URL"}}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "env_not_allowed",
        ),
        (
            "steal",
            json!({"name": "steal", "source": {"kind": "worker", "subject": "weft.tool.tenant-b.x"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
        (
            "elsewhere",
            json!({"name": "elsewhere", "source": {"kind": "worker", "url": "nats://10.0.0.9:4222"}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
        (
            "echo",
            json!({"name": "echo", "source": {"kind": "fixed", "result": 1}}),
            StatusCode::CONFLICT,
            "tool_exists",
        ),
        (
            "one",
            json!({"name": "two", "source": {"kind": "fixed", "result": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
        (
            "schema",
            json!({"name": "schema", "input_schema": {"type": 7}, "source": {"kind": "fixed", "result": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
        (
            // A pattern whose check could backtrack without bound.
            "backref",
            json!({"name": "backref", "input_schema": {"properties": {"q": {"pattern": "^(a|a)*\\1$"}}},
                "source": {"kind": "fixed", "result": 1}}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
        (
            "nosource",
            json!({"name": "nosource"}),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_tool",
        ),
    ];
    for (name, body, status, code) in cases {
        let (st, v) = s.put_tool(name, A, &body).await;
        assert_eq!((st, problem_code(&v)), (status, code), "{name}: {v}");
        assert!(
            v["hint"].as_str().is_some_and(|h| !h.is_empty()),
            "{name}: {v}"
        );
    }
    // Nothing of that was stored.
    let (_, list) = s.get("/v1/tools", A).await;
    assert!(!list.to_string().contains("\"api\""), "{list}");
    // An allowed http tool is stored, its header values redacted when shown.
    let ok = json!({"name": "crm", "source": {"kind": "http", "url": "https://api.example.com/x",
        "headers": {"authorization": "Bearer s3cret"}}});
    let (st, v) = s.put_tool("crm", A, &ok).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    // Two tools is this node's most per tenant: a third is refused, a change is not.
    let (st, _) = s.put_tool("t2", A, &fixed_tool("t2", json!(1))).await;
    assert_eq!(st, StatusCode::CREATED);
    let (st, v) = s.put_tool("t3", A, &fixed_tool("t3", json!(1))).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "too_many_tools"),
        "{v}"
    );
    assert_eq!(
        s.put_tool("t2", A, &fixed_tool("t2", json!(2))).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        s.put_tool("t3", B, &fixed_tool("t3", json!(1))).await.0,
        StatusCode::CREATED
    );
    assert!(!v.to_string().contains("s3cret"), "{v}");
    assert!(
        !s.get("/v1/tools/crm", A)
            .await
            .1
            .to_string()
            .contains("s3cret")
    );
    // Malformed bodies and names.
    let (st, v, _) = s
        .call(
            req("PUT", "/v1/tools/x", A)
                .header("content-type", "application/json")
                .body(Body::from("{not json"))
                .unwrap(),
        )
        .await;
    assert_eq!(st, StatusCode::BAD_REQUEST, "{v}");
    let (st, _) = s.put_tool("..", A, &json!({})).await;
    assert_eq!(st, StatusCode::BAD_REQUEST);
    let huge = json!({"name": "big", "description": "x".repeat(2 << 20),
        "source": {"kind": "fixed", "result": 1}});
    let (st, _) = s.put_tool("big", A, &huge).await;
    assert_eq!(st, StatusCode::PAYLOAD_TOO_LARGE);
}

/// `{"a": {"a": … {} …}}`, `depth` deep.
fn nested(depth: usize) -> Value {
    (0..depth).fold(json!({}), |v, _| json!({ "a": v }))
}

/// A `fixed` tool with `input_schema`.
fn tool_with_schema(name: &str, input_schema: Value) -> Value {
    json!({"name": name, "input_schema": input_schema, "source": {"kind": "fixed", "result": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schemas_whose_checks_multiply_are_refused_or_their_checks_bounded() {
    let s = sqlite(two_tenants()).await;
    // Each definition names the one before twice: 2^40 paths to `d0` for any value, `{}`
    // included. Refused when declared, with the reason.
    let mut defs = serde_json::Map::new();
    defs.insert("d0".into(), json!({"type": "object", "required": ["z"]}));
    for k in 1..=40 {
        let prev = format!("#/$defs/d{}", k - 1);
        defs.insert(
            format!("d{k}"),
            json!({"anyOf": [{"$ref": prev}, {"$ref": prev, "minProperties": 1}]}),
        );
    }
    let dag = json!({"$defs": defs, "$ref": "#/$defs/d40"});
    let (st, v) = s.put_tool("dag", A, &tool_with_schema("dag", dag)).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::UNPROCESSABLE_ENTITY, "invalid_tool"),
        "{v}"
    );
    assert!(v["detail"].as_str().unwrap().contains("paths"), "{v}");

    // Each level's two object branches apply the definition again to `a`: the work depends
    // on the value's depth (`null`, a templated value when validating, matches). Declared; a value 60 deep (2^60 paths) is reported as not checked,
    // by validation and at run time, instead of holding a thread (and, collecting every
    // branch's errors, all memory).
    let branch = |i: usize| {
        json!({"type": "object", "required": ["a"], "minProperties": i,
               "properties": {"a": {"$ref": "#/$defs/n"}}})
    };
    let tree = json!({
        "$defs": {"n": {"anyOf": [branch(0), branch(1), {"type": "null"}]}},
        "$ref": "#/$defs/n",
    });
    let (st, v) = s.put_tool("walk", A, &tool_with_schema("walk", tree)).await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s
        .post("/v1/validate", A, &plan_calling("walk", nested(60), false))
        .await;
    assert_eq!(
        (st, v["ok"].as_bool()),
        (StatusCode::OK, Some(false)),
        "{v}"
    );
    assert!(v.to_string().contains("not checked"), "{v}");

    let (st, v) = s
        .post(
            "/v1/plans",
            A,
            &plan_calling("walk", json!({"a": "${start.a}"}), false),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let (st, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "uses-walk", "input": nested(60)}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().expect("id").to_string();
    let failed = s.wait_status(&id, A, "failed").await;
    let (_, journal) = s.get(&format!("/v1/instances/{id}/journal"), A).await;
    let journal = journal.to_string();
    assert!(
        journal.contains("args_invalid") && journal.contains("not checked"),
        "{failed} {journal}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_tool_is_gone_for_new_plans() {
    let s = sqlite(two_tenants()).await;
    let (st, _) = s.put_tool("t1", A, &fixed_tool("t1", json!(1))).await;
    assert_eq!(st, StatusCode::CREATED);
    let plan = plan_calling("t1", json!({"text": "x"}), false);
    assert_eq!(s.post("/v1/plans", A, &plan).await.0, StatusCode::CREATED);
    let (st, _) = s.delete_tool("t1", B).await;
    assert_eq!(st, StatusCode::NOT_FOUND, "another tenant cannot delete it");
    let (st, _) = s.delete_tool("t1", A).await;
    assert_eq!(st, StatusCode::NO_CONTENT);
    assert_eq!(s.get("/v1/tools/t1", A).await.0, StatusCode::NOT_FOUND);
    assert_eq!(s.delete_tool("t1", A).await.0, StatusCode::NOT_FOUND);
    let (st, v) = s.delete_tool("echo", A).await;
    assert_eq!(
        (st, problem_code(&v)),
        (StatusCode::CONFLICT, "tool_exists")
    );
    // The stored plan no longer compiles: starting it says why.
    let (st, v) = s
        .post("/v1/instances", A, &json!({"plan": "uses-t1", "input": {}}))
        .await;
    assert_eq!(st, StatusCode::UNPROCESSABLE_ENTITY, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("t1"), "{v}");
    // Declared again, it is a new version and the plan runs.
    let (st, v) = s.put_tool("t1", A, &fixed_tool("t1", json!(3))).await;
    assert_eq!(
        (st, v["version"].as_u64()),
        (StatusCode::CREATED, Some(3)),
        "{v}"
    );
    s.run_to_done("uses-t1", A).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_survive_a_restart_and_recovered_instances_call_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("weft.db");
    let open = || async {
        let store: Arc<dyn Store> = weft_store_sqlite::open(path.to_str().unwrap())
            .await
            .unwrap();
        let (state, _) = AppState::open(
            weft_node::Builder::new(weft_node::Config::default()),
            Some(store),
            two_tenants(),
        )
        .await
        .unwrap();
        state
    };
    let state = open().await;
    let s = Srv::from_state(state.clone());
    let (st, _) = s
        .put_tool("score", A, &fixed_tool("score", json!({"score": 42})))
        .await;
    assert_eq!(st, StatusCode::CREATED);
    let plan = plan_calling("score", json!({"text": "x"}), true);
    assert_eq!(s.post("/v1/plans", A, &plan).await.0, StatusCode::CREATED);
    let (st, v) = s
        .post(
            "/v1/instances",
            A,
            &json!({"plan": "uses-score", "input": {}}),
        )
        .await;
    assert_eq!(st, StatusCode::CREATED, "{v}");
    let id = v["id"].as_str().unwrap().to_string();
    state.durable().shutdown().await.unwrap();
    drop((s, state));

    // A new process over the same store: the tool is listed and the waiting instance,
    // recovered, calls it when its event comes.
    let state = open().await;
    let s = Srv::from_state(state);
    assert_eq!(s.get("/v1/tools/score", A).await.0, StatusCode::OK);
    let (st, v) = s
        .post("/v1/events", A, &cloud_event("go", 1, Some(&id)))
        .await;
    assert!(st.is_success(), "{st} {v}");
    let done = s.wait_status(&id, A, "completed").await;
    assert!(done.to_string().contains("42"), "{done}");
}
