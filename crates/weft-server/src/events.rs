//! Events in and out. `POST /v1/events` takes one structured-mode CloudEvent
//! (`application/cloudevents+json` or `application/json`) or a batch
//! (`application/cloudevents-batch+json`), routes each through `Engine::ingest` (to
//! `weftinstance`, or by (tenant, type) to every waiting instance) and answers `202` once
//! the receiving instances' journal records are durable. `GET /v1/events/stream` is the
//! tenant's lifecycle events as Server-Sent Events.

use std::collections::BTreeSet;
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
use crate::body::{ApiQuery, Cap, content_type, parse_json, read_capped};
use crate::error::{ApiError, ApiResult, Problem};
use crate::names::{check_name, valid_name};
use crate::state::AppState;

/// Most events in one batch.
pub const MAX_BATCH: usize = 10_000;

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

fn text_attr<'a>(
    o: &'a serde_json::Map<String, Value>,
    k: &str,
    at: &str,
) -> Result<Option<&'a str>, ApiError> {
    match o.get(k) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(_) => Err(invalid(format!("{at}`{k}` must be a string"))),
    }
}

fn check_event(v: Value, at: &str) -> Result<Incoming, ApiError> {
    let Value::Object(mut o) = v else {
        return Err(invalid(format!("{at}a CloudEvent must be a JSON object")));
    };
    match text_attr(&o, "specversion", at)? {
        Some("1.0") => {}
        Some(other) => {
            return Err(invalid(format!(
                "{at}`specversion` is `{other}`; only 1.0 is supported"
            )));
        }
        None => return Err(invalid(format!("{at}`specversion` is missing"))),
    }
    for k in ["id", "source", "type"] {
        match text_attr(&o, k, at)? {
            Some(s) if !s.is_empty() => {}
            _ => return Err(invalid(format!("{at}`{k}` is missing or empty"))),
        }
    }
    if o.contains_key("data_base64") {
        return Err(invalid(format!(
            "{at}`data_base64` is not supported; send JSON `data`"
        )));
    }
    let ty = text_attr(&o, "type", at)?.unwrap_or_default().to_string();
    if ty.len() > 256 || ty.chars().any(char::is_control) {
        return Err(invalid(format!("{at}`type` is not a valid event name")));
    }
    let instance = text_attr(&o, "weftinstance", at)?.map(str::to_string);
    if let Some(i) = &instance
        && !valid_name(i)
    {
        return Err(invalid(format!(
            "{at}`weftinstance` is not a valid instance id"
        )));
    }
    let correlation = text_attr(&o, "weftcorrelation", at)?.map(str::to_string);
    let data = o.remove("data").unwrap_or_else(|| json!({}));
    Ok(Incoming {
        ty,
        data,
        instance,
        correlation,
    })
}

/// `202` body.
#[derive(Debug, Serialize, ToSchema)]
pub struct Accepted {
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
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
        (status = 429, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn ingest(
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
    let v: Value = parse_json(&bytes)?;
    let events = match (v, batch) {
        (Value::Array(a), Some(true) | None) => {
            if a.len() > MAX_BATCH {
                return Err(invalid(format!(
                    "a batch holds at most {MAX_BATCH} events, got {}",
                    a.len()
                )));
            }
            a.into_iter()
                .enumerate()
                .map(|(k, e)| check_event(e, &format!("event {k}: ")))
                .collect::<Result<Vec<_>, _>>()?
        }
        (Value::Array(_), Some(false)) => {
            return Err(invalid(
                "a batch must be sent as application/cloudevents-batch+json".into(),
            ));
        }
        (_, Some(true)) => {
            return Err(invalid(
                "application/cloudevents-batch+json takes a JSON array of events".into(),
            ));
        }
        (v, _) => vec![check_event(v, "")?],
    };
    let engine = state.inner.durable.engine();
    // Check every addressed event before ingesting any, so a 4xx means nothing was accepted.
    for (k, e) in events.iter().enumerate() {
        let Some(id) = &e.instance else { continue };
        let at = if events.len() > 1 {
            format!("event {k}: ")
        } else {
            String::new()
        };
        let live = engine
            .handle(id)
            .filter(|h| h.tenant() == tenant && !h.state().status.is_terminal());
        let Some(h) = live else {
            let mut err = not_live(&state, &tenant, id).await;
            err.detail = format!("{at}{}", err.detail);
            return Err(err);
        };
        let net = &h.plan().net;
        let accepted = net
            .event_id(&e.ty)
            .is_some_and(|ev| net.event(ev).kind == weft_core::EventKind::Input);
        if !accepted {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "event_not_accepted",
                format!(
                    "{at}plan `{}` of instance `{id}` has no input event `{}`",
                    h.plan().name,
                    e.ty
                ),
            )
            .hint("the event's `type` must be an input event of the instance's plan"));
        }
    }
    let mut targets: BTreeSet<String> = BTreeSet::new();
    let mut routed = 0;
    let started = Instant::now();
    for (k, e) in events.iter().enumerate() {
        let at = if events.len() > 1 {
            format!("event {k}: ")
        } else {
            String::new()
        };
        match &e.instance {
            Some(id) => {
                match engine.ingest(
                    &tenant,
                    &e.ty,
                    e.data.clone(),
                    e.correlation.as_deref(),
                    Some(id),
                ) {
                    Ok(n) => routed += n,
                    Err(weft_runtime::Error::UnknownInstance(_)) => {
                        let mut err = not_live(&state, &tenant, id).await;
                        err.detail = format!("{at}{}", err.detail);
                        return Err(err);
                    }
                    Err(err @ weft_runtime::Error::EventNotAccepted { .. }) => {
                        return Err(ApiError::new(
                            StatusCode::UNPROCESSABLE_ENTITY,
                            "event_not_accepted",
                            format!("{at}{err}"),
                        )
                        .hint("the event's `type` must be an input event of the instance's plan"));
                    }
                    Err(err) => return Err(ApiError::internal(err)),
                }
                targets.insert(id.clone());
            }
            None => {
                targets.extend(engine.routed_instances(&tenant, &e.ty));
                routed += engine
                    .ingest(
                        &tenant,
                        &e.ty,
                        e.data.clone(),
                        e.correlation.as_deref(),
                        None,
                    )
                    .map_err(ApiError::internal)?;
            }
        }
    }
    let journal = state.inner.durable.journal();
    let waits = targets.iter().map(|t| journal.barrier(t));
    for r in futures::future::join_all(waits).await {
        r.map_err(ApiError::internal)?;
    }
    let m = &state.inner.metrics;
    m.journal_commit.observe(started.elapsed().as_secs_f64());
    m.events_ingested.inc_by(events.len() as u64);
    m.events_routed.inc_by(routed as u64);
    Ok((
        StatusCode::ACCEPTED,
        Json(Accepted {
            accepted: events.len(),
            routed,
        }),
    ))
}

/// `GET /v1/events/stream` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamQuery {
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
pub fn event_json(ev: &CloudEvent) -> Value {
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
        (status = 400, body = Problem, content_type = "application/problem+json"),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 429, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub async fn stream(
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
    let events = sub
        .filter_map(move |d| {
            let out = match d {
                Delivery::Event(ev) => type_matches(&patterns, &ev.ty).then(|| {
                    Event::default()
                        .id(ev.id.clone())
                        .event(ev.ty.clone())
                        .data(event_json(&ev).to_string())
                }),
                Delivery::Lagged(n) => Some(
                    Event::default()
                        .event("weft.lagged")
                        .data(json!({"missed": n}).to_string()),
                ),
            };
            std::future::ready(out.map(Ok))
        })
        .take_until(stop);
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(state.config().keep_alive)))
}
