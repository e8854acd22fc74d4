//! `weft serve` as a process: prints the bound address for `--listen 127.0.0.1:0`, answers
//! HTTP, requires tokens when configured, refuses a non-loopback address without tokens,
//! recovers a running instance after a restart, and stops cleanly on SIGTERM.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Server {
    child: Child,
    addr: String,
    stderr: std::sync::mpsc::Receiver<String>,
}

fn start(dir: &std::path::Path, env: &[(&str, &str)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_weft"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(dir.join("weft.db"))
        .current_dir(dir)
        .env_remove("WEFT_API_TOKENS")
        .env_remove("WEFT_LLM_BASE_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("spawn weft serve");
    let err = child.stderr.take().expect("stderr");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let Ok(line) = rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) else {
            let _ = child.kill();
            let _ = child.wait();
            panic!("weft serve printed no address");
        };
        if let Some(a) = line.strip_prefix("weft: listening on http://") {
            return Server {
                child,
                addr: a.trim().to_string(),
                stderr: rx,
            };
        }
    }
}

impl Drop for Server {
    /// A failed test must not leave its server running.
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// One HTTP/1.1 request; returns (status, body).
fn http(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> (u16, String) {
    let mut s = TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(Duration::from_secs(10)))
        .expect("timeout");
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\ncontent-length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    req.push_str(body);
    s.write_all(req.as_bytes()).expect("write");
    let mut out = String::new();
    s.read_to_string(&mut out).expect("read");
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = out
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

fn sigterm_and_wait(mut srv: Server) -> Vec<String> {
    let pid = srv.child.id().to_string();
    let ok = Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .expect("kill");
    assert!(ok.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(st) = srv.child.try_wait().expect("wait") {
            assert!(st.success(), "exit {st:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "weft serve did not stop on SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    srv.stderr.try_iter().collect()
}

#[test]
fn serve_answers_and_stops_on_sigterm_keeping_instances() {
    let dir = tempfile_dir("plain");
    let srv = start(&dir, &[]);
    let (st, body) = http(&srv.addr, "GET", "/healthz", &[], "");
    assert_eq!((st, body.as_str()), (200, "{\"status\":\"ok\"}"));
    let (st, body) = http(&srv.addr, "GET", "/openapi.json", &[], "");
    assert_eq!(st, 200);
    assert!(body.contains("\"openapi\":\"3.1"), "{body}");
    // A reactive instance keeps waiting across a restart.
    let plan = r#"{"plan_name":"ticker","graph_type":"reactive","events":{"tick":{"kind":"input"},"seen":{"kind":"output"}},"steps":{"count":{"on":["tick"],"action":"echo","args":{"n":"${tick.n}"},"emits":["seen"]}}}"#;
    let ct = [("content-type", "application/json")];
    let (st, body) = http(
        &srv.addr,
        "POST",
        "/v1/instances",
        &ct,
        &format!("{{\"plan_inline\":{plan}}}"),
    );
    assert_eq!(st, 201, "{body}");
    assert!(body.contains("\"id\":\"i"), "{body}");
    let id = body
        .split("\"id\":\"")
        .nth(1)
        .and_then(|r| r.split('"').next())
        .expect("id")
        .to_string();
    let lines = sigterm_and_wait(srv);
    assert!(
        lines.iter().any(|l| l.contains("weft: stopped")),
        "{lines:?}"
    );

    let srv = start(&dir, &[]);
    let ev = format!(
        r#"{{"specversion":"1.0","id":"e1","source":"/t","type":"tick","data":{{"n":1}},"weftinstance":"{id}"}}"#
    );
    let (st, body) = http(
        &srv.addr,
        "POST",
        "/v1/events",
        &[("content-type", "application/cloudevents+json")],
        &ev,
    );
    assert_eq!(
        (st, body.as_str()),
        (202, "{\"accepted\":1,\"routed\":1,\"duplicates\":0}")
    );
    sigterm_and_wait(srv);
}

#[test]
fn serve_with_tokens_requires_them() {
    let dir = tempfile_dir("tokens");
    let srv = start(&dir, &[("WEFT_API_TOKENS", "secret=team-a")]);
    assert_eq!(http(&srv.addr, "GET", "/v1/plans", &[], "").0, 401);
    let (st, body) = http(
        &srv.addr,
        "GET",
        "/v1/plans",
        &[("authorization", "Bearer secret")],
        "",
    );
    assert_eq!((st, body.as_str()), (200, "{\"plans\":[]}"));
    sigterm_and_wait(srv);
}

#[test]
fn serve_refuses_a_public_address_without_tokens() {
    let dir = tempfile_dir("public");
    let out = Command::new(env!("CARGO_BIN_EXE_weft"))
        .args(["serve", "--listen", "0.0.0.0:0", "--store"])
        .arg(dir.join("weft.db"))
        .env_remove("WEFT_API_TOKENS")
        .output()
        .expect("run");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    // Refused by the configuration check, before anything is opened.
    assert!(err.contains("C005"), "{err}");
    assert!(err.contains("only listens on a loopback address"), "{err}");
    assert!(!dir.join("weft.db").exists(), "nothing is opened: {err}");
}

fn tempfile_dir(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!(
        "weft-serve-test-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default()
    ));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}
