//! `weft run PLAN`: run one instance on the embedded default (an in-process engine with the
//! built-in tools; email goes to `./.weft/outbox/`) and print its outcome, result tokens and
//! a readable trace of every firing.
//!
//! Order of work: parse `--input`/`--event` (bad JSON is a usage error, exit 2, before
//! anything runs), validate like `weft validate` (errors exit 1), register the plan (and any
//! `--with` plans for `plan.run`), start, deliver the events in order, then wait. Acyclic
//! plans settle by themselves; reactive ones run until Ctrl-C, `--timeout-ms`, or with
//! `--until-idle` until nothing is in flight, no timer is pending and no step fired for two
//! polls (the instance loop fires everything enabled before it waits, so that means nothing
//! is enabled).
//!
//! Exit codes: 0 = completed, or a reactive run stopped cleanly (idle, timeout, Ctrl-C);
//! 1 = waiting (for an input event no `--event` delivered: a plain run keeps nothing to
//! deliver it to later), stuck, failed, paused, an acyclic run cut short, or an invalid plan;
//! 2 = usage or I/O.

use std::collections::HashMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use serde::Serialize;
use serde_json::{Value, json};
use weft_core::instance::Waiting;
use weft_core::{Emit, EventKind, GraphType, OnFail, Plan, Status as RunStatus};
use weft_runtime::{Engine, InstanceHandle, Outcome, StartOptions, TraceEntry};

use super::validate::{self, Checked};
use super::{Ctx, Status};
use crate::output::{self, Palette};

/// The tenant of CLI runs.
pub(crate) const TENANT: &str = "local";
/// How often the wait loop looks at the instance (idle detection, progress).
const POLL: Duration = Duration::from_millis(20);
/// Progress lines are updated at most this often.
const PROGRESS_EVERY: Duration = Duration::from_millis(200);
/// Payloads in the human trace are cut to this many characters.
const SHORT: usize = 100;

/// Arguments of `weft run`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON), or `-` for stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// The payload of the start token (JSON; default `{}`).
    #[arg(long, value_name = "JSON")]
    pub input: Option<String>,
    /// Deliver an external event after the start, in the order given: `NAME=JSON`. The event
    /// must be a `kind: input` event of the plan.
    #[arg(long = "event", value_name = "NAME=JSON")]
    pub events: Vec<String>,
    /// Reactive plans: stop once nothing is enabled, in flight or scheduled (otherwise they
    /// run until Ctrl-C or --timeout-ms).
    #[arg(long)]
    pub until_idle: bool,
    /// Stop the instance after this many milliseconds.
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// Configuration of the built-in I/O tools as JSON (`{"http": {"allow_hosts": [...]},
    /// "email": {"outbox_dir": ...}, "process": {...}}`; the same as `[tools]` in
    /// weft.toml, which it replaces); default: offline and locked down.
    #[arg(long, value_name = "FILE")]
    pub tools_config: Option<PathBuf>,
    /// Also register this plan (for `plan.run` steps naming it); repeatable.
    #[arg(long = "with", value_name = "PLAN")]
    pub with: Vec<PathBuf>,
    /// Print one JSON document `{outcome, reason, results, waiting, trace}`.
    #[arg(long)]
    pub json: bool,
    /// Run durably: journal every step to this store (a SQLite file such as `.weft/weft.db`,
    /// or a `postgres://` URL) so the instance survives a crash and can be inspected with
    /// `weft inspect` / `weft replay` / `weft journal verify`. A store configured in
    /// weft.toml or `WEFT_STORE_URL` does the same.
    #[arg(long, value_name = "LOCATION")]
    pub store: Option<String>,
}

/// A parsed `--event`.
#[derive(Debug)]
struct EventArg {
    name: String,
    payload: Value,
}

fn parse_json(what: &str, text: &str) -> anyhow::Result<Value> {
    serde_json::from_str(text).map_err(|e| anyhow::anyhow!("{what} is not valid JSON: {e}"))
}

fn parse_event(arg: &str) -> anyhow::Result<EventArg> {
    let Some((name, payload)) = arg.split_once('=') else {
        anyhow::bail!("--event `{}` must be NAME=JSON", output::shorten(arg, 80));
    };
    let name = name.trim();
    if name.is_empty() {
        anyhow::bail!("--event `{}` has no event name", output::shorten(arg, 80));
    }
    let payload = parse_json(&format!("the payload of --event `{name}`"), payload)?;
    Ok(EventArg {
        name: name.to_string(),
        payload,
    })
}

/// How the wait ended when we stopped the instance ourselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cut {
    Idle,
    Timeout(u64),
    Interrupted,
}

impl Cut {
    fn reason(self) -> String {
        match self {
            Cut::Idle => "idle: nothing enabled, in flight or scheduled (--until-idle)".into(),
            Cut::Timeout(ms) => format!("stopped after --timeout-ms {ms}"),
            Cut::Interrupted => "interrupted (Ctrl-C)".into(),
        }
    }
}

/// Runs `weft run`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let input = match &args.input {
        Some(text) => parse_json("--input", text)?,
        None => Value::Object(serde_json::Map::new()),
    };
    let events = args
        .events
        .iter()
        .map(|e| parse_event(e))
        .collect::<anyhow::Result<Vec<_>>>()?;

    let catalog = crate::input::catalog(ctx, None)?;
    let checked = validate::check_with(&args.plan, &catalog, ctx)?;
    if checked.has_errors() {
        return invalid(args, ctx, &checked, out);
    }
    let Checked::Validated { file, plan, .. } = checked else {
        return invalid(args, ctx, &checked, out);
    };
    if let Some(refused) = governance_refusal(ctx, &catalog, &plan)? {
        let checked = Checked::Validated {
            file,
            plan,
            findings: refused,
        };
        return invalid(args, ctx, &checked, out);
    }
    let mut extra = Vec::new();
    for path in &args.with {
        match validate::check(path, None, ctx)? {
            Checked::Validated { plan, findings, .. }
                if !findings.iter().any(weft_core::Finding::is_error) =>
            {
                extra.push(*plan);
            }
            other => return invalid(args, ctx, &other, out),
        }
    }

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let ran = rt.block_on(execute(args, ctx, &plan, extra, input, events))?;
    // Tools may still hold tasks (timers); do not wait for them.
    rt.shutdown_background();
    let report = Report::new(&file, &plan, &ran);
    if args.json {
        output::json(out, &report.json())?;
    } else {
        report.render(out, &ctx.palette)?;
    }
    Ok(report.status())
}

fn input_events(net: &weft_core::Net) -> String {
    let names: Vec<String> = net
        .events
        .iter()
        .filter(|e| e.kind == EventKind::Input)
        .map(|e| format!("`{}`", e.name))
        .collect();
    if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    }
}

/// Prints an invalid plan's findings like `weft validate` (or as JSON) and exits 1.
/// With a `[policy]` bundle or plan `limits`, the governance checks `POST /v1/plans` runs:
/// the error findings that refuse the plan (a required property, the bound over its
/// `limits`, the policy's decision), if any. Without either there is nothing that could
/// refuse it, and the plan's state space is not explored.
fn governance_refusal(
    ctx: &Ctx,
    catalog: &weft_core::StaticCatalog,
    plan: &weft_core::Plan,
) -> anyhow::Result<Option<Vec<weft_core::Finding>>> {
    if !ctx.config.config.policy.any() && plan.limits.is_none() {
        return Ok(None);
    }
    let opts = weft_analysis::AnalysisOptions {
        max_states: ctx.config.config.limits.max_states,
        governance: Some(ctx.governance(catalog)?),
        ..weft_analysis::AnalysisOptions::default()
    };
    let report = weft_analysis::analyze_plan(plan, &opts);
    let refused: Vec<weft_core::Finding> = report
        .findings
        .into_iter()
        .filter(weft_analysis::governance::refuses)
        .collect();
    Ok((!refused.is_empty()).then_some(refused))
}

fn invalid(
    args: &Args,
    ctx: &Ctx,
    checked: &Checked,
    out: &mut dyn Write,
) -> anyhow::Result<Status> {
    let file = match checked {
        Checked::LoadFailed { file, .. } | Checked::Validated { file, .. } => file.as_str(),
    };
    if args.json {
        output::json(
            out,
            &json!({
                "file": file,
                "outcome": "invalid",
                "reason": "the plan has errors",
                "findings": checked.diags(),
                "results": {},
                "waiting": [],
                "trace": [],
            }),
        )?;
    } else {
        checked.render(out, &ctx.palette)?;
        writeln!(
            out,
            "{file}: {} (not run)",
            ctx.palette.paint("invalid", Palette::error())
        )?;
    }
    Ok(Status::PlanErrors)
}

/// What a run produced.
struct Ran {
    outcome: Outcome,
    cut: Option<Cut>,
    graph: GraphType,
    elapsed: Duration,
    /// Events that could not be delivered (the instance had already ended).
    undelivered: Vec<String>,
}

async fn execute(
    args: &Args,
    ctx: &Ctx,
    plan: &Plan,
    extra: Vec<Plan>,
    input: Value,
    events: Vec<EventArg>,
) -> anyhow::Result<Ran> {
    // Durable when a store is configured (flag, environment or weft.toml), else in memory.
    let builder = ctx.node().trace(true);
    let node = if ctx.store_configured() {
        builder.open().await
    } else {
        // MCP servers are discovered asynchronously (`open` does it itself).
        match builder.discover_mcp().await {
            Ok(b) => b.in_memory(),
            Err(e) => Err(e),
        }
    }
    .map_err(|e| anyhow::anyhow!("{e}"))?;
    let durable = node.durable().cloned();
    let engine = node.engine().clone();
    let register = |p: Plan| async {
        match &durable {
            Some(d) => {
                let doc = serde_json::to_value(&p)?;
                d.register(TENANT, doc)
                    .await
                    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
            }
            None => engine.register(p).map_err(|e| anyhow::anyhow!("{e}")),
        }
    };
    for p in extra {
        let name = p.plan_name.clone();
        register(p)
            .await
            .map_err(|e| anyhow::anyhow!("--with plan `{name}` cannot be registered: {e}"))?;
    }
    let compiled = register(plan.clone())
        .await
        .map_err(|e| anyhow::anyhow!("the plan cannot be registered: {e}"))?;
    let net = &compiled.net;
    for e in &events {
        match net.event_id(&e.name).map(|id| (id, net.event(id).kind)) {
            Some((id, EventKind::Input)) => {
                if let Err(m) = net.check_payload(id, &e.payload) {
                    anyhow::bail!(
                        "--event `{}`: the payload does not match the event's schema: {m} (at `{}`)",
                        e.name,
                        m.at()
                    );
                }
            }
            Some(_) => anyhow::bail!(
                "--event `{}`: `{}` is not a `kind: input` event of plan `{}`, so it cannot be \
                 delivered from outside (input events: {})",
                e.name,
                e.name,
                plan.plan_name,
                input_events(net)
            ),
            None => anyhow::bail!(
                "--event `{}`: plan `{}` has no such event (input events: {})",
                e.name,
                plan.plan_name,
                input_events(net)
            ),
        }
    }
    let started = Instant::now();
    let handle = engine
        .start_with(
            TENANT,
            &compiled,
            input,
            StartOptions {
                trace: true,
                ..StartOptions::default()
            },
        )
        .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
    let mut undelivered = Vec::new();
    for e in events {
        if let Err(err) = engine.ingest(TENANT, &e.name, e.payload, None, Some(handle.id())) {
            undelivered.push(format!("`{}`: {err}", e.name));
        }
    }
    let (outcome, cut) = wait(args, &engine, &handle, plan.graph_type, started).await;
    if let Some(d) = &durable {
        // Make the final records (and the instance's status) durable before reporting.
        d.wait_written(&handle)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        eprintln!(
            "journal: instance {} in {}",
            handle.id(),
            ctx.config.config.store.url
        );
    }
    // What `[budget]`'s quotas counted, into the store's counters before the process ends.
    if let Err(e) = node.sync_counts().await {
        eprintln!("warning: the quota counts were not stored: {e}");
    }
    Ok(Ran {
        outcome,
        cut,
        graph: plan.graph_type,
        elapsed: started.elapsed(),
        undelivered,
    })
}

/// Waits for the outcome, stopping the instance on idle, timeout or Ctrl-C.
async fn wait(
    args: &Args,
    engine: &Engine,
    handle: &InstanceHandle,
    graph: GraphType,
    started: Instant,
) -> (Outcome, Option<Cut>) {
    let done = handle.wait();
    tokio::pin!(done);
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    let deadline = args
        .timeout_ms
        .map(|ms| tokio::time::Instant::from_std(started + Duration::from_millis(ms)));
    let sleep = tokio::time::sleep_until(
        deadline.unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)),
    );
    tokio::pin!(sleep);
    let mut tick = tokio::time::interval(POLL);
    let mut progress = Progress::new();
    let mut cut = None;
    let mut last_fired = None;
    let mut idle_polls = 0u32;
    let outcome = loop {
        tokio::select! {
            o = &mut done => break o,
            r = &mut ctrl_c, if cut.is_none() => {
                if r.is_ok() {
                    cut = Some(Cut::Interrupted);
                    handle.stop();
                }
            }
            () = &mut sleep, if cut.is_none() && deadline.is_some() => {
                cut = Some(Cut::Timeout(args.timeout_ms.unwrap_or_default()));
                handle.stop();
            }
            _ = tick.tick() => {
                let state = handle.state();
                progress.update(state.fired, started);
                if cut.is_none() && args.until_idle && graph == GraphType::Reactive
                    && state.status == RunStatus::Running
                {
                    let quiet = state.in_flight.is_empty()
                        && engine.pending_timers() == 0
                        && last_fired == Some(state.fired);
                    idle_polls = if quiet { idle_polls + 1 } else { 0 };
                    if idle_polls >= 2 {
                        cut = Some(Cut::Idle);
                        handle.stop();
                    }
                }
                last_fired = Some(state.fired);
            }
        }
    };
    progress.clear();
    (outcome, cut)
}

/// The `… N firings` line on stderr, only when stderr is a terminal.
struct Progress {
    on: bool,
    shown: bool,
    last: Option<Instant>,
}

impl Progress {
    fn new() -> Self {
        Progress {
            on: std::io::stderr().is_terminal(),
            shown: false,
            last: None,
        }
    }

    fn update(&mut self, fired: u64, started: Instant) {
        if !self.on || started.elapsed() < PROGRESS_EVERY {
            return;
        }
        if self.last.is_some_and(|t| t.elapsed() < PROGRESS_EVERY) {
            return;
        }
        self.last = Some(Instant::now());
        self.shown = true;
        let mut err = std::io::stderr().lock();
        let _ = write!(
            err,
            "\r\x1b[K… {} ({:.1} s)",
            output::plural(usize::try_from(fired).unwrap_or(usize::MAX), "firing"),
            started.elapsed().as_secs_f64()
        );
        let _ = err.flush();
    }

    fn clear(&mut self) {
        if self.shown {
            let mut err = std::io::stderr().lock();
            let _ = write!(err, "\r\x1b[K");
            let _ = err.flush();
        }
    }
}

/// One firing, ready to print or serialise.
#[derive(Debug, Serialize)]
struct Firing {
    firing: u64,
    step: String,
    inputs: Vec<TokenRef>,
    args: Value,
    attempts: u32,
    outcome: Value,
    emitted: Vec<TokenRef>,
    started_ms: i64,
    finished_ms: Option<i64>,
    duration_ms: Option<i64>,
}

#[derive(Debug, Serialize)]
struct TokenRef {
    token: u64,
    /// `None` when the trace does not say (an emitted token nobody consumed and whose event
    /// cannot be told from the plan).
    event: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    payload: Option<Value>,
}

/// Everything printed about a run.
struct Report<'a> {
    file: &'a str,
    plan: &'a Plan,
    ran: &'a Ran,
    firings: Vec<Firing>,
}

impl<'a> Report<'a> {
    fn new(file: &'a str, plan: &'a Plan, ran: &'a Ran) -> Self {
        let trace: &[TraceEntry] = ran.outcome.trace.as_deref().unwrap_or(&[]);
        // Event of each token, from the bindings that consumed it (authoritative).
        let mut token_event: HashMap<u64, String> = HashMap::new();
        for t in trace {
            for (id, ev, _) in &t.binding {
                token_event.insert(*id, ev.clone());
            }
        }
        let firings = trace
            .iter()
            .map(|t| Firing {
                firing: t.firing,
                step: t.step.clone(),
                inputs: t
                    .binding
                    .iter()
                    .map(|(id, ev, p)| TokenRef {
                        token: *id,
                        event: Some(ev.clone()),
                        payload: Some((**p).clone()),
                    })
                    .collect(),
                args: match &t.args {
                    Ok(v) => v.clone(),
                    Err(e) => json!({ "error": e }),
                },
                attempts: t.attempts,
                outcome: match &t.outcome {
                    None => json!({ "pending": true }),
                    Some(Ok(v)) => json!({ "ok": v }),
                    Some(Err(e)) => json!({ "error": { "code": e.code, "message": e.message } }),
                },
                emitted: emitted_events(plan, t)
                    .into_iter()
                    .enumerate()
                    .map(|(k, (id, guess))| TokenRef {
                        token: id,
                        // The engine's record first, then a consuming binding, then the plan.
                        event: t
                            .emitted_events
                            .get(k)
                            .cloned()
                            .flatten()
                            .or_else(|| token_event.get(&id).cloned())
                            .or(guess),
                        payload: None,
                    })
                    .collect(),
                started_ms: t.started_ms,
                finished_ms: t.finished_ms,
                // Clamped: the runtime can record a finish a millisecond before the start (reported).
                duration_ms: t.finished_ms.map(|f| f.saturating_sub(t.started_ms).max(0)),
            })
            .collect();
        Report {
            file,
            plan,
            ran,
            firings,
        }
    }

    /// `completed`, `waiting`, `stuck`, `failed`, `paused`, `stopped`.
    fn outcome_name(&self) -> &'static str {
        self.ran.outcome.status.name()
    }

    fn reason(&self) -> Option<String> {
        let o = &self.ran.outcome;
        match &o.status {
            RunStatus::Failed { reason } | RunStatus::Paused { reason } => Some(reason.clone()),
            RunStatus::Stopped => self.ran.cut.map(Cut::reason).or_else(|| o.reason.clone()),
            RunStatus::Stuck => Some(
                "nothing can fire, nothing is in flight and no output event holds a token".into(),
            ),
            RunStatus::Waiting => Some(waiting_reason(o.awaits.as_ref())),
            _ => o.reason.clone(),
        }
    }

    fn status(&self) -> Status {
        match &self.ran.outcome.status {
            RunStatus::Completed => Status::Clean,
            RunStatus::Stopped if self.ran.graph == GraphType::Reactive => Status::Clean,
            _ => Status::PlanErrors,
        }
    }

    fn json(&self) -> Value {
        let o = &self.ran.outcome;
        json!({
            "file": self.file,
            "plan": self.plan.plan_name,
            "instance": o.instance,
            "outcome": self.outcome_name(),
            "reason": self.reason(),
            "results": o.results_json(),
            "waiting": o.waiting,
            "awaits": o.awaits,
            "undelivered": self.ran.undelivered,
            "firings": self.firings.len(),
            "elapsed_ms": u64::try_from(self.ran.elapsed.as_millis()).unwrap_or(u64::MAX),
            "trace": self.firings,
        })
    }

    fn render(&self, out: &mut dyn Write, p: &Palette) -> std::io::Result<()> {
        let o = &self.ran.outcome;
        let verdict = match &o.status {
            RunStatus::Completed => p.paint("completed", Palette::good()),
            RunStatus::Stopped if self.ran.graph == GraphType::Reactive => {
                p.paint("stopped", Palette::good())
            }
            RunStatus::Paused { .. } | RunStatus::Waiting => p.paint(
                o.status.name(),
                Palette::severity(weft_core::Severity::Warning),
            ),
            other => p.paint(other.name(), Palette::error()),
        };
        writeln!(
            out,
            "{}: {verdict} (instance {}, {}, {:.1} ms)",
            p.paint(&self.plan.plan_name, Palette::bold()),
            o.instance,
            output::plural(self.firings.len(), "firing"),
            self.ran.elapsed.as_secs_f64() * 1000.0
        )?;
        let eq = p.paint("=", Palette::gutter());
        if !matches!(o.status, RunStatus::Completed)
            && let Some(r) = self.reason()
        {
            writeln!(out, "  {eq} {r}")?;
        }
        for w in &o.waiting {
            writeln!(out, "  {eq} {}", waiting_line(w))?;
        }
        for u in &self.ran.undelivered {
            writeln!(out, "  {eq} event not delivered: {u}")?;
        }

        writeln!(out)?;
        writeln!(out, "{}", p.paint("results", Palette::bold()))?;
        if o.results.is_empty() {
            writeln!(out, "  (no tokens on output events)")?;
        }
        let width = o
            .results
            .iter()
            .map(|r| r.event.chars().count())
            .max()
            .unwrap_or(0);
        for r in &o.results {
            for payload in &r.payloads {
                writeln!(out, "  {:width$}  {}", r.event, short(payload))?;
            }
        }

        writeln!(out)?;
        writeln!(out, "{}", p.paint("trace", Palette::bold()))?;
        if self.firings.is_empty() {
            writeln!(out, "  (no step fired)")?;
        }
        let t0 = self.firings.iter().map(|f| f.started_ms).min().unwrap_or(0);
        let label = |s: &str| p.paint(&format!("{s:6}"), Palette::gutter());
        for f in &self.firings {
            let timing = match f.duration_ms {
                Some(d) => format!("+{} ms, took {d} ms", f.started_ms.saturating_sub(t0)),
                None => format!("+{} ms, unfinished", f.started_ms.saturating_sub(t0)),
            };
            let attempts = if f.attempts > 1 {
                format!(", {} attempts", f.attempts)
            } else {
                String::new()
            };
            writeln!(
                out,
                "  #{:<3} {}  ({timing}{attempts})",
                f.firing,
                p.paint(&f.step, Palette::bold())
            )?;
            let inputs: Vec<String> = f
                .inputs
                .iter()
                .map(|t| {
                    format!(
                        "{}#{} {}",
                        t.event.as_deref().unwrap_or("?"),
                        t.token,
                        t.payload.as_ref().map(short).unwrap_or_default()
                    )
                })
                .collect();
            writeln!(out, "       {} {}", label("in"), inputs.join(", "))?;
            writeln!(out, "       {} {}", label("args"), short(&f.args))?;
            if let Some(v) = f.outcome.get("ok") {
                writeln!(
                    out,
                    "       {} {}",
                    p.paint("ok    ", Palette::good()),
                    short(v)
                )?;
            } else if let Some(e) = f.outcome.get("error") {
                let code = e.get("code").and_then(Value::as_str).unwrap_or("error");
                let msg = e.get("message").and_then(Value::as_str).unwrap_or("");
                writeln!(
                    out,
                    "       {} [{code}] {}",
                    p.paint("error ", Palette::error()),
                    output::shorten(msg, 2 * SHORT)
                )?;
            } else {
                writeln!(out, "       {} (in flight)", label("…"))?;
            }
            if !f.emitted.is_empty() {
                let emitted: Vec<String> = f
                    .emitted
                    .iter()
                    .map(|t| format!("{}#{}", t.event.as_deref().unwrap_or("?"), t.token))
                    .collect();
                writeln!(out, "       {} {}", label("emits"), emitted.join(", "))?;
            }
        }
        Ok(())
    }
}

/// What a `waiting` run waits for, and how to give it that.
fn waiting_reason(a: Option<&weft_runtime::Awaits>) -> String {
    let events = a.map(|a| a.events.as_slice()).unwrap_or_default();
    if events.is_empty() {
        return "nothing can fire now; a pending timer can still move it".into();
    }
    let list: Vec<String> = events.iter().map(|e| format!("`{e}`")).collect();
    format!(
        "waiting for an event on {} (kind: input); deliver it with --event {}='{{...}}'",
        list.join(" or "),
        events[0]
    )
}

fn waiting_line(w: &Waiting) -> String {
    let list = |v: &[String]| {
        v.iter()
            .map(|e| format!("`{e}`"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let mut s = format!("step `{}`", w.step);
    if !w.has.is_empty() {
        s.push_str(&format!(" has {}", list(&w.has)));
    }
    if !w.lacks.is_empty() {
        s.push_str(&format!(
            "{} lacks {}",
            if w.has.is_empty() { "" } else { " but" },
            list(&w.lacks)
        ));
    }
    if let Some(e) = &w.guard_error {
        s.push_str(&format!(
            " (all inputs present, but its guard fails to evaluate: {e})"
        ));
    } else if w.guard_blocked {
        s.push_str(" (all inputs present, but no combination satisfies its guard or correlation)");
    }
    s
}

/// Compact JSON cut to [`SHORT`] characters.
fn short(v: &Value) -> String {
    output::shorten(&v.to_string(), SHORT)
}

/// The emitted token ids with the event each went to when the plan tells: positionally when
/// every declared emit fired, and the failure event when an error produced one token. A
/// later binding that consumed the token overrides the guess.
fn emitted_events(plan: &Plan, t: &TraceEntry) -> Vec<(u64, Option<String>)> {
    let step = plan.steps.get(&t.step);
    let name = |e: &Emit| match e {
        Emit::Event(name) => name.clone(),
        Emit::Shaped(sh) => sh.event.clone(),
    };
    let unconditional = |e: &&Emit| match e {
        Emit::Event(_) => true,
        Emit::Shaped(sh) => sh.when.is_none(),
    };
    let guesses: Vec<Option<String>> = match (step, &t.outcome) {
        (Some(s), Some(Ok(_))) if s.emits.len() == t.emitted.len() => {
            s.emits.iter().map(|e| Some(name(e))).collect()
        }
        (Some(s), Some(Ok(_)))
            if s.emits.iter().filter(unconditional).count() == t.emitted.len() =>
        {
            s.emits
                .iter()
                .filter(unconditional)
                .map(|e| Some(name(e)))
                .collect()
        }
        (Some(s), Some(Err(_))) if t.emitted.len() == 1 => vec![Some(match &s.on_fail {
            Some(OnFail::Emit(ev)) => ev.clone(),
            _ => format!("{}.failed", t.step),
        })],
        _ => Vec::new(),
    };
    t.emitted
        .iter()
        .enumerate()
        .map(|(i, id)| (*id, guesses.get(i).cloned().flatten()))
        .collect()
}
