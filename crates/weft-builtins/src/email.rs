//! `send_email`: SMTP through `lettre` when a relay is configured, otherwise a local outbox.
//!
//! The outbox makes the seed sample plan (and any plan under test) run offline: each message
//! becomes one `.eml` file named by a hash of the tenant and the call's idempotency key, so a
//! retried or recovered call with the same key finds its message already there and does not
//! deliver a second one. A different message under a key already used (a second `weft run`
//! reusing the instance id) gets the next free name, `<key>-2.eml`, …: no file is ever
//! overwritten. Files are written to a temporary name and hard-linked into place (which
//! fails rather than replace a file), so a crash never leaves half a message. Over SMTP the Message-ID is derived from the same hash, which lets
//! receivers that dedupe on Message-ID drop a resend after a crash.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lettre::message::header::{Cc, ContentType, To};
use lettre::message::{Mailbox, Mailboxes};
use lettre::transport::smtp::authentication::Credentials;
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};
use serde::Deserialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::builtin::builtin_spec;
use crate::config::{EmailConfig, SmtpConfig, SmtpSecurity};
use crate::support::{invalid, parse_args, snippet};
use crate::{BoxFuture, Tool, ToolContext, ToolError, ToolSpec};

const NAME: &str = "send_email";

/// The `send_email` tool.
pub struct EmailTool {
    spec: ToolSpec,
    inner: Arc<Inner>,
}

struct Inner {
    cfg: EmailConfig,
    /// Built once when SMTP is configured; a bad relay setting is reported on each call.
    smtp: Option<Result<AsyncSmtpTransport<Tokio1Executor>, String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Args {
    to: String,
    subject: String,
    #[serde(default)]
    body: Option<String>,
    #[serde(default)]
    cc: Option<String>,
    #[serde(default)]
    from: Option<String>,
}

impl EmailTool {
    /// The tool delivering per `cfg`.
    pub fn new(cfg: &EmailConfig) -> Self {
        EmailTool {
            spec: builtin_spec(NAME),
            inner: Arc::new(Inner {
                cfg: cfg.clone(),
                smtp: cfg.smtp.as_ref().map(build_transport),
            }),
        }
    }
}

fn build_transport(c: &SmtpConfig) -> Result<AsyncSmtpTransport<Tokio1Executor>, String> {
    type T = AsyncSmtpTransport<Tokio1Executor>;
    let builder = match c.security {
        SmtpSecurity::Tls => {
            T::relay(&c.host).map_err(|e| format!("SMTP relay `{}`: {e}", c.host))?
        }
        SmtpSecurity::Starttls => {
            T::starttls_relay(&c.host).map_err(|e| format!("SMTP relay `{}`: {e}", c.host))?
        }
        SmtpSecurity::None => T::builder_dangerous(c.host.as_str()),
    };
    let port = c.port.unwrap_or(match c.security {
        SmtpSecurity::Tls => 465,
        SmtpSecurity::Starttls => 587,
        SmtpSecurity::None => 25,
    });
    let mut builder = builder
        .port(port)
        .timeout(Some(Duration::from_millis(c.timeout_ms)));
    if let Some(user) = &c.username {
        builder = builder.credentials(Credentials::new(
            user.clone(),
            c.password.clone().unwrap_or_default(),
        ));
    }
    Ok(builder.build())
}

impl Tool for EmailTool {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn profile_needs(&self) -> Option<weft_tools::Needs> {
        crate::profile::needs(
            NAME,
            &crate::ToolsConfig {
                email: self.inner.cfg.clone(),
                ..crate::ToolsConfig::default()
            },
        )
    }

    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let inner = Arc::clone(&self.inner);
        Box::pin(async move { inner.call(ctx, args).await })
    }
}

impl Inner {
    async fn call(&self, ctx: ToolContext, args: Value) -> Result<Value, ToolError> {
        let a: Args = parse_args(NAME, args)?;
        let key = delivery_key(&ctx);
        let message_id = format!("<{}@weft>", &key[..32]);
        let message = self.build_message(&ctx, &a, &message_id)?;
        match &self.smtp {
            None => {
                let path = self.to_outbox(&key, &message).await?;
                Ok(serde_json::json!({
                    "delivered": "outbox",
                    "message_id": message_id,
                    "path": path.to_string_lossy(),
                }))
            }
            Some(Err(e)) => Err(ToolError::fatal("smtp_config", e.clone())),
            Some(Ok(transport)) => {
                transport.send(message).await.map_err(smtp_error)?;
                Ok(serde_json::json!({ "delivered": "smtp", "message_id": message_id }))
            }
        }
    }

    fn build_message(
        &self,
        ctx: &ToolContext,
        a: &Args,
        message_id: &str,
    ) -> Result<Message, ToolError> {
        let from_text = a.from.as_deref().unwrap_or(&self.cfg.from);
        let from: Mailbox = from_text
            .parse()
            .map_err(|e| invalid(NAME, format!("from `{}`: {e}", snippet(from_text, 80))))?;
        let to = mailboxes("to", &a.to)?;
        let mut b = Message::builder()
            .from(from)
            .mailbox(To::from(to))
            .subject(a.subject.clone())
            .message_id(Some(message_id.to_string()))
            .date(message_date(ctx))
            .header(ContentType::TEXT_PLAIN);
        if let Some(cc) = &a.cc {
            b = b.mailbox(Cc::from(mailboxes("cc", cc)?));
        }
        b.body(a.body.clone().unwrap_or_default())
            .map_err(|e| invalid(NAME, format!("message: {e}")))
    }

    /// Files `message` in the outbox, never overwriting a file: as `<key>.eml`, or, when a
    /// different message holds that name (a run that reused the instance id), the first free
    /// `<key>-<n>.eml`. A file holding this very message (the `Date:` header aside, which a
    /// retry renders anew) is the same delivery: its path is returned, nothing is written.
    async fn to_outbox(&self, key: &str, message: &Message) -> Result<PathBuf, ToolError> {
        let dir = &self.cfg.outbox_dir;
        let bytes = message.formatted();
        let mut created = false;
        for n in 1..=MAX_OUTBOX_COPIES {
            let path = if n == 1 {
                dir.join(format!("{key}.eml"))
            } else {
                dir.join(format!("{key}-{n}.eml"))
            };
            match tokio::fs::read(&path).await {
                Ok(existing) if same_message(&existing, &bytes) => return Ok(path),
                Ok(_) => continue,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(io_error("reading the outbox", &path, &e)),
            }
            if !created {
                tokio::fs::create_dir_all(dir)
                    .await
                    .map_err(|e| io_error("creating the outbox directory", dir, &e))?;
                created = true;
            }
            if self.file_new(key, &path, &bytes).await? {
                return Ok(path);
            }
            // Another writer took the name meanwhile: it may hold this very message.
            if tokio::fs::read(&path)
                .await
                .is_ok_and(|existing| same_message(&existing, &bytes))
            {
                return Ok(path);
            }
        }
        Err(ToolError::fatal(
            "outbox_full",
            format!(
                "{} messages with the same idempotency key are in the outbox ({}); move them away",
                MAX_OUTBOX_COPIES,
                dir.display()
            ),
        ))
    }

    /// Writes `bytes` to a temporary file and links it as `path` only if `path` does not
    /// exist (`Ok(false)`: it does), so a crash never leaves half a message and nothing is
    /// overwritten.
    async fn file_new(&self, key: &str, path: &Path, bytes: &[u8]) -> Result<bool, ToolError> {
        let dir = &self.cfg.outbox_dir;
        let tmp = dir.join(format!(
            ".{key}.{}.{}.tmp",
            std::process::id(),
            TMP_COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let write = async {
            let mut f = tokio::fs::File::create(&tmp).await?;
            tokio::io::AsyncWriteExt::write_all(&mut f, bytes).await?;
            f.sync_all().await?;
            drop(f);
            tokio::fs::hard_link(&tmp, path).await
        };
        let linked = write.await;
        let _ = tokio::fs::remove_file(&tmp).await;
        match linked {
            Ok(()) => Ok(true),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
            Err(e) => Err(io_error("writing to the outbox", path, &e)),
        }
    }
}

/// Most files one idempotency key gets in the outbox (`<key>.eml`, `<key>-2.eml`, …).
const MAX_OUTBOX_COPIES: u32 = 1000;

/// Whether two formatted messages are the same, their `Date:` headers aside.
fn same_message(a: &[u8], b: &[u8]) -> bool {
    fn without_date(m: &[u8]) -> impl Iterator<Item = &[u8]> {
        let end = m
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .unwrap_or(m.len());
        let (head, body) = m.split_at(end);
        head.split(|&c| c == b'\n')
            .filter(|l| !l.starts_with(b"Date: "))
            .chain(std::iter::once(body))
    }
    without_date(a).eq(without_date(b))
}

static TMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Hex SHA-256 of tenant and idempotency key: the message's identity across retries.
fn delivery_key(ctx: &ToolContext) -> String {
    let mut h = Sha256::new();
    h.update(ctx.tenant.as_bytes());
    h.update([0u8]);
    h.update(ctx.idempotency_key.as_bytes());
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// The engine's clock when it has one (deterministic in tests), else the wall clock.
fn message_date(ctx: &ToolContext) -> SystemTime {
    match u64::try_from(ctx.services.now_ms()) {
        Ok(ms) if ms > 0 => UNIX_EPOCH + Duration::from_millis(ms),
        _ => SystemTime::now(),
    }
}

/// One address or a comma-separated list.
fn mailboxes(field: &str, text: &str) -> Result<Mailboxes, ToolError> {
    let m: Mailboxes = text
        .parse()
        .map_err(|e| invalid(NAME, format!("{field} `{}`: {e}", snippet(text, 80))))?;
    if m.iter().next().is_none() {
        return Err(invalid(NAME, format!("{field}: no address")));
    }
    Ok(m)
}

fn io_error(doing: &str, path: &Path, e: &std::io::Error) -> ToolError {
    ToolError::retryable("io", format!("{doing} ({}): {e}", path.display()))
}

fn smtp_error(e: lettre::transport::smtp::Error) -> ToolError {
    let msg = format!("SMTP: {e}");
    if e.is_permanent() {
        ToolError::fatal("smtp_rejected", msg)
    } else {
        ToolError::retryable("smtp", msg)
    }
}
