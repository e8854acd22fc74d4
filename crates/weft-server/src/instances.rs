//! Instance routes: start, list, state (marking with payloads, waiting steps, in-flight
//! actions), trace, journal page, inspect at a sequence number, stop, resume, checkpoint.
//! Live instances are read from the engine; finished or not-yet-recovered ones from the
//! store (the journal folded by weft-durable). Another tenant's instance is `404`.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use weft_core::{Instance, Status};
use weft_runtime::{CompiledPlan, InstanceHandle, TraceEntry};
use weft_store::{InstanceRecord, InstanceStatus, Page};

use crate::auth::Tenant;
use crate::body::{ApiPath, ApiQuery, MaybeJson};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::check_name;
use crate::plans::PlanDoc;
use crate::state::AppState;

/// `POST /v1/instances` body.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct StartRequest {
    /// Name of a stored plan (optional with `plan_inline`).
    #[serde(default)]
    pub plan: Option<String>,
    /// Version (latest when absent).
    #[serde(default)]
    pub version: Option<u32>,
    /// A plan document to store (as a new version) and start.
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub plan_inline: Option<Value>,
    /// The instance input (default `{}`).
    #[serde(default)]
    #[schema(value_type = Option<Object>)]
    pub input: Option<Value>,
}

/// A started / stopped / resumed instance.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InstanceRef {
    /// Instance id.
    pub id: String,
    /// Plan name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub plan: Option<String>,
    /// Plan version.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// Status now.
    pub status: String,
}

/// Start an instance.
#[utoipa::path(post, path = "/v1/instances", operation_id = "instances_start", tag = "instances",
    request_body(content = StartRequest, content_type = "application/json"),
    responses(
        (status = 201, body = InstanceRef),
        Problems,
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "`invalid_plan`, or `input_invalid`: the input does not match the `schema` of an event it goes on (nothing is started)", body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn start(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    crate::body::PlanBody(req): crate::body::PlanBody<StartRequest>,
) -> ApiResult<(StatusCode, Json<InstanceRef>)> {
    let (name, version) = match (&req.plan_inline, &req.plan) {
        (Some(doc), _) => {
            let bytes = Bytes::from(serde_json::to_vec(doc).map_err(ApiError::internal)?);
            let (name, version, _) = crate::plans::store_plan(
                &state,
                &tenant,
                PlanDoc {
                    bytes,
                    value: doc.clone(),
                },
            )
            .await?;
            if req.plan.as_ref().is_some_and(|p| p != &name) {
                return Err(ApiError::bad_request(format!(
                    "`plan` names `{}` but `plan_inline` is plan `{name}`",
                    req.plan.as_deref().unwrap_or_default()
                )));
            }
            (name, Some(version))
        }
        (None, Some(p)) => {
            check_name("plan", p)?;
            (p.clone(), req.version)
        }
        (None, None) => {
            return Err(ApiError::bad_request(
                "give `plan` (a stored plan's name) or `plan_inline` (a plan document)",
            ));
        }
    };
    let (compiled, version) = state.compiled(&tenant, &name, version).await?;
    let input = req.input.unwrap_or_else(|| json!({}));
    crate::written::check(&state)?;
    let h = state.start(&tenant, &compiled, version, input)?;
    let started = std::time::Instant::now();
    crate::written::durable(&state, h.id(), || {
        (
            format!(
                "the store refuses writes right now; instance `{}` was started and is written when it recovers",
                h.id()
            ),
            format!(
                "do not start it again: GET /v1/instances/{} follows it once the store takes writes (GET /readyz)",
                h.id()
            ),
        )
    })
    .await?;
    state
        .inner
        .metrics
        .journal_commit
        .observe(started.elapsed().as_secs_f64());
    Ok((
        StatusCode::CREATED,
        Json(InstanceRef {
            id: h.id().to_string(),
            plan: Some(name),
            version: Some(version),
            status: h.state().status.name().to_string(),
        }),
    ))
}

/// `GET /v1/instances` query.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct ListQuery {
    /// `running`, `waiting`, `completed`, `stuck`, `failed`, `paused`, `stopped`. `waiting`:
    /// settled, but an input event or a pending timer can still move it; `stuck`: nothing
    /// can (see `weft_core::Status`).
    pub status: Option<String>,
    /// Only instances of this plan.
    pub plan: Option<String>,
    /// Page size (1–1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `next` of the previous page.
    pub cursor: Option<String>,
}

/// One entry of the list.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InstanceSummary {
    /// Id.
    pub id: String,
    /// Plan name.
    pub plan: String,
    /// Plan version.
    pub version: u32,
    /// Status.
    pub status: String,
    /// Created (epoch ms).
    pub created_at_ms: i64,
    /// Last status change (epoch ms).
    pub updated_at_ms: i64,
}

/// `GET /v1/instances`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InstanceList {
    /// Instances by id.
    pub instances: Vec<InstanceSummary>,
    /// Cursor of the next page (`null`: last page).
    pub next: Option<String>,
}

fn summary(r: InstanceRecord) -> InstanceSummary {
    InstanceSummary {
        id: r.id,
        plan: r.plan_name,
        version: r.plan_version,
        status: r.status.as_str().to_string(),
        created_at_ms: r.created_at_ms,
        updated_at_ms: r.updated_at_ms,
    }
}

/// List instances, read from their records: an instance's status there is written with the
/// group commit after the instance settles, so one that has just ended may be listed with its
/// previous status for a few milliseconds (`GET /v1/instances/{id}` reads the live state).
#[utoipa::path(get, path = "/v1/instances", operation_id = "instances_list", tag = "instances", params(ListQuery),
    responses(
        (status = 200, body = InstanceList),
        Problems,
    ),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<InstanceList>> {
    let status = match q.status.as_deref() {
        None | Some("") => None,
        Some(s) => Some(InstanceStatus::parse(s).map_err(|_| {
            ApiError::bad_request(format!("unknown status `{s}`"))
                .hint("use running, waiting, completed, stuck, failed, paused or stopped")
        })?),
    };
    if let Some(p) = &q.plan {
        check_name("plan", p)?;
    }
    if let Some(c) = &q.cursor {
        check_name("cursor", c)?;
    }
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit must be 1–1000"));
    }
    let recs = state
        .store()
        .list_instances(
            &tenant,
            status,
            Page {
                after: q.cursor.clone(),
                limit,
            },
        )
        .await?;
    let next = (recs.len() == limit as usize)
        .then(|| recs.last().map(|r| r.id.clone()))
        .flatten();
    let instances = recs
        .into_iter()
        .filter(|r| q.plan.as_ref().is_none_or(|p| &r.plan_name == p))
        .map(summary)
        .collect();
    Ok(Json(InstanceList { instances, next }))
}

/// What is known about one of the tenant's instances.
pub(crate) struct Owned {
    pub record: Option<InstanceRecord>,
    pub live: Option<InstanceHandle>,
}

/// The `503` of a read that first waits for an instance's start to be durable.
fn not_yet(id: &str) -> (String, String) {
    (
        format!("the store refuses writes right now; instance `{id}` was started a moment ago and is not written yet"),
        "retry after the `Retry-After` seconds (GET /readyz says when the store takes writes again)".to_string(),
    )
}

/// The tenant's instance `id`, or `404` (also for other tenants' instances).
pub(crate) async fn owned(state: &AppState, tenant: &str, id: &str) -> ApiResult<Owned> {
    check_name("instance id", id)?;
    let live = state.handle(id).filter(|h| h.tenant() == tenant);
    let record = state
        .store()
        .get_instance(id)
        .await?
        .filter(|r| r.tenant == tenant);
    if live.is_none() && record.is_none() {
        return Err(ApiError::not_found(format!("instance `{id}`")));
    }
    Ok(Owned { record, live })
}

/// `GET /v1/instances/{id}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct InstanceState {
    /// Id.
    pub id: String,
    /// Plan name.
    pub plan: String,
    /// Plan version.
    pub version: u32,
    /// Status.
    pub status: String,
    /// Why it failed or paused.
    pub reason: Option<String>,
    /// Last journal sequence number.
    pub journal_head: u64,
    /// Tokens per event: `{"event": [{"data": …}]}` (non-empty events).
    #[schema(value_type = Object)]
    pub marking: Value,
    /// Steps that wait, with the inputs they lack.
    #[schema(value_type = Vec<Object>)]
    pub waiting: Vec<Value>,
    /// When `waiting`: what can still move it, `{"events": [input events that could enable
    /// a step], "timers_due_ms": [pending timers' deadlines]}`; `null` otherwise.
    #[schema(value_type = Option<Object>)]
    pub awaits: Option<Value>,
    /// Actions in flight.
    #[schema(value_type = Vec<Object>)]
    pub in_flight: Vec<Value>,
    /// Tokens on output events.
    #[schema(value_type = Vec<Object>)]
    pub results: Vec<Value>,
    /// The failure, when failed.
    #[schema(value_type = Option<Object>)]
    pub failure: Option<Value>,
    /// Steps fired.
    pub fired: u64,
    /// Whether the instance is live in this process.
    pub live: bool,
    /// For a plan with `limits`: what its calls used, `{tool_calls, llm_calls, cost,
    /// limits}`; `null` otherwise.
    #[schema(value_type = Option<Object>)]
    pub usage: Option<Value>,
    /// Approvals of firings in flight: `{key, step, firing, reasons, requested_ms,
    /// deadline_ms, default, decision}`; the status is `waiting_approval` while one has no
    /// decision.
    #[schema(value_type = Vec<Object>)]
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub approvals: Vec<Value>,
}

fn reason_of(s: &Status) -> Option<String> {
    match s {
        Status::Failed { reason } | Status::Paused { reason } => Some(reason.clone()),
        _ => None,
    }
}

fn state_view(
    id: &str,
    plan: &CompiledPlan,
    version: u32,
    inst: Option<&Instance>,
    head: u64,
    trace: Option<&[TraceEntry]>,
    live: bool,
) -> InstanceState {
    let net = &plan.net;
    let mut marking = serde_json::Map::new();
    let mut waiting = Vec::new();
    let mut in_flight = Vec::new();
    let mut results = Vec::new();
    let (status, reason, fired) = match inst {
        None => ("running".to_string(), None, 0),
        Some(i) => (i.status.name().to_string(), reason_of(&i.status), i.fired),
    };
    if let Some(i) = inst {
        for (eid, ev) in net.events.iter().enumerate() {
            let Some(slots) = net.event_slots.get(eid) else {
                continue;
            };
            let Some(&slot) = slots.first() else { continue };
            let toks: Vec<Value> = i
                .marking
                .slots
                .get(slot as usize)
                .map(|s| {
                    s.tokens
                        .iter()
                        .map(|t| json!({"data": &*t.payload, "correlation": &*t.correlation}))
                        .collect()
                })
                .unwrap_or_default();
            if !toks.is_empty() {
                marking.insert(ev.name.clone(), Value::Array(toks));
            }
        }
        for w in i.waiting(net) {
            waiting.push(json!({"step": w.step, "has": w.has, "lacks": w.lacks, "guard_blocked": w.guard_blocked}));
        }
        for (f, inf) in &i.in_flight {
            let step = net.step(inf.step).name.clone();
            let since = trace
                .and_then(|t| t.iter().rev().find(|e| e.firing == *f))
                .map(|e| e.started_ms);
            let tool = plan
                .plan
                .steps
                .get(&step)
                .map(|s| s.action.clone())
                .unwrap_or_default();
            in_flight.push(json!({
                "step": step,
                "tool": tool,
                "firing": f,
                "attempt": inf.attempt,
                "idempotency_key": weft_core::instance::idempotency_key(id, &step, *f),
                "since_ms": since,
            }));
        }
        for (event, toks) in i.results(net) {
            for t in toks {
                results.push(json!({"event": event, "data": &*t.payload}));
            }
        }
    }
    let failure = (status == "failed").then(|| json!({"reason": reason}));
    InstanceState {
        id: id.to_string(),
        plan: plan.name.to_string(),
        version,
        status,
        reason,
        journal_head: head,
        marking: Value::Object(marking),
        waiting,
        awaits: None,
        in_flight,
        results,
        failure,
        fired,
        live,
        approvals: Vec::new(),
        usage: None,
    }
}

/// The `usage` of a state view, when the instance's calls are counted (its plan sets
/// `limits`, or `[budget]` sets a budget): `used` against its limits (the plan's, else the
/// operator's for every instance).
fn usage_view(
    state: &AppState,
    plan: &weft_runtime::CompiledPlan,
    used: weft_runtime::Usage,
) -> Option<Value> {
    let budget = &state.node().config().budget;
    let counted =
        plan.plan.limits.is_some() || budget.quotas().is_some_and(|q| q.counts_every_call());
    if !counted {
        return None;
    }
    let mut v = serde_json::to_value(used).ok()?;
    if let Some(limits) = plan.plan.limits.as_ref().or(budget.instance.as_ref()) {
        v["limits"] = serde_json::to_value(limits).ok()?;
    }
    Some(v)
}

/// Get an instance's state.
#[utoipa::path(get, path = "/v1/instances/{id}", operation_id = "instances_get", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = InstanceState),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn get(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<InstanceState>> {
    // Both reads at once; the head is only used once ownership is established.
    let (o, head) = tokio::join!(owned(&state, &tenant, &id), state.store().last_seq(&id));
    let o = o?;
    let head = head?;
    if let Some(h) = &o.live {
        let version = o.record.as_ref().map_or(0, |r| r.plan_version);
        // One moment: a status and in-flight list read apart could contradict each other.
        let (plan, inst, snap) = h.core_and_state();
        let trace = h.trace();
        let mut view = state_view(
            &id,
            &plan,
            version,
            inst.as_ref(),
            head,
            trace.as_deref(),
            true,
        );
        view.status = snap.status_name().to_string();
        view.awaits = snap.awaits.and_then(|a| serde_json::to_value(a).ok());
        view.usage = snap.usage.and_then(|u| usage_view(&state, &plan, u));
        view.approvals = state
            .inner
            .durable
            .engine()
            .approvals(&id)
            .unwrap_or_default()
            .iter()
            .filter_map(|a| serde_json::to_value(a).ok())
            .collect();
        return Ok(Json(view));
    }
    let Some(rec) = o.record else {
        return Err(ApiError::not_found(format!("instance `{id}`")));
    };
    let (plan, version) = state
        .compiled(&tenant, &rec.plan_name, Some(rec.plan_version))
        .await?;
    let folded = state.inner.durable.folded(&id).await?;
    let trace = state.kept_trace(&id);
    let mut view = state_view(
        &id,
        &plan,
        version,
        folded.instance.as_ref(),
        head,
        trace.as_deref(),
        false,
    );
    if folded.instance.is_none() {
        view.status = rec.status.as_str().to_string();
        view.reason = rec.reason;
    }
    view.usage = usage_view(&state, &plan, folded.extras.usage);
    view.approvals = folded
        .extras
        .approvals
        .iter()
        .filter_map(|(key, a)| serde_json::to_value(weft_runtime::ApprovalView::of(key, a)).ok())
        .collect();
    if let Some(i) = folded
        .instance
        .as_ref()
        .filter(|i| i.status == Status::Waiting)
    {
        let mut due: Vec<i64> = folded.extras.timers.values().map(|t| t.due_ms).collect();
        due.sort_unstable();
        view.awaits =
            Some(json!({"events": i.awaited_events(folded.net(&plan.net)), "timers_due_ms": due}));
    }
    Ok(Json(view))
}

/// `GET /v1/instances/{id}/trace`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct TraceView {
    /// Firings in order.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<Value>,
    /// Whether a trace was recorded (acyclic instances started by this process).
    pub recorded: bool,
}

fn trace_json(t: &TraceEntry) -> Value {
    let (outcome, error) = match &t.outcome {
        None => ("in_flight", None),
        Some(Ok(_)) => ("ok", None),
        Some(Err(e)) => ("error", Some(format!("[{}] {}", e.code, e.message))),
    };
    let binding: serde_json::Map<String, Value> = t
        .binding
        .iter()
        .map(|(_, event, payload)| (event.clone(), (**payload).clone()))
        .collect();
    json!({
        "step": t.step,
        "seq": t.firing,
        "firing": t.firing,
        "started_ms": t.started_ms,
        "finished_ms": t.finished_ms,
        "attempts": t.attempts,
        "outcome": outcome,
        "error": error,
        "binding": binding,
        "args": t.args.as_ref().ok(),
        "result": t.outcome.as_ref().and_then(|o| o.as_ref().ok()),
        "emitted": t.emitted,
    })
}

/// Get an instance's trace of firings.
#[utoipa::path(get, path = "/v1/instances/{id}/trace", operation_id = "instances_trace", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = TraceView),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn trace(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<TraceView>> {
    let o = owned(&state, &tenant, &id).await?;
    let mut t = o
        .live
        .as_ref()
        .and_then(InstanceHandle::trace)
        .or_else(|| state.kept_trace(&id));
    // What this process did not see (the instance ran, or began, before a restart: no trace,
    // or one starting after firing 0) is read from the journal.
    let first = t.as_ref().and_then(|t| t.iter().map(|e| e.firing).min());
    if first.is_none_or(|f| f > 0) {
        let engine = state.inner.durable.engine();
        if let Some(j) =
            crate::journal_trace::from_journal(state.store().as_ref(), engine, &id).await
        {
            t = Some(crate::journal_trace::merged(j, t.unwrap_or_default()));
        }
    }
    Ok(Json(TraceView {
        recorded: t.is_some(),
        steps: t.unwrap_or_default().iter().map(trace_json).collect(),
    }))
}

/// `?from=SEQ&limit=N`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct JournalQuery {
    /// First sequence number (default 1).
    pub from: Option<u64>,
    /// Page size (1–1000, default 100).
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
}

/// `GET /v1/instances/{id}/journal`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct JournalPage {
    /// Records in sequence order.
    #[schema(value_type = Vec<Object>)]
    pub records: Vec<Value>,
    /// `from` of the next page (`null`: end).
    pub next: Option<u64>,
}

/// Read a page of an instance's journal.
#[utoipa::path(get, path = "/v1/instances/{id}/journal", operation_id = "instances_journal", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"), JournalQuery),
    responses(
        (status = 200, body = JournalPage),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn journal(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<JournalQuery>,
) -> ApiResult<Json<JournalPage>> {
    owned(&state, &tenant, &id).await?;
    let limit = q.limit.unwrap_or(100);
    if !(1..=1000).contains(&limit) {
        return Err(ApiError::bad_request("limit must be 1–1000"));
    }
    crate::written::settled(&state, &id).await;
    let from = q.from.unwrap_or(1).max(1);
    let recs = state.store().read(&id, from, limit).await?;
    let next = (recs.len() == limit as usize)
        .then(|| recs.last().map(|r| r.seq + 1))
        .flatten();
    let records = recs
        .iter()
        .map(|r| {
            json!({
                "seq": r.seq,
                "kind": r.kind,
                "at_ms": r.at_ms,
                "hash": r.hash.to_hex(),
                "prev_hash": r.prev_hash.to_hex(),
                "body": serde_json::from_slice::<Value>(&r.body).unwrap_or(Value::Null),
            })
        })
        .collect();
    Ok(Json(JournalPage { records, next }))
}

/// `?at=SEQ`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct AtQuery {
    /// Sequence number (default: the head).
    pub at: Option<u64>,
}

/// Time travel: the instance after record `at` (what `weft inspect --at SEQ --json` prints).
#[utoipa::path(get, path = "/v1/instances/{id}/inspect", operation_id = "instances_inspect", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"), AtQuery),
    responses(
        (status = 200, body = Object, description = "The `weft inspect --json` document"),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn inspect(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<AtQuery>,
) -> ApiResult<Json<Value>> {
    let o = owned(&state, &tenant, &id).await?;
    if o.record.is_none() {
        // Started a moment ago: make its start durable first.
        crate::written::durable(&state, &id, || not_yet(&id)).await?;
    } else {
        crate::written::settled(&state, &id).await;
    }
    let i = weft_durable::inspect(
        state.store().as_ref(),
        state.inner.durable.engine(),
        &id,
        q.at,
    )
    .await?;
    Ok(Json(serde_json::to_value(i).map_err(ApiError::internal)?))
}

fn terminal_conflict(id: &str, status: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        "instance_terminal",
        format!("instance `{id}` is {status}"),
    )
    .hint("a terminal instance cannot change; start a new one or resume from a checkpoint")
}

/// Stop an instance.
#[utoipa::path(post, path = "/v1/instances/{id}/stop", operation_id = "instances_stop", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = InstanceRef),
        Problems,
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn stop(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<InstanceRef>> {
    let o = owned(&state, &tenant, &id).await?;
    let Some(h) = o.live else {
        let status = o.record.as_ref().map_or("finished", |r| r.status.as_str());
        return Err(terminal_conflict(&id, status));
    };
    if h.state().status.is_terminal() {
        return Err(terminal_conflict(&id, h.state().status.name()));
    }
    crate::written::check(&state)?;
    state
        .inner
        .durable
        .stop_with(&h, crate::request_id::current_request_id().as_deref());
    let out = crate::written::until(
        &state,
        async { Ok(state.inner.durable.wait(&h).await?) },
        || {
            (
                format!("the store refuses writes right now; instance `{id}` was stopped and its status is written when it recovers"),
                format!("do not stop it again: GET /v1/instances/{id} shows it once the store takes writes (GET /readyz)"),
            )
        },
    )
    .await?;
    Ok(Json(InstanceRef {
        id,
        plan: Some(h.plan().name.to_string()),
        version: o.record.map(|r| r.plan_version),
        status: out.status.name().to_string(),
    }))
}

/// `POST /v1/instances/{id}/resume` body.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ResumeRequest {
    /// A checkpoint `cp-…` to fork from (default: continue from the head).
    #[serde(default)]
    pub from: Option<String>,
}

/// Resume an instance (or fork it from a checkpoint).
#[utoipa::path(post, path = "/v1/instances/{id}/resume", operation_id = "instances_resume", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    request_body(content = ResumeRequest, content_type = "application/json"),
    responses(
        (status = 200, body = InstanceRef),
        Problems,
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
        (status = 409, body = Problem, content_type = "application/problem+json"),
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn resume(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
    MaybeJson(req): MaybeJson<ResumeRequest>,
) -> ApiResult<Json<InstanceRef>> {
    let o = owned(&state, &tenant, &id).await?;
    if let Some(cp) = &req.from {
        check_name("checkpoint", cp)?;
    }
    if o.record.is_none() {
        crate::written::durable(&state, &id, || not_yet(&id)).await?;
    }
    crate::written::check(&state)?;
    let was_live = o.live.is_some();
    let h = match state.inner.durable.resume(&id, req.from.as_deref()).await {
        Ok(h) => h,
        Err(e) if e.code() == "not_found" && req.from.is_none() => {
            let status = o.record.as_ref().map_or("finished", |r| r.status.as_str());
            return Err(terminal_conflict(&id, status));
        }
        Err(e) => return Err(e.into()),
    };
    if !was_live || h.id() != id {
        state.track(h.clone());
    }
    Ok(Json(InstanceRef {
        id: h.id().to_string(),
        plan: Some(h.plan().name.to_string()),
        version: o.record.map(|r| r.plan_version),
        status: h.state().status.name().to_string(),
    }))
}

/// `POST /v1/instances/{id}/checkpoint`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct CheckpointView {
    /// `cp-<sha256>`.
    pub checkpoint: String,
    /// The journal sequence number it names.
    pub seq: u64,
}

/// Name the instance's journal head as a checkpoint.
#[utoipa::path(post, path = "/v1/instances/{id}/checkpoint", operation_id = "instances_checkpoint", tag = "instances",
    params(("id" = String, Path, description = "Instance id", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = CheckpointView),
        Problems,
        (status = 503, description = "`store_unavailable` (with `Retry-After`): the store refuses writes", body = Problem, content_type = "application/problem+json"),
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn checkpoint(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<CheckpointView>> {
    owned(&state, &tenant, &id).await?;
    crate::written::check(&state)?;
    crate::written::durable(&state, &id, || not_yet(&id)).await?;
    let store = state.store();
    let cp = weft_durable::checkpoint(store.as_ref(), &id).await?;
    let seq = weft_durable::checkpoint_seq(store.as_ref(), &id, &cp).await?;
    Ok(Json(CheckpointView {
        checkpoint: cp,
        seq,
    }))
}

/// The plan, failure and marking of an instance, for the repair route.
pub(crate) async fn repair_inputs(
    state: &AppState,
    tenant: &str,
    id: &str,
) -> ApiResult<(Arc<CompiledPlan>, String, BTreeMap<String, Vec<Value>>)> {
    let o = owned(state, tenant, id).await?;
    let (plan, inst, status) = if let Some(h) = &o.live {
        let (plan, inst, snap) = h.core_and_state();
        (plan, inst, snap.status)
    } else {
        let rec = o
            .record
            .as_ref()
            .ok_or_else(|| ApiError::not_found(format!("instance `{id}`")))?;
        let (plan, _) = state
            .compiled(tenant, &rec.plan_name, Some(rec.plan_version))
            .await?;
        let f = state.inner.durable.folded(id).await?;
        let status = f
            .instance
            .as_ref()
            .map_or(Status::Running, |i| i.status.clone());
        (plan, f.instance, status)
    };
    let failure = match &status {
        Status::Failed { reason } | Status::Paused { reason } => reason.clone(),
        other => format!("the instance is {} (no failure recorded)", other.name()),
    };
    let mut marking = BTreeMap::new();
    if let Some(i) = &inst {
        let net = &plan.net;
        for (eid, ev) in net.events.iter().enumerate() {
            let Some(&slot) = net.event_slots.get(eid).and_then(|s| s.first()) else {
                continue;
            };
            if let Some(s) = i.marking.slots.get(slot as usize)
                && !s.tokens.is_empty()
            {
                marking.insert(
                    ev.name.clone(),
                    s.tokens.iter().map(|t| (*t.payload).clone()).collect(),
                );
            }
        }
    }
    Ok((plan, failure, marking))
}
