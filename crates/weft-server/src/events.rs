//! Events in and out. `POST /v1/events` takes one structured-mode CloudEvent
//! (`application/cloudevents+json` or `application/json`), a batch
//! (`application/cloudevents-batch+json`) or one binary-mode event (`ce-*` headers, the body
//! its data), all read and checked alike by `cloudevents.rs`, routes each through `Engine::ingest` (to
//! `weftinstance`, or by (tenant, type) to every waiting instance) and answers `202` once
//! the receiving instances' journal records are durable. A batch is all or nothing
//! (`Engine::ingest_batch`: every event checked, then all queued while the receiving loops
//! are held), and an event whose `source` + `id` was applied before is not applied again
//! (`dedup.rs`; counted in `duplicates`). `GET /v1/events/stream` is the tenant's lifecycle
//! events as Server-Sent Events.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Instant;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use weft_runtime::CloudEvent;

use crate::auth::Tenant;
use crate::body::{ApiQuery, Cap, content_type, read_capped};
use crate::cloudevents::{Incoming, Invalid, is_binary, parse_binary, parse_structured};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::check_name;
use crate::replay::{Entry, Item};
use crate::state::AppState;

fn invalid(detail: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_cloudevent", detail).hint(
        "send a CloudEvents 1.0 structured-mode JSON object: {\"specversion\":\"1.0\",\"id\":\"…\",\"source\":\"…\",\"type\":\"<plan event>\",\"data\":{…},\"weftinstance\"?:\"<id>\"}, or a binary-mode event: the headers ce-specversion: 1.0, ce-id, ce-source, ce-type (ce-weftinstance, ce-weftcorrelation optional) and the data as a JSON body",
    )
}

/// The problem for a request holding no acceptable event.
fn refused(e: Invalid) -> ApiError {
    match e.code {
        "invalid_json" => ApiError::new(StatusCode::BAD_REQUEST, "invalid_json", e.detail),
        "unsupported_media_type" => ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            e.detail,
        )
        .hint("send the data as JSON (Content-Type: application/json)"),
        _ => invalid(e.detail),
    }
}

/// `503` while the store refuses journal writes (a full disk, a lost connection).
fn store_refusing() -> ApiError {
    crate::written::refused(
        "the store refuses writes right now; events already accepted are written when it recovers",
        "retry after the `Retry-After` seconds with the same CloudEvent ids: an event already applied is answered as a duplicate",
    )
}

/// `202` body.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Accepted {
    /// Events accepted.
    pub accepted: usize,
    /// Deliveries to instances.
    pub routed: usize,
    /// Events not applied because the same `source` + `id` was applied before (within
    /// `server.event_dedup_secs`) or earlier in the same batch: delivered already.
    pub duplicates: usize,
}

async fn not_live(state: &AppState, tenant: &str, id: &str) -> ApiError {
    if let Some(h) = state.handle(id).filter(|h| h.tenant() == tenant) {
        return ApiError::new(
            StatusCode::CONFLICT,
            "instance_terminal",
            format!(
                "instance `{id}` is {} and takes no events",
                h.state().status.name()
            ),
        )
        .hint("only running or waiting instances accept events");
    }
    match state.store().get_instance(id).await {
        Ok(Some(r)) if r.tenant == tenant => ApiError::new(
            StatusCode::CONFLICT,
            "instance_terminal",
            format!(
                "instance `{id}` is {} and takes no events",
                r.status.as_str()
            ),
        )
        .hint("only running or waiting instances accept events"),
        _ => ApiError::not_found(format!("instance `{id}`")),
    }
}

/// Ingest one CloudEvent or a batch.
#[utoipa::path(post, path = "/v1/events", operation_id = "events_send", tag = "events",
    params(
        ("ce-specversion" = Option<String>, Header, description = "Binary mode (the CloudEvents HTTP binding): `1.0`. Any `ce-` header makes the request a binary-mode event: its attributes are the `ce-*` headers (percent-encoded), its data the body (JSON: `application/json`, `text/json`, `+json`, an empty body is `{}`; or `text/plain`, a JSON string). `ce-specversion`, `ce-id`, `ce-source` and `ce-type` are required (else `400 invalid_cloudevent` naming the header); the same checks, deduplication and limits as structured mode apply."),
        ("ce-id" = Option<String>, Header, description = "Binary mode: the event id (deduplicated with `ce-source`)."),
        ("ce-source" = Option<String>, Header, description = "Binary mode: the event source."),
        ("ce-type" = Option<String>, Header, description = "Binary mode: the event type (a plan event)."),
        ("ce-weftinstance" = Option<String>, Header, description = "Binary mode: the instance the event is for."),
        ("ce-weftcorrelation" = Option<String>, Header, description = "Binary mode: the token correlation."),
    ),
    request_body(description = "A structured-mode CloudEvent (`application/cloudevents+json` or `application/json`), a JSON array of them (`application/cloudevents-batch+json`), or, with `ce-*` headers, a binary-mode event's data",
        content(
            (Object = "application/cloudevents+json"),
            (Vec<Object> = "application/cloudevents-batch+json"),
            (Object = "application/json"),
        )),
    responses(
        (status = 202, description = "Every event applied, or recognised as a duplicate (same `source` + `id` within `server.event_dedup_secs`, or repeated in the batch) and counted in `duplicates` instead of being applied again. A batch is all or nothing: any error status means no event of it was applied.", body = Accepted),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 408, description = "`request_timeout`: the body did not arrive within `server.body_timeout_ms`", body = Problem, content_type = "application/problem+json"),
        (status = 409, description = "`instance_terminal`, or `event_in_progress`: another request is ingesting the same event", body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`event_not_accepted`: the type is not an input event of the instance's plan; `payload_invalid`: the data does not match the event's `schema` in the plan of an instance it would reach (no instance receives it, and its id may be sent again)", body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes; events of this request that were accepted are written when it recovers, and a retry is deduplicated", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn ingest(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    req: Request,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let ct = content_type(req.headers());
    let headers = req.headers();
    let pairs = || headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
    let batch = match ct.as_deref() {
        Some("application/cloudevents-batch+json") => Some(Some(true)),
        Some("application/cloudevents+json") => Some(Some(false)),
        // Binary mode: attributes in `ce-*` headers, the body is the data.
        _ if is_binary(pairs()) => None,
        Some("application/json") => Some(None),
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "expected application/cloudevents+json, application/cloudevents-batch+json or application/json, got {}",
                    other.map_or_else(|| "none".to_string(), |c| format!("`{c}`"))
                ),
            )
            .hint("send a structured-mode CloudEvent, a batch, or a binary-mode event (ce-specversion, ce-id, ce-source and ce-type headers, the data as the body)"));
        }
    };
    let binary: Option<Vec<(String, Vec<u8>)>> = batch.is_none().then(|| {
        pairs()
            .filter(|(n, _)| n.starts_with("ce-"))
            .map(|(n, v)| (n.to_string(), v.to_vec()))
            .collect()
    });
    let bytes = read_capped(req, &state, Cap::Default).await?;
    let events = match (batch, &binary) {
        (Some(batch), _) => parse_structured(&bytes, batch).map_err(refused)?,
        (None, Some(h)) => vec![
            parse_binary(
                h.iter().map(|(n, v)| (n.as_str(), v.as_slice())),
                ct.as_deref(),
                &bytes,
            )
            .map_err(refused)?,
        ],
        (None, None) => return Err(ApiError::internal("no mode")),
    };
    let many = events.len() > 1;
    drop(bytes);
    let journal = Arc::clone(state.inner.durable.journal());
    if journal.store_refusing() {
        return Err(store_refusing());
    }
    let ids: Vec<(String, String)> = events
        .iter()
        .map(|e| (e.source.clone(), e.id.clone()))
        .collect();
    let (dup, claim) = crate::dedup::check(&state, &tenant, &ids).await?;
    let duplicates = dup.iter().filter(|d| **d).count();
    let engine = state.inner.durable.engine();
    let at = |k: usize| {
        if many {
            format!("event {k}: ")
        } else {
            String::new()
        }
    };
    let accepted = events.len();
    let mut targets: Vec<String> = Vec::with_capacity(accepted);
    let mut routed = 0;
    let request_id = crate::request_id::current_request_id();
    let durable = &state.inner.durable;
    let started = Instant::now();
    let fresh: Vec<(usize, Incoming)> = events
        .into_iter()
        .enumerate()
        .filter(|(k, _)| !dup[*k])
        .collect();
    let applied: Vec<usize> = fresh.iter().map(|(k, _)| *k).collect();
    let (st, tn) = (&state, &tenant);
    let refused = |k: usize, err: weft_runtime::Error| async move {
        match err {
            weft_runtime::Error::UnknownInstance(id) => {
                let mut e = not_live(st, tn, &id).await;
                e.detail = format!("{}{}", at(k), e.detail);
                e
            }
            err @ weft_runtime::Error::EventNotAccepted { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "event_not_accepted",
                format!("{}{err}", at(k)),
            )
            .hint("the event's `type` must be an input event of the instance's plan"),
            err @ weft_runtime::Error::PayloadInvalid { .. } => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "payload_invalid",
                format!("{}{err}", at(k)),
            )
            .hint("send `data` that matches the event's `schema` in the plan (GET /v1/plans/{name} shows it); no instance received the event"),
            err => ApiError::internal(err),
        }
    };
    if let [(k, _)] = fresh.as_slice() {
        // One event: the engine's own checks answer.
        let k = *k;
        let Some((_, e)) = fresh.into_iter().next() else {
            return Err(ApiError::internal("no event"));
        };
        match &e.instance {
            Some(id) => targets.push(id.clone()),
            None => targets.extend(engine.routed_instances(&tenant, &e.ty)),
        }
        match durable.ingest_with(
            &tenant,
            &e.ty,
            e.data,
            e.correlation.as_deref(),
            e.instance.as_deref(),
            request_id.as_deref(),
        ) {
            Ok(n) => routed += n,
            Err(err) => return Err(refused(k, err).await),
        }
    } else if !fresh.is_empty() {
        // A batch: all or nothing (`Engine::ingest_batch`): every event checked, then all
        // queued while the receiving instances' loops are held.
        let index: Vec<usize> = fresh.iter().map(|(k, _)| *k).collect();
        let batch: Vec<weft_runtime::BatchEvent> = fresh
            .into_iter()
            .map(|(_, e)| {
                match &e.instance {
                    Some(id) => targets.push(id.clone()),
                    None => targets.extend(engine.routed_instances(&tenant, &e.ty)),
                }
                weft_runtime::BatchEvent {
                    event: e.ty,
                    payload: e.data,
                    correlation: e.correlation,
                    instance: e.instance,
                }
            })
            .collect();
        match durable.ingest_batch_with(&tenant, batch, request_id.as_deref()) {
            Ok(counts) => routed += counts.iter().sum::<usize>(),
            Err((j, err)) => return Err(refused(index.get(j).copied().unwrap_or(0), err).await),
        }
    }
    if targets.len() > 1 {
        targets.sort_unstable();
        targets.dedup();
    }
    // Waiting for durability and remembering the events for deduplication run on a task of
    // their own: a client that gives up (or a `503` below) does not stop them, so an event
    // applied is always remembered once durable and a retry is never applied twice.
    let j = Arc::clone(&journal);
    let mut finish = tokio::spawn(async move {
        let waits = targets.iter().map(|t| j.barrier(t));
        for r in futures::future::join_all(waits).await {
            r?;
        }
        crate::dedup::remember(&claim, applied.into_iter()).await;
        drop(claim);
        Ok::<(), weft_durable::DurableError>(())
    });
    loop {
        tokio::select! {
            r = &mut finish => {
                r.map_err(ApiError::internal)?.map_err(ApiError::internal)?;
                break;
            }
            () = tokio::time::sleep(crate::written::REFUSAL_CHECK) => {
                if journal.store_refusing() {
                    // Applied in memory, durable once the store takes writes again; a retry
                    // meanwhile is `409 event_in_progress`, afterwards a duplicate.
                    return Err(store_refusing());
                }
            }
        }
    }
    let m = &state.inner.metrics;
    m.journal_commit.observe(started.elapsed().as_secs_f64());
    m.events_ingested.inc_by(accepted as u64);
    m.events_routed.inc_by(routed as u64);
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            accepted,
            routed,
            duplicates,
        }),
    ))
}

/// `GET /v1/events/stream` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct StreamQuery {
    /// Comma-separated event types (`dev.weft.plan.completed`, or its alias `plan.completed`); `plan.step.*` matches a prefix.
    #[serde(rename = "type")]
    #[param(rename = "type")]
    pub types: Option<String>,
    /// Only this instance.
    pub instance: Option<String>,
    /// Token (for `EventSource`, which cannot set headers; read by the auth layer).
    #[expect(dead_code, reason = "documented here, read by the auth middleware")]
    pub access_token: Option<String>,
}

/// The CloudEvent as sent on the stream (weft's extensions named `weft…`).
pub(crate) fn event_json(ev: &CloudEvent) -> Value {
    json!({
        "specversion": ev.specversion,
        "id": ev.id,
        "source": ev.source,
        "type": ev.ty,
        "time": ev.time,
        "datacontenttype": ev.datacontenttype,
        "wefttenant": ev.tenant,
        "weftinstance": ev.instance,
        "weftcorrelation": ev.correlation,
        "data": ev.data,
    })
}

fn type_matches(patterns: &[String], ty: &str) -> bool {
    patterns.is_empty()
        || patterns
            .iter()
            .any(|p| weft_runtime::bus::type_matches(p, ty))
}

/// Server-Sent Events: the tenant's lifecycle events. A client reconnecting with
/// `Last-Event-ID` first gets the events it missed, within the retention of `replay.rs`.
#[utoipa::path(get, path = "/v1/events/stream", operation_id = "events_stream", tag = "events",
    params(StreamQuery,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id (the last `id:` received): the events after it are sent first. Kept: the tenant's last 4,096 events or 8 MiB in this server process; an id no longer kept gets one `weft.lagged` frame (`{\"missed\": null}`) and the stream continues from now.")),
    responses(
        (status = 200, description = "`text/event-stream`: `id:` event id, `event:` CloudEvent type, `data:` the CloudEvent JSON; `event: weft.lagged` (no id, `data: {\"missed\": n}`) when events were lost for this stream", content_type = "text/event-stream", body = String),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn stream(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    headers: axum::http::HeaderMap,
    ApiQuery(q): ApiQuery<StreamQuery>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>>>> {
    if let Some(i) = &q.instance {
        check_name("instance", i)?;
        crate::instances::owned(&state, &tenant, i).await?;
    }
    let patterns: Vec<String> = q
        .types
        .as_deref()
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    // Resume after `Last-Event-ID` from the buffer every stream reads (`replay.rs`).
    let last_event_id = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
        .filter(|s| !s.is_empty());
    let replay = &state.inner.replay;
    let mut pump_shutdown = state.inner.shutdown.subscribe();
    replay.start(state.inner.durable.engine(), async move {
        let _ = pump_shutdown.wait_for(|s| *s).await;
    });
    let (cursor, gap) = match replay.cursor(&tenant, last_event_id) {
        Ok(cursor) => (cursor, false),
        Err(cursor) => (cursor, true),
    };
    let mut shutdown = state.inner.shutdown.subscribe();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let lagged = state.inner.metrics.bus_lagged.clone();
    let instance = q.instance.clone();
    let missed = move |n: Option<u64>| {
        lagged.inc_by(n.unwrap_or(0));
        Event::default()
            .event("weft.lagged")
            .data(json!({ "missed": n }).to_string())
    };
    let events = replay
        .follow(tenant, cursor, gap)
        .filter_map(move |item| {
            let out = match item {
                Item::Entry(e) => match &*e {
                    Entry::Event { ev, json, .. } => (instance
                        .as_deref()
                        .is_none_or(|i| ev.instance.as_deref() == Some(i))
                        && type_matches(&patterns, &ev.ty))
                    .then(|| {
                        Event::default()
                            .id(ev.id.clone())
                            .event(ev.ty.clone())
                            .data(json.clone())
                    }),
                    Entry::Lost { n, .. } => Some(missed(Some(*n))),
                },
                Item::Missed(n) => Some(missed(n)),
            };
            std::future::ready(out.map(Ok))
        })
        .take_until(stop);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive)))
}
