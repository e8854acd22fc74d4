//! The web UI end to end in a real browser: each test starts the real `weft serve` (with an API
//! token, so the UI's token prompt is exercised) on a fresh SQLite store, then runs a script of
//! `ui-tests/` that drives Debian's headless Chromium through playwright-core, and asserts it
//! exits 0: `e2e.mjs URL --weft BIN --store DB --token TOKEN` (the whole UI, on a server without
//! configuration; see it for the checks) and `quotas.mjs URL --token TOKEN` (the Quotas page,
//! on a server whose `weft.toml` sets `[budget]` quotas). Screenshots land in
//! `$WEFT_UI_ARTIFACTS` (default `target/ui-artifacts/`). Ignored unless `WEFT_TEST_BROWSER`
//! was set at build time (`cfg(weft_browser)`, see `build.rs`; `.ci/run` sets it after
//! installing Chromium and `ui-tests/node_modules`); run without `/usr/bin/chromium`, `node` or
//! `ui-tests/node_modules` it fails, naming what is missing.

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use common::{root, temp_dir};

const TOKEN: &str = "tok-ui-e2e";

/// The quotas `quotas.mjs` expects (it checks the server's answer against them first).
const BUDGET_TOML: &str = r#"[budget]
tenant = { max_tool_calls = 500, max_cost = 50.0 }
plan = { max_tool_calls = 8 }
planner = { max_llm_calls = 20, calls_per_minute = 5 }
period_secs = 604800
"#;

/// Kills the server when the test ends, however it ends.
struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn missing_prerequisites(root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let chromium = std::env::var("WEFT_CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
    if !Path::new(&chromium).exists() {
        missing.push(format!(
            "{chromium} (apt-get install chromium, as .ci/run does)"
        ));
    }
    if !Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        missing.push("node (Node.js >= 20)".into());
    }
    if !root.join("ui-tests/node_modules/playwright-core").is_dir() {
        missing.push("ui-tests/node_modules (cd ui-tests && npm ci, as .ci/run does)".into());
    }
    missing
}

/// Starts `weft serve` in `dir` (where a `weft.toml` is read, if there is one) on the store
/// `db`, with the tenant `tenant-ui` behind [`TOKEN`]; returns it, its URL, and the thread
/// collecting its log.
fn serve(dir: &Path, db: &Path) -> (Server, String, JoinHandle<Vec<String>>) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(db)
        .current_dir(dir)
        .env("WEFT_API_TOKENS", format!("{TOKEN}=tenant-ui"))
        .env("NO_COLOR", "1")
        // The generate check expects the server's answer without a model (503 llm_unavailable).
        .env_remove("WEFT_LLM_BASE_URL")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start weft serve");
    let stderr = child.stderr.take().expect("server stderr");
    let server = Server(child);

    // The server prints `weft: listening on http://ADDR` on stderr; keep forwarding the rest.
    let (tx, rx) = mpsc::channel();
    let log = std::thread::spawn(move || {
        let mut lines = Vec::new();
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(url) = line.split("listening on ").nth(1) {
                let _ = tx.send(url.trim().to_string());
            }
            lines.push(line);
        }
        lines
    });
    let url = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("weft serve printed its address within 60 s");
    (server, url, log)
}

/// Runs `node ui-tests/<script> args…` against `server` and asserts that every check passed.
fn run_script(
    root: &Path,
    script: &str,
    args: &[&std::ffi::OsStr],
    server: Server,
    log: JoinHandle<Vec<String>>,
) {
    let mut node = Command::new("node")
        .arg(root.join("ui-tests").join(script))
        .args(args)
        .current_dir(root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("start node ui-tests/{script}: {e}"));
    let mut out = node.stdout.take().expect("node stdout");
    let mut err = node.stderr.take().expect("node stderr");
    let out_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err_t = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    // The script bounds each of its waits; this is only a backstop against a hung browser.
    let deadline = Instant::now() + Duration::from_secs(600);
    let status = loop {
        if let Some(s) = node.try_wait().expect("wait for node") {
            break Some(s);
        }
        if Instant::now() > deadline {
            let _ = node.kill();
            let _ = node.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let stdout = out_t.join().unwrap_or_default();
    let stderr_node = err_t.join().unwrap_or_default();
    println!("{stdout}");
    eprintln!("{stderr_node}");
    drop(server);
    let server_log = log.join().unwrap_or_default();
    let status = status.unwrap_or_else(|| panic!("ui-tests/{script} did not finish within 600 s"));
    assert!(
        status.success(),
        "ui-tests/{script} failed ({status}):\n{stdout}\n{stderr_node}\nserver log:\n{}",
        server_log.join("\n")
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "no summary line:\n{stdout}"
    );
}

fn prerequisites() -> std::path::PathBuf {
    let root = root();
    let missing = missing_prerequisites(&root);
    assert!(
        missing.is_empty(),
        "the browser test needs: {} (or unset WEFT_TEST_BROWSER to have it ignored)",
        missing.join("; ")
    );
    root
}

#[test]
#[cfg_attr(
    not(weft_browser),
    ignore = "needs Chromium, Node.js and ui-tests/node_modules: install them and set WEFT_TEST_BROWSER=1 (bash .ci/run does)"
)]
fn web_ui_in_headless_chromium() {
    let root = prerequisites();
    let dir = temp_dir("ui-e2e");
    let db = dir.join("weft.db");
    let (server, url, log) = serve(&dir, &db);
    let bin = env!("CARGO_BIN_EXE_weft");
    run_script(
        &root,
        "e2e.mjs",
        &[
            url.as_ref(),
            "--weft".as_ref(),
            bin.as_ref(),
            "--store".as_ref(),
            db.as_os_str(),
            "--token".as_ref(),
            TOKEN.as_ref(),
        ],
        server,
        log,
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[cfg_attr(
    not(weft_browser),
    ignore = "needs Chromium, Node.js and ui-tests/node_modules: install them and set WEFT_TEST_BROWSER=1 (bash .ci/run does)"
)]
fn quotas_page_in_headless_chromium() {
    let root = prerequisites();
    let dir = temp_dir("ui-quotas");
    std::fs::write(dir.join("weft.toml"), BUDGET_TOML).expect("write weft.toml");
    let db = dir.join("weft.db");
    let (server, url, log) = serve(&dir, &db);
    run_script(
        &root,
        "quotas.mjs",
        &[url.as_ref(), "--token".as_ref(), TOKEN.as_ref()],
        server,
        log,
    );
    let _ = std::fs::remove_dir_all(&dir);
}
