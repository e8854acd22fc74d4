//! `weft graph PLAN --format dot|mermaid|pnml`: export a plan's structure for people
//! (Graphviz, Mermaid in Markdown) or for other Petri-net tools (PNML), to stdout.
//!
//! Only loading is required (load errors exit 1): drawing a plan that does not validate yet
//! is exactly when a picture helps. Run `weft validate` for the findings. `--json` wraps the
//! export in one document with the plan's structure (events with their kinds, steps with
//! the events they consume and emit), for tools that draw it themselves.

use std::io::Write;
use std::path::PathBuf;

use clap::ValueEnum;
use weft_analysis::{CompileOptions, PtNet};

use super::validate::display_name;
use super::{Ctx, Status};
use crate::input;
use crate::output::{self, LoadDiag};

/// Export formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Graphviz DOT (events as circles, steps as boxes).
    Dot,
    /// A Mermaid flowchart (renders in Markdown on most forges).
    Mermaid,
    /// PNML, the ISO/IEC 15909-2 Petri-net interchange format, of the compiled P/T net.
    Pnml,
}

/// Arguments of `weft graph`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON), or `-` for stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Output format.
    #[arg(long, short, value_enum, default_value_t = Format::Dot)]
    pub format: Format,
    /// Print one JSON document `{plan, format, graph, events, steps}` (`graph`: the export
    /// as text; a load error is `{"error": …}`, exit 1).
    #[arg(long)]
    pub json: bool,
}

/// Runs `weft graph`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let plan = match input::load_plan(&args.plan, &ctx.limits)? {
        Ok(plan) => plan,
        Err(e) if args.json => {
            output::json(
                out,
                &serde_json::json!({"plan": null, "error": LoadDiag::new(&e)}),
            )?;
            return Ok(Status::PlanErrors);
        }
        Err(e) => {
            // The graph is the data on stdout; the reason there is none goes to stderr.
            let mut err = std::io::stderr().lock();
            output::load_error(
                &mut err,
                &output::Palette::for_stderr(),
                &display_name(&args.plan),
                &LoadDiag::new(&e),
            )?;
            return Ok(Status::PlanErrors);
        }
    };
    let text = match args.format {
        Format::Dot => weft_analysis::export::dot(&plan),
        Format::Mermaid => weft_analysis::export::mermaid(&plan),
        Format::Pnml => {
            // The plan's workflow net (source, `begin`, outputs drained into `sink`, final
            // marking [sink]) so that classical soundness checkers can read it.
            let net = PtNet::from_plan(&plan, &CompileOptions::default());
            weft_analysis::export::pnml(&net.workflow_net())
        }
    };
    if args.json {
        let events: Vec<_> = plan
            .events
            .iter()
            .map(|(name, def)| serde_json::json!({"name": name, "kind": def.kind}))
            .collect();
        let steps: Vec<_> = plan
            .steps
            .iter()
            .map(|(name, s)| {
                let emits: Vec<&str> = s.emits.iter().map(|e| e.event()).collect();
                serde_json::json!({"name": name, "action": s.action, "on": s.on, "emits": emits})
            })
            .collect();
        let format = match args.format {
            Format::Dot => "dot",
            Format::Mermaid => "mermaid",
            Format::Pnml => "pnml",
        };
        output::json(
            out,
            &serde_json::json!({"plan": plan.plan_name, "format": format, "graph": text,
                "events": events, "steps": steps}),
        )?;
        return Ok(Status::Clean);
    }
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(Status::Clean)
}
