//! `weft explain PLAN`: a plain-language walk-through of a plan. By default the deterministic
//! template (grounded in the plan, no model); with `--llm`, the model's text, checked against
//! the plan (steps it missed or invented are printed as warnings).

use std::io::Write;
use std::path::PathBuf;

use anyhow::Context as _;
use weft_llm::{Correlation, Llm};

use super::validate::{self, Checked};
use super::{Ctx, Status};
use crate::output::Palette;

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
}

/// Runs `weft explain`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let checked = validate::check(&args.plan, None, ctx)?;
    let plan = match &checked {
        Checked::Validated { plan, .. } if !checked.has_errors() => plan,
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
    if !args.llm {
        writeln!(out, "{}", weft_llm::explain_template(plan).trim_end())?;
        return Ok(Status::Clean);
    }
    let provider = crate::llm::model(ctx, args.script.as_deref())?;
    let model = Llm::new(provider);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let e = rt
        .block_on(weft_llm::explain(
            Some(&model),
            &Correlation::new("local"),
            plan,
        ))
        .map_err(|e| anyhow::anyhow!("the model could not explain the plan: {e}"))?;
    writeln!(out, "{}", e.text.trim_end())?;
    let sp = Palette::for_stderr();
    let mut err = std::io::stderr().lock();
    for w in &e.warnings {
        writeln!(
            err,
            "{}: {w}",
            sp.paint("warning", Palette::severity(weft_core::Severity::Warning))
        )?;
    }
    Ok(Status::Clean)
}
