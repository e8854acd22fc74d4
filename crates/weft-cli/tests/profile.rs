//! `weft profile PLAN` on a real configuration: each step's derived security profile, for a
//! built-in HTTP tool under `[tools.http] allow_hosts`, a sandboxed `command` tool with its
//! paths, network and limits, and a pure helper; human and JSON output, and exit 1 for a tool
//! nobody declared.

mod common;

use common::{code, json, stderr, stdout, temp_dir, weft_in};
use serde_json::json;

const PLAN: &str = r#"{"plan_name": "profiled", "graph_type": "acyclic",
  "events": {"start": {}, "fetched": {}, "summed": {}, "done": {}},
  "steps": {
    "fetch": {"on": ["start"], "action": "http.request", "args": {"url": "https://api.example.com/x"},
              "emits": ["fetched"], "timeout_ms": 2000},
    "sum": {"on": ["fetched"], "action": "summarize", "args": {}, "emits": ["summed"]},
    "finish": {"on": ["summed"], "action": "echo", "args": {}, "emits": ["done"]}
  }}"#;

fn config(dir: &std::path::Path) -> String {
    format!(
        r#"[tools.http]
allow_hosts = ["api.example.com"]

[[tools.declared]]
name = "summarize"
effect = "read"
timeout_ms = 20000
[tools.declared.source]
kind = "command"
program = "/bin/cat"
cwd = "{d}"
read_paths = ["{d}"]
write_paths = ["{d}/out"]
memory_mb = 256
cpu_seconds = 10
"#,
        d = dir.display()
    )
}

#[test]
fn profiles_are_derived_per_step() {
    let dir = temp_dir("profile");
    std::fs::create_dir_all(dir.join("out")).unwrap();
    std::fs::write(dir.join("weft.toml"), config(&dir)).unwrap();
    std::fs::write(dir.join("plan.json"), PLAN).unwrap();

    let out = weft_in(&dir, &["profile", "plan.json", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let doc = json(&out);
    assert_eq!(doc["plan"], "profiled");
    assert_eq!(doc["unknown"], json!([]));
    let step = |name: &str| {
        doc["steps"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["step"] == name)
            .unwrap_or_else(|| panic!("{name} in {doc}"))["profile"]
            .clone()
    };
    let fetch = step("fetch");
    assert_eq!(fetch["tool"], "http.request");
    assert_eq!(fetch["source"], "builtin");
    assert_eq!(fetch["network"]["hosts"], json!(["api.example.com"]));
    assert_eq!(fetch["filesystem"]["read_only"], true);
    assert_eq!(
        fetch["limits"]["time_ms"], 2000,
        "the step's timeout is the smaller"
    );
    assert_eq!(fetch["isolation"], "none");
    assert_eq!(fetch["deterministic"], false);

    let d = dir.display().to_string();
    let sum = step("sum");
    assert_eq!(sum["source"], "command");
    assert_eq!(sum["isolation"], "sandboxed");
    assert_eq!(sum["network"]["hosts"], json!([]));
    assert_eq!(sum["filesystem"]["write"], json!([format!("{d}/out")]));
    assert!(
        sum["filesystem"]["read"]
            .as_array()
            .unwrap()
            .contains(&json!(d)),
        "{sum}"
    );
    assert_eq!(
        sum["limits"],
        json!({"time_ms": 20000, "memory_mb": 256, "cpu_seconds": 10})
    );
    assert_eq!(sum["effect"], "read");

    let finish = step("finish");
    assert_eq!(finish["deterministic"], true);
    assert_eq!(finish["network"]["hosts"], json!([]));
    assert_eq!(finish["filesystem"]["read"], json!([]));

    let out = weft_in(&dir, &["profile", "plan.json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let text = stdout(&out);
    for line in [
        "fetch  http.request (builtin, write)",
        "  network        api.example.com",
        "  write          nothing (read-only)",
        "  limits         time 2000 ms, memory none, cpu none",
        "sum  summarize (command, read)",
        "  network        none",
        "  limits         time 20000 ms, memory 256 MiB, cpu 10 s",
        "  isolation      sandboxed (Landlock, network namespace, rlimits)",
        "finish  echo (builtin, pure)",
        "  deterministic  yes",
    ] {
        assert!(text.contains(line), "{line:?} in\n{text}");
    }
}

#[test]
fn an_unknown_tool_has_no_profile() {
    let dir = temp_dir("profile-unknown");
    std::fs::write(
        dir.join("plan.json"),
        r#"{"plan_name": "p", "graph_type": "acyclic", "events": {"start": {}, "done": {}},
            "steps": {"s": {"on": ["start"], "action": "nobody.made.this", "emits": ["done"]}}}"#,
    )
    .unwrap();
    let out = weft_in(&dir, &["profile", "plan.json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("nobody.made.this"),
        "{}",
        stderr(&out)
    );
    let out = weft_in(&dir, &["profile", "plan.json", "--json"]);
    assert_eq!(json(&out)["unknown"], json!(["nobody.made.this"]));
}
