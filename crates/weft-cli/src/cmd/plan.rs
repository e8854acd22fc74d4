//! `weft plan "INSTRUCTION"`: ask a model for a plan through weft-llm's verified planner
//! (the critic loop validates and analyses every candidate and sends the findings back) and
//! print the accepted plan, or write it with `-o`.
//!
//! The model is the OpenAI-compatible provider configured from `WEFT_LLM_*`, or a scripted
//! provider file with `--script` (offline demo and tests). The summary on stderr lists what
//! the critic rejected in each round. Exit codes: 0 = a plan was accepted; 1 = the attempts
//! ran out (the last findings are listed) or the model's replies were unusable; 2 = usage or
//! environment: no provider configured, the model unreachable (a line per retry on stderr),
//! timing out or answering 5xx.
//!
//! With `--store LOC` the exchanges are kept in the store's transcripts and the accepted plan
//! in its plan cache: the same instruction, tools and model are answered from the store.
//! `[budget.planner]` counts the run's model calls against the local tenant's quota: in the
//! store's counters with `--store` (shared with the servers on it), else for this run alone.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::json;
use weft_core::ToolSpec;
use weft_llm::{Llm, PlanOptions};

use super::{Ctx, Status};
use crate::input;
use crate::output::{self, Palette};

/// Arguments of `weft plan`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// What the plan should do, in plain language.
    #[arg(value_name = "INSTRUCTION")]
    pub instruction: String,
    /// A static tool description file (`{"tools": [...]}`) adding to the built-in tools the
    /// model may use.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Write the plan to this file instead of stdout.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Use a scripted provider file (JSON array or JSONL of expected exchanges) instead of
    /// the WEFT_LLM_* server.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Candidates the critic loop may ask for.
    #[arg(long, value_name = "N", default_value_t = PlanOptions::default().max_attempts, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Also run the semantic review pass (its concerns are printed as warnings).
    #[arg(long)]
    pub review: bool,
    /// Print one JSON document `{plan, attempts, critic_rounds, warnings, findings}`.
    #[arg(long)]
    pub json: bool,
    /// Keep transcripts and the plan cache in this store (a SQLite file or a `postgres://`
    /// URL; e.g. `.weft/weft.db`).
    #[arg(long, value_name = "LOCATION")]
    pub store: Option<String>,
}

/// Runs `weft plan`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let provider = crate::llm::model(ctx, args.script.as_deref())?;
    let catalog = input::catalog(ctx, args.tools.as_deref())?;
    let tools: Vec<ToolSpec> = catalog.iter().cloned().collect();
    let mut opts = PlanOptions {
        max_attempts: args.max_attempts,
        semantic_review: args.review,
        limits: ctx.limits,
        ..PlanOptions::default()
    };
    // The candidates pass the checks `weft run` and the server apply; the critic hands a
    // refusal back to the model.
    opts.analysis.governance = Some(ctx.governance(&catalog)?);
    let mut llm = Llm::new(provider);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let mut sink = None;
    let store = match &args.store {
        Some(_) => Some(rt.block_on(ctx.open_store())?),
        None => None,
    };
    // `[budget.planner]`: this run's calls count against the tenant's quota (with the
    // store's counters when there is a store).
    let quota = rt
        .block_on(weft_node::llm::PlannerQuota::open(
            &ctx.config.config.budget,
            store.clone(),
        ))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    if let Some(q) = &quota {
        llm = llm.with_budget(q.budget());
    }
    if let Some(store) = store {
        let t = weft_llm::StoreTranscript::new(std::sync::Arc::clone(&store), rt.handle());
        llm = llm.with_transcripts(std::sync::Arc::new(t.clone()));
        sink = Some(t);
        let tenant = opts.correlation.tenant.clone();
        opts.cache = Some(std::sync::Arc::new(weft_llm::StorePlanCache::new(
            store, tenant,
        )));
    }
    let _progress = crate::llm::retry_lines();
    let result = rt.block_on(async {
        let r = weft_llm::plan(&llm, &args.instruction, &tools, &opts).await;
        if let Some(q) = &quota
            && let Err(e) = q.sync().await
        {
            eprintln!("warning: the planner quota's count not stored: {e}");
        }
        if let Some(t) = &sink
            && let Err(e) = t.flush().await
        {
            eprintln!("warning: transcripts not stored: {e}");
        }
        r
    });
    let p = &ctx.palette;
    let outcome = match result {
        Ok(o) => o,
        Err(e @ weft_llm::Error::PlanningFailed { .. }) => {
            if args.json {
                let findings = match &e {
                    weft_llm::Error::PlanningFailed { findings, .. } => findings.clone(),
                    _ => Vec::new(),
                };
                output::json(
                    out,
                    &json!({"plan": null, "error": e.to_string(), "findings": findings}),
                )?;
            } else {
                let mut err = std::io::stderr().lock();
                writeln!(
                    err,
                    "{}: {e}",
                    Palette::for_stderr().paint("error", Palette::error())
                )?;
            }
            return Ok(Status::PlanErrors);
        }
        Err(e) if crate::llm::is_environment(&e) => anyhow::bail!("{e}"),
        Err(e) => {
            let mut err = std::io::stderr().lock();
            writeln!(
                err,
                "{}: the model failed: {e}",
                Palette::for_stderr().paint("error", Palette::error())
            )?;
            return Ok(Status::PlanErrors);
        }
    };
    let plan_text = serde_json::to_string_pretty(&outcome.plan)?;
    if let Some(path) = &args.output {
        std::fs::write(path, format!("{plan_text}\n"))
            .with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    if args.json {
        output::json(
            out,
            &json!({
                "plan": outcome.plan,
                "attempts": outcome.attempts,
                "critic_rounds": outcome.critic_rounds(),
                "from_cache": outcome.from_cache,
                "warnings": outcome.warnings,
                "findings": outcome.findings,
                "feedback": outcome.rounds.iter().map(|r| &r.feedback).collect::<Vec<_>>(),
            }),
        )?;
        return Ok(Status::Clean);
    }
    if args.output.is_none() {
        writeln!(out, "{plan_text}")?;
    }
    // The summary goes to stderr when the plan itself is on stdout, so `> plan.json` works.
    let mut err_lock;
    let summary: &mut dyn Write = if args.output.is_none() {
        err_lock = std::io::stderr().lock();
        &mut err_lock
    } else {
        out
    };
    let sp = if args.output.is_none() {
        Palette::for_stderr()
    } else {
        *p
    };
    let target = args
        .output
        .as_ref()
        .map(|o| format!(" → {}", o.display()))
        .unwrap_or_default();
    writeln!(
        summary,
        "{}: plan `{}` accepted after {} ({}){target}",
        sp.paint("planned", Palette::good()),
        outcome.plan.plan_name,
        output::plural(
            usize::try_from(outcome.attempts).unwrap_or(usize::MAX),
            "attempt"
        ),
        output::plural(outcome.critic_rounds(), "critic round"),
    )?;
    for r in &outcome.rounds {
        writeln!(
            summary,
            "{}: the critic rejected attempt {}:",
            sp.paint("rejected", Palette::severity(weft_core::Severity::Warning)),
            r.attempt
        )?;
        for f in &r.findings {
            let line = weft_llm::error::render_finding(f).replace('\n', "\n  ");
            writeln!(summary, "  {line}")?;
        }
    }
    for w in &outcome.warnings {
        writeln!(
            summary,
            "{}: {w}",
            sp.paint("warning", Palette::severity(weft_core::Severity::Warning))
        )?;
    }
    Ok(Status::Clean)
}
