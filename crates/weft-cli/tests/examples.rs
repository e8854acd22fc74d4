//! Every plan under `examples/` is checked against `examples/expected.json`: the exit codes of
//! `weft validate` and `weft analyze`, the finding codes and the verdict, and for every plan
//! outside `broken/` the outcome and exit code of `weft run` (with the args recorded there). A plan file missing
//! from `expected.json` (or an entry without a file) fails the test, so the table stays honest.

mod common;

use std::collections::BTreeSet;

use common::{code, json, root, stderr, temp_dir, weft, weft_in};

fn plan_files() -> BTreeSet<String> {
    let dir = root().join("examples");
    let mut out = BTreeSet::new();
    for sub in ["", "broken"] {
        for entry in std::fs::read_dir(dir.join(sub)).expect("examples dir") {
            let path = entry.expect("entry").path();
            let name = path
                .file_name()
                .expect("name")
                .to_string_lossy()
                .to_string();
            if path.extension().is_some_and(|e| e == "json" || e == "pnml")
                && name != "expected.json"
            {
                out.insert(if sub.is_empty() {
                    name
                } else {
                    format!("{sub}/{name}")
                });
            }
        }
    }
    out
}

#[test]
fn expected_json_lists_exactly_the_example_files() {
    let text = std::fs::read_to_string(root().join("examples/expected.json")).expect("read");
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).expect("expected.json is a JSON object");
    let listed: BTreeSet<String> = expected.keys().cloned().collect();
    let files = plan_files();
    let missing: Vec<_> = files.difference(&listed).collect();
    let stale: Vec<_> = listed.difference(&files).collect();
    assert!(
        missing.is_empty(),
        "examples missing from expected.json: {missing:?}"
    );
    assert!(
        stale.is_empty(),
        "expected.json lists files that do not exist: {stale:?}"
    );
    assert!(files.len() >= 12, "only {} examples", files.len());
}

#[test]
fn every_example_gives_its_expected_result() {
    let text = std::fs::read_to_string(root().join("examples/expected.json")).expect("read");
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).expect("expected.json");
    let mut failures = Vec::new();
    for (file, want) in &expected {
        let path = format!("examples/{file}");
        if let Some(v) = want.get("validate_exit").and_then(|v| v.as_i64()) {
            let out = weft(&["validate", "--json", &path]);
            if i64::from(code(&out)) != v {
                failures.push(format!("{file}: validate exit {} != {v}", code(&out)));
            }
            // Must be one JSON document whatever the outcome.
            let _ = json(&out);
        }
        let out = weft(&["analyze", "--json", &path]);
        let doc = json(&out);
        let want_exit = want["analyze_exit"].as_i64().expect("analyze_exit");
        if i64::from(code(&out)) != want_exit {
            failures.push(format!(
                "{file}: analyze exit {} != {want_exit}",
                code(&out)
            ));
        }
        let codes: BTreeSet<String> = doc["findings"]
            .as_array()
            .expect("findings")
            .iter()
            .map(|f| f["code"].as_str().expect("code").to_string())
            .collect();
        let want_codes: BTreeSet<String> = want["codes"]
            .as_array()
            .expect("codes")
            .iter()
            .map(|c| c.as_str().expect("code").to_string())
            .collect();
        if codes != want_codes {
            failures.push(format!("{file}: codes {codes:?} != {want_codes:?}"));
        }
        let verdict = doc["analysis"]["verdict"].clone();
        if verdict != want["verdict"] {
            failures.push(format!("{file}: verdict {verdict} != {}", want["verdict"]));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn sample_is_the_seed_plan_byte_for_byte() {
    let bytes = std::fs::read(root().join("examples/sample.json")).expect("read");
    assert_eq!(
        bytes,
        br#"{"plan_name":"sample","graph_type":"acyclic","events":{"start":{},"done":{}},"steps":{"first":{"on":["start"],"action":"send_email","args":{"to":"a@example.com","subject":"Hi","body":"Test"},"emits":["done"]}}}"#
    );
}

#[test]
fn every_runnable_example_runs_to_its_expected_outcome() {
    let text = std::fs::read_to_string(root().join("examples/expected.json")).expect("read");
    let expected: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(&text).expect("expected.json");
    let mut failures = Vec::new();
    for (file, want) in &expected {
        let Some(run) = want.get("run") else {
            if !file.starts_with("broken/") && file.ends_with(".json") {
                failures.push(format!("{file}: no `run` expectation in expected.json"));
            }
            continue;
        };
        // A fresh working directory per plan: the outbox lands there, not in the repo.
        let dir = temp_dir(&format!("run-example-{}", file.replace(['/', '.'], "-")));
        let abs = |p: &str| {
            if p.starts_with("examples/") {
                root().join(p).display().to_string()
            } else {
                p.to_string()
            }
        };
        let mut args = vec![
            "run".to_string(),
            "--json".to_string(),
            "--timeout-ms".to_string(),
            "20000".to_string(),
        ];
        args.extend(
            run["args"]
                .as_array()
                .expect("run.args")
                .iter()
                .map(|a| abs(a.as_str().expect("arg"))),
        );
        args.push(abs(&format!("examples/{file}")));
        let argv: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = weft_in(&dir, &argv);
        let doc = json(&out);
        let want_exit = run["exit"].as_i64().expect("run.exit");
        if i64::from(code(&out)) != want_exit {
            failures.push(format!(
                "{file}: run exit {} != {want_exit} (reason: {}; stderr: {})",
                code(&out),
                doc["reason"],
                stderr(&out)
            ));
        }
        if doc["outcome"] != run["outcome"] {
            failures.push(format!(
                "{file}: run outcome {} != {} (reason: {})",
                doc["outcome"], run["outcome"], doc["reason"]
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
