//! `weft explain PLAN`: a plain-language walk-through of a plan. By default the deterministic
//! template (grounded in the plan, no model); with `--llm`, the model's text, checked against
//! the plan (steps it missed or invented are printed as warnings). Either way the plan is
//! also analysed, and a deadlock the analysis finds is said after the walk-through (a plan
//! explained as if it worked when it cannot would mislead). `--json` prints one document.

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use serde_json::json;
use weft_analysis::AnalysisOptions;
use weft_core::Finding;
use weft_llm::{Correlation, Llm};

use super::validate::{self, Checked};
use super::{Ctx, Status};
use crate::output::{self, Palette};

/// How long the deadlock check may run (a partial exploration reports what it found).
const ANALYSIS_SECS: u64 = 10;

/// Arguments of `weft explain`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON), or `-` for stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Ask the model configured by WEFT_LLM_* (or `--script`) instead of the template.
    #[arg(long)]
    pub llm: bool,
    /// With `--llm`: a scripted provider file instead of the WEFT_LLM_* server.
    #[arg(long, value_name = "FILE", requires = "llm")]
    pub script: Option<PathBuf>,
    /// Print one JSON document `{plan, explanation, source, warnings, deadlocks}`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `weft explain`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let checked = validate::check(&args.plan, None, ctx)?;
    let plan = match &checked {
        Checked::Validated { plan, .. } if !checked.has_errors() => plan,
        _ if args.json => {
            output::json(
                out,
                &json!({"plan": null, "explanation": null,
                    "error": "the plan has errors; fix them first (weft validate)"}),
            )?;
            return Ok(Status::PlanErrors);
        }
        _ => {
            checked.render(out, &ctx.palette)?;
            writeln!(
                out,
                "{}: the plan has errors; fix them first (weft validate)",
                ctx.palette.paint("not explained", Palette::error())
            )?;
            return Ok(Status::PlanErrors);
        }
    };
    let (text, source, warnings) = if args.llm {
        let provider = crate::llm::model(ctx, args.script.as_deref())?;
        let model = Llm::new(provider);
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("cannot start the async runtime")?;
        let _progress = crate::llm::retry_lines();
        let e = rt
            .block_on(weft_llm::explain(
                Some(&model),
                &Correlation::new("local"),
                plan,
            ))
            .map_err(|e| anyhow::anyhow!("the model could not explain the plan: {e}"))?;
        (e.text, "llm", e.warnings)
    } else {
        (weft_llm::explain_template(plan), "template", Vec::new())
    };
    let deadlocks = deadlocks(plan, ctx);
    if args.json {
        output::json(
            out,
            &json!({"plan": plan.plan_name, "explanation": text.trim_end(), "source": source,
                "warnings": warnings, "deadlocks": deadlocks}),
        )?;
        return Ok(Status::Clean);
    }
    writeln!(out, "{}", text.trim_end())?;
    let p = &ctx.palette;
    for d in &deadlocks {
        writeln!(
            out,
            "\n{}: {}",
            p.paint("Deadlock", Palette::error()),
            d.message.strip_prefix("Deadlock: ").unwrap_or(&d.message)
        )?;
        if let Some(w) = d.witness.as_ref().filter(|w| !w.is_empty()) {
            writeln!(out, "  witness: {}", w.join(" -> "))?;
        }
        if let Some(h) = &d.hint {
            writeln!(out, "  hint: {h}")?;
        }
    }
    if !deadlocks.is_empty() {
        writeln!(out, "  (see `weft analyze` for the whole analysis)")?;
    }
    let sp = Palette::for_stderr();
    let mut err = std::io::stderr().lock();
    for w in &warnings {
        writeln!(
            err,
            "{}: {w}",
            sp.paint("warning", Palette::severity(weft_core::Severity::Warning))
        )?;
    }
    Ok(Status::Clean)
}

/// The deadlocks (A001) the behavioural analysis finds, within a few seconds.
fn deadlocks(plan: &weft_core::Plan, ctx: &Ctx) -> Vec<Finding> {
    let at = std::time::Instant::now() + std::time::Duration::from_secs(ANALYSIS_SECS);
    let opts = AnalysisOptions {
        max_states: ctx.config.config.limits.max_states,
        interrupt: Some(std::sync::Arc::new(move || std::time::Instant::now() >= at)),
        ..AnalysisOptions::default()
    };
    weft_analysis::analyze_plan(plan, &opts)
        .findings
        .into_iter()
        .filter(|f| f.code == "A001")
        .collect()
}
