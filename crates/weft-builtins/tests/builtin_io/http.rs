//! `http.request` against a real HTTP/1.1 server on 127.0.0.1.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use weft_builtins::{HttpConfig, ToolsConfig, register_all};
use weft_tools::Registry;

use crate::common::{FakeServices, call, ctx_with};

#[derive(Debug, Clone)]
struct Seen {
    method: String,
    path: String,
    headers: HashMap<String, String>,
    body: String,
}

struct Server {
    base: String,
    port: u16,
    seen: Arc<Mutex<Vec<Seen>>>,
    connections: Arc<AtomicUsize>,
}

async fn server() -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let connections = Arc::new(AtomicUsize::new(0));
    let (s, c) = (Arc::clone(&seen), Arc::clone(&connections));
    tokio::spawn(async move {
        loop {
            let Ok((sock, _)) = listener.accept().await else {
                return;
            };
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(handle(sock, Arc::clone(&s), port));
        }
    });
    Server {
        base: format!("http://127.0.0.1:{port}"),
        port,
        seen,
        connections,
    }
}

async fn handle(mut sock: TcpStream, seen: Arc<Mutex<Vec<Seen>>>, port: u16) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            return;
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_string();
    let mut lines = head.split("\r\n");
    let mut first = lines.next().unwrap_or("").split(' ');
    let method = first.next().unwrap_or("").to_string();
    let path = first.next().unwrap_or("").to_string();
    let headers: HashMap<String, String> = lines
        .filter_map(|l| l.split_once(": "))
        .map(|(k, v)| (k.to_ascii_lowercase(), v.to_string()))
        .collect();
    let len: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    while buf.len() < head_end + len {
        let n = sock.read(&mut chunk).await.unwrap_or(0);
        if n == 0 {
            break;
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    let body = String::from_utf8_lossy(&buf[head_end..]).to_string();
    seen.lock().unwrap().push(Seen {
        method,
        path: path.clone(),
        headers,
        body: body.clone(),
    });
    let respond = |status: &str, ctype: &str, body: &str, extra: &str| {
        format!(
            "HTTP/1.1 {status}\r\ncontent-type: {ctype}\r\ncontent-length: {}\r\n{extra}connection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let out = match path.as_str() {
        "/json" => respond(
            "200 OK",
            "application/json",
            r#"{"hello":"world","n":1}"#,
            "x-test: a\r\nx-test: b\r\n",
        ),
        "/echo" => respond("200 OK", "application/json; charset=utf-8", &body, ""),
        "/text" => respond("200 OK", "text/plain", "just text", ""),
        "/bad-json" => respond("200 OK", "application/json", "{not json", ""),
        "/500" => respond("500 Internal Server Error", "text/plain", "boom", ""),
        "/429" => respond("429 Too Many Requests", "text/plain", "slow down", ""),
        "/404" => respond("404 Not Found", "text/plain", "nope", ""),
        "/big" => respond("200 OK", "text/plain", &"x".repeat(2048), ""),
        "/big-chunked" => {
            let mut s = String::from(
                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
            );
            for _ in 0..8 {
                s.push_str(&format!("100\r\n{}\r\n", "y".repeat(256)));
            }
            s.push_str("0\r\n\r\n");
            s
        }
        "/redirect-ok" => respond("302 Found", "text/plain", "", "location: /json\r\n"),
        "/redirect-away" => respond(
            "302 Found",
            "text/plain",
            "",
            "location: http://elsewhere.invalid/x\r\n",
        ),
        "/redirect-loopback-name" => respond(
            "302 Found",
            "text/plain",
            "",
            &format!("location: http://localhost:{port}/json\r\n"),
        ),
        "/hang" => {
            // Never answer; hold the connection open until the test ends.
            std::future::pending::<()>().await;
            String::new()
        }
        _ => respond("404 Not Found", "text/plain", "", ""),
    };
    let _ = sock.write_all(out.as_bytes()).await;
    let _ = sock.shutdown().await;
}

fn registry(allow: &[&str]) -> Registry {
    let cfg = ToolsConfig {
        http: HttpConfig {
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
            max_body_bytes: 1024,
            ..HttpConfig::default()
        },
        ..ToolsConfig::default()
    };
    let mut reg = Registry::new();
    register_all(&mut reg, &cfg);
    reg
}

async fn req(reg: &Registry, args: Value) -> Result<Value, weft_tools::ToolError> {
    call(
        reg,
        "http.request",
        ctx_with(Arc::new(FakeServices::default()), "inst-1/step/1"),
        args,
    )
    .await
}

#[tokio::test]
async fn get_json_parses_body_and_joins_repeated_headers() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let r = req(&reg, json!({"url": format!("{}/json", s.base)}))
        .await
        .unwrap();
    assert_eq!(r["status"], 200);
    assert_eq!(r["body"], json!({"hello": "world", "n": 1}));
    assert_eq!(r["headers"]["x-test"], "a, b");
    let seen = s.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.method, "GET");
    assert_eq!(seen.headers["idempotency-key"], "inst-1/step/1");
}

#[tokio::test]
async fn post_json_sends_body_headers_and_idempotency_key() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let r = req(
        &reg,
        json!({"url": format!("{}/echo", s.base), "method": "POST",
               "headers": {"X-Custom": "yes"}, "body": {"a": [1, 2]}}),
    )
    .await
    .unwrap();
    assert_eq!(r["body"], json!({"a": [1, 2]}));
    let seen = s.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.method, "POST");
    assert_eq!(seen.path, "/echo");
    assert_eq!(seen.headers["x-custom"], "yes");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(seen.headers["idempotency-key"], "inst-1/step/1");
    assert_eq!(
        serde_json::from_str::<Value>(&seen.body).unwrap(),
        json!({"a": [1, 2]})
    );
}

#[tokio::test]
async fn caller_idempotency_key_wins_and_string_bodies_are_text() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    req(
        &reg,
        json!({"url": format!("{}/echo", s.base), "method": "PUT",
               "headers": {"idempotency-key": "mine"}, "body": "plain"}),
    )
    .await
    .unwrap();
    let seen = s.seen.lock().unwrap()[0].clone();
    assert_eq!(seen.headers["idempotency-key"], "mine");
    assert_eq!(seen.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(seen.body, "plain");
}

#[tokio::test]
async fn text_and_mislabelled_json_bodies_are_strings() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let r = req(&reg, json!({"url": format!("{}/text", s.base)}))
        .await
        .unwrap();
    assert_eq!(r["body"], "just text");
    let r = req(&reg, json!({"url": format!("{}/bad-json", s.base)}))
        .await
        .unwrap();
    assert_eq!(r["body"], "{not json");
}

#[tokio::test]
async fn server_errors_and_429_are_retryable_client_errors_fatal() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let e = req(&reg, json!({"url": format!("{}/500", s.base)}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("http_status", true));
    assert!(
        e.message.contains("500") && e.message.contains("boom"),
        "{e}"
    );
    let e = req(&reg, json!({"url": format!("{}/429", s.base)}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("http_status", true));
    let e = req(&reg, json!({"url": format!("{}/404", s.base)}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("http_status", false));
}

#[tokio::test]
async fn hosts_not_allowlisted_are_denied_without_connecting() {
    let s = server().await;
    // Loopback only passes when listed exactly: neither `*` nor another name lets it in.
    for allow in [
        &[][..],
        &["*"][..],
        &["localhost"][..],
        &["*.example.com"][..],
    ] {
        let reg = registry(allow);
        let e = req(&reg, json!({"url": format!("{}/json", s.base)}))
            .await
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("denied", false),
            "{allow:?}"
        );
    }
    let reg = registry(&["*"]);
    let e = req(
        &reg,
        json!({"url": format!("http://localhost:{}/json", s.port)}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "denied");
    let e = req(
        &reg,
        json!({"url": format!("http://[::1]:{}/json", s.port)}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "denied");
    let reg = registry(&["*.example.com"]);
    let e = req(&reg, json!({"url": "http://example.com.evil.test/"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "denied");
    let e = req(&reg, json!({"url": "http://example.com/"}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "denied", "a wildcard does not cover the apex");
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn redirects_are_followed_only_to_allowlisted_hosts() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let r = req(&reg, json!({"url": format!("{}/redirect-ok", s.base)}))
        .await
        .unwrap();
    assert_eq!(r["body"]["hello"], "world");
    let e = req(&reg, json!({"url": format!("{}/redirect-away", s.base)}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("denied", false), "{e}");
    let e = req(
        &reg,
        json!({"url": format!("{}/redirect-loopback-name", s.base)}),
    )
    .await
    .unwrap_err();
    assert_eq!(e.code, "denied", "{e}");
}

#[tokio::test]
async fn response_bodies_are_capped() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    for path in ["/big", "/big-chunked"] {
        let e = req(&reg, json!({"url": format!("{}{path}", s.base)}))
            .await
            .unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("body_too_large", false),
            "{path}"
        );
        assert!(e.message.contains("1024"), "{e}");
    }
}

#[tokio::test]
async fn a_server_that_never_answers_times_out() {
    let s = server().await;
    let reg = registry(&["127.0.0.1"]);
    let e = req(
        &reg,
        json!({"url": format!("{}/hang", s.base), "timeout_ms": 100}),
    )
    .await
    .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("timeout", true), "{e}");
}

#[tokio::test]
async fn a_closed_port_is_a_retryable_connect_error() {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    drop(l);
    let reg = registry(&["127.0.0.1"]);
    let e = req(&reg, json!({"url": format!("http://127.0.0.1:{port}/")}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("connect", true), "{e}");
}

#[tokio::test]
async fn hostile_args_get_args_invalid() {
    let reg = registry(&["127.0.0.1"]);
    let huge = "a".repeat(1_000_000);
    for args in [
        json!(null),
        json!("http://x"),
        json!({}),
        json!({"url": 5}),
        json!({"url": "not a url"}),
        json!({"url": "ftp://127.0.0.1/"}),
        json!({"url": "file:///etc/passwd"}),
        json!({"url": "http://127.0.0.1/", "method": "TRACE"}),
        json!({"url": "http://127.0.0.1/", "method": huge}),
        json!({"url": "http://127.0.0.1/", "headers": {"bad name": "x"}}),
        json!({"url": "http://127.0.0.1/", "headers": {"x": "a\r\nb"}}),
        json!({"url": "http://127.0.0.1/", "headers": {"x": 1}}),
        json!({"url": "http://127.0.0.1/", "timeout_ms": -1}),
        json!({"url": "http://127.0.0.1/", "extra": true}),
        json!({"url": format!("http://{huge}/")}),
    ] {
        let e = req(&reg, args.clone()).await.unwrap_err();
        assert!(
            matches!(e.code.as_str(), "args_invalid" | "denied") && !e.retryable,
            "{e} for {}",
            &args.to_string()[..args.to_string().len().min(80)]
        );
    }
}

#[tokio::test]
async fn names_resolving_to_loopback_need_an_exact_entry() {
    // The machine's own host name usually resolves to 127.0.x.1 through /etc/hosts; skip
    // where it does not.
    let Ok(name) = std::fs::read_to_string("/proc/sys/kernel/hostname") else {
        return;
    };
    let name = name.trim().to_string();
    let loopback = tokio::net::lookup_host((name.as_str(), 0))
        .await
        .map(|mut a| a.all(|a| a.ip().is_loopback()))
        .unwrap_or(false);
    if name.is_empty() || !loopback || name == "localhost" {
        return;
    }
    let s = server().await;
    let url = format!("http://{name}:{}/json", s.port);
    let e = req(&registry(&["*"]), json!({"url": url}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("denied", false), "{e}");
    assert_eq!(s.connections.load(Ordering::SeqCst), 0);
    let r = req(&registry(&[name.as_str()]), json!({"url": url}))
        .await
        .unwrap();
    assert_eq!(r["status"], 200);
}
