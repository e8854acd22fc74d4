//! `weft run` end to end: the README's first command (the sample, its email in the outbox of
//! the working directory), the human and `--json` output (snapshots with ids and timings
//! redacted), and the exit codes: 0 completed, 1 stuck / failed / invalid plan, 2 usage or I/O.

mod common;

use std::path::Path;

use common::{code, json, root, stderr, stdout, temp_dir, weft_in};

fn example(name: &str) -> String {
    root().join("examples").join(name).display().to_string()
}

/// Exit code, stdout and stderr in one reviewable text, with the example paths made relative.
fn transcript(dir: &Path, args: &[&str]) -> String {
    let out = weft_in(dir, args);
    let prefix = format!("{}/", root().display());
    format!(
        "$ weft {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" ").replace(&prefix, ""),
        code(&out),
        stdout(&out).replace(&prefix, ""),
        stderr(&out).replace(&prefix, "")
    )
}

/// Timings and generated names vary between runs; everything else must not.
fn filters() -> Vec<(&'static str, &'static str)> {
    vec![
        (r"\d+(\.\d+)? ms", "[ms]"),
        (
            r#""(started_ms|finished_ms|duration_ms|elapsed_ms)": \d+"#,
            r#""$1": "[ms]""#,
        ),
        (r"[0-9a-f]{16,}", "[hash]"),
        (r#""due": "[^"]+""#, r#""due": "[time]""#),
        (r#""due_ms": \d+"#, r#""due_ms": "[ms]""#),
        // `${start}` renders a CEL map whose key order is not stable (reported to weft-runtime).
        (r#""body":\{.*"#, r#""body":[map]"#),
    ]
}

#[test]
fn sample_completes_and_its_email_lands_in_the_outbox() {
    let dir = temp_dir("run-sample");
    let out = weft_in(&dir, &["run", &example("sample.json")]);
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert!(stdout(&out).contains("completed"), "{}", stdout(&out));
    let outbox = dir.join(".weft/outbox");
    let files: Vec<_> = std::fs::read_dir(&outbox)
        .unwrap_or_else(|e| panic!("no outbox at {}: {e}", outbox.display()))
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    let mail = std::fs::read_to_string(&files[0]).expect("read mail");
    assert!(mail.contains("a@example.com"), "{mail}");
    assert!(mail.contains("Hi"), "{mail}");
}

#[test]
fn human_output() {
    let dir = temp_dir("run-human");
    insta::with_settings!({filters => filters()}, {
        insta::assert_snapshot!("run_sample", transcript(&dir, &["run", &example("sample.json")]));
        insta::assert_snapshot!(
            "run_failure_handling",
            transcript(
                &dir,
                &["run", "--input", r#"{"order":"A-1","email":"b@example.com"}"#, &example("failure-handling.json")]
            )
        );
        insta::assert_snapshot!(
            "run_stuck",
            transcript(&dir, &["run", "--input", r#"{"amount":500}"#, &example("broken/deadlock.json")])
        );
    });
}

#[test]
fn json_output() {
    let dir = temp_dir("run-json");
    insta::with_settings!({filters => filters()}, {
        insta::assert_snapshot!(
            "run_json_sample",
            transcript(&dir, &["run", "--json", &example("sample.json")])
        );
        insta::assert_snapshot!(
            "run_json_timer_with_event",
            transcript(
                &dir,
                &[
                    "run",
                    "--json",
                    "--input",
                    r#"{"email":"x@example.com"}"#,
                    "--event",
                    r#"reminder.due={"early":true}"#,
                    &example("timer.json"),
                ]
            )
        );
    });
}

#[test]
fn json_document_has_the_contract_fields() {
    let dir = temp_dir("run-json-fields");
    let out = weft_in(&dir, &["run", "--json", &example("sample.json")]);
    let doc = json(&out);
    for field in ["outcome", "reason", "results", "waiting", "trace"] {
        assert!(doc.get(field).is_some(), "missing `{field}` in {doc}");
    }
    assert_eq!(doc["outcome"], "completed");
    let trace = doc["trace"].as_array().expect("trace");
    assert_eq!(trace.len(), 1);
    assert_eq!(trace[0]["step"], "first");
    assert_eq!(trace[0]["inputs"][0]["event"], "start");
    assert_eq!(trace[0]["emitted"][0]["event"], "done");
    assert!(doc["results"].get("done").is_some(), "{doc}");
}

#[test]
fn exit_codes() {
    let dir = temp_dir("run-exit");
    // 0: completed.
    assert_eq!(code(&weft_in(&dir, &["run", &example("sample.json")])), 0);
    // 1: failed (http.request to a host the default config does not allow).
    let out = weft_in(
        &dir,
        &[
            "run",
            "--input",
            r#"{"customer_id":"c"}"#,
            &example("join.json"),
        ],
    );
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert!(stdout(&out).contains("failed"), "{}", stdout(&out));
    // 1: stuck, naming what the waiting step lacks.
    let out = weft_in(
        &dir,
        &[
            "run",
            "--input",
            r#"{"amount":500}"#,
            &example("broken/deadlock.json"),
        ],
    );
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("stuck"), "{}", stdout(&out));
    assert!(
        stdout(&out).contains("lacks `approved`"),
        "{}",
        stdout(&out)
    );
    // 1: invalid plan, findings printed like `weft validate`.
    let out = weft_in(&dir, &["run", &example("broken/unknown-tool.json")]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("V002"), "{}", stdout(&out));
    // 2: I/O.
    let out = weft_in(&dir, &["run", "no-such-plan.json"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("cannot open"), "{}", stderr(&out));
    // 2: usage.
    assert_eq!(code(&weft_in(&dir, &["run"])), 2);
    assert_eq!(
        code(&weft_in(
            &dir,
            &["run", "--timeout-ms", "soon", &example("sample.json")]
        )),
        2
    );
}

#[test]
fn bad_event_and_input_are_usage_errors() {
    let dir = temp_dir("run-bad-event");
    let timer = example("timer.json");
    let out = weft_in(&dir, &["run", "--event", "reminder.due={oops", &timer]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("the payload of --event `reminder.due` is not valid JSON"),
        "{}",
        stderr(&out)
    );
    assert!(stdout(&out).is_empty(), "nothing runs: {}", stdout(&out));
    assert!(!dir.join(".weft").exists(), "nothing ran");

    let out = weft_in(&dir, &["run", "--event", "no-equals-sign", &timer]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("must be NAME=JSON"),
        "{}",
        stderr(&out)
    );

    let out = weft_in(&dir, &["run", "--event", "scheduled={}", &timer]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("not a `kind: input` event"),
        "{}",
        stderr(&out)
    );

    let out = weft_in(&dir, &["run", "--event", "nope={}", &timer]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("`reminder.due`"),
        "lists the input events: {}",
        stderr(&out)
    );

    let out = weft_in(&dir, &["run", "--input", "{", &timer]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--input is not valid JSON"),
        "{}",
        stderr(&out)
    );
}

/// An input or an `--event` payload that does not match its event's schema is a usage error
/// that names the event, the place and the reason; nothing runs.
#[test]
fn input_and_events_not_matching_their_schemas_are_usage_errors() {
    let dir = temp_dir("run-schemas");
    let plan = dir.join("typed.json");
    let doc = serde_json::json!({"plan_name": "typed", "graph_type": "reactive",
        "events": {"start": {"schema": {"type": "object", "required": ["who"]}},
                   "msg": {"kind": "input", "schema": {"type": "object", "properties": {"n": {"type": "integer"}}}},
                   "seen": {"kind": "output"}},
        "steps": {"handle": {"on": ["msg"], "action": "echo", "args": {}, "emits": ["seen"]}}});
    std::fs::write(&plan, doc.to_string()).expect("write");
    let plan = plan.display().to_string();
    let out = weft_in(&dir, &["run", "--until-idle", "--input", "{}", &plan]);
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("[input_invalid]") && err.contains("`start`") && err.contains("who"),
        "{err}"
    );
    let out = weft_in(
        &dir,
        &[
            "run",
            "--until-idle",
            "--input",
            r#"{"who":"me"}"#,
            "--event",
            r#"msg={"n":"one"}"#,
            &plan,
        ],
    );
    assert_eq!(code(&out), 2, "{}", stdout(&out));
    let err = stderr(&out);
    assert!(
        err.contains("--event `msg`") && err.contains("(at `/n`)"),
        "{err}"
    );
    assert!(stdout(&out).is_empty(), "nothing runs: {}", stdout(&out));
    let out = weft_in(
        &dir,
        &[
            "run",
            "--json",
            "--until-idle",
            "--input",
            r#"{"who":"me"}"#,
            "--event",
            r#"msg={"n":1}"#,
            &plan,
        ],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        json(&out)["results"].get("seen").is_some(),
        "{}",
        stdout(&out)
    );
}

#[test]
fn reactive_plan_until_idle_stops_cleanly_and_timeout_stops_too() {
    let dir = temp_dir("run-reactive");
    let plan = example("reactive-loop.json");
    let out = weft_in(&dir, &["run", "--json", "--until-idle", &plan]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let doc = json(&out);
    assert_eq!(doc["outcome"], "stopped");
    assert!(
        doc["reason"].as_str().is_some_and(|r| r.contains("idle")),
        "{doc}"
    );
    assert!(doc["results"].get("listening").is_some(), "{doc}");

    let out = weft_in(&dir, &["run", "--json", "--timeout-ms", "300", &plan]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let doc = json(&out);
    assert_eq!(doc["outcome"], "stopped");
    assert!(
        doc["reason"]
            .as_str()
            .is_some_and(|r| r.contains("timeout")),
        "{doc}"
    );

    // An LLM step without a configured provider fails with a message saying what to set.
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_weft"));
    let out = cmd
        .args([
            "run",
            "--json",
            "--until-idle",
            "--event",
            r#"message={"text":"hi","from":"a@example.com"}"#,
            &plan,
        ])
        .current_dir(&dir)
        .env("NO_COLOR", "1")
        .env_remove("WEFT_LLM_BASE_URL")
        .output()
        .expect("run weft");
    let doc = json(&out);
    assert_eq!(code(&out), 1, "{doc}");
    assert_eq!(doc["outcome"], "failed");
    assert!(doc.to_string().contains("WEFT_LLM_BASE_URL"), "{doc}");
}

#[test]
fn acyclic_timeout_is_not_a_success() {
    let dir = temp_dir("run-timeout");
    let out = weft_in(
        &dir,
        &[
            "run",
            "--json",
            "--timeout-ms",
            "100",
            "--input",
            r#"{"email":"x@example.com"}"#,
            &example("timer.json"),
        ],
    );
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    assert_eq!(json(&out)["outcome"], "stopped");
}

/// Issue #26: a conditional emit keeps its event name in the trace (it used to print
/// `emits ?#1` and `"event": null` when two conditional emits feed the same join).
#[test]
fn conditional_emits_keep_their_event_names_in_the_trace() {
    let dir = temp_dir("run-cond-emits");
    let plan = dir.join("cond.json");
    std::fs::write(
        &plan,
        r#"{"plan_name":"cond","graph_type":"acyclic","events":{"start":{},"a":{},"b":{},"done":{}},
        "steps":{"split":{"on":["start"],"action":"echo","args":{"ok":true},
                   "emits":[{"event":"a","when":"result.ok"},{"event":"b","when":"!result.ok"}]},
                 "join":{"on":["a","b"],"action":"echo","args":{},"emits":["done"]}}}"#,
    )
    .expect("write plan");
    let out = weft_in(&dir, &["run", "--json", &plan.display().to_string()]);
    let doc = json(&out);
    let firings = doc["trace"].as_array().expect("a trace");
    let split = firings
        .iter()
        .find(|f| f["step"] == "split")
        .expect("split fired");
    assert_eq!(split["emitted"][0]["event"], "a", "{split}");
    let out = weft_in(&dir, &["run", &plan.display().to_string()]);
    assert!(!stdout(&out).contains("?#"), "{}", stdout(&out));
    assert!(stdout(&out).contains("a#1"), "{}", stdout(&out));
}
