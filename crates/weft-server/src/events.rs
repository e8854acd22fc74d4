//! Events in and out. `POST /v1/events` takes one structured-mode CloudEvent
//! (`application/cloudevents+json` or `application/json`) or a batch
//! (`application/cloudevents-batch+json`), routes each through `Engine::ingest` (to
//! `weftinstance`, or by (tenant, type) to every waiting instance) and answers `202` once
//! the receiving instances' journal records are durable. `GET /v1/events/stream` is the
//! tenant's lifecycle events as Server-Sent Events.

use std::borrow::Cow;
use std::convert::Infallible;
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
        ty,
        data: e.data,
        instance: e.weftinstance,
        correlation: e.weftcorrelation,
    })
}

/// `202` body.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Accepted {
    /// Events accepted.
    pub accepted: usize,
    /// Deliveries to instances.
    pub routed: usize,
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
        (status = 202, body = Accepted),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
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
    let engine = state.inner.durable.engine();
    let many = events.len() > 1;
    let at = |k: usize| {
        if many {
            format!("event {k}: ")
        } else {
            String::new()
        }
    };
    // A batch is checked whole before anything of it is ingested, so a 4xx means nothing
    // was accepted. (A single event is checked by the ingest itself, with the same answers.)
    // A registered instance is not terminal: the engine unregisters an instance in the loop
    // turn that ends it.
    if many {
        for (k, e) in events.iter().enumerate() {
            let Some(id) = &e.instance else { continue };
            let Some(h) = engine.handle(id).filter(|h| h.tenant() == tenant) else {
                let mut err = not_live(&state, &tenant, id).await;
                err.detail = format!("{}{}", at(k), err.detail);
                return Err(err);
            };
            let plan = h.plan();
            let net = &plan.net;
            let accepted = net
                .event_id(&e.ty)
                .is_some_and(|ev| net.event(ev).kind == weft_core::EventKind::Input);
            if !accepted {
                return Err(ApiError::new(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    "event_not_accepted",
                    format!(
                        "{}plan `{}` of instance `{id}` has no input event `{}`",
                        at(k),
                        plan.name,
                        e.ty
                    ),
                )
                .hint("the event's `type` must be an input event of the instance's plan"));
            }
        }
    }
    let accepted = events.len();
    let mut targets: Vec<String> = Vec::with_capacity(accepted);
    let mut routed = 0;
    let request_id = crate::request_id::current_request_id();
    let durable = &state.inner.durable;
    let started = Instant::now();
    for (k, e) in events.into_iter().enumerate() {
        let Incoming {
            ty,
            data,
            instance,
            correlation,
        } = e;
        match instance {
            Some(id) => {
                match durable.ingest_with(
                    &tenant,
                    &ty,
                    data,
                    correlation.as_deref(),
                    Some(&id),
                    request_id.as_deref(),
                ) {
                    Ok(n) => routed += n,
                    Err(weft_runtime::Error::UnknownInstance(_)) => {
                        let mut err = not_live(&state, &tenant, &id).await;
                        err.detail = format!("{}{}", at(k), err.detail);
                        return Err(err);
                    }
                    Err(err @ weft_runtime::Error::EventNotAccepted { .. }) => {
                        return Err(ApiError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "event_not_accepted",
                            format!("{}{err}", at(k)),
                        )
                        .hint("the event's `type` must be an input event of the instance's plan"));
                    }
                    Err(err) => return Err(ApiError::internal(err)),
                }
                targets.push(id);
            }
            None => {
                targets.extend(engine.routed_instances(&tenant, &ty));
                routed += durable
                    .ingest_with(
                        &tenant,
                        &ty,
                        data,
                        correlation.as_deref(),
                        None,
                        request_id.as_deref(),
                    )
                    .map_err(ApiError::internal)?;
            }
        }
    }
    if targets.len() > 1 {
        targets.sort_unstable();
        targets.dedup();
    }
    let journal = state.inner.durable.journal();
    let waits = targets.iter().map(|t| journal.barrier(t));
    for r in futures::future::join_all(waits).await {
        r.map_err(ApiError::internal)?;
    }
    let m = &state.inner.metrics;
    m.journal_commit.observe(started.elapsed().as_secs_f64());
    m.events_ingested.inc_by(accepted as u64);
    m.events_routed.inc_by(routed as u64);
    Ok((StatusCode::ACCEPTED, Json(Accepted { accepted, routed })))
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
