//! A declared `worker` tool in a whole durable node: the `[[tools.declared]]` entries printed
//! by `python -m weft_worker describe` go into a `weft.toml` as a user would paste them, the
//! node loads and checks it, and a plan's step calls the tool on a real Python worker over a
//! real NATS server — through the node's tool-call chain (a link at the policy stage sees the
//! call) and journal, with the instance's tenant, id, plan and step in the call. Ignored unless
//! `WEFT_TEST_NATS_URL` and `WEFT_TEST_PYTHON` (`scripts/python-env.sh`) were set at build time
//! (`build.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use weft_core::Status;
use weft_node::{Builder, Inputs, Openers, load_checked};
use weft_tools::Stage;

fn var(name: &str, hint: &str) -> String {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v,
        _ => panic!("this test needs {name} (it was set when the test was built): {hint}"),
    }
}

fn workers_py() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/weft-worker/tests/fixtures/workers.py")
}

/// A Python worker for `tenant`, killed on drop.
struct PyWorker(Child);

impl PyWorker {
    fn start(python: &str, url: &str, tenant: &str, log: &Path) -> PyWorker {
        let mut child = Command::new(python)
            .args(["-m", "weft_worker", "serve"])
            .arg(workers_py())
            .args(["--url", url, "--tenant", tenant])
            .env("WEFT_TEST_LOG", log)
            .env("PYTHONUNBUFFERED", "1")
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start a Python worker");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        // The first line says it serves (or why it does not).
        let first = lines.next().and_then(Result::ok).unwrap_or_default();
        assert!(
            first.contains("weft-worker: serving"),
            "the worker did not start: {first}"
        );
        std::thread::spawn(move || lines.map_while(Result::ok).for_each(|l| eprintln!("{l}")));
        PyWorker(child)
    }
}

impl Drop for PyWorker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    not(all(weft_nats, weft_python)),
    ignore = "needs NATS and Python workers: set WEFT_TEST_NATS_URL and WEFT_TEST_PYTHON=$(bash scripts/python-env.sh) (bash .ci/run does)"
)]
async fn a_plan_step_calls_a_python_worker_through_the_node() {
    let url = var(
        "WEFT_TEST_NATS_URL",
        "export WEFT_TEST_NATS_URL=nats://127.0.0.1:4222",
    );
    let python = var(
        "WEFT_TEST_PYTHON",
        "export WEFT_TEST_PYTHON=$(bash scripts/python-env.sh)",
    );
    let dir = std::env::temp_dir().join(format!("weft-node-worker-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("calls.jsonl");
    let tenant = format!("node.{}", std::process::id());
    let _worker = PyWorker::start(&python, &url, &tenant, &log);

    // weft.toml: a store, and the tools as `describe` prints them.
    let described = Command::new(&python)
        .args(["-m", "weft_worker", "describe"])
        .arg(workers_py())
        .args(["--url", &url])
        .output()
        .unwrap();
    assert!(described.status.success(), "{described:?}");
    let toml = format!(
        "[store]\nurl = \"{}\"\n\n{}",
        dir.join("weft.db").display(),
        String::from_utf8(described.stdout).unwrap()
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
    let declared: Vec<&str> = loaded
        .config
        .tools
        .declared
        .iter()
        .map(|d| d.name.as_str())
        .collect();
    assert!(declared.contains(&"facts.extract"), "{declared:?}");

    let seen: common::Log = Arc::default();
    let node = Builder::new(loaded.config)
        .link(Stage::Policy, Arc::new(common::Counting(Arc::clone(&seen))))
        .open()
        .await
        .unwrap();
    let d = node.durable().unwrap();
    d.register(
        &tenant,
        json!({"plan_name": "facts", "graph_type": "acyclic",
            "events": {"start": {}, "done": {"kind": "output"}},
            "steps": {"extract": {"on": ["start"], "action": "facts.extract",
                "args": {"text": "${start.text}"}, "emits": ["done"]}}}),
    )
    .await
    .unwrap();
    let h = d
        .start(
            &tenant,
            "facts",
            json!({"text": "Water is wet. Fire is hot."}),
        )
        .unwrap();
    let o = tokio::time::timeout(Duration::from_secs(30), d.wait(&h))
        .await
        .expect("the instance settles")
        .unwrap();
    assert_eq!(o.status, Status::Completed, "{o:?}");
    assert_eq!(
        o.results_json()["done"]["facts"],
        json!(["Water is wet", "Fire is hot"]),
        "{o:?}"
    );

    // The call passed the node's chain, and the worker saw the instance's context.
    assert_eq!(*seen.lock().unwrap(), ["facts.extract"]);
    let calls: Vec<Value> = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(calls.len(), 1, "{calls:?}");
    let c = &calls[0];
    assert_eq!(c["tenant"], tenant.as_str());
    assert_eq!(c["instance"], h.id());
    assert_eq!(
        (&c["plan"], &c["step"]),
        (&json!("facts"), &json!("extract"))
    );
    assert_eq!(c["attempt"], 1);
    assert!(!c["key"].as_str().unwrap().is_empty());

    // The journal has the step's outcome: the instance replays to the same result.
    d.flush().await.unwrap();
    let id = h.id().to_string();
    weft_durable::verify(node.store().unwrap().as_ref(), &id)
        .await
        .unwrap();
    d.shutdown().await.unwrap();
    let _ = std::fs::remove_dir_all(&dir);
}
