//! Snapshots of what people and machines see: the human output of `validate` and `analyze`
//! (with `NO_COLOR=1`) and the `--json` documents, for a few representative examples. Review
//! the `.snap` diffs when output changes: they are the CLI's user interface.

mod common;

use common::{code, stderr, stdout, temp_dir, weft};

/// Exit code, stdout and stderr in one reviewable text.
fn run(args: &[&str]) -> String {
    let out = weft(args);
    format!(
        "$ weft {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        code(&out),
        stdout(&out),
        stderr(&out)
    )
}

/// Replaces the number in "N firings" with `[n]`.
fn redact_firings(text: &str) -> String {
    let words: Vec<&str> = text.split(' ').collect();
    let mut out = Vec::with_capacity(words.len());
    for (i, w) in words.iter().enumerate() {
        let next_is_firings = words.get(i + 1).is_some_and(|n| n.starts_with("firing"));
        if next_is_firings && !w.is_empty() && w.chars().all(|c| c.is_ascii_digit()) {
            out.push("[n]");
        } else {
            out.push(w);
        }
    }
    out.join(" ")
}

#[test]
fn validate_human() {
    insta::assert_snapshot!(
        "validate_sample",
        run(&["validate", "examples/sample.json"])
    );
    insta::assert_snapshot!(
        "validate_unknown_event",
        run(&["validate", "examples/broken/unknown-event.json"])
    );
    insta::assert_snapshot!(
        "validate_cycle",
        run(&["validate", "examples/broken/cycle.json"])
    );
    insta::assert_snapshot!(
        "validate_bad_expression",
        run(&["validate", "examples/broken/bad-expression.json"])
    );
}

#[test]
fn analyze_human() {
    insta::assert_snapshot!("analyze_join", run(&["analyze", "examples/join.json"]));
    insta::assert_snapshot!(
        "analyze_deadlock",
        run(&["analyze", "examples/broken/deadlock.json"])
    );
    insta::assert_snapshot!(
        "analyze_reactive_loop",
        run(&["analyze", "examples/reactive-loop.json"])
    );
    insta::assert_snapshot!(
        "analyze_unbounded",
        run(&["analyze", "examples/broken/unbounded.json"])
    );
    // How many firings were explored before the cut-off depends on the exploration order,
    // which is the analysis crate's business; the state count and the verdict are the contract.
    // Past the state limit, an acyclic plan is analysed on its partial-order reduced graph
    // (12 markings for the ten-way fan-out instead of 1,025)...
    insta::assert_snapshot!(
        "analyze_reduced",
        redact_firings(&run(&[
            "analyze",
            "--max-states",
            "100",
            "examples/fanout.json"
        ]))
    );
    // ...and when even that does not fit, the verdict is unknown.
    insta::assert_snapshot!(
        "analyze_state_limit",
        redact_firings(&run(&[
            "analyze",
            "--max-states",
            "5",
            "examples/fanout.json"
        ]))
    );
    insta::assert_snapshot!(
        "analyze_unknown_tool",
        run(&["analyze", "examples/broken/unknown-tool.json"])
    );
}

#[test]
fn json_output() {
    insta::assert_snapshot!(
        "validate_json_unknown_tool",
        run(&["validate", "--json", "examples/broken/unknown-tool.json"])
    );
    insta::assert_snapshot!(
        "analyze_json_deadlock",
        run(&["analyze", "--json", "examples/broken/deadlock.json"])
    );
    insta::assert_snapshot!(
        "analyze_json_timer",
        run(&["analyze", "--json", "examples/timer.json"])
    );
}

#[test]
fn load_error_human_and_json() {
    let dir = temp_dir("snap-load");
    std::fs::write(
        dir.join("typo.json"),
        "{\n  \"plan_name\": \"typo\",\n  \"graph_type\": \"acyclic\",\n  \"events\": {\"start\": {}},\n  \"steps\": {\"a\": {\"on\": [\"start\"], \"acton\": \"noop\"}}\n}\n",
    )
    .expect("write");
    // Run from the temp dir so the path in the output is stable.
    let human = common::weft_in(&dir, &["validate", "typo.json"]);
    let json = common::weft_in(&dir, &["validate", "--json", "typo.json"]);
    insta::assert_snapshot!(
        "load_error",
        format!(
            "exit: {}\n{}--- json (exit {})\n{}",
            code(&human),
            stdout(&human),
            code(&json),
            stdout(&json)
        )
    );
}

#[test]
fn tools_table() {
    insta::assert_snapshot!("tools", run(&["tools"]));
}
