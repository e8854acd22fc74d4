//! `weft repair` and `weft summarize` end to end with the real binary, a scripted model and
//! a temporary SQLite store: a run pauses on a step with `on_fail: repair`; `weft repair`
//! swaps a revised plan in and the instance completes (and replays); a revision that would
//! lose a token fails the instance with R001; `weft summarize` reports the run from the
//! journal (template, and the scripted model with `--llm`).

mod common;

use std::path::Path;

use common::{code, json, stderr, stdout, temp_dir, weft_in};
use serde_json::{Value, json as j};

fn failing() -> Value {
    j!({"plan_name": "ship", "graph_type": "acyclic",
      "description": "Ship the order with the carrier",
      "events": {"start": {}, "packed": {}, "shipped": {"kind": "output"}},
      "steps": {
        "pack": {"on": ["start"], "action": "echo", "args": {"order": "${start.order}"}, "emits": ["packed"]},
        "send": {"on": ["packed"], "action": "fail", "args": {"message": "carrier A is down"},
                 "on_fail": "repair", "emits": ["shipped"]}}})
}

fn fixed() -> Value {
    j!({"plan_name": "ship", "graph_type": "acyclic",
      "events": {"start": {}, "packed": {}, "shipped": {"kind": "output"}},
      "steps": {
        "pack": {"on": ["start"], "action": "echo", "args": {"order": "${start.order}"}, "emits": ["packed"]},
        "send_b": {"on": ["packed"], "action": "echo",
                   "args": {"carrier": "B", "order": "${packed.order}"}, "emits": ["shipped"]}}})
}

fn lossy() -> Value {
    j!({"plan_name": "ship", "graph_type": "acyclic",
      "events": {"start": {}, "shipped": {"kind": "output"}},
      "steps": {"log_it": {"on": ["start"], "action": "log", "args": {"message": "x"}, "emits": ["shipped"]}}})
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write");
    p.display().to_string()
}

fn script(dir: &Path, name: &str, lines: &[Value]) -> String {
    let text: Vec<String> = lines.iter().map(Value::to_string).collect();
    write(dir, name, &text.join("\n"))
}

/// Runs the failing plan into the store; returns the paused instance's id.
fn paused_run(dir: &Path, plan: &str) -> String {
    let out = weft_in(
        dir,
        &[
            "run",
            plan,
            "--input",
            r#"{"order": 42}"#,
            "--store",
            ".weft/weft.db",
            "--json",
        ],
    );
    let doc = json(&out);
    assert_eq!(doc["outcome"], "paused", "{doc}\n{}", stderr(&out));
    doc["instance"].as_str().expect("instance id").to_string()
}

#[test]
fn repair_then_summarize() {
    let dir = temp_dir("repair-cli");
    let plan = write(&dir, "ship.json", &failing().to_string());
    let id = paused_run(&dir, &plan);

    let good = script(
        &dir,
        "good.jsonl",
        &[j!({"match": {"user": "carrier A is down"},
              "reply": {"tool_call": {"name": "create_plan", "arguments": fixed()}}})],
    );
    let out = weft_in(&dir, &["repair", &id, "--script", &good, "--json"]);
    assert_eq!(code(&out), 0, "{}\n{}", stdout(&out), stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["outcome"], "completed", "{doc}");
    assert_eq!(doc["repairs"], 1);
    assert_eq!(doc["plan_hash"].as_str().map(str::len), Some(64));

    // The journal holds the repair and replays to the recorded state.
    let out = weft_in(&dir, &["inspect", &id, "--json"]);
    let ins = json(&out);
    assert_eq!(ins["status"], "completed");
    let kinds: Vec<&str> = ins["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert!(kinds.contains(&"repair.applied"), "{kinds:?}");
    let out = weft_in(&dir, &["replay", &id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let out = weft_in(&dir, &["journal", "verify", &id]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));

    // The model's exchange was kept in the store's transcripts, under the instance.
    let tenant = ins["tenant"].as_str().unwrap().to_string();
    let db = dir.join(".weft/weft.db");
    let rt = tokio::runtime::Runtime::new().unwrap();
    let kept = rt.block_on(async {
        let store = weft_store_sqlite::SqliteStore::open(&db).await.unwrap();
        weft_llm::list_transcripts(
            &store,
            &tenant,
            &weft_llm::TranscriptScope::Instance(id.clone()),
        )
        .await
        .unwrap()
    });
    assert_eq!(kept.len(), 1, "{kept:?}");
    assert_eq!(kept[0].purpose, "repair");
    drop(rt);

    // Template summary, grounded in the journal and the revised plan.
    let out = weft_in(&dir, &["summarize", &id, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let s = json(&out);
    assert_eq!(s["source"], "template");
    assert_eq!(s["status"], "completed");
    let problems = s["problems"].to_string();
    assert!(problems.contains("carrier A is down"), "{s}");
    let out = weft_in(&dir, &["summarize", &id]);
    assert!(stdout(&out).contains("Problems:"), "{}", stdout(&out));

    // The model's summary with --llm.
    let reply = j!({"what_happened": "The order was packed; carrier A failed; the plan was repaired to ship with carrier B.",
                    "problems": ["carrier A is down"], "suggestions": ["prefer carrier B"]});
    let sum = script(
        &dir,
        "summary.jsonl",
        &[j!({"match": {"user": "repair.applied"}, "reply": {"content": reply.to_string()}})],
    );
    let out = weft_in(
        &dir,
        &["summarize", &id, "--llm", "--script", &sum, "--json"],
    );
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let s = json(&out);
    assert_eq!(s["source"], "llm");
    assert_eq!(s["suggestions"], j!(["prefer carrier B"]));
}

#[test]
fn a_repair_that_would_lose_a_token_fails_with_r001() {
    let dir = temp_dir("repair-cli-lossy");
    let plan = write(&dir, "ship.json", &failing().to_string());
    let id = paused_run(&dir, &plan);
    let bad = j!({"reply": {"tool_call": {"name": "create_plan", "arguments": lossy()}}});
    let script = script(&dir, "bad.jsonl", &[bad.clone(), bad]);
    let out = weft_in(
        &dir,
        &[
            "repair",
            &id,
            "--script",
            &script,
            "--max-attempts",
            "2",
            "--json",
        ],
    );
    assert_eq!(code(&out), 1, "{}\n{}", stdout(&out), stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["outcome"], "failed");
    assert_eq!(doc["repairs"], 0);
    let reason = doc["reason"].as_str().unwrap();
    assert!(reason.contains("[R001]"), "{reason}");
    assert!(reason.contains("packed"), "{reason}");
    // Unknown and finished instances are usage errors.
    let out = weft_in(&dir, &["repair", &id, "--script", &script]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("[not_repairable]"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("failed"), "{}", stderr(&out));
    let out = weft_in(&dir, &["repair", "i999999", "--script", &script]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(stderr(&out).contains("[not_found]"), "{}", stderr(&out));
}

#[test]
fn plan_with_a_store_keeps_transcripts_and_answers_again_from_its_cache() {
    let dir = temp_dir("plan-store");
    let script = common::root()
        .join("crates/weft-cli/tests/fixtures/plan-script.jsonl")
        .display()
        .to_string();
    let args = [
        "plan",
        "email a@example.com hello",
        "--script",
        &script,
        "--store",
        ".weft/weft.db",
        "--json",
    ];
    let first = json(&weft_in(&dir, &args));
    assert_eq!(first["from_cache"], false);
    assert_eq!(first["critic_rounds"], 1);
    // A second process, same instruction: from the store's plan cache (the script would
    // have served the invalid candidate first).
    let again = json(&weft_in(&dir, &args));
    assert_eq!(again["from_cache"], true, "{again}");
    assert_eq!(again["plan"], first["plan"]);
    assert_eq!(again["attempts"], 0);
}
