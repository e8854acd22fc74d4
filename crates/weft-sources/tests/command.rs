//! The `command` source against real programs: shell and Python scripts the tests write into
//! a temporary directory and run through the source (no mocks).

#![allow(clippy::unwrap_used)]

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use weft_sources::{DeclaredTool, ToolDef, declare};
use weft_tools::{NoServices, Tool, ToolContext, ToolError};

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("weft-command-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// Writes an executable script.
fn script(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    p
}

/// The real Python interpreter (not a version manager's shim).
fn python() -> String {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sys; print(sys.executable)"])
        .output()
        .expect("python3 is on the machine");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

fn def(source: Value, extra: Value) -> ToolDef {
    let mut src = json!({"kind": "command"});
    for (k, v) in source.as_object().unwrap() {
        src[k] = v.clone();
    }
    let mut d = json!({"name": "run", "effect": "write", "timeout_ms": 20_000, "source": src});
    for (k, v) in extra.as_object().unwrap() {
        d[k] = v.clone();
    }
    serde_json::from_value(d).unwrap()
}

fn tool(source: Value, extra: Value) -> DeclaredTool {
    declare(&def(source, extra)).unwrap()
}

fn build_error(source: Value) -> String {
    declare(&def(source, json!({})))
        .map(|_| ())
        .unwrap_err()
        .to_string()
}

fn ctx() -> ToolContext {
    ToolContext {
        tenant: Arc::from("acme"),
        instance: Arc::from("inst-9"),
        plan: Arc::from("tools"),
        step: Arc::from("summarize"),
        idempotency_key: Arc::from("inst-9/summarize/3"),
        attempt: 1,
        deadline: None,
        inputs: Arc::new(Vec::new()),
        services: Arc::new(NoServices),
    }
}

async fn fails(t: &DeclaredTool, args: Value) -> ToolError {
    t.call(ctx(), args).await.unwrap_err()
}

/// Whether process `pid` is gone (or a zombie: dead, not yet reaped by its parent).
fn gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(s) => s.rsplit(')').next().unwrap().trim_start().starts_with('Z'),
    }
}

async fn wait_gone(pid: u32) -> bool {
    for _ in 0..100 {
        if gone(pid) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

fn read_pid(p: &Path) -> u32 {
    std::fs::read_to_string(p).unwrap().trim().parse().unwrap()
}

async fn wait_for_file(p: &Path) {
    for _ in 0..200 {
        if std::fs::metadata(p).is_ok_and(|m| m.len() > 0) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    panic!("{} never appeared", p.display());
}

const PY_ECHO: &str = r#"
import json, os, sys
if not os.environ.get("WEFT_IDEMPOTENCY_KEY"):
    print("WEFT_IDEMPOTENCY_KEY is not set", file=sys.stderr)
    sys.exit(3)
args = json.load(sys.stdin)
allowed, denied = sys.argv[1], sys.argv[2]
print(json.dumps({
    "got": args,
    "argv": sys.argv[1:],
    "key": os.environ["WEFT_IDEMPOTENCY_KEY"],
    "instance": os.environ.get("WEFT_INSTANCE"),
    "step": os.environ.get("WEFT_STEP"),
    "attempt": os.environ.get("WEFT_ATTEMPT"),
    "allowed": os.environ.get(allowed),
    "denied_present": denied in os.environ,
    # Python itself adds LC_CTYPE when it coerces the C locale.
    "env": sorted(k for k in os.environ if k != "LC_CTYPE"),
    "cwd": os.getcwd(),
}))
"#;

/// Two variables of this process: one to pass through, one that must not arrive.
fn two_vars() -> (String, String, String) {
    let mut vars = std::env::vars().filter(|(k, v)| {
        !k.starts_with("WEFT_") && !k.is_empty() && !v.is_empty() && k != "LC_CTYPE"
    });
    let (allowed, value) = vars.next().expect("the test process has an environment");
    let (denied, _) = vars.next().expect("the test process has two variables");
    (allowed, value, denied)
}

#[tokio::test]
async fn a_python_tool_gets_the_args_on_stdin_and_only_the_allowed_environment() {
    let dir = scratch("python-echo");
    let py = script(&dir, "echo.py", &format!("#!{}\n{PY_ECHO}", python()));
    let (allowed, value, denied) = two_vars();
    let t = tool(
        json!({"program": py, "args": [allowed, denied], "env": [allowed], "cwd": dir}),
        json!({}),
    );
    assert_eq!(
        t.source(),
        format!("command {} {allowed} {denied}", py.display())
    );
    let args = json!({"text": "Ada wrote the first program", "n": [1, 2.5, null]});
    let r = t.call(ctx(), args.clone()).await.unwrap();
    assert_eq!(r["got"], args);
    assert_eq!(r["argv"], json!([allowed, denied]));
    assert_eq!(r["key"], "inst-9/summarize/3");
    assert_eq!(r["instance"], "inst-9");
    assert_eq!(r["step"], "summarize");
    assert_eq!(r["attempt"], "1");
    assert_eq!(r["allowed"], json!(value));
    assert_eq!(r["denied_present"], json!(false), "{denied} leaked");
    let mut expected = vec![
        allowed.clone(),
        "WEFT_ATTEMPT".into(),
        "WEFT_IDEMPOTENCY_KEY".into(),
        "WEFT_INSTANCE".into(),
        "WEFT_STEP".into(),
    ];
    expected.sort();
    assert_eq!(r["env"], json!(expected), "nothing else is inherited");
    assert_eq!(
        r["cwd"],
        json!(std::fs::canonicalize(&dir).unwrap().display().to_string())
    );
}

#[tokio::test]
async fn a_shell_tool_found_relative_to_its_cwd() {
    let dir = scratch("shell-echo");
    script(
        &dir,
        "echo.sh",
        "#!/bin/sh\ninput=$(cat)\nprintf '{\"args\": %s, \"key\": \"%s\"}\\n' \"$input\" \"$WEFT_IDEMPOTENCY_KEY\"\n",
    );
    let t = tool(json!({"program": "./echo.sh", "cwd": dir}), json!({}));
    assert_eq!(t.source(), "command ./echo.sh");
    let r = t.call(ctx(), json!({"a": "b"})).await.unwrap();
    assert_eq!(r, json!({"args": {"a": "b"}, "key": "inst-9/summarize/3"}));

    // A bare name comes from weft's PATH.
    let sh = tool(json!({"program": "sh", "args": ["-c", "cat"]}), json!({}));
    assert_eq!(sh.source(), "command sh -c cat");
    assert_eq!(
        sh.call(ctx(), json!([1, "two"])).await.unwrap(),
        json!([1, "two"])
    );
}

/// Args of any size reach the program whole: a small one is in the pipe before the child
/// starts, a large one (over what a pipe holds) is finished by the call while the child reads.
#[tokio::test]
async fn args_of_any_size_reach_the_program_whole() {
    let echo = tool(
        json!({"program": "/bin/cat", "max_output_bytes": 4_000_000}),
        json!({}),
    );
    for len in [0, 10, 65_536, 3_000_000] {
        let text: String = (0..len)
            .map(|i| char::from(b'a' + (i % 26) as u8))
            .collect();
        let args = json!({"text": text});
        let got = echo.call(ctx(), args.clone()).await.unwrap();
        assert!(got == args, "{len} characters came back changed");
    }
}

#[tokio::test]
async fn output_that_is_not_one_json_value_is_fatal() {
    let dir = scratch("bad-json");
    for (name, body, shows) in [
        (
            "prose.sh",
            "echo 'here is your answer: {'",
            "here is your answer",
        ),
        (
            "two.sh",
            "echo '{\"a\": 1}'; echo '{\"b\": 2}'",
            "{\"b\": 2}",
        ),
        ("nothing.sh", "exit 0", "EOF"),
    ] {
        let p = script(&dir, name, &format!("#!/bin/sh\ncat >/dev/null\n{body}\n"));
        let t = tool(
            json!({"program": p}),
            json!({"retry": {"max": 2, "backoff_ms": 1}}),
        );
        let e = fails(&t, json!({})).await;
        assert_eq!(e.code, "command_bad_output", "{name}: {e}");
        assert!(!e.retryable);
        assert!(e.message.contains(shows), "{name}: {e}");
    }
}

#[tokio::test]
async fn a_failing_exit_carries_the_end_of_stderr_and_is_retried_only_when_declared() {
    let dir = scratch("exit");
    let count = dir.join("count");
    let p = script(
        &dir,
        "fail.sh",
        &format!(
            "#!/bin/sh\necho run >> '{}'\ni=0\nwhile [ $i -lt 300 ]; do echo \"noise line $i\" >&2; i=$((i+1)); done\necho 'fatal: disk full' >&2\nexit 3\n",
            count.display()
        ),
    );
    let runs = || {
        std::fs::read_to_string(&count)
            .unwrap_or_default()
            .lines()
            .count()
    };
    // Not declared retryable: one run, fatal, whatever the retry setting.
    let t = tool(
        json!({"program": p}),
        json!({"retry": {"max": 2, "backoff_ms": 1}}),
    );
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "command_failed");
    assert!(!e.retryable);
    assert!(e.message.contains("status 3"), "{e}");
    assert!(
        e.message.contains("fatal: disk full"),
        "the end of stderr: {e}"
    );
    let excerpt = e.message.split("status 3: ").nth(1).unwrap();
    assert!(
        excerpt.chars().count() <= 512,
        "{}",
        excerpt.chars().count()
    );
    assert!(excerpt.starts_with('…'), "{excerpt}");
    assert_eq!(runs(), 1);

    // Declared: retried (3 runs in all), and the last failure is retryable.
    let t = tool(
        json!({"program": p, "retry_on_exit": [75, 3]}),
        json!({"retry": {"max": 2, "backoff_ms": 1}}),
    );
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "command_failed");
    assert!(e.retryable);
    assert_eq!(runs(), 4);
}

#[tokio::test]
async fn a_hang_past_the_timeout_kills_the_child_and_what_it_started() {
    let dir = scratch("hang");
    let p = script(
        &dir,
        "hang.sh",
        &format!(
            "#!/bin/sh\necho $$ > '{d}/pid'\nsleep 1000 &\necho $! > '{d}/grandchild'\nwait\n",
            d = dir.display()
        ),
    );
    let t = tool(json!({"program": p}), json!({"timeout_ms": 500}));
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "timeout", "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let pid = read_pid(&dir.join("pid"));
    let grandchild = read_pid(&dir.join("grandchild"));
    assert!(wait_gone(pid).await, "the child {pid} still runs");
    assert!(
        wait_gone(grandchild).await,
        "the child's child {grandchild} still runs"
    );
}

#[tokio::test]
async fn an_abandoned_call_kills_the_child() {
    let dir = scratch("abandoned");
    let p = script(
        &dir,
        "hang.sh",
        &format!(
            "#!/bin/sh\necho $$ > '{}/pid'\nexec sleep 1000\n",
            dir.display()
        ),
    );
    let t = tool(json!({"program": p}), json!({}));
    let call = t.call(ctx(), json!({}));
    let pid_file = dir.join("pid");
    let watch = async {
        wait_for_file(&pid_file).await;
    };
    tokio::select! {
        _ = call => panic!("the call cannot finish"),
        () = watch => {}
    }
    // `select!` dropped the call's future.
    let pid = read_pid(&pid_file);
    assert!(wait_gone(pid).await, "the child {pid} still runs");
}

#[tokio::test]
async fn an_output_flood_is_cut_at_the_cap_and_the_child_killed() {
    let dir = scratch("flood");
    let p = script(
        &dir,
        "flood.sh",
        &format!(
            "#!/bin/sh\necho $$ > '{}/pid'\nwhile :; do echo '\"yyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyyy\"'; done\n",
            dir.display()
        ),
    );
    let t = tool(
        json!({"program": p, "max_output_bytes": 64 * 1024}),
        json!({"timeout_ms": 30_000}),
    );
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "command_output_too_large", "{e}");
    assert!(!e.retryable);
    assert!(e.message.contains("65536"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(10),
        "{:?}",
        start.elapsed()
    );
    let pid = read_pid(&dir.join("pid"));
    assert!(
        gone(pid),
        "the flooding child {pid} was killed before the call returned"
    );
}

const PY_HOG: &str = r#"
import json, sys
json.load(sys.stdin)
block = bytearray(256 * 1024 * 1024)
print(json.dumps({"allocated": len(block)}))
"#;

#[tokio::test]
async fn a_memory_hog_fails_under_memory_mb() {
    let dir = scratch("hog");
    let p = script(&dir, "hog.py", &format!("#!{}\n{PY_HOG}", python()));
    // Unlimited, it works (so the failure below is the limit's doing).
    let free = tool(json!({"program": p}), json!({}));
    assert_eq!(
        free.call(ctx(), json!({})).await.unwrap(),
        json!({"allocated": 256 * 1024 * 1024})
    );
    let limited = tool(json!({"program": p, "memory_mb": 96}), json!({}));
    let e = fails(&limited, json!({})).await;
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(e.message.contains("MemoryError"), "{e}");
}

#[tokio::test]
async fn a_cpu_burner_is_stopped_by_cpu_seconds() {
    let dir = scratch("burner");
    let p = script(
        &dir,
        "burn.py",
        &format!("#!{}\nwhile True:\n    pass\n", python()),
    );
    let t = tool(
        json!({"program": p, "cpu_seconds": 1}),
        json!({"timeout_ms": 30_000}),
    );
    let start = Instant::now();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "command_failed", "{e}");
    assert!(e.message.contains("killed"), "{e}");
    assert!(
        start.elapsed() < Duration::from_secs(20),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn programs_that_cannot_run_do_not_build() {
    let dir = scratch("missing");
    let e = build_error(json!({"program": "/nonexistent/weft-tool"}));
    assert!(
        e.contains("/nonexistent/weft-tool") && e.contains("does not exist"),
        "{e}"
    );
    let e = build_error(json!({"program": "weft-surely-not-a-program"}));
    assert!(
        e.contains("weft-surely-not-a-program") && e.contains("PATH"),
        "{e}"
    );
    let plain = dir.join("plain.txt");
    std::fs::write(&plain, "not a program").unwrap();
    let e = build_error(json!({"program": plain}));
    assert!(e.contains("not an executable"), "{e}");
    let e = build_error(json!({"program": "sh", "cwd": dir.join("nowhere")}));
    assert!(e.contains("not a directory"), "{e}");
    let e = build_error(json!({"program": "sh", "env": ["A=B"]}));
    assert!(e.contains("A=B"), "{e}");
    let e = build_error(json!({"program": "sh", "max_output_bytes": 0}));
    assert!(e.contains("max_output_bytes"), "{e}");

    let unknown: Result<ToolDef, _> = serde_json::from_value(json!({"name": "x",
        "source": {"kind": "command", "program": "sh", "shell": true}}));
    assert!(unknown.unwrap_err().to_string().contains("shell"));
    let d = def(json!({"program": "sh"}), json!({}));
    let weft_sources::SourceDef::Command(c) = &d.source else {
        panic!("{d:?}")
    };
    assert_eq!(d.source.kind(), "command");
    assert_eq!(c.max_output_bytes, 1024 * 1024);
    assert!(c.env.is_empty() && c.retry_on_exit.is_empty() && c.memory_mb.is_none());
}

#[tokio::test]
async fn a_program_removed_after_the_build_fails_the_call_clearly() {
    let dir = scratch("removed");
    let p = script(&dir, "gone.sh", "#!/bin/sh\necho 1\n");
    let t = tool(json!({"program": p}), json!({}));
    std::fs::remove_file(&p).unwrap();
    let e = fails(&t, json!({})).await;
    assert_eq!(e.code, "command_not_found", "{e}");
    assert!(e.message.contains("gone.sh"), "{e}");
}

/// The limits are the child's own, set between clone and exec: no helper program is needed
/// (this runs in a child process of this test binary with an empty PATH).
#[test]
fn limits_are_set_without_any_program_on_path() {
    let empty = std::env::temp_dir().join(format!("weft-command-{}-nopath", std::process::id()));
    if std::env::var_os("WEFT_TEST_EMPTY_PATH").is_none() {
        std::fs::create_dir_all(&empty).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["limits_are_set_without_any_program_on_path", "--exact"])
            .env("WEFT_TEST_EMPTY_PATH", "1")
            .env("PATH", &empty)
            .output()
            .unwrap();
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(out.status.success(), "{text}");
        assert!(text.contains("1 passed"), "{text}");
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let t = tool(
        json!({"program": "/bin/sh", "args": ["-c", "printf '[%s,%s]' $(ulimit -v) $(ulimit -t)"],
            "memory_mb": 64, "cpu_seconds": 5}),
        json!({}),
    );
    let got = rt.block_on(t.call(ctx(), json!({}))).unwrap();
    assert_eq!(got, json!([64 * 1024, 5]));
}
