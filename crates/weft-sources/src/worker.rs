//! The `worker` source: a declared tool served by remote workers over NATS request/reply
//! (seed 000's drivers; `python/weft-worker` is the worker side).
//!
//! A call is one NATS request on the tool's subject, `weft.tool.<tenant>.<tool>` by default
//! (each name one escaped token, see [`subject_token`]), carrying a CloudEvent (JSON,
//! `specversion` 1.0, `type` `dev.weft.tool.call`, `source` `weft`, `id` = idempotency key `:`
//! attempt, `subject` = the tool) whose `data` is `{tool, tenant, instance, plan, step,
//! idempotency_key, attempt, deadline_ms, args}`. The worker replies `{"result": …}` or
//! `{"error": {"code", "message", "retryable"}}`. Workers of one tool subscribe in one queue
//! group, so NATS gives each request to one of them.
//!
//! Failures: no worker subscribed (NATS "no responders", immediate) and a connection that
//! cannot be made are retryable `worker_unavailable`; no reply in time is retryable
//! `worker_timeout` (a worker that died mid-call ends so, and the tool's `retry` sends the
//! request again with the same idempotency key, which the worker library dedupes); a reply
//! that is not one of the two shapes is a fatal `worker_bad_reply`; a worker's error keeps
//! its code, message and retryability.
//!
//! Connections: one client per URL and tokio runtime, made on the runtime's first call
//! (building a tool is synchronous and does no I/O) and shared by every worker tool called
//! there; async-nats reconnects it. Its connection task runs on the caller's runtime, so a
//! request and its reply are handed between the caller's own threads (a client on a thread
//! of its own cost every call two more hand-overs: 40–70 µs at p50, docs/performance.md).
//! A runtime's id is never reused, so a client of a runtime that ended is never used again;
//! the map keeps the last `MAX_CLIENTS` runtimes'. A call made outside any runtime uses a
//! small runtime of weft's own (thread `weft-nats`).

use std::borrow::Cow;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_nats::RequestErrorKind;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use weft_tools::{BoxFuture, ToolContext, ToolError};

use crate::Error;
use crate::declared::Source;
use crate::def::ToolDef;

/// The NATS server a worker tool uses when its definition names none.
pub const DEFAULT_URL: &str = "nats://127.0.0.1:4222";

/// The `worker` source's settings (`source = { kind = "worker", … }`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerDef {
    /// The NATS server (default `nats://127.0.0.1:4222`); `tls://` for TLS.
    #[serde(default = "default_url")]
    pub url: String,
    /// The subject of the requests (default `weft.tool.{tenant}.{tool}`): `{tenant}` is the
    /// calling instance's tenant and `{tool}` this tool's name, each one escaped subject
    /// token ([`subject_token`]). Wildcards and empty tokens are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<String>,
    /// How long one request waits for its reply, in milliseconds (default: the tool's
    /// `timeout_ms` shared among the attempts its `retry` allows, so that a request lost with
    /// a dead worker leaves time to retry); never past the step's deadline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_timeout_ms: Option<u64>,
}

fn default_url() -> String {
    DEFAULT_URL.into()
}

impl WorkerDef {
    /// What its calls need: a worker runs elsewhere (what it reaches is its host's); weft
    /// reaches the NATS server only.
    pub fn needs(&self) -> weft_tools::Needs {
        let server = self
            .url
            .split("://")
            .nth(1)
            .unwrap_or(&self.url)
            .to_string();
        weft_tools::Needs {
            network: vec![server],
            isolation: weft_tools::Isolation::Remote,
            ..weft_tools::Needs::nothing("worker")
        }
    }
}

/// `s` as one NATS subject token. Letters, digits, `_` and `-` stay; every other byte
/// (`.`, `*`, `>`, whitespace, `%`, non-ASCII, …) becomes `%XX` (upper-case hex of its UTF-8
/// bytes), and the empty string becomes `%`. Distinct names give distinct tokens, and no
/// name can add a token or a wildcard. The worker library computes the same.
pub fn subject_token(s: &str) -> Cow<'_, str> {
    let plain = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b'-';
    if s.is_empty() {
        return Cow::Borrowed("%");
    }
    if s.bytes().all(plain) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for b in s.bytes() {
        if plain(b) {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    Cow::Owned(out)
}

/// The default subject of `tool`'s calls for `tenant`: `weft.tool.<tenant>.<tool>`.
pub fn default_subject(tenant: &str, tool: &str) -> String {
    format!(
        "weft.tool.{}.{}",
        subject_token(tenant),
        subject_token(tool)
    )
}

/// Where a worker tool's requests go: the subject with `{tenant}` and `{tool}` still to
/// replace (the tool's token is replaced at build time).
#[derive(Debug, Clone)]
struct Subject {
    /// Text before and after each `{tenant}`: `parts.join(tenant_token)`.
    parts: Vec<String>,
}

impl Subject {
    fn parse(template: &str, tool: &str) -> Result<Subject, String> {
        let with_tool = template.replace("{tool}", &subject_token(tool));
        // Check it with a sample tenant token: the real ones are escaped the same way.
        let sample = with_tool.replace("{tenant}", "t");
        if sample.is_empty() {
            return Err("the subject is empty".into());
        }
        for token in sample.split('.') {
            if token.is_empty() {
                return Err(format!("subject `{template}` has an empty token"));
            }
            if token == "*" || token == ">" {
                return Err(format!(
                    "subject `{template}` has a wildcard token `{token}`: a request goes to one \
                     subject"
                ));
            }
            if token.chars().any(char::is_whitespace) {
                return Err(format!("subject `{template}` contains whitespace"));
            }
        }
        Ok(Subject {
            parts: with_tool.split("{tenant}").map(str::to_owned).collect(),
        })
    }

    fn for_tenant(&self, tenant: &str) -> String {
        self.parts.join(&subject_token(tenant))
    }

    fn describe(&self) -> String {
        self.parts.join("<tenant>")
    }
}

/// The `worker` source of one tool.
pub(crate) struct Worker {
    url: Arc<str>,
    /// `url` with any password hidden, for messages.
    shown_url: Arc<str>,
    subject: Subject,
    tool: Arc<str>,
    /// How long one request waits for its reply (before the context's deadline).
    request_timeout: Duration,
}

impl Worker {
    /// The source of `def`'s calls (`url`, `subject` and `request_timeout_ms` of its
    /// `source`). Checks the URL and subject; connects on the first call.
    pub(crate) fn open(def: &ToolDef, w: &WorkerDef) -> Result<Worker, Error> {
        let (url, subject, request_timeout_ms) =
            (w.url.as_str(), w.subject.as_deref(), w.request_timeout_ms);
        let invalid = |message: String| Error::Invalid {
            name: def.name.clone(),
            message,
        };
        url.parse::<async_nats::ServerAddr>()
            .map_err(|e| invalid(format!("worker url `{url}`: {e}")))?;
        if url.starts_with("ws://") || url.starts_with("wss://") {
            return Err(invalid(format!(
                "worker url `{url}`: WebSocket is not built in; use nats:// or tls://"
            )));
        }
        let subject = Subject::parse(subject.unwrap_or("weft.tool.{tenant}.{tool}"), &def.name)
            .map_err(invalid)?;
        // By default the tool's timeout is shared among its attempts, so that a request
        // lost with a dead worker leaves time for the retries.
        let attempts = def.retry.as_ref().map_or(1, |r| u64::from(r.max) + 1);
        let ms = request_timeout_ms.unwrap_or((def.timeout_ms / attempts).max(1));
        if ms == 0 {
            return Err(invalid("request_timeout_ms must be at least 1".into()));
        }
        Ok(Worker {
            url: url.into(),
            shown_url: hide_password(url).into(),
            subject,
            tool: def.name.as_str().into(),
            request_timeout: Duration::from_millis(ms),
        })
    }
}

/// `nats://user:secret@host` → `nats://user:***@host`.
fn hide_password(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (auth, host) = match rest.rsplit_once('@') {
        Some(x) => x,
        None => return url.to_owned(),
    };
    match auth.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => format!("{scheme}://***@{host}"),
    }
}

/// The CloudEvent of one call, serialized as it is declared: the fields in the order of the
/// module docs, written straight from the context (no JSON tree is built: a `json!` object
/// made each call cost more than the rest of the source's call, docs/performance.md).
#[derive(Serialize)]
struct CallEvent<'a> {
    specversion: &'static str,
    #[serde(rename = "type")]
    ty: &'static str,
    source: &'static str,
    /// `idempotency_key:attempt`.
    id: EventId<'a>,
    subject: &'a str,
    datacontenttype: &'static str,
    data: CallData<'a>,
}

/// The `data` of a [`CallEvent`].
#[derive(Serialize)]
struct CallData<'a> {
    tool: &'a str,
    tenant: &'a str,
    instance: &'a str,
    plan: &'a str,
    step: &'a str,
    idempotency_key: &'a str,
    attempt: u32,
    deadline_ms: u64,
    args: &'a Value,
}

/// A CloudEvent `id`, written as `key:attempt` without making the string first.
struct EventId<'a>(&'a str, u32);

impl Serialize for EventId<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&format_args!("{}:{}", self.0, self.1))
    }
}

/// The CloudEvent of one call.
fn call_event(
    tool: &str,
    ctx: &ToolContext,
    deadline_ms: u64,
    args: &Value,
) -> serde_json::Result<Vec<u8>> {
    serde_json::to_vec(&CallEvent {
        specversion: "1.0",
        ty: "dev.weft.tool.call",
        source: "weft",
        id: EventId(&ctx.idempotency_key, ctx.attempt),
        subject: tool,
        datacontenttype: "application/json",
        data: CallData {
            tool,
            tenant: &ctx.tenant,
            instance: &ctx.instance,
            plan: &ctx.plan,
            step: &ctx.step,
            idempotency_key: &ctx.idempotency_key,
            attempt: ctx.attempt,
            deadline_ms,
            args,
        },
    })
}

/// The first 200 characters of a reply, for messages.
fn excerpt(bytes: &[u8]) -> String {
    let s = String::from_utf8_lossy(bytes);
    match s.char_indices().nth(200) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.into_owned(),
    }
}

/// A worker's reply: `{"result": …}` or `{"error": {"code", "message", "retryable"}}`.
fn parse_reply(subject: &str, bytes: &[u8]) -> Result<Value, ToolError> {
    let bad = |why: &str| {
        ToolError::fatal(
            "worker_bad_reply",
            format!(
                "the worker on `{subject}` replied {why}; expected {{\"result\": …}} or \
                 {{\"error\": {{\"code\", \"message\", \"retryable\"}}}}: {}",
                excerpt(bytes)
            ),
        )
    };
    let Ok(Value::Object(mut reply)) = serde_json::from_slice::<Value>(bytes) else {
        return Err(bad("something that is not a JSON object"));
    };
    if reply.len() != 1 {
        return Err(bad("an object without exactly one of `result` and `error`"));
    }
    if let Some(result) = reply.remove("result") {
        return Ok(result);
    }
    let Some(Value::Object(error)) = reply.remove("error") else {
        return Err(bad("an object without `result` or an `error` object"));
    };
    let (Some(Value::String(code)), Some(Value::String(message))) =
        (error.get("code"), error.get("message"))
    else {
        return Err(bad("an error without a string `code` and `message`"));
    };
    let retryable = match error.get("retryable") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(bad("an error whose `retryable` is not a boolean")),
    };
    Err(ToolError {
        code: code.clone(),
        message: message.clone(),
        retryable,
    })
}

/// The runtime NATS connections made outside any runtime run on: one thread, started on
/// first use, for the life of the process.
fn nats_runtime() -> Result<&'static tokio::runtime::Handle, ToolError> {
    static RUNTIME: OnceLock<Result<tokio::runtime::Handle, String>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .thread_name("weft-nats")
                .build()
                .map_err(|e| e.to_string())?;
            let handle = rt.handle().clone();
            std::thread::Builder::new()
                .name("weft-nats".into())
                .spawn(move || rt.block_on(std::future::pending::<()>()))
                .map_err(|e| e.to_string())?;
            Ok(handle)
        })
        .as_ref()
        .map_err(|e| {
            ToolError::fatal(
                "worker_unavailable",
                format!("cannot start the NATS runtime: {e}"),
            )
        })
}

type Cell = Arc<tokio::sync::OnceCell<async_nats::Client>>;

/// Most (URL, runtime) clients kept; the oldest runtime's go first (a process has one or two
/// runtimes; tests and CLI commands start one after another).
const MAX_CLIENTS: usize = 64;

/// Clients by URL and runtime, in the order they were made.
type Clients = Vec<((Arc<str>, Option<tokio::runtime::Id>), Cell)>;

/// The client for `url` on the caller's runtime, connecting on first use. A failed
/// connection is not kept: the next call tries again.
async fn client(url: &Arc<str>, shown: &str) -> Result<async_nats::Client, ToolError> {
    static CLIENTS: OnceLock<Mutex<Clients>> = OnceLock::new();
    let current = tokio::runtime::Handle::try_current().ok();
    let key = (
        Arc::clone(url),
        current.as_ref().map(tokio::runtime::Handle::id),
    );
    let cell: Cell = {
        let mut clients = CLIENTS
            .get_or_init(Mutex::default)
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match clients.iter().find(|(k, _)| *k == key) {
            Some((_, cell)) => Arc::clone(cell),
            None => {
                if clients.len() >= MAX_CLIENTS {
                    clients.remove(0);
                }
                let cell = Cell::default();
                clients.push((key, Arc::clone(&cell)));
                cell
            }
        }
    };
    let c = cell
        .get_or_try_init(|| async {
            let rt = match &current {
                Some(rt) => rt,
                None => nats_runtime()?,
            };
            let url = Arc::clone(url);
            let connect = rt.spawn(async move {
                async_nats::ConnectOptions::new()
                    .name("weft")
                    .connection_timeout(Duration::from_secs(5))
                    .connect(&*url)
                    .await
            });
            match connect.await {
                Ok(Ok(c)) => Ok(c),
                Ok(Err(e)) => Err(ToolError::retryable(
                    "worker_unavailable",
                    format!("cannot connect to NATS at {shown}: {e}"),
                )),
                Err(e) => Err(ToolError::retryable(
                    "worker_unavailable",
                    format!("cannot connect to NATS at {shown}: {e}"),
                )),
            }
        })
        .await?;
    Ok(c.clone())
}

/// Unix epoch milliseconds `after` from now.
fn epoch_ms_after(after: Duration) -> u64 {
    let t = SystemTime::now() + after;
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

impl Source for Worker {
    fn call(&self, ctx: ToolContext, args: Value) -> BoxFuture<'static, Result<Value, ToolError>> {
        let start = Instant::now();
        let timeout = match ctx.deadline {
            Some(d) => self.request_timeout.min(d.saturating_duration_since(start)),
            None => self.request_timeout,
        };
        let subject = self.subject.for_tenant(&ctx.tenant);
        let payload = call_event(&self.tool, &ctx, epoch_ms_after(timeout), &args);
        let (url, shown) = (Arc::clone(&self.url), Arc::clone(&self.shown_url));
        let tool = Arc::clone(&self.tool);
        Box::pin(async move {
            let payload = payload.map_err(|e| {
                ToolError::fatal("args_invalid", format!("cannot encode the call: {e}"))
            })?;
            let timed_out = || {
                ToolError::retryable(
                    "worker_timeout",
                    format!(
                        "no worker on `{subject}` ({shown}) replied within {} ms",
                        timeout.as_millis()
                    ),
                )
            };
            if timeout.is_zero() {
                return Err(ToolError::retryable(
                    "worker_timeout",
                    format!("the step's deadline passed before the request on `{subject}`"),
                ));
            }
            let client = tokio::time::timeout(timeout, client(&url, &shown))
                .await
                .map_err(|_| {
                    ToolError::retryable(
                        "worker_unavailable",
                        format!(
                            "cannot connect to NATS at {shown} within {} ms",
                            timeout.as_millis()
                        ),
                    )
                })??;
            let left = timeout.saturating_sub(start.elapsed());
            if left.is_zero() {
                return Err(timed_out());
            }
            let request = async_nats::Request::new()
                .payload(payload.into())
                .timeout(Some(left));
            match client.send_request(subject.clone(), request).await {
                Ok(reply) => parse_reply(&subject, &reply.payload),
                Err(e) => Err(match e.kind() {
                    RequestErrorKind::NoResponders => ToolError::retryable(
                        "worker_unavailable",
                        format!(
                            "no worker serves subject `{subject}` on {shown} (tool `{tool}`): \
                             start one, e.g. `python -m weft_worker serve MODULE --url {shown} \
                             --tenant TENANT` (python/weft-worker)"
                        ),
                    ),
                    RequestErrorKind::TimedOut => timed_out(),
                    RequestErrorKind::MaxPayloadExceeded => ToolError::fatal(
                        "args_invalid",
                        format!("the call is larger than NATS at {shown} accepts: {e}"),
                    ),
                    RequestErrorKind::InvalidSubject => ToolError::fatal(
                        "worker_bad_subject",
                        format!("`{subject}` is not a valid NATS subject: {e}"),
                    ),
                    RequestErrorKind::Other => ToolError::retryable(
                        "worker_unavailable",
                        format!("the request on `{subject}` to NATS at {shown} failed: {e}"),
                    ),
                }),
            }
        })
    }

    fn describe(&self) -> String {
        format!("worker {}/{}", self.shown_url, self.subject.describe())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;
    use serde_json::json;

    /// The event is the documented shape, byte for byte as a `json!` object of it writes
    /// (keys in order, the id made of key and attempt, args as given).
    #[test]
    fn the_call_event_is_the_documented_cloudevent() {
        let mut ctx = ToolContext::detached("s\"1");
        ctx.tenant = "acme".into();
        ctx.instance = "i-7".into();
        ctx.plan = "p".into();
        ctx.idempotency_key = "i-7/s/3".into();
        ctx.attempt = 2;
        let args = json!({"z": 1, "a": ["é", {"k": null}], "n": 1.5});
        let bytes = call_event("facts.extract", &ctx, 1234, &args).unwrap();
        let expected = serde_json::to_vec(&json!({
            "specversion": "1.0", "type": "dev.weft.tool.call", "source": "weft",
            "id": "i-7/s/3:2", "subject": "facts.extract", "datacontenttype": "application/json",
            "data": {"tool": "facts.extract", "tenant": "acme", "instance": "i-7", "plan": "p",
                "step": "s\"1", "idempotency_key": "i-7/s/3", "attempt": 2, "deadline_ms": 1234,
                "args": args}
        }))
        .unwrap();
        assert_eq!(
            String::from_utf8(bytes).unwrap(),
            String::from_utf8(expected).unwrap()
        );
    }

    #[test]
    fn names_are_one_token_each() {
        assert_eq!(subject_token("extract_facts"), "extract_facts");
        assert_eq!(subject_token("a.b"), "a%2Eb");
        assert_eq!(subject_token("*"), "%2A");
        assert_eq!(subject_token(">"), "%3E");
        assert_eq!(subject_token("a b"), "a%20b");
        assert_eq!(subject_token("50%"), "50%25");
        assert_eq!(subject_token(""), "%");
        assert_eq!(subject_token("é"), "%C3%A9");
        assert_eq!(
            default_subject("acme.eu", "facts.extract"),
            "weft.tool.acme%2Eeu.facts%2Eextract"
        );
        // Injective on names that would collide if `.` became `_`.
        assert_ne!(subject_token("a.b"), subject_token("a_b"));
        assert_ne!(subject_token("a%2Eb"), subject_token("a.b"));
    }

    #[test]
    fn subjects_with_wildcards_or_empty_tokens_are_refused() {
        assert!(Subject::parse("a.*.b", "t").is_err());
        assert!(Subject::parse("a.>", "t").is_err());
        assert!(Subject::parse("a..b", "t").is_err());
        assert!(Subject::parse("a b", "t").is_err());
        assert!(Subject::parse("", "t").is_err());
        let s = Subject::parse("jobs.{tenant}.{tool}", "x.y").unwrap();
        assert_eq!(s.for_tenant("t.>"), "jobs.t%2E%3E.x%2Ey");
        assert_eq!(s.describe(), "jobs.<tenant>.x%2Ey");
    }

    #[test]
    fn replies_map_to_results_and_errors() {
        assert_eq!(
            parse_reply("s", br#"{"result": {"a": 1}}"#).unwrap(),
            json!({"a": 1})
        );
        assert_eq!(
            parse_reply("s", br#"{"result": null}"#).unwrap(),
            json!(null)
        );
        let e = parse_reply(
            "s",
            br#"{"error": {"code": "quota", "message": "later", "retryable": true}}"#,
        )
        .unwrap_err();
        assert_eq!((e.code.as_str(), e.retryable), ("quota", true));
        assert_eq!(e.message, "later");
        for bad in [
            &b"not json"[..],
            br#"[1]"#,
            br#"{}"#,
            br#"{"result": 1, "error": {}}"#,
            br#"{"error": "boom"}"#,
            br#"{"error": {"code": 1, "message": "m"}}"#,
            br#"{"error": {"code": "c", "message": "m", "retryable": "yes"}}"#,
        ] {
            let e = parse_reply("weft.tool.t.x", bad).unwrap_err();
            assert_eq!(e.code, "worker_bad_reply", "{}", excerpt(bad));
            assert!(!e.retryable);
            assert!(e.message.contains("weft.tool.t.x"), "{e}");
        }
        let long = format!(r#"{{"oops": "{}"}}"#, "x".repeat(1000));
        let e = parse_reply("s", long.as_bytes()).unwrap_err();
        assert!(
            e.message.len() < 600,
            "an excerpt, not the reply: {}",
            e.message.len()
        );
    }

    #[test]
    fn passwords_are_not_shown() {
        assert_eq!(
            hide_password("nats://u:secret@h:4222"),
            "nats://u:***@h:4222"
        );
        assert_eq!(hide_password("nats://tok@h"), "nats://***@h");
        assert_eq!(hide_password("nats://h:4222"), "nats://h:4222");
    }
}
