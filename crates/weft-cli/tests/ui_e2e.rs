//! The web UI end to end in a real browser: starts the real `weft serve` (with an API token, so
//! the UI's token prompt is exercised) on a fresh SQLite store, then runs
//! `node ui-tests/e2e.mjs URL --weft BIN --store DB --token TOKEN`, which drives Debian's
//! headless Chromium through playwright-core (see ui-tests/e2e.mjs for the checks), and asserts
//! it exits 0. Screenshots land in `$WEFT_UI_ARTIFACTS` (default `target/ui-artifacts/`).
//! Ignored unless `WEFT_TEST_BROWSER` was set at build time (`cfg(weft_browser)`, see
//! `build.rs`; `.ci/run` sets it after installing Chromium and `ui-tests/node_modules`); run
//! without `/usr/bin/chromium`, `node` or `ui-tests/node_modules` it fails, naming what is
//! missing.

mod common;

use std::io::{BufRead as _, BufReader, Read as _};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::{root, temp_dir};

const TOKEN: &str = "tok-ui-e2e";

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

#[test]
#[cfg_attr(
    not(weft_browser),
    ignore = "needs Chromium, Node.js and ui-tests/node_modules: install them and set WEFT_TEST_BROWSER=1 (bash .ci/run does)"
)]
fn web_ui_in_headless_chromium() {
    let root = root();
    let missing = missing_prerequisites(&root);
    assert!(
        missing.is_empty(),
        "the browser test needs: {} (or unset WEFT_TEST_BROWSER to have it ignored)",
        missing.join("; ")
    );

    let dir = temp_dir("ui-e2e");
    let db = dir.join("weft.db");
    let bin = env!("CARGO_BIN_EXE_weft");
    let mut child = Command::new(bin)
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(&db)
        .current_dir(&dir)
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

    let mut node = Command::new("node")
        .arg(root.join("ui-tests/e2e.mjs"))
        .arg(&url)
        .arg("--weft")
        .arg(bin)
        .arg("--store")
        .arg(&db)
        .args(["--token", TOKEN])
        .current_dir(&root)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start node ui-tests/e2e.mjs");
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
    let status = status.expect("ui-tests/e2e.mjs did not finish within 600 s");
    assert!(
        status.success(),
        "ui-tests/e2e.mjs failed ({status}):\n{stdout}\n{stderr_node}\nserver log:\n{}",
        server_log.join("\n")
    );
    assert!(
        stdout.contains(" passed, 0 failed"),
        "no summary line:\n{stdout}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
