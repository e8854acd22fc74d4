//! The CLI's messages where a newcomer meets them first (issue #28): what the critic
//! rejected, an unreachable model, a missing instance, a deadlocking plan explained, the
//! `--json` of `graph` and `explain`, a waiting run, a busy port, the allowlist's key. Human
//! text is snapshotted (review the `.snap` diffs: they are the CLI's user interface).

mod common;

use std::process::{Command, Stdio};

use common::{code, json, root, stderr, stdout, temp_dir, weft, weft_in};

/// Exit code, stdout and stderr in one reviewable text.
fn transcript(out: &std::process::Output, args: &[&str]) -> String {
    format!(
        "$ weft {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        code(out),
        stdout(out),
        stderr(out)
    )
}

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

#[test]
fn plan_says_what_the_critic_rejected() {
    let script = "crates/weft-cli/tests/fixtures/plan-script.jsonl";
    let args = ["plan", "email a@example.com hello", "--script", script];
    let out = weft(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut t = transcript(&out, &args);
    // The plan itself (stdout) is checked by tests/plan.rs; the summary is what matters here.
    t = t.replace(&stdout(&out), "[plan]\n");
    insta::assert_snapshot!("plan_rejected_rounds", t);
}

/// A model that refuses connections: one line per retry on stderr, then exit 2 (an
/// environment error, like no model configured), not 1 (a plan error).
#[test]
fn an_unreachable_model_says_each_retry_and_exits_2() {
    // Port 9 (discard) on loopback: nothing listens there in the test environment.
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["plan", "hello"])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env("WEFT_LLM_BASE_URL", "http://127.0.0.1:9/v1")
        .env("WEFT_LLM_MAX_RETRIES", "2")
        .stdin(Stdio::null())
        .output()
        .expect("run weft");
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(err.contains("(attempt 1)"), "{err}");
    assert!(err.contains("(attempt 2)"), "{err}");
    assert!(!err.contains("(attempt 3)"), "{err}");
    assert!(err.contains("transport error after 3 attempt"), "{err}");
}

#[test]
fn no_model_configured_suggests_a_model_url_not_weft_s_own_port() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["plan", "hello"])
        .current_dir(root())
        .env("NO_COLOR", "1")
        .env_remove("WEFT_LLM_BASE_URL")
        .stdin(Stdio::null())
        .output()
        .expect("run weft");
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert!(!err.contains(":8080"), "{err}");
    assert!(err.contains("http://127.0.0.1:11434/v1"), "{err}");
    assert!(
        err.contains("llm.base_url") && err.contains("--script"),
        "{err}"
    );
}

/// `weft run` has no `--script`: the message of an unconfigured `llm.complete` must not
/// point to one.
#[test]
fn run_never_points_to_a_script_flag() {
    let dir = temp_dir("messages-run-llm");
    let out = weft_in(
        &dir,
        &[
            "run",
            "--until-idle",
            "--event",
            r#"message={"text":"hi","from":"b@example.com"}"#,
            &example("reactive-loop.json"),
        ],
    );
    let text = stdout(&out) + &stderr(&out);
    assert!(text.contains("WEFT_LLM_BASE_URL"), "{text}");
    assert!(!text.contains("--script"), "{text}");
}

#[test]
fn inspect_after_a_plain_run_is_one_error_with_the_store_hint() {
    let dir = temp_dir("messages-inspect");
    assert_eq!(code(&weft_in(&dir, &["run", &example("sample.json")])), 0);
    let args = ["inspect", "i1"];
    let out = weft_in(&dir, &args);
    assert_eq!(code(&out), 2);
    assert_eq!(stderr(&out).matches("[not_found]").count(), 1);
    insta::assert_snapshot!("inspect_not_journaled", transcript(&out, &args));
}

#[test]
fn explain_says_a_plan_deadlocks() {
    let args = ["explain", "examples/broken/deadlock.json"];
    let out = weft(&args);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    insta::assert_snapshot!("explain_deadlock", transcript(&out, &args));
    let doc = json(&weft(&[
        "explain",
        "--json",
        "examples/broken/deadlock.json",
    ]));
    assert_eq!(doc["plan"], "deadlock");
    assert_eq!(doc["source"], "template");
    assert_eq!(doc["deadlocks"][0]["code"], "A001");
    assert!(
        doc["explanation"]
            .as_str()
            .is_some_and(|t| t.contains("finish"))
    );
    let doc = json(&weft(&["explain", "--json", "examples/join.json"]));
    assert_eq!(doc["deadlocks"], serde_json::json!([]));
}

#[test]
fn graph_has_json() {
    let doc = json(&weft(&[
        "graph",
        "--json",
        "--format",
        "mermaid",
        "examples/join.json",
    ]));
    assert_eq!(doc["plan"], "join");
    assert_eq!(doc["format"], "mermaid");
    assert!(
        doc["graph"]
            .as_str()
            .is_some_and(|g| g.contains("flowchart")),
        "{doc}"
    );
    let steps = doc["steps"].as_array().expect("steps");
    let report = steps
        .iter()
        .find(|s| s["name"] == "build_report")
        .expect("build_report");
    assert_eq!(report["on"].as_array().map(Vec::len), Some(2), "{doc}");
    let out = weft(&["graph", "--json", "no-such-plan.json"]);
    assert_ne!(code(&out), 0);
}

/// A run whose plan waits for a declared input event says `waiting` and what for (not a red
/// `stuck`), and completes when the event is given.
#[test]
fn a_run_waiting_for_its_input_says_so() {
    let dir = temp_dir("messages-waiting");
    let plan = dir.join("approval.json");
    std::fs::write(
        &plan,
        r#"{"plan_name":"approval","graph_type":"acyclic",
  "events":{"start":{},"approval":{"kind":"input"},"done":{"kind":"output"}},
  "steps":{"go":{"on":["start","approval"],"action":"echo","args":{},"emits":["done"]}}}"#,
    )
    .expect("write plan");
    let plan = plan.display().to_string();
    let out = weft_in(&dir, &["run", "--json", &plan]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    assert_eq!(doc["outcome"], "waiting", "{doc}");
    assert_eq!(doc["awaits"]["events"], serde_json::json!(["approval"]));
    assert!(
        doc["reason"]
            .as_str()
            .is_some_and(|r| r.contains("--event approval=")),
        "{doc}"
    );
    let out = weft_in(&dir, &["run", "--event", "approval={}", &plan]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert!(stdout(&out).contains("completed"), "{}", stdout(&out));
}

/// A host outside the allowlist: the denial names the key that allows it and its forms.
#[test]
fn an_allowlist_denial_names_the_configuration_key() {
    let dir = temp_dir("messages-allow");
    let out = weft_in(
        &dir,
        &[
            "run",
            "--input",
            r#"{"customer_id":"c"}"#,
            &example("join.json"),
        ],
    );
    assert_eq!(code(&out), 1);
    let text = stdout(&out);
    assert!(text.contains("tools.http.allow_hosts"), "{text}");
    assert!(text.contains("WEFT_TOOLS_HTTP_ALLOW_HOSTS"), "{text}");
}

/// Only failures are problems: a clean run has none, even when a record's body happens to
/// say "error" (here the input of `instance.started`).
#[test]
fn summarize_lists_no_problem_for_a_clean_run() {
    let dir = temp_dir("messages-summarize");
    let db = dir.join("w.db").display().to_string();
    let run = weft_in(
        &dir,
        &[
            "run",
            "--store",
            &db,
            "--json",
            "--input",
            r#"{"note":"no error here"}"#,
            &example("sample.json"),
        ],
    );
    assert_eq!(code(&run), 0, "{}", stderr(&run));
    // On a store, instance ids are opaque: take it from the run.
    let id = json(&run)["instance"]
        .as_str()
        .expect("instance")
        .to_string();
    let doc = json(&weft_in(
        &dir,
        &["summarize", &id, "--store", &db, "--json"],
    ));
    assert_eq!(doc["problems"], serde_json::json!([]), "{doc}");
}

/// A busy port: the address and a `--listen` hint, said once; the no-tokens warning once.
#[test]
fn serve_on_a_busy_port_names_the_address_once() {
    let busy = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = busy.local_addr().expect("addr").to_string();
    let dir = temp_dir("messages-serve");
    let db = dir.join("w.db").display().to_string();
    let out = weft_in(&dir, &["serve", "--listen", &addr, "--store", &db]);
    let err = stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert_eq!(err.matches("no API tokens").count(), 1, "{err}");
    assert_eq!(err.matches("already in use").count(), 1, "{err}");
    assert!(err.contains(&format!("cannot listen on {addr}")), "{err}");
    assert!(err.contains("--listen"), "{err}");
    drop(busy);
}
