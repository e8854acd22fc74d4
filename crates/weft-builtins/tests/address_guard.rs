//! `http.request` and the special addresses (loopback, private, link-local with the cloud
//! metadata service, carrier-grade NAT, their IPv4-mapped IPv6 forms): refused under `*`,
//! for literal hosts and for redirect hops alike, before any connection.

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weft_builtins::{HttpConfig, ToolsConfig, host_allowed, register_all};
use weft_tools::{Registry, ToolContext, ToolError};

/// A server on 127.0.0.1 that answers every request with `302` to the path's target:
/// `/to/<url>` redirects to `<url>`. Returns its port and its connection count.
async fn redirector() -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                let mut chunk = [0u8; 1024];
                while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                    match sock.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let head = String::from_utf8_lossy(&buf).to_string();
                let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                let target = path.strip_prefix("/to/").unwrap_or("/");
                let out = format!(
                    "HTTP/1.1 302 Found\r\nlocation: {target}\r\ncontent-length: 0\r\n\
                     connection: close\r\n\r\n"
                );
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (port, connections)
}

fn registry(allow: &[&str]) -> Registry {
    let cfg = ToolsConfig {
        http: HttpConfig {
            allow_hosts: allow.iter().map(|s| s.to_string()).collect(),
            ..HttpConfig::default()
        },
        ..ToolsConfig::default()
    };
    let mut reg = Registry::new();
    register_all(&mut reg, &cfg);
    reg
}

/// Calls `http.request` with `url` and a short time limit: a guard that let the request
/// through would end in `timeout` or `connect`, not in `denied`.
async fn get(reg: &Registry, url: &str) -> Result<Value, ToolError> {
    reg.get("http.request")
        .unwrap()
        .call(
            ToolContext::detached("s"),
            json!({"url": url, "timeout_ms": 3000}),
        )
        .await
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_denied_even_under_a_wildcard() {
    let (port, connections) = redirector().await;
    for allow in [&["127.0.0.1"][..], &["127.0.0.1", "*"][..]] {
        let reg = registry(allow);
        let url = format!("http://127.0.0.1:{port}/to/http://169.254.169.254/latest/meta-data/");
        let e = get(&reg, &url).await.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("denied", false),
            "{allow:?}: {e}"
        );
        assert!(
            e.message.contains("redirect refused")
                && e.message.contains("169.254.169.254")
                && e.message.contains("tools.http.allow_hosts"),
            "{allow:?}: {e}"
        );
    }
    // The first hop was made (the server answered 302 each time); nothing else reached it.
    assert_eq!(connections.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn redirects_to_any_special_literal_are_denied_under_a_wildcard() {
    let (port, _) = redirector().await;
    let reg = registry(&["127.0.0.1", "*"]);
    for (target, class) in [
        ("http://169.254.169.254/latest/meta-data/", "link-local"),
        (
            "http://[::ffff:169.254.169.254]/latest/meta-data/",
            "link-local",
        ),
        // 169.254.169.254 written as one decimal number; URLs normalise it.
        ("http://2852039166/latest/meta-data/", "link-local"),
        ("http://[fe80::1]/", "link-local"),
        ("http://10.0.0.1/", "private"),
        ("http://172.16.0.1/", "private"),
        ("http://172.31.255.255/", "private"),
        ("http://192.168.1.1/", "private"),
        ("http://[fd00::1]/", "private"),
        ("http://[::ffff:10.0.0.1]/", "private"),
        ("http://100.64.0.1/", "carrier-grade NAT"),
        ("http://100.100.100.200/", "carrier-grade NAT"),
        ("http://0.0.0.0/", "unspecified"),
        ("http://127.0.0.2/", "loopback"),
    ] {
        let url = format!("http://127.0.0.1:{port}/to/{target}");
        let e = get(&reg, &url).await.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("denied", false),
            "{target}: {e}"
        );
        assert!(e.message.contains(class), "{target}: {e}");
    }
}

#[tokio::test]
async fn special_literals_are_denied_under_a_wildcard_without_connecting() {
    let reg = registry(&["*", "*.example.com"]);
    for url in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
        "http://[::ffff:a9fe:a9fe]/",
        "http://0xa9.0xfe.0xa9.0xfe/",
        "http://2852039166/",
        "http://169.254.0.1/",
        "http://[fe80::1]/",
        "http://10.255.255.255/",
        "http://172.16.0.0/",
        "http://172.31.255.255/",
        "http://192.168.0.1/",
        "http://[fc00::1]/",
        "http://100.64.0.0/",
        "http://100.127.255.255/",
        "http://0.0.0.0/",
        "http://[::]/",
        "http://127.0.0.1/",
        "http://[::1]/",
    ] {
        let e = get(&reg, url).await.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("denied", false),
            "{url}: {e}"
        );
        assert!(
            e.message
                .contains("listed exactly in tools.http.allow_hosts"),
            "{url}: {e}"
        );
    }
}

#[tokio::test]
async fn localhost_under_a_wildcard_is_refused() {
    let (port, connections) = redirector().await;
    let reg = registry(&["*"]);
    for url in [
        format!("http://localhost:{port}/"),
        format!("http://LOCALHOST.:{port}/"),
        format!("http://api.localhost:{port}/"),
    ] {
        let e = get(&reg, &url).await.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("denied", false),
            "{url}: {e}"
        );
    }
    assert_eq!(connections.load(Ordering::SeqCst), 0);
    // Listed exactly, it is reachable: the redirector answers (a 302 to 127.0.0.1, which
    // is not listed).
    let reg = registry(&["localhost"]);
    let e = get(
        &reg,
        &format!("http://localhost:{port}/to/http://127.0.0.1:{port}/"),
    )
    .await
    .unwrap_err();
    assert!(
        e.code == "denied" && e.message.contains("redirect refused: host `127.0.0.1`"),
        "{e}"
    );
    assert_eq!(connections.load(Ordering::SeqCst), 1);
}

/// The check tenants' `http` tools pass when they are declared (`weft_builtins::host_allowed`).
#[test]
fn declared_hosts_get_the_same_check() {
    let star = vec!["*".to_string()];
    for host in [
        "169.254.169.254",
        "[::ffff:169.254.169.254]",
        "10.0.0.1",
        "172.16.0.1",
        "192.168.0.1",
        "100.64.0.1",
        "[fd00::1]",
        "[fe80::1]",
        "127.0.0.1",
        "localhost",
    ] {
        let e = host_allowed(&star, host).unwrap_err();
        assert!(
            e.contains("listed exactly in tools.http.allow_hosts"),
            "{host}: {e}"
        );
        assert!(
            host_allowed(&["*".into(), host.into()], host).is_ok(),
            "{host}"
        );
    }
    assert!(host_allowed(&star, "172.32.0.0").is_ok());
    assert!(host_allowed(&star, "api.example.com").is_ok());
}
