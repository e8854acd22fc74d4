//! Plan routes: create (validate + analyse + store a version), list, get, the drawable net,
//! and validate / analyse without storing. Checking a document is [`check`], the same
//! load → validate → analyse sequence `weft validate` and `weft analyze` run.

use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::StatusCode;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use utoipa::{IntoParams, ToSchema};
use weft_analysis::{AnalysisOptions, AnalysisReport, Verdict};
use weft_core::{Finding, LoadError, Plan};
use weft_store::now_ms;

use crate::auth::Tenant;
use crate::body::{ApiPath, ApiQuery, Cap, parse_json, read_capped, require_json};
use crate::error::{ApiError, ApiResult, Problem, Problems};
use crate::names::check_name;
use crate::state::{AppState, lock};

/// A plan document body: raw bytes (so load errors carry line and column) plus its JSON.
#[derive(Debug)]
pub(crate) struct PlanDoc {
    /// The bytes as sent.
    pub bytes: Bytes,
    /// Parsed JSON.
    pub value: Value,
}

impl FromRequest<AppState> for PlanDoc {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        require_json(req.headers())?;
        let bytes = read_capped(req, state, Cap::Plan).await?;
        let value: Value = parse_json(&bytes)?;
        Ok(PlanDoc { bytes, value })
    }
}

/// The outcome of checking a plan document.
#[derive(Debug, Clone)]
pub(crate) struct Checked {
    /// The plan, if it loaded.
    pub plan: Option<Plan>,
    /// Load error or validation findings, then analysis findings, as JSON.
    pub findings: Vec<Value>,
    /// Any error among the load/validation findings, or a governance check refusing it (a
    /// required property, the plan's `limits`, the policy)?
    pub invalid: bool,
    /// The analysis (when validation passed).
    pub report: Option<AnalysisReport>,
}

impl Checked {
    /// The analysis summary object (`null` when not analysed).
    pub(crate) fn analysis(&self) -> Value {
        match &self.report {
            None => Value::Null,
            Some(r) => json!({
                "states": r.states,
                "edges": r.edges,
                "complete": r.complete,
                "verdict": r.verdict,
                "bounded": r.bounded,
                "notes": r.notes,
                "governance": r.governance,
            }),
        }
    }

    /// `sound`, `unsound`, `deadlock` or `unknown` (list view).
    pub(crate) fn verdict(&self) -> &'static str {
        let Some(r) = &self.report else {
            return "unknown";
        };
        if r.findings.iter().any(|f| f.code == "A001") {
            return "deadlock";
        }
        match r.verdict {
            Verdict::Sound => "sound",
            Verdict::NotSound => "unsound",
            Verdict::Unknown => "unknown",
            Verdict::NotApplicable => {
                if r.findings.iter().any(Finding::is_error) {
                    "unsound"
                } else if r.complete {
                    "sound"
                } else {
                    "unknown"
                }
            }
        }
    }
}

fn load_finding(e: &LoadError) -> Value {
    let (line, column) = match e {
        LoadError::InvalidUtf8 { line, column, .. }
        | LoadError::TooDeep { line, column, .. }
        | LoadError::Syntax { line, column, .. } => (Some(*line), Some(*column)),
        _ => (None, None),
    };
    let message = match e {
        LoadError::Syntax { message, .. } => message.clone(),
        _ => e.to_string(),
    };
    json!({
        "code": e.code(),
        "name": "load",
        "severity": "error",
        "pointer": e.pointer(),
        "message": message,
        "hint": e.hint(),
        "line": line,
        "column": column,
    })
}

/// Loads, validates and (without errors) analyses a plan document. CPU-bound: call from
/// `spawn_blocking`.
pub(crate) fn check(
    bytes: &[u8],
    registry: &weft_tools::Registry,
    analyse: bool,
    deadline: Option<weft_analysis::Interrupt>,
    governance: Option<Arc<weft_analysis::Governance>>,
) -> Checked {
    let limits = weft_core::Limits::default();
    let plan = match weft_core::parse_plan(bytes, &limits) {
        Ok(p) => p,
        Err(e) => {
            return Checked {
                plan: None,
                findings: vec![load_finding(&e)],
                invalid: true,
                report: None,
            };
        }
    };
    let validation = weft_core::validate(&plan, Some(registry), &limits);
    let mut invalid = validation.findings.iter().any(Finding::is_error);
    let mut findings: Vec<Value> = validation
        .findings
        .iter()
        .map(|f| serde_json::to_value(f).unwrap_or(Value::Null))
        .collect();
    let report = (!invalid && analyse).then(|| {
        weft_analysis::analyze_plan(
            &plan,
            &AnalysisOptions {
                max_states: 50_000,
                max_bytes: 256 << 20,
                interrupt: deadline,
                governance,
                ..AnalysisOptions::default()
            },
        )
    });
    if let Some(r) = &report {
        // Governance refuses a plan; the other analysis findings are reported with it.
        invalid |= r.findings.iter().any(weft_analysis::governance::refuses);
        findings.extend(
            r.findings
                .iter()
                .map(|f| serde_json::to_value(f).unwrap_or(Value::Null)),
        );
    }
    Checked {
        plan: Some(plan),
        findings,
        invalid,
        report,
    }
}

/// [`check`] on a blocking thread, against the node's tools and `tenant`'s own.
pub(crate) async fn check_async(
    state: &AppState,
    tenant: &str,
    bytes: Bytes,
    analyse: bool,
) -> ApiResult<Checked> {
    crate::tools::refresh(state, tenant).await?;
    let registry = state.inner.node.registry_for(tenant);
    let governance = state.inner.node.governance(tenant);
    // One tenant's checks wait for each other past `server.validate_concurrency`, so a
    // tenant sending expensive plans holds that many blocking threads at most, never the
    // request path; each check's CEL evaluations and analysis also stop at `CHECK_DEADLINE`.
    let slots = {
        let mut m = state
            .inner
            .validating
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let n = state.config().validate_concurrency.max(1);
        Arc::clone(
            m.entry(tenant.to_string())
                .or_insert_with(|| Arc::new(tokio::sync::Semaphore::new(n))),
        )
    };
    let _permit = slots.acquire_owned().await.map_err(ApiError::internal)?;
    tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + CHECK_DEADLINE;
        let stop: weft_core::cel_budget::Interrupt =
            Arc::new(move || std::time::Instant::now() >= deadline);
        weft_core::cel_budget::with_interrupt(Arc::clone(&stop), || {
            check(&bytes, &registry, analyse, Some(stop), Some(governance))
        })
    })
    .await
    .map_err(ApiError::internal)
}

/// The longest the CEL evaluations and the analysis of one plan check may take together (the budget of each
/// evaluation bounds it too; this bounds a plan with many expensive expressions).
const CHECK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(10);

fn invalid_plan(c: &Checked) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid_plan",
        format!(
            "the plan has errors: {}",
            c.findings
                .iter()
                .filter(|f| f.get("severity").and_then(Value::as_str) == Some("error"))
                .take(3)
                .map(|f| format!(
                    "{} {}",
                    f.get("code").and_then(Value::as_str).unwrap_or(""),
                    f.get("message").and_then(Value::as_str).unwrap_or("")
                ))
                .collect::<Vec<_>>()
                .join("; ")
        ),
    )
    .hint("fix the error findings (see `findings`) and send the plan again")
    .findings(Value::Array(c.findings.clone()))
}

/// Checks and stores a plan document for `tenant` (a new version unless identical to the
/// latest); returns (name, version, check).
pub(crate) async fn store_plan(
    state: &AppState,
    tenant: &str,
    doc: PlanDoc,
) -> ApiResult<(String, u32, Arc<Checked>)> {
    let checked = check_async(state, tenant, doc.bytes, true).await?;
    if checked.invalid {
        return Err(invalid_plan(&checked));
    }
    let name = checked
        .plan
        .as_ref()
        .map(|p| p.plan_name.clone())
        .unwrap_or_default();
    check_name("plan_name", &name).map_err(|e| {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid_plan",
            e.detail.clone(),
        )
        .hint(e.hint.clone().unwrap_or_default())
    })?;
    let store = state.store();
    let version = match store.get_plan(tenant, &name, None).await? {
        Some(p) if p.document == doc.value => p.info.version,
        _ => store.put_plan(tenant, &name, doc.value, now_ms()).await?,
    };
    let checked = Arc::new(checked);
    lock(&state.inner.analyses).insert(
        (tenant.to_string(), name.clone(), version),
        Arc::clone(&checked),
    );
    Ok((name, version, checked))
}

/// The check of a stored version (cached).
async fn stored_check(
    state: &AppState,
    tenant: &str,
    name: &str,
    version: u32,
    doc: &Value,
) -> ApiResult<Arc<Checked>> {
    let key = (tenant.to_string(), name.to_string(), version);
    if let Some(c) = lock(&state.inner.analyses).get(&key) {
        return Ok(Arc::clone(c));
    }
    let bytes = Bytes::from(serde_json::to_vec(doc).map_err(ApiError::internal)?);
    let c = Arc::new(check_async(state, tenant, bytes, true).await?);
    lock(&state.inner.analyses).insert(key, Arc::clone(&c));
    Ok(c)
}

/// `201` body of `POST /v1/plans`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PlanCreated {
    /// Plan name.
    pub name: String,
    /// Stored version (1, 2, …).
    pub version: u32,
    /// `template`.
    pub status: String,
    /// Validation and analysis findings (no errors).
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
    /// Analysis summary: states, edges, complete, verdict, bounded, notes.
    #[schema(value_type = Option<Object>)]
    pub analysis: Value,
}

/// Create a plan version.
#[utoipa::path(post, path = "/v1/plans", operation_id = "plans_create", tag = "plans",
    request_body(content = Object, description = "A plan document (model v1)", content_type = "application/json"),
    responses(
        (status = 201, body = PlanCreated),
        Problems,
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
        (status = 422, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn create(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    doc: PlanDoc,
) -> ApiResult<(StatusCode, Json<PlanCreated>)> {
    let (name, version, c) = store_plan(&state, &tenant, doc).await?;
    Ok((
        StatusCode::CREATED,
        Json(PlanCreated {
            name,
            version,
            status: "template".into(),
            findings: c.findings.clone(),
            analysis: c.analysis(),
        }),
    ))
}

/// One entry of `GET /v1/plans`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PlanSummary {
    /// Name.
    pub name: String,
    /// Latest version.
    pub version: u32,
    /// Status of that version.
    pub status: String,
    /// When it was stored (epoch ms).
    pub created_at_ms: i64,
    /// Number of steps.
    pub steps: usize,
    /// `sound`, `unsound`, `deadlock` or `unknown`.
    pub verdict: String,
}

/// `GET /v1/plans`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PlanList {
    /// Latest version of each plan, by name.
    pub plans: Vec<PlanSummary>,
}

/// List plans (latest version of each).
#[utoipa::path(get, path = "/v1/plans", operation_id = "plans_list", tag = "plans",
    responses(
        (status = 200, body = PlanList),
        (status = 401, body = Problem, content_type = "application/problem+json"),
        (status = 429, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn list(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
) -> ApiResult<Json<PlanList>> {
    let infos = state.store().list_plans(&tenant).await?;
    let mut latest: Vec<weft_store::PlanInfo> = Vec::new();
    for i in infos {
        match latest.last_mut() {
            Some(l) if l.name == i.name => {
                if i.version > l.version {
                    *l = i;
                }
            }
            _ => latest.push(i),
        }
    }
    let mut plans = Vec::with_capacity(latest.len());
    for i in latest {
        let Some(rec) = state
            .store()
            .get_plan(&tenant, &i.name, Some(i.version))
            .await?
        else {
            continue;
        };
        let c = stored_check(&state, &tenant, &i.name, i.version, &rec.document).await?;
        plans.push(PlanSummary {
            steps: c.plan.as_ref().map_or(0, |p| p.steps.len()),
            verdict: c.verdict().to_string(),
            name: i.name,
            version: i.version,
            status: i.status.as_str().to_string(),
            created_at_ms: i.created_at_ms,
        });
    }
    Ok(Json(PlanList { plans }))
}

/// `GET /v1/plans/{name}`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct PlanDetail {
    /// Name.
    pub name: String,
    /// Version.
    pub version: u32,
    /// Status.
    pub status: String,
    /// The document.
    #[schema(value_type = Object)]
    pub plan: Value,
    /// Findings.
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
    /// Analysis summary.
    #[schema(value_type = Option<Object>)]
    pub analysis: Value,
}

async fn detail(
    state: &AppState,
    tenant: &str,
    name: &str,
    version: Option<u32>,
) -> ApiResult<PlanDetail> {
    check_name("plan name", name)?;
    let rec = state
        .store()
        .get_plan(tenant, name, version)
        .await?
        .ok_or_else(|| match version {
            Some(v) => ApiError::not_found(format!("plan `{name}` version {v}")),
            None => ApiError::not_found(format!("plan `{name}`")),
        })?;
    let c = stored_check(state, tenant, name, rec.info.version, &rec.document).await?;
    Ok(PlanDetail {
        name: rec.info.name,
        version: rec.info.version,
        status: rec.info.status.as_str().to_string(),
        plan: rec.document,
        findings: c.findings.clone(),
        analysis: c.analysis(),
    })
}

/// Get the latest version of a plan.
#[utoipa::path(get, path = "/v1/plans/{name}", operation_id = "plans_get", tag = "plans",
    params(("name" = String, Path, description = "Plan name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")),
    responses(
        (status = 200, body = PlanDetail),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn get_latest(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<PlanDetail>> {
    Ok(Json(detail(&state, &tenant, &name, None).await?))
}

/// Get one version of a plan.
#[utoipa::path(get, path = "/v1/plans/{name}/versions/{version}", operation_id = "plans_get_version", tag = "plans",
    params(("name" = String, Path, description = "Plan name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"), ("version" = u32, Path, description = "Version")),
    responses(
        (status = 200, body = PlanDetail),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn get_version(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath((name, version)): ApiPath<(String, u32)>,
) -> ApiResult<Json<PlanDetail>> {
    Ok(Json(detail(&state, &tenant, &name, Some(version)).await?))
}

/// `?version=N`.
#[derive(Debug, Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub(crate) struct VersionQuery {
    /// Version (latest when absent).
    pub version: Option<u32>,
}

/// The net for drawing.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct NetView {
    /// Places (plan events).
    #[schema(value_type = Vec<Object>)]
    pub places: Vec<Value>,
    /// Steps.
    #[schema(value_type = Vec<Object>)]
    pub steps: Vec<Value>,
    /// Arcs place→step (consume) and step→place (emit).
    #[schema(value_type = Vec<Object>)]
    pub arcs: Vec<Value>,
    /// Verdict, deadlocks with witnesses, dead steps, unbounded places, findings.
    #[schema(value_type = Object)]
    pub analysis: Value,
}

fn pointer_tail(p: &str, prefix: &str) -> Option<String> {
    let rest = p.strip_prefix(prefix)?;
    let seg = rest.split('/').next()?;
    Some(seg.replace("~1", "/").replace("~0", "~"))
}

/// The marking a deadlock witness reaches: the witness's steps fired in order on the plan's
/// P/T net. A step can have several transitions (guard branches, `when` variants), so the
/// choices are searched (depth first, at most 10,000 firings) for a sequence that ends where
/// nothing is enabled; tokens per event, places that are not plan events left out. `{}` if
/// none is found.
pub(crate) fn deadlock_marking(plan: &Plan, witness: &[String]) -> Value {
    let net = weft_analysis::PtNet::from_plan(
        plan,
        &weft_analysis::CompileOptions {
            env_tokens: AnalysisOptions::default().env_tokens,
        },
    );
    let candidates: Vec<Vec<usize>> = witness
        .iter()
        .map(|label| {
            (0..net.transitions.len())
                .filter(|&t| net.witness_label(t) == *label)
                .collect()
        })
        .collect();
    let dead = |m: &[u32]| (0..net.transitions.len()).all(|t| !net.enabled(t, m));
    let mut budget = 10_000u32;
    let mut stack = vec![(0usize, net.initial.clone())];
    let mut found = None;
    while let Some((k, m)) = stack.pop() {
        if k == candidates.len() {
            if dead(&m) {
                found = Some(m);
                break;
            }
            continue;
        }
        for &t in candidates[k].iter().rev() {
            if budget == 0 {
                break;
            }
            budget -= 1;
            if let Some(n) = net.fire(t, &m) {
                stack.push((k + 1, n));
            }
        }
    }
    let Some(m) = found else {
        return json!({});
    };
    let mut out = serde_json::Map::new();
    for (p, n) in net.places.iter().zip(&m) {
        if *n > 0
            && let Some(e) = &p.event
        {
            let prev = out.get(e).and_then(Value::as_u64).unwrap_or(0);
            out.insert(e.clone(), json!(prev + u64::from(*n)));
        }
    }
    Value::Object(out)
}

/// Builds the drawable net of a plan.
pub(crate) fn net_view(plan: &Plan, c: &Checked) -> NetView {
    let consumed: std::collections::HashSet<&str> = plan
        .steps
        .values()
        .flat_map(|s| s.on.iter().map(String::as_str))
        .collect();
    let emitted: std::collections::HashSet<&str> = plan
        .steps
        .values()
        .flat_map(|s| s.emits.iter().map(weft_core::plan::Emit::event))
        .collect();
    let fail_targets: std::collections::HashSet<String> = plan
        .steps
        .values()
        .filter_map(|s| match &s.on_fail {
            Some(weft_core::plan::OnFail::Emit(e)) => Some(e.clone()),
            _ => None,
        })
        .collect();
    let initial: Vec<&str> = match &plan.initial {
        Some(i) => i.iter().map(String::as_str).collect(),
        None => plan
            .events
            .keys()
            .map(String::as_str)
            .filter(|e| consumed.contains(e) && !emitted.contains(e))
            .collect(),
    };
    let places = plan
        .events
        .iter()
        .map(|(name, def)| {
            let kind = if name.ends_with(".failed") || fail_targets.contains(name) {
                "error"
            } else if def.kind == Some(weft_core::plan::EventKind::Output)
                || !consumed.contains(name.as_str())
            {
                "result"
            } else if def.kind == Some(weft_core::plan::EventKind::Input)
                || initial.contains(&name.as_str())
            {
                "input"
            } else {
                "internal"
            };
            json!({
                "id": name,
                "kind": kind,
                "initial": u32::from(initial.contains(&name.as_str())),
                "description": def.description,
            })
        })
        .collect();
    let mut arcs = Vec::new();
    let steps = plan
        .steps
        .iter()
        .map(|(id, s)| {
            for e in &s.on {
                arcs.push(json!({"from": e, "to": id, "kind": "consume", "when": null}));
            }
            for e in &s.emits {
                arcs.push(json!({"from": id, "to": e.event(), "kind": "emit", "when": e.when()}));
            }
            json!({
                "id": id,
                "tool": if s.action.is_empty() { None } else { Some(&s.action) },
                "guard": s.guard,
                "args": if s.args.is_null() { None } else { Some(&s.args) },
                "on_fail": s.on_fail.as_ref().map(weft_core::plan::OnFail::as_text),
            })
        })
        .collect();
    let mut deadlocks = Vec::new();
    let mut dead_steps = Vec::new();
    let mut unbounded = Vec::new();
    if let Some(r) = &c.report {
        for f in &r.findings {
            match f.code.as_str() {
                "A001" => {
                    let witness = f.witness.clone().unwrap_or_default();
                    deadlocks.push(json!({
                        "marking": deadlock_marking(plan, &witness),
                        "witness": witness,
                        "message": f.message,
                    }));
                }
                "A002" => dead_steps.extend(pointer_tail(&f.pointer, "/steps/")),
                "A003" => unbounded.extend(pointer_tail(&f.pointer, "/events/")),
                _ => {}
            }
        }
    }
    NetView {
        places,
        steps,
        arcs,
        analysis: json!({
            "verdict": c.verdict(),
            "deadlocks": deadlocks,
            "dead_steps": dead_steps,
            "unbounded": unbounded,
            "findings": c.findings,
        }),
    }
}

/// The plan's net for drawing.
#[utoipa::path(get, path = "/v1/plans/{name}/net", operation_id = "plans_net", tag = "plans",
    params(("name" = String, Path, description = "Plan name", pattern = "^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"), VersionQuery),
    responses(
        (status = 200, body = NetView),
        Problems,
        (status = 404, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn net(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<VersionQuery>,
) -> ApiResult<Json<NetView>> {
    check_name("plan name", &name)?;
    let rec = state
        .store()
        .get_plan(&tenant, &name, q.version)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("plan `{name}`")))?;
    let c = stored_check(&state, &tenant, &name, rec.info.version, &rec.document).await?;
    let plan = c
        .plan
        .as_ref()
        .ok_or_else(|| ApiError::internal("stored plan does not load"))?;
    Ok(Json(net_view(plan, &c)))
}

/// `POST /v1/validate`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Validated {
    /// No error findings.
    pub ok: bool,
    /// Load error or validation findings.
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
}

/// Validate a plan without storing it.
#[utoipa::path(post, path = "/v1/validate", operation_id = "plans_validate", tag = "plans",
    request_body(content = Object, description = "A plan document", content_type = "application/json"),
    responses(
        (status = 200, body = Validated),
        Problems,
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn validate(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    doc: PlanDoc,
) -> ApiResult<Json<Validated>> {
    let c = check_async(&state, &tenant, doc.bytes, false).await?;
    Ok(Json(Validated {
        ok: !c.invalid,
        findings: c.findings,
    }))
}

/// `POST /v1/analyze`.
#[derive(Debug, Serialize, ToSchema)]
pub(crate) struct Analyzed {
    /// Validation then analysis findings.
    #[schema(value_type = Vec<Object>)]
    pub findings: Vec<Value>,
    /// Analysis summary (`null` when validation failed).
    #[schema(value_type = Option<Object>)]
    pub analysis: Value,
}

/// Validate and analyse a plan without storing it.
#[utoipa::path(post, path = "/v1/analyze", operation_id = "plans_analyze", tag = "plans",
    request_body(content = Object, description = "A plan document", content_type = "application/json"),
    responses(
        (status = 200, body = Analyzed),
        Problems,
        (status = 413, body = Problem, content_type = "application/problem+json"),
        (status = 415, body = Problem, content_type = "application/problem+json"),
    ),
    security(("bearer" = [])))]
pub(crate) async fn analyze(
    State(state): State<AppState>,
    Tenant(tenant): Tenant,
    doc: PlanDoc,
) -> ApiResult<Json<Analyzed>> {
    let c = check_async(&state, &tenant, doc.bytes, true).await?;
    Ok(Json(Analyzed {
        analysis: c.analysis(),
        findings: c.findings,
    }))
}
