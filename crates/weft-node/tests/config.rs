//! `weft.toml` loading: every layer (defaults, file, environment, flags) with the source of
//! each value, and the findings for files that are unreadable, not TOML, name unknown keys,
//! give values of the wrong kind or values the checks refuse. Snapshots of good and bad
//! files; the environment is a fixed map, never the process's.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use weft_node::{Config, FlagValue, Inputs, Loaded, Openers, Source, load_checked};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn load_with(file: Option<PathBuf>, env: &[(&str, &str)], flags: Vec<FlagValue>) -> Loaded {
    let env: HashMap<String, String> = env
        .iter()
        .map(|(k, v)| ((*k).to_string(), (*v).to_string()))
        .collect();
    let lookup = move |k: &str| env.get(k).cloned();
    let inputs = Inputs {
        file,
        dir: fixture("no-such-dir"),
        env: &lookup,
        flags,
    };
    load_checked(&inputs, &Openers::default())
}

/// Keys that are not defaults, and every finding, as text.
fn render(l: &Loaded) -> String {
    let mut out = String::new();
    for e in l.entries() {
        if let (Some(v), false) = (&e.value, matches!(e.source, Source::Default)) {
            out.push_str(&format!("{} = {v}  # {}\n", e.key, e.source));
        }
    }
    for f in &l.findings {
        out.push_str(&format!(
            "{} {} at `{}`: {}{}\n",
            f.code,
            f.name,
            f.pointer,
            f.message,
            f.hint
                .as_deref()
                .map(|h| format!(" (hint: {h})"))
                .unwrap_or_default()
        ));
    }
    out.replace(env!("CARGO_MANIFEST_DIR"), "$CRATE")
}

#[test]
fn no_file_means_the_embedded_defaults() {
    let l = load_with(None, &[], Vec::new());
    assert!(l.findings.is_empty(), "{:?}", l.findings);
    assert_eq!(l.config, Config::default());
    assert!(l.file.is_none());
    assert_eq!(l.source("store.url"), Some(&Source::Default));
    assert_eq!(l.config.store.url, ".weft/weft.db");
    // Unset optional keys have no entry at all.
    assert_eq!(l.source("llm.base_url"), None);
}

#[test]
fn a_full_file_sets_every_section() {
    let l = load_with(Some(fixture("good.toml")), &[], Vec::new());
    assert!(!l.has_errors(), "{}", render(&l));
    assert_eq!(l.config.store.snapshot_every, 250);
    assert_eq!(l.config.tools.http.allow_hosts.len(), 2);
    assert!(l.config.tools.process.enabled);
    // An integer where a number is expected is taken as one.
    assert!((l.config.server.rate_limit - 50.0).abs() < f64::EPSILON);
    // Secrets are never shown.
    let shown = render(&l);
    assert!(!shown.contains("sk-not-printed"), "{shown}");
    assert!(!shown.contains("tok-a"), "{shown}");
    insta::assert_snapshot!("good", shown);
}

#[test]
fn the_environment_beats_the_file_and_flags_beat_both() {
    let l = load_with(
        Some(fixture("good.toml")),
        &[
            ("WEFT_STORE_SNAPSHOT_EVERY", "7"),
            ("WEFT_STORE_URL", "env.db"),
            (
                "WEFT_TOOLS_HTTP_ALLOW_HOSTS",
                "a.example.com, b.example.com",
            ),
            ("WEFT_LLM_PREFILL_TOOL_CALL", "yes"),
            ("WEFT_API_TOKENS", "legacy=tenant-z"),
            ("WEFT_NOT_A_KEY", "ignored"),
        ],
        vec![FlagValue::new("store.url", "--store", "flag.db")],
    );
    assert!(!l.has_errors(), "{}", render(&l));
    assert_eq!(l.config.store.snapshot_every, 7);
    assert_eq!(
        l.source("store.snapshot_every"),
        Some(&Source::Env("WEFT_STORE_SNAPSHOT_EVERY".into()))
    );
    assert_eq!(l.config.store.url, "flag.db");
    assert_eq!(l.source("store.url"), Some(&Source::Flag("--store".into())));
    assert_eq!(
        l.config.tools.http.allow_hosts,
        ["a.example.com", "b.example.com"]
    );
    assert_eq!(l.config.llm.prefill_tool_call, Some(true));
    // The legacy variable is an environment layer like the key's own variable.
    assert_eq!(
        l.source("server.tokens"),
        Some(&Source::Env("WEFT_API_TOKENS".into()))
    );
    assert_eq!(l.config.store.owner.as_deref(), Some("node-a"));
    insta::assert_snapshot!("layers", render(&l));
}

#[test]
fn the_legacy_tokens_variable_still_sets_the_tokens() {
    let l = load_with(None, &[("WEFT_API_TOKENS", "t=tenant-a")], Vec::new());
    assert!(!l.has_errors(), "{}", render(&l));
    assert_eq!(l.config.server.tokens.as_deref(), Some("t=tenant-a"));
    assert_eq!(
        l.source("server.tokens"),
        Some(&Source::Env("WEFT_API_TOKENS".into()))
    );
}

#[test]
fn unknown_keys_are_errors_with_a_suggestion() {
    let l = load_with(Some(fixture("unknown_key.toml")), &[], Vec::new());
    assert!(l.has_errors());
    let codes: Vec<&str> = l.findings.iter().map(|f| f.code.as_str()).collect();
    assert_eq!(codes, ["C003", "C003"], "{}", render(&l));
    insta::assert_snapshot!("unknown_key", render(&l));
}

#[test]
fn values_of_the_wrong_kind_are_errors() {
    let l = load_with(
        Some(fixture("wrong_type.toml")),
        &[("WEFT_SERVER_BODY_LIMIT", "a lot")],
        Vec::new(),
    );
    assert!(l.has_errors());
    assert!(
        l.findings.iter().all(|f| f.code == "C004"),
        "{}",
        render(&l)
    );
    assert_eq!(l.findings.len(), 5, "{}", render(&l));
    insta::assert_snapshot!("wrong_type", render(&l));
}

#[test]
fn a_syntax_error_names_the_line() {
    let l = load_with(Some(fixture("syntax.toml")), &[], Vec::new());
    assert_eq!(l.findings.len(), 1, "{}", render(&l));
    assert_eq!(l.findings[0].code, "C002");
    assert!(l.findings[0].message.contains("line 3"), "{}", render(&l));
    insta::assert_snapshot!("syntax", render(&l));
}

#[test]
fn checks_refuse_values_that_cannot_work() {
    let l = load_with(Some(fixture("invalid_values.toml")), &[], Vec::new());
    assert!(
        l.findings.iter().all(|f| f.code == "C005"),
        "{}",
        render(&l)
    );
    let keys: Vec<&str> = l.findings.iter().map(|f| f.pointer.as_str()).collect();
    for k in [
        "/store/url",
        "/bus/url",
        "/store/lease_renew_ms",
        "/limits/max_steps",
        "/server/listen",
        "/telemetry/otlp_endpoint",
        "/budget/period_secs",
        "/budget/tenant/max_tool_calls",
        "/budget/planner/calls_per_minute",
    ] {
        assert!(keys.contains(&k), "no finding at {k}: {}", render(&l));
    }
    insta::assert_snapshot!("invalid_values", render(&l));
}

#[test]
fn a_missing_or_hostile_file_is_a_finding_not_a_crash() {
    let l = load_with(Some(fixture("absent.toml")), &[], Vec::new());
    assert_eq!(l.findings[0].code, "C001");
    let dir = std::env::temp_dir().join(format!("weft-node-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("dir");
    let bin = dir.join("binary.toml");
    std::fs::write(&bin, [0xff, 0xfe, 0x00, 0x41]).expect("write");
    assert_eq!(
        load_with(Some(bin), &[], Vec::new()).findings[0].code,
        "C001"
    );
    let huge = dir.join("huge.toml");
    std::fs::write(&huge, "a = 1\n".repeat(300_000)).expect("write");
    let l = load_with(Some(huge), &[], Vec::new());
    assert_eq!(l.findings[0].code, "C001", "{}", render(&l));
    let deep = dir.join("deep.toml");
    std::fs::write(
        &deep,
        format!("x = {}1{}", "[".repeat(5000), "]".repeat(5000)),
    )
    .expect("write");
    let l = load_with(Some(deep), &[], Vec::new());
    assert!(l.has_errors());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn weft_toml_in_the_directory_is_found() {
    let env = |_: &str| None;
    let l = load_checked(
        &Inputs {
            file: None,
            dir: fixture("").join("dir_with_weft_toml"),
            env: &env,
            flags: Vec::new(),
        },
        &Openers::default(),
    );
    assert!(!l.has_errors(), "{}", render(&l));
    assert_eq!(l.config.store.snapshot_every, 5);
    assert_eq!(l.source("store.snapshot_every"), Some(&Source::File));
}
