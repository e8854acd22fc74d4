//! Seed 004's ReAct planner served over NATS request/reply, so bus-native callers need no
//! HTTP: a request on `[planner] subject` (default `weft.planner.react`) carries the JSON body
//! of `POST /plan/react` and is answered with exactly the JSON that route returns — the same
//! request → response logic ([`weft_llm::react::answer`]), the same tools (the node's
//! outside-instance registry overlaid with the tenant's declared tools, called as `[planner]
//! tenant`: the bus carries no token, so one subscription acts for one tenant), the partial
//! trace with an `error` field when the model fails mid-loop.
//!
//! **Where the answer goes.** To the request's NATS reply subject when it has one (a plain
//! NATS request: its inbox is a reply subject per request). A request *published* without a
//! reply subject names its trace id instead (header `Weft-Trace-Id`, else a body field
//! `trace_id`) and the answer is published on `<subject>.reply.<trace_id>` (the trace id one
//! escaped subject token) — seed 004's "reply channel per trace id"; with neither it is
//! dropped (logged). Every answer carries the headers `Weft-Trace-Id` (the header's, else for
//! a published request the body's, else a fresh `react-…` id; also the LLM correlation id) and `Weft-Status` (the HTTP status the route would
//! have answered: `200`, `400`, …).
//!
//! **Refusals** are `{"error": {"code", "message", "status", "hint"?}}` with the route's
//! stable codes: `payload_too_large` (over `max_request_bytes`, checked before parsing),
//! `invalid_json`, `invalid_request` (not a PlannerRequest, or an empty goal),
//! `unknown_tool`, `llm_unavailable`, `llm_failed`, plus `busy` (`max_concurrent` requests
//! already running: answered at once, so a flood costs a reply each, never a queue) and
//! `internal` (the planning task panicked; the service keeps serving).
//!
//! Several nodes serving one subject share its requests through the queue group.
//! [`PlannerBus::stop`] unsubscribes, lets the running requests finish and answer (up to a
//! drain timeout) and flushes.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::{Value, json};
use tokio::sync::{Semaphore, oneshot};
use weft_llm::Llm;
use weft_llm::react::{PlannerRequest, Refusal};
use weft_tools::Registry;

use crate::config::PlannerConfig;
use crate::{Error, Node};

/// The header naming a request's trace id (and echoed on its answer).
pub const TRACE_HEADER: &str = "Weft-Trace-Id";
/// The header giving an answer's status (the HTTP status `/plan/react` would answer).
pub const STATUS_HEADER: &str = "Weft-Status";
/// The most requests planned at once, whatever `max_concurrent` says.
pub const MAX_CONCURRENT: usize = 1 << 16;
/// How long [`PlannerBus::stop`] waits for running requests.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(30);

/// The running service: stop it with [`PlannerBus::stop`] (dropping it stops it too, without
/// waiting for running requests).
#[derive(Debug)]
pub struct PlannerBus {
    subject: String,
    stop: Option<oneshot::Sender<()>>,
    task: Option<tokio::task::JoinHandle<()>>,
}

impl PlannerBus {
    /// The subject it serves.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Unsubscribes, waits for running requests to answer (up to [`DRAIN_TIMEOUT`]) and
    /// flushes their answers.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.task.take() {
            let _ = t.await;
        }
    }
}

impl Drop for PlannerBus {
    fn drop(&mut self) {
        if let Some(t) = self.task.take() {
            t.abort();
        }
    }
}

/// What is wrong with a `[planner]` section that serves (empty when `nats_url` is unset).
pub(crate) fn problems(c: &PlannerConfig) -> Vec<(&'static str, String)> {
    let mut out = Vec::new();
    let Some(url) = &c.nats_url else {
        return out;
    };
    if url.parse::<async_nats::ServerAddr>().is_err() {
        out.push((
            "planner.nats_url",
            format!("`{url}` is not a NATS server URL (e.g. nats://127.0.0.1:4222)"),
        ));
    }
    let bad_subject = |s: &str| {
        s.is_empty()
            || s.split('.')
                .any(|t| t.is_empty() || t == "*" || t == ">" || t.contains(char::is_whitespace))
    };
    if bad_subject(&c.subject) {
        out.push((
            "planner.subject",
            format!(
                "`{}` is not a subject to serve (dot-separated tokens, no wildcards)",
                c.subject
            ),
        ));
    }
    if bad_subject(&c.queue_group) {
        out.push((
            "planner.queue_group",
            format!("`{}` is not a queue group name", c.queue_group),
        ));
    }
    if c.tenant.is_empty() {
        out.push(("planner.tenant", "the tenant must not be empty".into()));
    }
    for (key, v) in [
        ("planner.max_concurrent", c.max_concurrent),
        ("planner.max_request_bytes", c.max_request_bytes),
    ] {
        if v == 0 {
            out.push((key, format!("`{key}` must be at least 1")));
        }
    }
    out
}

/// Where a request's tools come from.
enum Tools {
    /// One registry for every request.
    Fixed(Arc<Registry>),
    /// The node's outside-instance tools overlaid with the tenant's declared ones, re-read
    /// from the store before each request (as `/plan/react` does).
    Node(Box<Node>),
}

impl Tools {
    async fn for_tenant(&self, tenant: &str) -> Arc<Registry> {
        match self {
            Tools::Fixed(r) => Arc::clone(r),
            Tools::Node(node) => {
                if let (Some(tb), Some(store)) = (node.toolbox(), node.store())
                    && let Err(e) = tb.refresh(store.as_ref(), Some(tenant)).await
                {
                    // The tools read last time still serve.
                    tracing::warn!(tenant, error = %e, "cannot re-read the tenant's tools");
                }
                node.outside_registry_for(tenant)
            }
        }
    }
}

/// What one request needs.
/// Returns once the server has processed every subscription `client` sent before the call.
/// `flush` only writes them to the socket; the server handles one connection's operations in
/// order, so a message this connection publishes to its own fresh inbox arriving back means
/// the earlier subscriptions are in place.
async fn registered(client: &async_nats::Client) -> Result<(), String> {
    let inbox = client.new_inbox();
    let mut probe = client
        .subscribe(inbox.clone())
        .await
        .map_err(|e| e.to_string())?;
    client
        .publish(inbox, Vec::new().into())
        .await
        .map_err(|e| e.to_string())?;
    client.flush().await.map_err(|e| e.to_string())?;
    match tokio::time::timeout(Duration::from_secs(10), probe.next()).await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err("the connection closed".into()),
        Err(_) => Err("the server did not answer within 10 s".into()),
    }
}

struct Service {
    client: async_nats::Client,
    llm: Option<Llm>,
    tools: Tools,
    tenant: String,
    subject: String,
    max_request_bytes: usize,
}

/// Serves `node`'s planner as `weft serve` does: its model ([`Node::planner_llm`], under
/// `[budget.planner]`), and its outside-instance tools
/// overlaid with `config.tenant`'s declared ones ([`Node::outside_registry_for`], re-read
/// from the store before each request, as `/plan/react` does). See [`spawn`].
pub async fn spawn_node(config: &PlannerConfig, node: &Node) -> Result<PlannerBus, Error> {
    start(
        config,
        node.planner_llm(),
        Tools::Node(Box::new(node.clone())),
    )
    .await
}

/// Connects to `config.nats_url` and serves the planner on `config.subject` in
/// `config.queue_group` with the model `llm` (none: every request is `llm_unavailable`) and
/// the tools `tools` (e.g. the node's [`Node::outside_registry`]), until stopped.
pub async fn spawn(
    config: &PlannerConfig,
    llm: Option<Llm>,
    tools: Arc<Registry>,
) -> Result<PlannerBus, Error> {
    start(config, llm, Tools::Fixed(tools)).await
}

async fn start(
    config: &PlannerConfig,
    llm: Option<Llm>,
    tools: Tools,
) -> Result<PlannerBus, Error> {
    if let Some((key, m)) = problems(config).into_iter().next() {
        return Err(Error::Planner(format!("{key}: {m}")));
    }
    let url = config
        .nats_url
        .as_deref()
        .ok_or_else(|| Error::Planner("planner.nats_url is not set".into()))?;
    let cap = config.max_concurrent.clamp(1, MAX_CONCURRENT);
    let client = async_nats::ConnectOptions::new()
        .name("weft-planner")
        .connection_timeout(Duration::from_secs(5))
        // A bounded buffer: requests beyond it while the loop is behind are dropped by the
        // client (their callers time out) rather than held in memory.
        .subscription_capacity((cap * 4).max(64))
        .connect(url)
        .await
        .map_err(|e| Error::Planner(format!("cannot connect to `{url}`: {e}")))?;
    let mut sub = client
        .queue_subscribe(config.subject.clone(), config.queue_group.clone())
        .await
        .map_err(|e| Error::Planner(format!("cannot subscribe to `{}`: {e}", config.subject)))?;
    // The subscription is registered with the server before `spawn` returns.
    registered(&client)
        .await
        .map_err(|e| Error::Planner(format!("cannot reach `{url}`: {e}")))?;
    let svc = Arc::new(Service {
        client,
        llm,
        tools,
        tenant: config.tenant.clone(),
        subject: config.subject.clone(),
        max_request_bytes: config.max_request_bytes,
    });
    let permits = Arc::new(Semaphore::new(cap));
    let (stop_tx, mut stop_rx) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        loop {
            let msg = tokio::select! {
                _ = &mut stop_rx => break,
                m = sub.next() => match m {
                    Some(m) => m,
                    None => break,
                },
            };
            let Some(to) = svc.reply_to(&msg) else {
                tracing::warn!(
                    subject = %msg.subject,
                    "planner request with no reply subject and no trace id: dropped"
                );
                continue;
            };
            let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
                let r = refusal_body(
                    503,
                    "busy",
                    format!("{cap} planner requests are running; try again later"),
                    None,
                );
                svc.send(&to, 503, r).await;
                continue;
            };
            let svc = Arc::clone(&svc);
            tokio::spawn(async move {
                let _permit = permit;
                let inner = {
                    let svc = Arc::clone(&svc);
                    let payload = msg.payload.clone();
                    let trace = to.trace.clone();
                    tokio::spawn(async move { svc.respond(&payload, &trace).await })
                };
                let (status, body) = match inner.await {
                    Ok(r) => r,
                    Err(e) => {
                        tracing::error!(error = %e, "the planner task failed");
                        (
                            500,
                            refusal_body(500, "internal", "the planner failed".into(), None),
                        )
                    }
                };
                svc.send(&to, status, body).await;
            });
        }
        let _ = sub.unsubscribe().await;
        // Running requests answer before the service ends.
        let _ = tokio::time::timeout(
            DRAIN_TIMEOUT,
            permits.acquire_many(u32::try_from(cap).unwrap_or(u32::MAX)),
        )
        .await;
        let _ = svc.client.flush().await;
    });
    Ok(PlannerBus {
        subject: config.subject.clone(),
        stop: Some(stop_tx),
        task: Some(task),
    })
}

/// Where one answer goes and under which trace id.
struct ReplyTo {
    subject: String,
    trace: String,
}

impl Service {
    /// The reply subject of `msg` (see the module docs), or `None` when it has nowhere to go.
    fn reply_to(&self, msg: &async_nats::Message) -> Option<ReplyTo> {
        let header = msg
            .headers
            .as_ref()
            .and_then(|h| h.get(TRACE_HEADER))
            .map(|v| v.as_str().to_string())
            .filter(|s| !s.is_empty());
        let trace = || {
            header.clone().or_else(|| {
                // Only a body small enough to be served is read for its trace id.
                (msg.payload.len() <= self.max_request_bytes)
                    .then(|| serde_json::from_slice::<Value>(&msg.payload).ok())
                    .flatten()?
                    .get("trace_id")?
                    .as_str()
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
            })
        };
        match &msg.reply {
            Some(r) => Some(ReplyTo {
                subject: r.to_string(),
                trace: header
                    .clone()
                    .unwrap_or_else(|| weft_llm::ids::new_id("react")),
            }),
            None => {
                let t = trace()?;
                Some(ReplyTo {
                    subject: format!("{}.reply.{}", self.subject, weft_sources::subject_token(&t)),
                    trace: t,
                })
            }
        }
    }

    /// The answer to one payload: its status and JSON body.
    async fn respond(&self, payload: &[u8], trace: &str) -> (u16, Value) {
        if payload.len() > self.max_request_bytes {
            return (
                413,
                refusal_body(
                    413,
                    "payload_too_large",
                    format!(
                        "the request is {} bytes; the limit is {} (planner.max_request_bytes)",
                        payload.len(),
                        self.max_request_bytes
                    ),
                    None,
                ),
            );
        }
        let req: PlannerRequest = match serde_json::from_slice(payload) {
            Ok(r) => r,
            Err(e) => {
                let (code, what) = if e.is_data() {
                    ("invalid_request", "the expected JSON object")
                } else {
                    ("invalid_json", "valid JSON")
                };
                return (
                    400,
                    refusal_body(
                        400,
                        code,
                        format!("the request body is not {what}: {e}"),
                        None,
                    ),
                );
            }
        };
        let corr = weft_llm::Correlation {
            correlation_id: trace.to_string(),
            ..weft_llm::Correlation::new(self.tenant.as_str())
        };
        let tools = self.tools.for_tenant(&self.tenant).await;
        match weft_llm::react::answer(self.llm.as_ref(), &tools, &corr, &req).await {
            Ok(r) => match serde_json::to_value(&r) {
                Ok(v) => (200, v),
                Err(e) => (
                    500,
                    refusal_body(500, "internal", format!("cannot encode: {e}"), None),
                ),
            },
            Err(r) => {
                let status = r.kind.status();
                (status, refusal_json(&r))
            }
        }
    }

    async fn send(&self, to: &ReplyTo, status: u16, body: Value) {
        let mut headers = async_nats::HeaderMap::new();
        headers.insert(TRACE_HEADER, to.trace.as_str());
        headers.insert(STATUS_HEADER, status.to_string());
        let bytes = serde_json::to_vec(&body).unwrap_or_default();
        if let Err(e) = self
            .client
            .publish_with_headers(to.subject.clone(), headers, bytes.into())
            .await
        {
            tracing::warn!(subject = %to.subject, error = %e, "cannot send a planner answer");
        }
    }
}

fn refusal_json(r: &Refusal) -> Value {
    refusal_body(
        r.kind.status(),
        r.code,
        r.message.clone(),
        r.hint.map(str::to_string),
    )
}

/// `{"error": {"code", "message", "status", "hint"?}}`.
fn refusal_body(status: u16, code: &str, message: String, hint: Option<String>) -> Value {
    let mut e = json!({"code": code, "message": message, "status": status});
    if let Some(h) = hint {
        e["hint"] = Value::String(h);
    }
    json!({ "error": e })
}
