//! `weft plan` offline against the committed scripted provider (`tests/fixtures/
//! plan-script.jsonl`: an invalid candidate, then a valid one → one critic round), its exit
//! codes, and `weft explain`'s template.

mod common;

use std::process::{Command, Stdio};

use common::{code, json, root, stderr, stdout, temp_dir, weft};

fn script() -> String {
    root()
        .join("crates/weft-cli/tests/fixtures/plan-script.jsonl")
        .display()
        .to_string()
}

#[test]
fn scripted_plan_needs_one_critic_round() {
    let out = weft(&["plan", "email a@example.com hello", "--script", &script()]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let plan: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the plan on stdout");
    assert_eq!(plan["steps"]["send"]["action"], "send_email");
    assert!(stderr(&out).contains("1 critic round"), "{}", stderr(&out));

    let doc = json(&weft(&["plan", "hello", "--json", "--script", &script()]));
    assert_eq!(doc["critic_rounds"], 1);
    assert_eq!(doc["attempts"], 2);
    assert!(
        doc["feedback"][0]
            .as_str()
            .is_some_and(|f| f.contains("V002")),
        "{doc}"
    );
}

#[test]
fn output_file_holds_a_plan_that_validates() {
    let dir = temp_dir("plan-out");
    let file = dir.join("plan.json");
    let out = weft(&[
        "plan",
        "hello",
        "--script",
        &script(),
        "-o",
        &file.display().to_string(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(stdout(&out).contains("1 critic round"), "{}", stdout(&out));
    assert_eq!(code(&weft(&["validate", &file.display().to_string()])), 0);
}

/// `[budget.planner]` counts `weft plan`'s model calls in the store's counters: the scripted
/// run makes two, so another run under a quota of three is refused at its second call.
#[test]
fn the_planner_quota_counts_one_shot_runs_through_the_store() {
    let dir = temp_dir("plan-quota");
    let config = dir.join("weft.toml");
    std::fs::write(
        &config,
        "[budget]\nperiod_secs = 1099511627776\n[budget.planner]\nmax_llm_calls = 3\n",
    )
    .unwrap();
    let db = dir.join("weft.db").display().to_string();
    let config = config.display().to_string();
    // Two instructions: the store's plan cache would answer the same one again.
    let run = |instruction: &str| {
        weft(&[
            "--config",
            &config,
            "plan",
            instruction,
            "--script",
            &script(),
            "--store",
            &db,
        ])
    };
    let first = run("hello");
    assert_eq!(code(&first), 0, "{}", stderr(&first));
    let second = run("hello again");
    assert_eq!(code(&second), 1, "{}", stderr(&second));
    assert!(
        stderr(&second).contains("3 of 3 calls"),
        "{}",
        stderr(&second)
    );
}

#[test]
fn exhausted_attempts_exit_1_with_the_last_findings() {
    let out = weft(&[
        "plan",
        "hello",
        "--script",
        &script(),
        "--max-attempts",
        "1",
    ]);
    assert_eq!(code(&out), 1);
    assert!(
        stderr(&out).contains("gave up after 1 attempt"),
        "{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("V002"), "{}", stderr(&out));
}

#[test]
fn no_provider_is_exit_2_naming_the_variables() {
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["plan", "hello"])
        .env_remove("WEFT_LLM_BASE_URL")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .output()
        .expect("run weft");
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("WEFT_LLM_BASE_URL"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        code(&weft(&[
            "plan",
            "hello",
            "--script",
            "no-such-script.jsonl"
        ])),
        2
    );
    assert_eq!(
        code(&weft(&[
            "plan",
            "hello",
            "--script",
            &script(),
            "--max-attempts",
            "0"
        ])),
        2
    );
}

#[test]
fn explain_uses_the_template_by_default() {
    let out = weft(&["explain", "examples/join.json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for step in ["load_profile", "load_orders", "build_report"] {
        assert!(text.contains(step), "{text}");
    }
    assert_eq!(
        code(&weft(&["explain", "examples/broken/unknown-tool.json"])),
        1
    );
    assert_eq!(code(&weft(&["explain", "no-such-plan.json"])), 2);
}
