//! `weft config` and `weft config --check` on the real binary: the effective configuration
//! with the source of each value, good and bad files, the environment and flags, and a
//! broken `weft.toml` stopping every other command with exit 2. The child's environment
//! keeps no `WEFT_…` variable of the test process, so the snapshots do not depend on it.

mod common;

use std::path::Path;
use std::process::{Command, Output, Stdio};

use common::{code, root, stderr, stdout, temp_dir};

fn weft_env(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_weft"));
    c.args(args)
        .current_dir(dir)
        .env("NO_COLOR", "1")
        .stdin(Stdio::null());
    for (k, _) in std::env::vars() {
        if k.starts_with("WEFT_") || k.starts_with("OTEL_") {
            c.env_remove(k);
        }
    }
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().expect("run weft")
}

fn fixture(name: &str) -> String {
    root()
        .join("crates/weft-cli/tests/fixtures/config")
        .join(name)
        .display()
        .to_string()
}

fn redact(text: &str) -> String {
    text.replace(&root().display().to_string(), "$ROOT")
}

#[test]
fn no_file_prints_every_key_with_its_default() {
    let dir = temp_dir("config-none");
    let o = weft_env(&dir, &["config"], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("store.url = \".weft/weft.db\""), "{out}");
    insta::assert_snapshot!("config_defaults", out);
    let o = weft_env(&dir, &["config", "--check"], &[]);
    assert_eq!(code(&o), 0);
    assert_eq!(stdout(&o), "the configuration: ok\n");
}

#[test]
fn a_good_file_with_the_environment_and_a_flag() {
    let dir = temp_dir("config-good");
    let good = fixture("good.toml");
    let o = weft_env(
        &dir,
        &["--config", &good, "config", "--json"],
        &[("WEFT_STORE_SNAPSHOT_EVERY", "9")],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let key = |k: &str| {
        v["keys"]
            .as_array()
            .and_then(|a| a.iter().find(|e| e["key"] == k))
            .cloned()
            .unwrap_or_else(|| panic!("no key {k}: {v}"))
    };
    assert_eq!(key("store.snapshot_every")["value"], 9);
    assert_eq!(
        key("store.snapshot_every")["source"],
        serde_json::json!({"kind": "env", "name": "WEFT_STORE_SNAPSHOT_EVERY"})
    );
    assert_eq!(key("store.url")["source"]["kind"], "file");
    assert_eq!(key("llm.api_key")["value"], "<secret>");
    assert!(!stdout(&o).contains("sk-not-printed"));
    assert_eq!(key("limits.max_depth")["source"]["kind"], "default");
    assert_eq!(key("tools.email.smtp.host")["source"]["kind"], "unset");
    assert_eq!(
        key("tools.email.smtp.host")["value"],
        serde_json::Value::Null
    );
    assert_eq!(v["findings"], serde_json::json!([]));

    // A flag wins over the file: `serve --listen` is `server.listen`.
    let o = weft_env(
        &dir,
        &["--config", &good, "--max-steps", "12", "config"],
        &[],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    insta::assert_snapshot!("config_good", redact(&stdout(&o)));
}

#[test]
fn check_reports_a_bad_file_in_the_finding_style() {
    let dir = temp_dir("config-bad");
    let bad = fixture("bad.toml");
    let o = weft_env(&dir, &["--config", &bad, "config", "--check"], &[]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    insta::assert_snapshot!("config_bad", redact(&stdout(&o)));
    let o = weft_env(
        &dir,
        &["--config", &bad, "config", "--check", "--json"],
        &[],
    );
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    let mut found: Vec<(&str, &str)> = v["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter_map(|f| Some((f["code"].as_str()?, f["pointer"].as_str()?)))
        .collect();
    found.sort_unstable();
    assert_eq!(
        found,
        [
            ("C003", "/store/snapshot_evry"),
            ("C004", "/server/rate_limit"),
            ("C005", "/server/listen"),
            ("C005", "/store/url"),
        ],
        "{v}"
    );
}

#[test]
fn a_broken_weft_toml_stops_other_commands() {
    let dir = temp_dir("config-broken");
    std::fs::write(dir.join("weft.toml"), "[store\nurl = 1\n").expect("write");
    let o = weft_env(&dir, &["schema"], &[]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    assert!(err.contains("C002"), "{err}");
    assert!(err.contains("invalid_config"), "{err}");
    assert!(stdout(&o).is_empty());
    // An unknown --config file is an error too, not the defaults.
    let o = weft_env(&dir, &["--config", "nope.toml", "tools"], &[]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("C001"), "{}", stderr(&o));
}

#[test]
fn the_configured_store_is_the_one_run_uses() {
    let dir = temp_dir("config-store");
    std::fs::write(
        dir.join("weft.toml"),
        "[store]\nurl = \"sqlite:from-config.db\"\n",
    )
    .expect("write");
    let plan = root().join("examples/sample.json");
    let o = weft_env(&dir, &["run", &plan.display().to_string()], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(dir.join("from-config.db").exists(), "{}", stderr(&o));
    assert!(stderr(&o).contains("journal: instance"), "{}", stderr(&o));
}

/// An MCP server named in `weft.toml` (the MCP test server over stdio): `weft tools` lists its
/// tools with their source, `weft validate` accepts a plan calling one, `weft run` runs it.
#[test]
#[cfg_attr(
    not(weft_mcp),
    ignore = "needs the MCP test server: set WEFT_TEST_MCP_PYTHON (bash scripts/mcp-test-env.sh)"
)]
fn an_mcp_server_in_weft_toml_serves_tools_to_validate_and_run() {
    let python = std::env::var("WEFT_TEST_MCP_PYTHON").expect(
        "WEFT_TEST_MCP_PYTHON was set when this test was built: \
         export WEFT_TEST_MCP_PYTHON=$(bash scripts/mcp-test-env.sh)",
    );
    let server = root().join("python/mcp-test-server/server.py");
    let dir = temp_dir("config-mcp");
    std::fs::write(
        dir.join("weft.toml"),
        format!(
            "[[tools.mcp]]\nname = \"calc\"\ncommand = [{python:?}, {:?}]\n",
            server.display().to_string()
        ),
    )
    .expect("write");
    let plan = serde_json::json!({"plan_name": "sum", "graph_type": "acyclic",
        "events": {"start": {}, "done": {"kind": "output"}},
        "steps": {"add": {"on": ["start"], "action": "calc.add", "args": {"a": 2, "b": 40},
                          "emits": ["done"]}}});
    std::fs::write(dir.join("plan.json"), plan.to_string()).expect("write");
    let o = weft_env(&dir, &["tools"], &[]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let line = stdout(&o)
        .lines()
        .find(|l| l.starts_with("calc.add "))
        .map(str::to_string)
        .unwrap_or_else(|| panic!("no calc.add in:\n{}", stdout(&o)));
    assert!(
        line.contains("mcp (calc)") && line.contains("read"),
        "{line}"
    );
    let o = weft_env(&dir, &["validate", "plan.json"], &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = weft_env(&dir, &["run", "plan.json", "--json"], &[]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).expect("json");
    assert_eq!(v["outcome"], "completed", "{v}");
    assert!(v["results"].to_string().contains("42"), "{v}");
}

/// `weft tools --tenant T` adds the tools T declared through the API, read from the
/// configured store, with their source kind and version; without a store it says what to set.
#[test]
fn tools_lists_a_tenants_api_tools_from_the_store() {
    let dir = temp_dir("tools-tenant");
    let db = dir.join("weft.db");
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = weft_store_sqlite::open(db.to_str().unwrap()).await.unwrap();
        let def = serde_json::json!({"name": "crm.find", "description": "Finds a customer",
            "effect": "read", "idempotent": true, "source": {"kind": "fixed", "result": 1}});
        for (tenant, v) in [("acme", 1), ("acme", 2), ("other", 1)] {
            assert_eq!(
                store
                    .put_tool(tenant, "crm.find", Some(def.clone()), 1)
                    .await
                    .unwrap(),
                v
            );
        }
        store
            .put_tool("acme", "gone", Some(def.clone()), 1)
            .await
            .unwrap();
        store.put_tool("acme", "gone", None, 2).await.unwrap();
    });
    let url = format!("sqlite://{}", db.display());
    let o = weft_env(
        &dir,
        &["tools", "--tenant", "acme"],
        &[("WEFT_STORE_URL", &url)],
    );
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    let line = out.lines().find(|l| l.starts_with("crm.find")).expect(&out);
    assert!(
        line.contains("api (fixed) v2") && line.contains("Finds a customer"),
        "{line}"
    );
    assert!(!out.contains("gone"), "{out}");
    assert!(out.lines().any(|l| l.starts_with("echo")), "{out}");
    let o = weft_env(
        &dir,
        &["tools", "--tenant", "nobody"],
        &[("WEFT_STORE_URL", &url)],
    );
    assert!(!stdout(&o).contains("crm.find"), "{}", stdout(&o));
    let o = weft_env(&dir, &["tools", "--tenant", "acme"], &[]);
    assert_ne!(code(&o), 0);
    assert!(stderr(&o).contains("store.url"), "{}", stderr(&o));
}
