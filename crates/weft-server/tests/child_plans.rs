//! `plan.run` by name on the server (issue #27 item 9): a child plan is found in the plan
//! store of the parent's tenant (never another tenant's), in its latest version when the
//! child starts; the child's instance record names that version, and it is still read back
//! after a restart.

mod common;

use common::{TOK_A, TOK_B, sqlite_at, two_tenants};
use serde_json::{Value, json};

const A: Option<&str> = Some(TOK_A);
const B: Option<&str> = Some(TOK_B);

fn example(file: &str) -> Value {
    let path = format!("{}/../../examples/{file}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(path).expect("example")).expect("json")
}

/// Stores `doc` for the tenant of `token`.
async fn store_plan(s: &common::Srv, token: Option<&str>, doc: &Value) {
    let (st, v) = s.post("/v1/plans", token, doc).await;
    assert_eq!(st.as_u16(), 201, "{v}");
}

/// Starts the stored plan `subplan` and waits until it is `want`; returns the instance.
async fn run_subplan(s: &common::Srv, token: Option<&str>, want: &str) -> Value {
    let (st, v) = s
        .post(
            "/v1/instances",
            token,
            &json!({"plan": "subplan", "input": {}}),
        )
        .await;
    assert_eq!(st.as_u16(), 201, "{v}");
    let id = v["id"].as_str().expect("instance id").to_string();
    s.wait_status(&id, token, want).await
}

/// The tenant's instances of plan `name`, as `(id, version, status)`.
async fn instances_of(
    s: &common::Srv,
    token: Option<&str>,
    name: &str,
) -> Vec<(String, u64, String)> {
    let (st, v) = s.get("/v1/instances?limit=100", token).await;
    assert_eq!(st.as_u16(), 200, "{v}");
    v["instances"]
        .as_array()
        .expect("instances")
        .iter()
        .filter(|i| i["plan"] == name)
        .map(|i| {
            (
                i["id"].as_str().unwrap_or_default().to_string(),
                i["version"].as_u64().unwrap_or(0),
                i["status"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

/// [`instances_of`] once every one has the status `want`: the list reads instance records,
/// whose status is written with the group commit after the instance ends, so a child that
/// ended just before its parent may be listed `running` for a moment (5 s at most here).
async fn written_instances_of(
    s: &common::Srv,
    token: Option<&str>,
    name: &str,
    want: &str,
) -> Vec<(String, u64, String)> {
    let mut listed = instances_of(s, token, name).await;
    for _ in 0..250 {
        if !listed.is_empty() && listed.iter().all(|i| i.2 == want) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        listed = instances_of(s, token, name).await;
    }
    listed
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stored_plan_runs_as_a_child_by_name_for_its_own_tenant_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("weft.db");
    let s = sqlite_at(&path, two_tenants()).await;

    // Tenant A stores `sample` and `subplan` (which runs `sample` by name): it completes.
    store_plan(&s, A, &example("sample.json")).await;
    store_plan(&s, A, &example("subplan.json")).await;
    run_subplan(&s, A, "completed").await;
    let children = written_instances_of(&s, A, "sample", "completed").await;
    assert_eq!(children.len(), 1, "{children:?}");
    assert_eq!((children[0].1, children[0].2.as_str()), (1, "completed"));

    // Tenant B stores only `subplan`: A's `sample` is not B's, so B's run fails and says so.
    store_plan(&s, B, &example("subplan.json")).await;
    let failed = run_subplan(&s, B, "failed").await;
    let reason = failed.to_string();
    assert!(
        reason.contains("no plan named `sample`") && reason.contains("tenant-b"),
        "{failed}"
    );
    assert!(instances_of(&s, B, "sample").await.is_empty());

    // A new version of `sample`: the next child runs the latest one, and its record says so.
    let mut v2 = example("sample.json");
    v2["description"] = json!("version two");
    store_plan(&s, A, &v2).await;
    run_subplan(&s, A, "completed").await;
    let mut versions: Vec<u64> = instances_of(&s, A, "sample")
        .await
        .iter()
        .map(|c| c.1)
        .collect();
    versions.sort_unstable();
    assert_eq!(versions, vec![1, 2]);

    // After a restart the children are read back with the versions they ran.
    let children = instances_of(&s, A, "sample").await;
    s.state.durable().shutdown().await.expect("shutdown");
    drop(s);
    let s = sqlite_at(&path, two_tenants()).await;
    for (id, version, _) in &children {
        let (st, v) = s.get(&format!("/v1/instances/{id}"), A).await;
        assert_eq!(st.as_u16(), 200, "{v}");
        assert_eq!(v["status"], "completed", "{v}");
        assert_eq!(v["version"].as_u64(), Some(*version), "{v}");
    }
    // Tenant B cannot see A's children.
    let (st, _) = s.get(&format!("/v1/instances/{}", children[0].0), B).await;
    assert_eq!(st.as_u16(), 404);
}
