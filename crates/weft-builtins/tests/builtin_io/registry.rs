//! `register_all` registers exactly the built-ins `builtin_tools.json` describes (less the
//! LLM tools), each with the spec from that file.

use weft_builtins::{ProcessConfig, ToolsConfig, register_all};
use weft_core::catalog::{StaticCatalog, ToolCatalog};
use weft_tools::Registry;

#[test]
fn every_builtin_spec_is_registered_and_nothing_else() {
    let mut reg = Registry::new();
    register_all(
        &mut reg,
        &ToolsConfig {
            process: ProcessConfig {
                enabled: true,
                ..ProcessConfig::default()
            },
            ..ToolsConfig::default()
        },
    );
    let catalog = StaticCatalog::builtin();
    let mut want: Vec<&str> = catalog
        .names()
        .into_iter()
        .filter(|n| !matches!(*n, "llm.complete" | "agent.react"))
        .collect();
    let mut have = reg.names();
    want.sort_unstable();
    have.sort_unstable();
    assert_eq!(have, want);
    for name in have {
        assert_eq!(reg.spec(name), catalog.spec(name), "{name}");
    }
}

#[test]
fn tools_config_reads_from_json_with_defaults() {
    let cfg: ToolsConfig = serde_json::from_value(serde_json::json!({
        "http": {"allow_hosts": ["api.example.com", "*.example.org"]},
        "email": {"smtp": {"host": "smtp.example.com", "username": "u", "password": "p"}},
        "process": {"enabled": true, "allow": ["/bin/echo"]}
    }))
    .unwrap();
    assert_eq!(cfg.http.max_body_bytes, 10 * 1024 * 1024);
    assert_eq!(cfg.email.outbox_dir, std::path::Path::new(".weft/outbox"));
    assert!(cfg.process.enabled);
    let bad = serde_json::from_value::<ToolsConfig>(serde_json::json!({"htp": {}}));
    assert!(bad.is_err(), "unknown keys are errors");
}
