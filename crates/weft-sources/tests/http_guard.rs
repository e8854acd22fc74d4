//! Declared `http` sources and the address guard: a redirect to the cloud metadata service or
//! to another loopback service is refused (`denied`) unless the source names the host in its
//! `allow_hosts`, and the redirect target is never contacted. (A *name* resolving to such an
//! address is tested beside the source, `src/http.rs`, with fixed DNS answers.)

#![allow(clippy::unwrap_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use weft_sources::declare;
use weft_tools::{Tool, ToolContext};

/// A server on 127.0.0.1 answering every request with `status` and `location` (a 3xx), or
/// `{"ok": true}` when `location` is empty. Returns its port and its connection count.
async fn server(status: u16, location: String) -> (u16, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let connections = Arc::new(AtomicUsize::new(0));
    let c = Arc::clone(&connections);
    tokio::spawn(async move {
        while let Ok((mut sock, _)) = listener.accept().await {
            c.fetch_add(1, Ordering::SeqCst);
            let location = location.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = sock.read(&mut buf).await;
                let out = if location.is_empty() {
                    "HTTP/1.1 200 OK\r\ncontent-length: 12\r\nconnection: close\r\n\r\n{\"ok\": true}"
                        .to_string()
                } else {
                    format!(
                        "HTTP/1.1 {status} Moved\r\nlocation: {location}\r\ncontent-length: 0\r\n\
                         connection: close\r\n\r\n"
                    )
                };
                let _ = sock.write_all(out.as_bytes()).await;
                let _ = sock.shutdown().await;
            });
        }
    });
    (port, connections)
}

fn tool(url: String, allow: &[&str]) -> weft_sources::DeclaredTool {
    declare(
        &serde_json::from_value(json!({"name": "facts", "timeout_ms": 5_000,
            "source": {"kind": "http", "url": url, "allow_hosts": allow}}))
        .unwrap(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_redirect_to_the_metadata_address_is_denied() {
    for target in [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::ffff:169.254.169.254]/latest/meta-data/",
    ] {
        let (port, _) = server(302, target.to_string()).await;
        let t = tool(format!("http://127.0.0.1:{port}/facts"), &[]);
        let e = t
            .call(ToolContext::detached("s"), json!({}))
            .await
            .unwrap_err();
        assert_eq!(e.code, "denied", "{target}: {e}");
        assert!(!e.retryable);
        assert!(
            e.message.contains("link-local")
                && e.message.contains("metadata")
                && e.message
                    .contains("the source's allow_hosts (tool `facts`)"),
            "{target}: {e}"
        );
    }
}

#[tokio::test]
async fn a_redirect_to_another_loopback_service_is_denied_unless_named() {
    let (inner, inner_connections) = server(200, String::new()).await;
    for target in [
        format!("http://127.0.0.2:{inner}/admin"),
        format!("http://localhost:{inner}/admin"),
    ] {
        let (port, _) = server(307, target.clone()).await;
        let t = tool(format!("http://127.0.0.1:{port}/facts"), &[]);
        let e = t
            .call(ToolContext::detached("s"), json!({}))
            .await
            .unwrap_err();
        assert_eq!(e.code, "denied", "{target}: {e}");
        assert!(
            e.message.contains("loopback") && e.message.contains("allow_hosts = ["),
            "{target}: {e}"
        );
    }
    assert_eq!(inner_connections.load(Ordering::SeqCst), 0);

    // Named, the redirect is not refused by the guard; it is not followed either (declared
    // sources follow no redirect): the answer is the 3xx itself.
    let (port, _) = server(307, format!("http://localhost:{inner}/admin")).await;
    let t = tool(format!("http://127.0.0.1:{port}/facts"), &["localhost"]);
    let e = t
        .call(ToolContext::detached("s"), json!({}))
        .await
        .unwrap_err();
    assert_eq!(e.code, "http_status", "{e}");
    assert_eq!(inner_connections.load(Ordering::SeqCst), 0);
}
