//! Bad input never panics: every malformed, oversized, deeply nested or otherwise hostile
//! document gets a clear, located error and the documented exit code (1 = the plan has
//! errors, 2 = usage or I/O failure). A crash would show up as a signal, not an exit code.

mod common;

use std::fmt::Write as _;
use std::path::Path;

use common::{code, json, stderr, stdout, temp_dir, weft, weft_in};

fn write(dir: &Path, name: &str, bytes: &[u8]) -> String {
    let path = dir.join(name);
    std::fs::write(&path, bytes).expect("write");
    path.to_string_lossy().to_string()
}

fn first_code(doc: &serde_json::Value) -> String {
    doc["findings"][0]["code"]
        .as_str()
        .expect("a finding")
        .to_string()
}

fn codes(doc: &serde_json::Value) -> Vec<String> {
    doc["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .map(|f| f["code"].as_str().expect("code").to_string())
        .collect()
}

#[test]
fn malformed_json_shows_line_and_column() {
    let dir = temp_dir("malformed");
    let f = write(
        &dir,
        "bad.json",
        b"{\"plan_name\": \"x\",\n  \"graph_type\": \"acyclic\",\n  \"events\": {,}\n}",
    );
    let out = weft(&["validate", &f]);
    assert_eq!(code(&out), 1, "{out:?}");
    let text = stdout(&out);
    assert!(text.contains("error[L004 syntax]"), "{text}");
    assert!(text.contains("bad.json:3:14"), "{text}");
    assert!(text.contains("hint:"), "{text}");

    let out = weft(&["validate", "--json", &f]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    let e = &doc["findings"][0];
    assert_eq!(e["code"], "L004");
    assert_eq!(e["line"], 3);
    assert_eq!(e["column"], 14);
    assert_eq!(e["pointer"], "/events");
    assert_eq!(doc["valid"], false);
}

#[test]
fn unknown_field_names_its_pointer() {
    let dir = temp_dir("unknown-field");
    let f = write(
        &dir,
        "p.json",
        br#"{"plan_name":"x","graph_type":"acyclic","events":{"start":{}},"steps":{"a":{"on":["start"],"action":"noop","bogus":1}}}"#,
    );
    let out = weft(&["analyze", "--json", &f]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    assert_eq!(doc["findings"][0]["pointer"], "/steps/a/bogus");
    assert!(doc["analysis"].is_null());
}

#[test]
fn invalid_utf8_is_a_load_error() {
    let dir = temp_dir("utf8");
    let f = write(&dir, "p.json", b"{\"plan_name\": \"caf\xe9\"}");
    let out = weft(&["validate", &f]);
    assert_eq!(code(&out), 1);
    let text = stdout(&out);
    assert!(text.contains("error[L002 invalid-utf8]"), "{text}");
    assert!(text.contains("p.json:1:19"), "{text}");
}

#[test]
fn fifty_megabytes_is_refused_without_reading_it() {
    let dir = temp_dir("large");
    let path = dir.join("big.json");
    let mut body = String::from("{\"plan_name\":\"big\",\"description\":\"");
    body.push_str(&"x".repeat(50 * 1024 * 1024));
    body.push_str("\"}");
    std::fs::write(&path, body).expect("write");
    let out = weft(&["validate", "--json", path.to_str().expect("utf-8 path")]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    assert_eq!(first_code(&doc), "L001");
    assert!(
        doc["findings"][0]["message"]
            .as_str()
            .expect("message")
            .contains("over the limit"),
        "{doc}"
    );
}

#[test]
fn plan_bytes_limit_is_configurable() {
    let out = weft(&["--max-plan-bytes", "20", "validate", "examples/sample.json"]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).contains("L001"), "{}", stdout(&out));
}

fn many_steps(n: usize) -> String {
    let mut s = String::from(
        r#"{"plan_name":"many","graph_type":"acyclic","events":{"start":{}},"steps":{"#,
    );
    for i in 0..n {
        if i > 0 {
            s.push(',');
        }
        let _ = write!(s, r#""s{i}":{{"on":["start"],"action":"noop"}}"#);
    }
    s.push_str("}}");
    s
}

#[test]
fn a_hundred_thousand_steps_hit_the_step_limit_unless_raised() {
    let dir = temp_dir("many-steps");
    let f = write(&dir, "many.json", many_steps(100_000).as_bytes());
    let out = weft(&["validate", "--json", &f]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    assert_eq!(first_code(&doc), "L005");
    assert_eq!(doc["findings"][0]["pointer"], "/steps");

    let out = weft(&["validate", "--max-steps", "200000", "--json", &f]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    let doc = json(&out);
    assert_eq!(doc["valid"], true);
}

#[test]
fn a_hundred_thousand_events_need_max_events_not_max_steps() {
    // Two limits, two flags (the README lists both): `--max-steps` leaves the event limit.
    let dir = temp_dir("many-events");
    let mut s = String::from(r#"{"plan_name":"many","graph_type":"acyclic","events":{"start":{}"#);
    for i in 0..60_000 {
        let _ = write!(s, r#","e{i}":{{}}"#);
    }
    s.push_str(r#"},"steps":{"a":{"on":["start"],"action":"noop"}}}"#);
    let f = write(&dir, "many.json", s.as_bytes());
    let out = weft(&["validate", "--max-steps", "200000", "--json", &f]);
    assert_eq!(code(&out), 1);
    assert_eq!(json(&out)["findings"][0]["pointer"], "/events");
    let out = weft(&["validate", "--max-events", "200000", "--json", &f]);
    assert_ne!(
        json(&out)["findings"][0]["code"],
        "L005",
        "{}",
        stdout(&out)
    );
}

#[test]
fn control_characters_in_names_reach_the_terminal_escaped() {
    let dir = temp_dir("control-chars");
    // ESC (a terminal title sequence), BEL and NUL in names the findings echo.
    let plan = r#"{"plan_name":"ctl","graph_type":"acyclic","events":{"start":{},"x\u001b]0;owned\u0007":{}},
      "steps":{"s\u0000\u001b[2J":{"on":["start","nowhere\u0007"],"action":"noop","emits":["x\u001b]0;owned\u0007"]}}}"#;
    let f = write(&dir, "ctl.json", plan.as_bytes());
    for args in [
        &["validate", &f][..],
        &["--color", "always", "validate", &f][..],
        &["analyze", &f][..],
    ] {
        let out = weft(args);
        let text = stdout(&out);
        assert!(text.contains("\\u001b"), "{args:?}: {text}");
        for c in ['\u{1b}', '\u{7}', '\0'] {
            let raw = text.replace("\u{1b}[0m", "").replace("\u{1b}[1m", "");
            if args.contains(&"always") && c == '\u{1b}' {
                // Colour is on: only the palette's own SGR sequences, never `]` or `[2J`.
                assert!(
                    !text.contains("\u{1b}]") && !text.contains("\u{1b}[2J"),
                    "{text:?}"
                );
                continue;
            }
            assert!(!raw.contains(c), "{args:?}: raw {c:?} in {text:?}");
        }
    }
    // `--json` stays valid JSON and keeps the names exactly.
    let out = weft(&["validate", "--json", &f]);
    let doc = json(&out);
    assert!(doc["findings"].to_string().contains("\\u0007"), "{doc}");
}

#[test]
fn deeply_nested_args_are_refused_without_recursion() {
    let dir = temp_dir("deep");
    let body = format!(
        r#"{{"plan_name":"deep","graph_type":"acyclic","events":{{"start":{{}}}},"steps":{{"a":{{"on":["start"],"action":"echo","args":{}{}}}}}}}"#,
        "[".repeat(100_000),
        "]".repeat(100_000)
    );
    let f = write(&dir, "deep.json", body.as_bytes());
    for cmd in ["validate", "analyze", "graph"] {
        let out = weft(&[cmd, &f]);
        assert_eq!(code(&out), 1, "{cmd}: {out:?}");
        let all = format!("{}{}", stdout(&out), stderr(&out));
        assert!(all.contains("L003"), "{cmd}: {all}");
    }
    // Unclosed nesting, too.
    let f = write(&dir, "open.json", "[".repeat(100_000).as_bytes());
    let out = weft(&["validate", &f]);
    assert_eq!(code(&out), 1);
}

#[test]
fn a_guard_that_is_not_boolean_is_v012() {
    let dir = temp_dir("guard");
    let f = write(
        &dir,
        "p.json",
        br#"{"plan_name":"g","graph_type":"acyclic","events":{"start":{},"done":{"kind":"output"}},"steps":{"a":{"on":["start"],"guard":"1 + 1","action":"noop","emits":["done"]}}}"#,
    );
    let out = weft(&["validate", "--json", &f]);
    assert_eq!(code(&out), 1);
    let doc = json(&out);
    assert!(codes(&doc).contains(&"V012".to_string()), "{doc}");
    assert_eq!(doc["findings"][0]["pointer"], "/steps/a/guard");
}

#[test]
fn empty_and_huge_event_names_are_v009() {
    let dir = temp_dir("names");
    for (label, name) in [("empty", String::new()), ("long", "e".repeat(10_000))] {
        let body = format!(
            r#"{{"plan_name":"n","graph_type":"acyclic","events":{{"start":{{}},"{name}":{{"kind":"output"}}}},"steps":{{"a":{{"on":["start"],"action":"noop","emits":["{name}"]}}}}}}"#
        );
        let f = write(&dir, &format!("{label}.json"), body.as_bytes());
        let out = weft(&["validate", "--json", &f]);
        assert_eq!(code(&out), 1, "{label}");
        let doc = json(&out);
        assert!(codes(&doc).contains(&"V009".to_string()), "{label}: {doc}");
        // Human output stays readable: the 10,000-character name is truncated.
        let out = weft(&["validate", &f]);
        let text = stdout(&out);
        assert!(text.contains("error[V009 invalid-name]"), "{label}: {text}");
        assert!(
            text.len() < 2_000,
            "{label}: {} bytes of output",
            text.len()
        );
    }
}

#[test]
fn missing_file_and_directories_are_io_failures() {
    let out = weft(&["validate", "no/such/plan.json"]);
    assert_eq!(code(&out), 2);
    assert!(stdout(&out).is_empty());
    let err = stderr(&out);
    assert!(err.contains("cannot open `no/such/plan.json`"), "{err}");

    let out = weft(&["analyze", "examples"]);
    assert_eq!(code(&out), 2);
    assert!(stderr(&out).contains("directory"), "{}", stderr(&out));

    let out = weft(&[
        "validate",
        "--tools",
        "no/such/tools.json",
        "examples/sample.json",
    ]);
    assert_eq!(code(&out), 2);
}

#[test]
fn a_bad_tool_file_is_a_usage_failure() {
    let dir = temp_dir("tools-file");
    let f = write(&dir, "tools.json", br#"{"tools": [{"nom": "x"}]}"#);
    let out = weft(&["validate", "--tools", &f, "examples/sample.json"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("is not a tool description"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn usage_errors_exit_2() {
    for args in [
        &["validate", "--frobnicate", "examples/sample.json"][..],
        &["validate"][..],
        &["explode"][..],
        &[][..],
        &["graph", "examples/sample.json", "--format", "svg"][..],
        &["--max-steps", "many", "validate", "examples/sample.json"][..],
    ] {
        let out = weft(args);
        assert_eq!(code(&out), 2, "{args:?}: {out:?}");
        assert!(!stderr(&out).is_empty(), "{args:?}");
    }
}

#[test]
fn help_documents_limits_and_exit_codes() {
    let out = weft(&["--help"]);
    assert_eq!(code(&out), 0);
    let text = stdout(&out);
    for flag in [
        "--max-plan-bytes",
        "--max-steps",
        "--max-depth",
        "--max-name-len",
        "Exit codes",
    ] {
        assert!(text.contains(flag), "{flag} missing from --help:\n{text}");
    }
}

#[test]
fn stdin_is_read_with_a_dash() {
    use std::io::Write as _;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["validate", "-"])
        .env("NO_COLOR", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    let sample = std::fs::read(common::root().join("examples/sample.json")).expect("read");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(&sample)
        .expect("write");
    let out = child.wait_with_output().expect("wait");
    assert_eq!(code(&out), 0);
    assert!(stdout(&out).contains("<stdin>: valid"), "{}", stdout(&out));
}

#[test]
fn graph_of_a_broken_json_reports_on_stderr() {
    let dir = temp_dir("graph-bad");
    let f = write(&dir, "p.json", b"{");
    let out = weft_in(&dir, &["graph", &f]);
    assert_eq!(code(&out), 1);
    assert!(stdout(&out).is_empty());
    assert!(stderr(&out).contains("L004"), "{}", stderr(&out));
}

#[test]
fn pnml_is_imported_and_analysed() {
    let dir = temp_dir("pnml");
    // Export a broken plan's net, then analyse the PNML: the deadlock survives the round trip.
    let out = weft(&["graph", "examples/broken/deadlock.json", "--format", "pnml"]);
    assert_eq!(code(&out), 0);
    let f = write(&dir, "deadlock.pnml", &out.stdout);
    let out = weft(&["analyze", "--json", &f]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let doc = json(&out);
    assert_eq!(doc["input"], "pnml");
    assert!(codes(&doc).contains(&"A001".to_string()), "{doc}");
    assert_eq!(doc["analysis"]["verdict"], "not_sound");

    // Content starting with `<` is PNML whatever the extension.
    let f = write(
        &dir,
        "net.txt",
        &std::fs::read(common::root().join("examples/workflow.pnml")).expect("read"),
    );
    let out = weft(&["analyze", "--json", &f]);
    assert_eq!(code(&out), 0, "{}", stdout(&out));
    assert_eq!(json(&out)["analysis"]["verdict"], "sound");
}

#[test]
fn bad_pnml_is_a_located_error_not_a_crash() {
    let dir = temp_dir("pnml-bad");
    let cases: [(&str, Vec<u8>); 4] = [
        ("truncated.pnml", b"<pnml><net id=\"n\"".to_vec()),
        ("empty.pnml", b"<pnml/>".to_vec()),
        ("deep.pnml", "<a>".repeat(100_000).into_bytes()),
        (
            "latin1.pnml",
            b"<pnml><net id=\"caf\xe9\"/></pnml>".to_vec(),
        ),
    ];
    for (name, body) in cases {
        let f = write(&dir, name, &body);
        let out = weft(&["analyze", "--json", &f]);
        assert_eq!(code(&out), 1, "{name}: {out:?}");
        let doc = json(&out);
        let c = first_code(&doc);
        assert!(c.starts_with('P') || c.starts_with('L'), "{name}: {doc}");
        assert!(doc["analysis"].is_null(), "{name}");
    }
}

#[test]
fn hostile_expressions_do_not_crash() {
    let dir = temp_dir("hostile-expr");
    let deep_parens = format!("{}true{}", "(".repeat(2_000), ")".repeat(2_000));
    let many_nots = format!("{}true", "!".repeat(200_000));
    let cases = [
        ("guard", deep_parens.clone()),
        ("guard", "!".repeat(4_000) + "true"),
        ("template", many_nots),
        ("template", deep_parens),
    ];
    for (i, (place, expr)) in cases.iter().enumerate() {
        let step = if *place == "guard" {
            serde_json::json!({"on": ["start"], "guard": expr, "action": "noop", "emits": ["done"]})
        } else {
            serde_json::json!({"on": ["start"], "args": {"x": format!("${{{expr}}}")}, "action": "noop", "emits": ["done"]})
        };
        let plan = serde_json::json!({
            "plan_name": "x", "graph_type": "acyclic",
            "events": {"start": {}, "done": {"kind": "output"}},
            "steps": {"a": step}
        });
        let f = write(&dir, &format!("{i}.json"), plan.to_string().as_bytes());
        for cmd in ["validate", "analyze"] {
            let out = weft(&[cmd, "--json", &f]);
            let c = code(&out);
            assert!(c == 0 || c == 1, "{place} #{i} {cmd}: {out:?}");
            let _ = json(&out);
        }
    }
}

#[test]
fn colour_follows_no_color_and_the_flag() {
    use std::process::Command;
    let run = |no_color: bool, args: &[&str]| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
        c.args(args).current_dir(common::root());
        if no_color {
            c.env("NO_COLOR", "");
        } else {
            c.env_remove("NO_COLOR");
        }
        stdout(&c.output().expect("run"))
    };
    let file = "examples/broken/unknown-tool.json";
    // Piped stdout: no colour, with or without NO_COLOR (any value, even empty).
    assert!(!run(false, &["validate", file]).contains('\u{1b}'));
    assert!(!run(true, &["validate", file]).contains('\u{1b}'));
    // Forced on.
    assert!(run(false, &["--color", "always", "validate", file]).contains("\u{1b}["));
    // JSON is never coloured.
    assert!(!run(false, &["--color", "always", "validate", "--json", file]).contains('\u{1b}'));
}
