//! `send_email`: idempotent outbox delivery, address checks, and SMTP against a minimal
//! local relay.

use std::sync::{Arc, Mutex};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use weft_builtins::{EmailConfig, SmtpConfig, SmtpSecurity, ToolsConfig, register_all};
use weft_tools::{Registry, ToolError};

use crate::common::{FakeServices, call, ctx_with, temp_dir};

fn registry(email: EmailConfig) -> Registry {
    let mut reg = Registry::new();
    register_all(
        &mut reg,
        &ToolsConfig {
            email,
            ..ToolsConfig::default()
        },
    );
    reg
}

async fn send(reg: &Registry, key: &str, args: Value) -> Result<Value, ToolError> {
    call(
        reg,
        "send_email",
        ctx_with(Arc::new(FakeServices::default()), key),
        args,
    )
    .await
}

fn eml_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[test]
fn the_default_config_delivers_offline_to_the_local_outbox() {
    let cfg = ToolsConfig::default();
    assert!(cfg.email.smtp.is_none());
    assert_eq!(cfg.email.outbox_dir, std::path::Path::new(".weft/outbox"));
}

/// A second run that reuses an instance id (a plain `weft run` starts at `i1` each time)
/// sends a different message under the same key: it gets its own file, and neither file is
/// overwritten; the same message again is the same delivery.
#[tokio::test]
async fn a_different_message_under_a_used_key_gets_its_own_file() {
    let dir = temp_dir("outbox-reused-key");
    let reg = registry(EmailConfig {
        outbox_dir: dir.clone(),
        ..EmailConfig::default()
    });
    let first = json!({"to": "a@example.com", "subject": "Hi", "body": "first run"});
    let second = json!({"to": "a@example.com", "subject": "Hi", "body": "second run"});
    let a = send(&reg, "i1/first/0", first.clone()).await.unwrap();
    let b = send(&reg, "i1/first/0", second.clone()).await.unwrap();
    assert_ne!(a["path"], b["path"]);
    let read = |v: &Value| std::fs::read_to_string(v["path"].as_str().unwrap()).unwrap();
    assert!(read(&a).ends_with("first run"), "{}", read(&a));
    assert!(read(&b).ends_with("second run"), "{}", read(&b));
    assert!(b["path"].as_str().unwrap().ends_with("-2.eml"), "{b}");
    // Either message again finds its own file.
    assert_eq!(send(&reg, "i1/first/0", second).await.unwrap(), b);
    assert_eq!(send(&reg, "i1/first/0", first).await.unwrap(), a);
    assert_eq!(eml_files(&dir).len(), 2);
}

#[tokio::test]
async fn the_seed_sample_args_land_in_the_outbox_once_per_key() {
    let dir = temp_dir("outbox-seed");
    let reg = registry(EmailConfig {
        outbox_dir: dir.clone(),
        ..EmailConfig::default()
    });
    let args = json!({"to": "a@example.com", "subject": "Hi", "body": "Test"});
    let r = send(&reg, "inst/first/1", args.clone()).await.unwrap();
    assert_eq!(r["delivered"], "outbox");
    let path = r["path"].as_str().unwrap().to_string();
    let files = eml_files(&dir);
    assert_eq!(files, vec![std::path::PathBuf::from(&path)]);
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains("From: weft@localhost\r\n"), "{text}");
    assert!(text.contains("To: a@example.com\r\n"), "{text}");
    assert!(text.contains("Subject: Hi\r\n"), "{text}");
    assert!(
        text.contains("Date: Tue, 02 Jan 2024 03:04:05 +0000\r\n"),
        "{text}"
    );
    let mid = r["message_id"].as_str().unwrap();
    assert!(text.contains(&format!("Message-ID: {mid}\r\n")), "{text}");
    assert!(text.ends_with("\r\n\r\nTest"), "{text}");

    // A retry or a recovered call with the same key delivers nothing new.
    let again = send(&reg, "inst/first/1", args.clone()).await.unwrap();
    assert_eq!(again, r);
    assert_eq!(eml_files(&dir).len(), 1);
    // Another key is another message; no temporary files are left behind.
    send(&reg, "inst/first/2", args).await.unwrap();
    let files = eml_files(&dir);
    assert_eq!(files.len(), 2);
    assert!(
        files
            .iter()
            .all(|p| p.extension().is_some_and(|e| e == "eml"))
    );
}

#[tokio::test]
async fn cc_from_and_lists_are_written() {
    let dir = temp_dir("outbox-cc");
    let reg = registry(EmailConfig {
        outbox_dir: dir.clone(),
        from: "Ops <ops@example.com>".into(),
        ..EmailConfig::default()
    });
    let r = send(
        &reg,
        "k",
        json!({"to": "a@example.com, Bob <b@example.com>", "cc": "c@example.com",
               "subject": "Grüße", "from": "Me <me@example.com>"}),
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(r["path"].as_str().unwrap()).unwrap();
    assert!(text.contains("From: Me <me@example.com>\r\n"), "{text}");
    assert!(
        text.contains("To: a@example.com, Bob <b@example.com>\r\n"),
        "{text}"
    );
    assert!(text.contains("Cc: c@example.com\r\n"), "{text}");
    assert!(
        text.contains("Subject: =?utf-8?"),
        "non-ASCII subjects are encoded: {text}"
    );
}

#[tokio::test]
async fn bad_addresses_and_hostile_args_are_fatal() {
    let dir = temp_dir("outbox-bad");
    let reg = registry(EmailConfig {
        outbox_dir: dir.clone(),
        ..EmailConfig::default()
    });
    let huge = "x".repeat(1_000_000);
    for args in [
        json!({"to": "not an address", "subject": "s"}),
        json!({"to": "", "subject": "s"}),
        json!({"to": "a@example.com", "cc": "@@", "subject": "s"}),
        json!({"to": "a@example.com", "from": "nobody", "subject": "s"}),
        json!({"to": huge, "subject": "s"}),
        json!({"to": ["a@example.com"], "subject": "s"}),
        json!({"to": "a@example.com"}),
        json!({"to": "a@example.com", "subject": "s", "bcc": "x@example.com"}),
        json!(42),
    ] {
        let e = send(&reg, "k", args).await.unwrap_err();
        assert_eq!(
            (e.code.as_str(), e.retryable),
            ("args_invalid", false),
            "{e}"
        );
    }
    assert!(eml_files(&dir).is_empty());
}

#[tokio::test]
async fn header_injection_through_the_subject_is_not_possible() {
    let dir = temp_dir("outbox-inject");
    let reg = registry(EmailConfig {
        outbox_dir: dir.clone(),
        ..EmailConfig::default()
    });
    let r = send(
        &reg,
        "k",
        json!({"to": "a@example.com", "subject": "Hi\r\nBcc: victim@example.com", "body": "x"}),
    )
    .await
    .unwrap();
    let text = std::fs::read_to_string(r["path"].as_str().unwrap()).unwrap();
    assert!(!text.lines().any(|l| l.starts_with("Bcc:")), "{text}");
}

/// A relay that speaks just enough SMTP; answers `reply_to_rcpt` to RCPT TO and records the
/// DATA it receives.
async fn smtp_relay(reply_to_rcpt: &'static str) -> (u16, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let got = Arc::new(Mutex::new(Vec::new()));
    let g = Arc::clone(&got);
    tokio::spawn(async move {
        while let Ok((sock, _)) = listener.accept().await {
            let g = Arc::clone(&g);
            tokio::spawn(async move {
                let (r, mut w) = sock.into_split();
                let mut lines = BufReader::new(r).lines();
                let _ = w.write_all(b"220 test ESMTP\r\n").await;
                let mut data: Option<String> = None;
                while let Ok(Some(line)) = lines.next_line().await {
                    if let Some(d) = data.as_mut() {
                        if line == "." {
                            g.lock().unwrap().push(std::mem::take(d));
                            data = None;
                            let _ = w.write_all(b"250 queued\r\n").await;
                        } else {
                            d.push_str(&line);
                            d.push('\n');
                        }
                        continue;
                    }
                    let verb = line
                        .split([' ', ':'])
                        .next()
                        .unwrap_or("")
                        .to_ascii_uppercase();
                    let reply: &[u8] = match verb.as_str() {
                        "EHLO" | "HELO" => b"250 test\r\n",
                        "MAIL" => b"250 ok\r\n",
                        "RCPT" => reply_to_rcpt.as_bytes(),
                        "DATA" => {
                            data = Some(String::new());
                            b"354 go on\r\n"
                        }
                        "QUIT" => {
                            let _ = w.write_all(b"221 bye\r\n").await;
                            return;
                        }
                        _ => b"250 ok\r\n",
                    };
                    let _ = w.write_all(reply).await;
                }
            });
        }
    });
    (port, got)
}

fn smtp_config(port: u16) -> EmailConfig {
    EmailConfig {
        // One directory per relay: tests run in parallel and `temp_dir` empties it.
        outbox_dir: temp_dir(&format!("outbox-unused-by-smtp-{port}")),
        smtp: Some(SmtpConfig {
            host: "127.0.0.1".into(),
            port: Some(port),
            username: None,
            password: None,
            security: SmtpSecurity::None,
            timeout_ms: 5_000,
        }),
        ..EmailConfig::default()
    }
}

#[tokio::test]
async fn smtp_delivers_when_configured() {
    let (port, got) = smtp_relay("250 ok\r\n").await;
    let cfg = smtp_config(port);
    let outbox = cfg.outbox_dir.clone();
    let reg = registry(cfg);
    let r = send(
        &reg,
        "k1",
        json!({"to": "a@example.com", "subject": "Hi", "body": "Test"}),
    )
    .await
    .unwrap();
    assert_eq!(r["delivered"], "smtp");
    assert!(r.get("path").is_none());
    let got = got.lock().unwrap().clone();
    assert_eq!(got.len(), 1);
    assert!(got[0].contains("Subject: Hi"), "{}", got[0]);
    assert!(got[0].contains(r["message_id"].as_str().unwrap()));
    assert!(eml_files(&outbox).is_empty());
}

#[tokio::test]
async fn smtp_permanent_rejection_is_fatal_and_a_dead_relay_retryable() {
    let (port, _) = smtp_relay("550 no such user\r\n").await;
    let reg = registry(smtp_config(port));
    let e = send(&reg, "k", json!({"to": "a@example.com", "subject": "Hi"}))
        .await
        .unwrap_err();
    assert_eq!(
        (e.code.as_str(), e.retryable),
        ("smtp_rejected", false),
        "{e}"
    );

    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dead = l.local_addr().unwrap().port();
    drop(l);
    let reg = registry(smtp_config(dead));
    let e = send(&reg, "k", json!({"to": "a@example.com", "subject": "Hi"}))
        .await
        .unwrap_err();
    assert_eq!((e.code.as_str(), e.retryable), ("smtp", true), "{e}");
}
