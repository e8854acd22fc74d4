//! `weft repair INSTANCE`: repair a paused, stuck or running instance by hand and continue
//! it. The instance is rebuilt from its journal (without resuming a paused one), the model
//! (`WEFT_LLM_*`, or a scripted provider file with `--script`, as for `weft plan`) is asked
//! for a revised plan through weft-llm's repair (critic loop, marking mapped by event name,
//! `R001` when a token would be lost), the engine swaps it in as a journaled
//! `repair.applied` record, and the instance runs until it settles.
//!
//! Exit codes: 0 = the repaired instance completed; 1 = it failed (the repair was refused
//! or the revised plan failed) or settled otherwise; 2 = usage or I/O (unknown or finished
//! instance, no provider configured).

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use weft_core::ToolSpec;
use weft_llm::{Llm, LlmRepairer, PlanOptions, StoreTranscript};

use super::history::{StoreArg, runtime};
use super::{Ctx, Status};
use crate::output::Palette;

/// Arguments of `weft repair`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Instance id.
    pub instance: String,
    /// What is wrong, for the model (default: the paused reason or the stuck diagnosis).
    #[arg(long, value_name = "TEXT")]
    pub failure: Option<String>,
    /// The instruction the plan was made for (default: the plan's description or name).
    #[arg(long, value_name = "TEXT")]
    pub instruction: Option<String>,
    /// Use a scripted provider file (JSON array or JSONL of expected exchanges) instead of
    /// the WEFT_LLM_* server.
    #[arg(long, value_name = "FILE")]
    pub script: Option<PathBuf>,
    /// Candidates the critic loop may ask for.
    #[arg(long, value_name = "N", default_value_t = PlanOptions::default().max_attempts, value_parser = clap::value_parser!(u32).range(1..))]
    pub max_attempts: u32,
    /// Print JSON `{instance, outcome, reason, repairs, plan_hash}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// Runs `weft repair`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let provider = crate::llm::model(ctx, args.script.as_deref())?;
    let rt = runtime()?;
    let (id, o, hash, repairs) = rt.block_on(async {
        let store = ctx.open_store().await?;
        match store.get_instance(&args.instance).await? {
            None => anyhow::bail!("[not_found] no instance `{}` in the store", args.instance),
            Some(r) if r.status.is_terminal() => anyhow::bail!(
                "[not_repairable] instance `{}` is {}{} and has ended; only paused, stuck or \
                 running instances can be repaired (fix the plan and start it again)",
                args.instance,
                serde_json::to_value(r.status)?
                    .as_str()
                    .unwrap_or("finished"),
                r.reason.map(|x| format!(" ({x})")).unwrap_or_default()
            ),
            Some(_) => {}
        }
        // The model's exchanges are kept in the store's transcripts, under the instance.
        let transcript =
            StoreTranscript::new(Arc::clone(&store), &tokio::runtime::Handle::current());
        let llm = Llm::new(provider).with_transcripts(Arc::new(transcript.clone()));
        let tools: Vec<ToolSpec> = ctx
            .node()
            .discover_mcp()
            .await
            .and_then(|b| b.tools())
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .iter()
            .map(|t| t.spec().clone())
            .collect();
        let mut repairer = LlmRepairer::new(Arc::new(llm), tools).with_options(PlanOptions {
            max_attempts: args.max_attempts,
            limits: ctx.limits,
            ..PlanOptions::default()
        });
        if let Some(i) = &args.instruction {
            repairer = repairer.with_instruction(i.clone());
        }
        let durable = Ctx::durable(ctx.node().repairer(Arc::new(repairer)), store).await?;
        let restored = durable
            .restore(&args.instance)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let handle = durable
            .engine()
            .repair(restored.id(), args.failure.clone())
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let o = durable
            .wait_written(&handle)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let f = durable
            .folded(handle.id())
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let (hash, repairs) = f
            .repaired
            .map(|r| (Some(r.hash), r.version))
            .unwrap_or((None, 0));
        if let Err(e) = transcript.flush().await {
            eprintln!("warning: transcripts not stored: {e}");
        }
        Ok::<_, anyhow::Error>((handle.id().to_string(), o, hash, repairs))
    })?;
    let status = o.status.name();
    let reason = o.reason.clone().or_else(|| match &o.status {
        weft_core::Status::Failed { reason } | weft_core::Status::Paused { reason } => {
            Some(reason.clone())
        }
        _ => None,
    });
    if args.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({"instance": id, "outcome": status, "reason": reason,
                "repairs": repairs, "plan_hash": hash}),
        )?;
        writeln!(out)?;
    } else {
        let p = &ctx.palette;
        let head = match &hash {
            Some(h) => p.paint(
                &format!(
                    "repaired (revision {repairs}, plan {})",
                    &h[..12.min(h.len())]
                ),
                Palette::good(),
            ),
            None => p.paint("not repaired", Palette::error()),
        };
        writeln!(
            out,
            "instance {id}: {head}; {status}{}",
            reason.map(|r| format!(" ({r})")).unwrap_or_default()
        )?;
    }
    Ok(if status == "completed" {
        Status::Clean
    } else {
        Status::PlanErrors
    })
}
