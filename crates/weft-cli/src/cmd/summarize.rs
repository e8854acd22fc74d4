//! `weft summarize INSTANCE`: what happened in a run, its problems and suggestions, grounded
//! in the instance's journal and the plan it ran (the revised plan after a repair). By
//! default the deterministic template (no model); with `--llm`, the model configured by
//! `WEFT_LLM_*` (or `--script FILE`), as for `weft explain`.

use std::io::Write;
use std::path::PathBuf;

use weft_llm::{Correlation, Llm};

use super::history::{StoreArg, runtime};
use super::{Ctx, Status};
use crate::output::Palette;

/// Arguments of `weft summarize`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Instance id.
    pub instance: String,
    /// Ask the model configured by WEFT_LLM_* (or `--script`) instead of the template.
    #[arg(long)]
    pub llm: bool,
    /// With `--llm`: a scripted provider file instead of the WEFT_LLM_* server.
    #[arg(long, value_name = "FILE", requires = "llm")]
    pub script: Option<PathBuf>,
    /// Print JSON `{instance, status, what_happened, problems, suggestions, source}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// The journal as text for the summarizer: one line per record, then the status.
fn journal_text(ins: &weft_durable::Inspection) -> String {
    let mut lines: Vec<String> = ins
        .events
        .iter()
        .map(|e| {
            let mut body = e.body.clone();
            // The whole revised plan is in the plan part of the prompt; keep lines short.
            if let Some(m) = body.as_object_mut() {
                m.remove("document");
            }
            format!("#{} {} {}", e.seq, e.kind, body)
        })
        .collect();
    lines.push(format!("final status: {}", ins.status));
    // `stuck:` lines are problems; a waiting instance's are not (it waits for its input).
    let label = if ins.status == "stuck" {
        "stuck"
    } else {
        "waiting"
    };
    for w in &ins.waiting {
        lines.push(format!(
            "{label}: step {} has [{}] but lacks [{}]",
            w.step,
            w.has.join(", "),
            w.lacks.join(", ")
        ));
    }
    lines.join("\n")
}

/// Runs `weft summarize`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let model = if args.llm {
        let provider = crate::llm::model(ctx, args.script.as_deref())?;
        Some(Llm::new(provider))
    } else {
        None
    };
    let rt = runtime()?;
    let _progress = model.is_some().then(crate::llm::retry_lines);
    let (ins, summary) = rt.block_on(async {
        let store = ctx.open_store().await?;
        let engine = super::history::engine(ctx)?;
        let ins = weft_durable::inspect(store.as_ref(), &engine, &args.instance, None)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        // The plan it ran: the last revision, else the stored version it started with.
        let revised = ins
            .events
            .iter()
            .rev()
            .find(|e| e.kind == "repair.applied")
            .and_then(|e| e.body.get("document").cloned());
        let doc = match revised {
            Some(d) => d,
            None => {
                store
                    .get_plan(&ins.tenant, &ins.plan, Some(ins.plan_version))
                    .await?
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "[not_found] plan `{}` version {} is not in the store",
                            ins.plan,
                            ins.plan_version
                        )
                    })?
                    .document
            }
        };
        let plan = weft_core::load::plan_from_value(doc, &ctx.limits)
            .map_err(|e| anyhow::anyhow!("the stored plan does not load: {e}"))?;
        let corr = Correlation::new(ins.tenant.clone())
            .with_plan(ins.plan.clone())
            .with_instance(ins.instance.clone());
        let summary = weft_llm::summarize(model.as_ref(), &corr, &journal_text(&ins), &plan)
            .await
            .map_err(|e| anyhow::anyhow!("the model could not summarize the run: {e}"))?;
        Ok::<_, anyhow::Error>((ins, summary))
    })?;
    if args.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"instance": ins.instance, "status": ins.status,
                "what_happened": summary.what_happened, "problems": summary.problems,
                "suggestions": summary.suggestions, "source": summary.source}),
        )?;
        writeln!(out)?;
        return Ok(Status::Clean);
    }
    let p = &ctx.palette;
    writeln!(
        out,
        "{} {} ({}, plan `{}`)",
        p.paint("instance", Palette::good()),
        ins.instance,
        ins.status,
        ins.plan
    )?;
    writeln!(out, "{}", summary.what_happened.trim_end())?;
    if !summary.problems.is_empty() {
        writeln!(out, "\n{}", p.paint("Problems:", Palette::error()))?;
        for pr in &summary.problems {
            writeln!(out, "- {pr}")?;
        }
    }
    if !summary.suggestions.is_empty() {
        writeln!(out, "\nSuggestions:")?;
        for s in &summary.suggestions {
            writeln!(out, "- {s}")?;
        }
    }
    Ok(Status::Clean)
}
