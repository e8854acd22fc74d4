//! `process.run`: off by default, allowlisted, no shell, timeouts kill, output capped.

use std::sync::Arc;
use std::time::Instant;

use serde_json::{Value, json};
use weft_builtins::{ProcessConfig, ToolsConfig, default_registry, register_all};
use weft_tools::{Registry, ToolError};

use crate::common::{FakeServices, call, ctx_with};

fn registry(allow: &[&str], max_output_bytes: usize) -> Registry {
    let mut reg = Registry::new();
    register_all(
        &mut reg,
        &ToolsConfig {
            process: ProcessConfig {
                enabled: true,
                allow: allow.iter().map(|s| s.to_string()).collect(),
                max_output_bytes,
                ..ProcessConfig::default()
            },
            ..ToolsConfig::default()
        },
    );
    reg
}

async fn run(reg: &Registry, args: Value) -> Result<Value, ToolError> {
    call(
        reg,
        "process.run",
        ctx_with(Arc::new(FakeServices::default()), "k"),
        args,
    )
    .await
}

#[test]
fn disabled_by_default() {
    assert!(default_registry().get("process.run").is_none());
}

#[tokio::test]
async fn an_allowed_command_runs_without_a_shell() {
    let reg = registry(&["/bin/echo", "cat"], 1024);
    let r = run(
        &reg,
        json!({"command": "/bin/echo", "args": ["hello", "$HOME", "; rm -rf /"]}),
    )
    .await
    .unwrap();
    assert_eq!(r["status"], 0);
    assert_eq!(r["stdout"], "hello $HOME ; rm -rf /\n");
    assert_eq!(r["stderr"], "");
    // Bare names are looked up on PATH; stdin is fed.
    let r = run(&reg, json!({"command": "cat", "stdin": "from stdin"}))
        .await
        .unwrap();
    assert_eq!(r["stdout"], "from stdin");
}

#[tokio::test]
async fn commands_not_listed_exactly_are_denied() {
    let reg = registry(&["/bin/echo"], 1024);
    for cmd in ["echo", "/bin/sh", "/bin/../bin/echo", "/bin/echo ", ""] {
        let e = run(&reg, json!({"command": cmd, "args": ["x"]}))
            .await
            .unwrap_err();
        assert_eq!((e.code.as_str(), e.retryable), ("denied", false), "{cmd:?}");
    }
}

#[tokio::test]
async fn a_timeout_kills_the_child() {
    let reg = registry(&["/bin/sleep"], 1024);
    let started = Instant::now();
    let e = run(
        &reg,
        json!({"command": "/bin/sleep", "args": ["5"], "timeout_ms": 100}),
    )
    .await
    .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("timeout", true), "{e}");
    assert!(
        started.elapsed().as_secs() < 4,
        "the call waited for the child"
    );
}

#[tokio::test]
async fn output_is_capped_and_marked() {
    let reg = registry(&["/usr/bin/head", "head"], 100);
    let r = run(
        &reg,
        json!({"command": "head", "args": ["-c", "100000", "/dev/zero"]}),
    )
    .await
    .unwrap();
    assert_eq!(r["stdout"].as_str().unwrap().len(), 100);
    assert_eq!(r["stdout_truncated"], true);
    assert_eq!(r["stderr_truncated"], false);
}

#[tokio::test]
async fn non_zero_exit_is_a_fatal_process_exit() {
    let reg = registry(&["ls"], 1024);
    let e = run(
        &reg,
        json!({"command": "ls", "args": ["/definitely/not/here"]}),
    )
    .await
    .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("process_exit", false),
        "{e}"
    );
    assert!(
        e.message.contains("not/here"),
        "stderr is in the message: {e}"
    );
}

#[tokio::test]
async fn the_environment_is_cleared() {
    // SAFETY-free: tests read the variable only through the child.
    let reg = registry(&["env"], 1 << 20);
    let r = run(&reg, json!({"command": "env"})).await.unwrap();
    let out = r["stdout"].as_str().unwrap();
    assert!(
        out.lines()
            .all(|l| ["PATH=", "HOME=", "LANG=", "LC_ALL=", "TZ="]
                .iter()
                .any(|p| l.starts_with(p))),
        "{out}"
    );
}

#[tokio::test]
async fn hostile_args_are_rejected() {
    let reg = registry(&["/bin/echo", "/no/such/binary"], 1024);
    for args in [
        json!({}),
        json!({"command": 1}),
        json!({"command": "/bin/echo", "args": "x"}),
        json!({"command": "/bin/echo", "args": [1]}),
        json!({"command": "/bin/echo", "args": ["a\u{0}b"]}),
        json!({"command": "/bin/echo", "shell": true}),
        json!({"command": "/bin/echo", "timeout_ms": "1"}),
    ] {
        let e = run(&reg, args).await.unwrap_err();
        assert_eq!(e.code, "args_invalid");
    }
    let e = run(&reg, json!({"command": "/no/such/binary"}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("spawn_failed", false));
}
