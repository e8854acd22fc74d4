//! MCP servers as tool sources in a whole durable node: a `weft.toml` with a `[[tools.mcp]]`
//! entry (the MCP test server of `python/mcp-test-server`, over stdio) is loaded and checked,
//! the node discovers the server's tools as `<name>.<tool>` with their effect classes, and a
//! plan's step calls `calc.add` through the node's tool-call chain (a link at the policy stage
//! sees the call) and journal. Ignored unless `WEFT_TEST_MCP_PYTHON`
//! (`scripts/mcp-test-env.sh`) was set at build time (`build.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use weft_core::{Effect, Status};
use weft_node::{Builder, Inputs, Openers, load_checked};
use weft_tools::Stage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
async fn a_plan_step_calls_an_mcp_tool_through_the_node() {
    let python = match std::env::var("WEFT_TEST_MCP_PYTHON") {
        Ok(v) if !v.is_empty() => v,
        _ => panic!(
            "this test needs WEFT_TEST_MCP_PYTHON (it was set when the test was built): \
             export WEFT_TEST_MCP_PYTHON=$(bash scripts/mcp-test-env.sh)"
        ),
    };
    let server = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../python/mcp-test-server/server.py")
        .canonicalize()
        .unwrap();
    let dir = std::env::temp_dir().join(format!("weft-node-mcp-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();

    // weft.toml as a user writes it.
    let toml = format!(
        "[store]\nurl = \"{}\"\n\n[[tools.mcp]]\nname = \"calc\"\ncommand = [\"{python}\", \"{}\"]\n\
         timeout_ms = 20000\n",
        dir.join("weft.db").display(),
        server.display()
    );
    std::fs::write(dir.join("weft.toml"), &toml).unwrap();
    let loaded = load_checked(
        &Inputs {
            file: Some(dir.join("weft.toml")),
            dir: dir.clone(),
            env: &|_| None,
            flags: Vec::new(),
        },
        &Openers::default(),
    );
    assert!(!loaded.has_errors(), "{:?}\n{toml}", loaded.findings);
    assert_eq!(loaded.config.tools.mcp.len(), 1);
    assert_eq!(loaded.config.tools.mcp[0].name, "calc");

    // The synchronous in-memory build needs the discovery first, and says so.
    let e = Builder::new(loaded.config.clone())
        .in_memory()
        .unwrap_err()
        .to_string();
    assert!(e.contains("discover_mcp"), "{e}");

    let seen: common::Log = Arc::default();
    let node = Builder::new(loaded.config)
        .link(Stage::Policy, Arc::new(common::Counting(Arc::clone(&seen))))
        .open()
        .await
        .unwrap();
    let add = node
        .registry()
        .get("calc.add")
        .expect("calc.add is registered");
    assert_eq!(
        (add.spec().effect, add.spec().idempotent),
        (Effect::Read, true)
    );
    let note = node
        .registry()
        .get("calc.write_note")
        .expect("calc.write_note is registered");
    assert_eq!(note.spec().effect, Effect::Write);

    let tenant = "mcp";
    let d = node.durable().unwrap();
    d.register(
        tenant,
        json!({"plan_name": "sum", "graph_type": "acyclic",
            "events": {"start": {}, "done": {"kind": "output"}},
            "steps": {"add": {"on": ["start"], "action": "calc.add",
                "args": {"a": "${start.a}", "b": "${start.b}"}, "emits": ["done"]}}}),
    )
    .await
    .unwrap();
    let h = d.start(tenant, "sum", json!({"a": 19, "b": 23})).unwrap();
    let o = tokio::time::timeout(Duration::from_secs(30), d.wait(&h))
        .await
        .expect("the instance settles")
        .unwrap();
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(o.results_json()["done"], json!(42), "{o:?}");
    // The call passed the node's chain.
    assert_eq!(*seen.lock().unwrap(), ["calc.add"]);

    // The journal has the step's outcome: the hash chain verifies.
    d.flush().await.unwrap();
    weft_durable::verify(node.store().unwrap().as_ref(), h.id())
        .await
        .unwrap();
    d.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
