//! Events in and out. `POST /v1/events` takes one structured-mode CloudEvent
//! (`application/cloudevents+json` or `application/json`) or a batch
//! (`application/cloudevents-batch+json`), routes each through `Engine::ingest` (to
//! `weftinstance`, or by (tenant, type) to every waiting instance) and answers `202` once
//! the receiving instances' journal records are durable. A batch is all or nothing
//! (`Engine::ingest_batch`: every event checked, then all queued while the receiving loops
//! are held), and an event whose `source` + `id` was applied before is not applied again
//! (`dedup.rs`; counted in `duplicates`). `GET /v1/events/stream` is the tenant's lifecycle
//! events as Server-Sent Events.

use std::borrow::Cow;
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
use weft_runtime::{CloudEvent, Delivery, Filter};

use crate::auth::Tenant;
use crate::body::{ApiQuery, Cap, content_type, read_capped};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::{check_name, valid_name};
use crate::state::AppState;

/// Most events in one batch.
pub(crate) const MAX_BATCH: usize = 10_000;

/// One incoming event, checked.
#[derive(Debug)]
struct Incoming {
    source: String,
    id: String,
    ty: String,
    data: Value,
    instance: Option<String>,
    correlation: Option<String>,
}

fn invalid(detail: String) -> ApiError {
    ApiError::new(StatusCode::BAD_REQUEST, "invalid_cloudevent", detail).hint(
        "send a CloudEvents 1.0 structured-mode JSON object: {\"specversion\":\"1.0\",\"id\":\"…\",\"source\":\"…\",\"type\":\"<plan event>\",\"data\":{…},\"weftinstance\"?:\"<id>\"}",
    )
}

/// A CloudEvent as sent, parsed straight from the body (attributes weft does not use are
/// skipped, string attributes borrowed from the body when they hold no escapes).
#[derive(Deserialize)]
struct RawEvent<'a> {
    #[serde(borrow, default)]
    specversion: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    id: Option<Cow<'a, str>>,
    #[serde(borrow, default)]
    source: Option<Cow<'a, str>>,
    #[serde(borrow, default, rename = "type")]
    ty: Option<Cow<'a, str>>,
    #[serde(default = "no_data")]
    data: Value,
    #[serde(default, deserialize_with = "present")]
    data_base64: bool,
    #[serde(default)]
    weftinstance: Option<String>,
    #[serde(default)]
    weftcorrelation: Option<String>,
}

fn no_data() -> Value {
    Value::Object(serde_json::Map::new())
}

/// `true` whenever the attribute is there (even `null`).
fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    serde::de::IgnoredAny::deserialize(d).map(|_| true)
}

/// The body as one event or a batch, parsed once; a JSON syntax error is `invalid_json`,
/// anything else wrong `invalid_cloudevent`.
fn parse_events(bytes: &[u8], batch: Option<bool>) -> Result<Vec<RawEvent<'_>>, ApiError> {
    let is_array = bytes
        .iter()
        .find(|b| !b.is_ascii_whitespace())
        .is_some_and(|b| *b == b'[');
    let err = |e: serde_json::Error, what: &str| {
        if e.is_data() {
            invalid(format!("{what}: {e}"))
        } else {
            ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid_json",
                format!("the request body is not valid JSON: {e}"),
            )
        }
    };
    match (is_array, batch) {
        (true, Some(true) | None) => {
            let events: Vec<RawEvent<'_>> = serde_json::from_slice(bytes)
                .map_err(|e| err(e, "a batch is a JSON array of CloudEvent objects"))?;
            if events.len() > MAX_BATCH {
                return Err(invalid(format!(
                    "a batch holds at most {MAX_BATCH} events, got {}",
                    events.len()
                )));
            }
            Ok(events)
        }
        (true, Some(false)) => Err(invalid(
            "a batch must be sent as application/cloudevents-batch+json".into(),
        )),
        (false, Some(true)) => {
            // Keep JSON syntax errors apart from a well-formed non-array.
            serde_json::from_slice::<serde::de::IgnoredAny>(bytes).map_err(|e| err(e, ""))?;
            Err(invalid(
                "application/cloudevents-batch+json takes a JSON array of events".into(),
            ))
        }
        (false, _) => serde_json::from_slice(bytes)
            .map(|e| vec![e])
            .map_err(|e| err(e, "a CloudEvent is a JSON object")),
    }
}

/// Checks one parsed event (`k`: its index in a batch, for the message).
fn check_event(e: RawEvent<'_>, k: Option<usize>) -> Result<Incoming, ApiError> {
    let at = || k.map_or_else(String::new, |k| format!("event {k}: "));
    match e.specversion.as_deref() {
        Some("1.0") => {}
        Some(other) => {
            return Err(invalid(format!(
                "{}`specversion` is `{other}`; only 1.0 is supported",
                at()
            )));
        }
        None => return Err(invalid(format!("{}`specversion` is missing", at()))),
    }
    for (name, v) in [("id", &e.id), ("source", &e.source), ("type", &e.ty)] {
        if v.as_deref().is_none_or(str::is_empty) {
            return Err(invalid(format!("{}`{name}` is missing or empty", at())));
        }
    }
    if e.data_base64 {
        return Err(invalid(format!(
            "{}`data_base64` is not supported; send JSON `data`",
            at()
        )));
    }
    let ty = e.ty.unwrap_or_default().into_owned();
    if ty.len() > 256 || ty.chars().any(char::is_control) {
        return Err(invalid(format!("{}`type` is not a valid event name", at())));
    }
    if let Some(i) = &e.weftinstance
        && !valid_name(i)
    {
        return Err(invalid(format!(
            "{}`weftinstance` is not a valid instance id",
            at()
        )));
    }
    Ok(Incoming {
        source: e.source.unwrap_or_default().into_owned(),
        id: e.id.unwrap_or_default().into_owned(),
        ty,
        data: e.data,
        instance: e.weftinstance,
        correlation: e.weftcorrelation,
    })
}

/// How often a request waiting for durability checks whether the store refuses writes.
const REFUSAL_CHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// `503` while the store refuses journal writes (a full disk, a lost connection).
fn store_refusing() -> ApiError {
    let mut e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        "store_unavailable",
        "the store refuses writes right now; events already accepted are written when it recovers",
    )
    .hint("retry after the `Retry-After` seconds with the same CloudEvent ids: an event already applied is answered as a duplicate");
    e.retry_after = Some(1);
    e
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
#[utoipa::path(post, path = "/v1/events", tag = "events",
    request_body(description = "A structured-mode CloudEvent (`application/cloudevents+json` or `application/json`) or a JSON array of them (`application/cloudevents-batch+json`)",
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
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes; events of this request that were accepted are written when it recovers, and a retry is deduplicated", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn ingest(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    req: Request,
) -> ApiResult<(StatusCode, Json<Accepted>)> {
    let ct = content_type(req.headers());
    let batch = match ct.as_deref() {
        Some("application/cloudevents-batch+json") => Some(true),
        Some("application/cloudevents+json") => Some(false),
        Some("application/json") => None,
        other => {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!(
                    "expected application/cloudevents+json, application/cloudevents-batch+json or application/json, got {}",
                    other.map_or_else(|| "none".to_string(), |c| format!("`{c}`"))
                ),
            )
            .hint("structured-mode CloudEvents only (binary mode with ce-* headers is not supported)"));
        }
    };
    let bytes = read_capped(req, &state, Cap::Default).await?;
    let raw = parse_events(&bytes, batch)?;
    let many = raw.len() > 1;
    let events = raw
        .into_iter()
        .enumerate()
        .map(|(k, e)| check_event(e, many.then_some(k)))
        .collect::<Result<Vec<_>, _>>()?;
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
            () = tokio::time::sleep(REFUSAL_CHECK) => {
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
    /// Comma-separated event types (`plan.completed`); `plan.step.*` matches a prefix.
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
        || patterns.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => ty.starts_with(prefix),
            None => p == ty,
        })
}

/// Server-Sent Events: the tenant's lifecycle events.
#[utoipa::path(get, path = "/v1/events/stream", tag = "events", params(StreamQuery),
    responses(
        (status = 200, description = "`text/event-stream`: `id:` event id, `event:` CloudEvent type, `data:` the CloudEvent JSON", content_type = "text/event-stream", body = String),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn stream(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
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
    let sub = state.inner.durable.engine().subscribe(Filter {
        type_prefix: None,
        tenant: Some(tenant),
        instance: q.instance.clone(),
    });
    let mut shutdown = state.inner.shutdown.subscribe();
    let stop = async move {
        let _ = shutdown.wait_for(|s| *s).await;
    };
    let lagged = state.inner.metrics.bus_lagged.clone();
    let events = sub
        .filter_map(move |d| {
            let out = match d {
                Delivery::Event(ev) => type_matches(&patterns, &ev.ty).then(|| {
                    Event::default()
                        .id(ev.id.clone())
                        .event(ev.ty.clone())
                        .data(event_json(&ev).to_string())
                }),
                Delivery::Lagged(n) => Some({
                    lagged.inc_by(n);
                    Event::default()
                        .event("weft.lagged")
                        .data(json!({"missed": n}).to_string())
                }),
            };
            std::future::ready(out.map(Ok))
        })
        .take_until(stop);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive)))
}
