//! The durability commands: `weft inspect` (time travel), `weft replay` (determinism check),
//! `weft journal verify` (hash chain), `weft checkpoint` and `weft resume`. They read the
//! journal an instance left in the store (`weft run --store …` writes one).

use std::io::Write;

use anyhow::Context as _;
use clap::Subcommand;
use weft_runtime::Engine;

use super::{Ctx, Status};
use crate::output::Palette;

/// `--store` for every durability command.
#[derive(Debug, clap::Args)]
pub struct StoreArg {
    /// Store location: a SQLite file (default `.weft/weft.db`) or a `postgres://` URL.
    #[arg(long, value_name = "LOCATION", global = true)]
    pub store: Option<String>,
}

/// `weft inspect INSTANCE [--at SEQ] [--json]`.
#[derive(Debug, clap::Args)]
pub struct InspectArgs {
    /// Instance id.
    pub instance: String,
    /// Journal sequence number to inspect (default: the head).
    #[arg(long, value_name = "SEQ")]
    pub at: Option<u64>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `weft replay INSTANCE`.
#[derive(Debug, clap::Args)]
pub struct ReplayArgs {
    /// Instance id.
    pub instance: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `weft checkpoint INSTANCE`.
#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// Instance id.
    pub instance: String,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `weft resume INSTANCE [--from cp-…]`.
#[derive(Debug, clap::Args)]
pub struct ResumeArgs {
    /// Instance id.
    pub instance: String,
    /// Continue from this checkpoint (forks a new instance from that point).
    #[arg(long, value_name = "CHECKPOINT")]
    pub from: Option<String>,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// `weft journal …`.
#[derive(Debug, Subcommand)]
pub enum JournalCommand {
    /// Verify an instance's hash-chained journal: any altered, missing or reordered record is found.
    Verify {
        /// Instance id.
        instance: String,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        store: StoreArg,
    },
}

pub(crate) fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("cannot start the async runtime")
}

/// An in-memory engine of the configured node, for compiling stored plans. Call inside the
/// multi-threaded [`runtime`] when `[[tools.mcp]]` servers are configured: their tools are
/// discovered asynchronously, here (synchronous callers) with `block_in_place`.
pub(crate) fn engine(ctx: &Ctx) -> anyhow::Result<Engine> {
    let mut builder = ctx.node();
    if !builder.config().tools.mcp.is_empty() {
        let handle = tokio::runtime::Handle::current();
        builder = tokio::task::block_in_place(|| handle.block_on(builder.discover_mcp()))
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    let node = builder.in_memory().map_err(|e| anyhow::anyhow!("{e}"))?;
    Ok(node.engine().clone())
}

fn print_json(out: &mut dyn Write, v: &impl serde::Serialize) -> anyhow::Result<()> {
    serde_json::to_writer_pretty(&mut *out, v)?;
    writeln!(out)?;
    Ok(())
}

/// `weft inspect`.
pub fn inspect(args: &InspectArgs, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let i = rt.block_on(async {
        let store = ctx.open_store().await?;
        let engine = engine(ctx)?;
        weft_durable::inspect(store.as_ref(), &engine, &args.instance, args.at)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
    })?;
    if args.json {
        print_json(out, &i)?;
        return Ok(Status::Clean);
    }
    let p = &ctx.palette;
    writeln!(
        out,
        "{} {} (plan {} v{}, tenant {})",
        p.paint("instance", Palette::bold()),
        i.instance,
        i.plan,
        i.plan_version,
        i.tenant
    )?;
    writeln!(
        out,
        "at record {} of {} — status {}, {} firings",
        i.at, i.head, i.status, i.fired
    )?;
    writeln!(out, "{}", p.paint("marking", Palette::bold()))?;
    if i.marking.is_empty() {
        writeln!(out, "  (empty)")?;
    }
    for (event, n) in &i.marking {
        writeln!(
            out,
            "  {event}: {n} token{}",
            if *n == 1 { "" } else { "s" }
        )?;
    }
    if !i.waiting.is_empty() {
        writeln!(out, "{}", p.paint("waiting", Palette::bold()))?;
        for w in &i.waiting {
            let lacks = if w.guard_blocked {
                "its guard does not hold".to_string()
            } else {
                format!("lacks {}", w.lacks.join(", "))
            };
            writeln!(out, "  {}: has {}; {lacks}", w.step, w.has.join(", "))?;
        }
    }
    if !i.in_flight.is_empty() {
        writeln!(out, "{}", p.paint("in flight", Palette::bold()))?;
        for a in &i.in_flight {
            writeln!(out, "  {}", serde_json::to_string(a).unwrap_or_default())?;
        }
    }
    Ok(Status::Clean)
}

/// `weft replay`: exit 1 when the journal does not reproduce the recorded state.
pub fn replay(args: &ReplayArgs, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let r = rt.block_on(async {
        let store = ctx.open_store().await?;
        let engine = engine(ctx)?;
        weft_durable::replay(store.as_ref(), &engine, &args.instance, None)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
    });
    let report = r?;
    if args.json {
        print_json(out, &report)?;
    } else if report.matches {
        writeln!(
            out,
            "replay of {}: {} records re-folded, reproduces the recorded state (status {})",
            report.instance, report.records, report.status
        )?;
    } else {
        writeln!(
            out,
            "replay of {}: MISMATCH: the journal does not reproduce the recorded state",
            report.instance
        )?;
    }
    Ok(if report.matches {
        Status::Clean
    } else {
        Status::PlanErrors
    })
}

/// `weft journal verify`: exit 1 when the chain is broken.
pub fn journal(cmd: &JournalCommand, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let JournalCommand::Verify { instance, json, .. } = cmd;
    let rt = runtime()?;
    let r = rt.block_on(async {
        let store = ctx.open_store().await?;
        if store.get_instance(instance).await?.is_none() {
            anyhow::bail!("[not_found] no instance `{instance}` in this store");
        }
        Ok::<_, anyhow::Error>(weft_durable::verify(store.as_ref(), instance).await)
    })?;
    match r {
        Ok(report) => {
            if *json {
                print_json(
                    out,
                    &serde_json::json!({"instance": instance, "ok": true, "report": format!("{report:?}")}),
                )?;
            } else {
                writeln!(out, "journal of {instance}: chain intact ({report:?})")?;
            }
            Ok(Status::Clean)
        }
        Err(e) => {
            if *json {
                print_json(
                    out,
                    &serde_json::json!({"instance": instance, "ok": false, "code": e.code(), "error": e.to_string()}),
                )?;
            } else {
                writeln!(out, "journal of {instance}: BROKEN [{}] {e}", e.code())?;
            }
            Ok(Status::PlanErrors)
        }
    }
}

/// `weft checkpoint`: prints `cp-<sha256>` naming the instance's current journal head.
pub fn checkpoint(args: &CheckpointArgs, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let cp = rt.block_on(async {
        let store = ctx.open_store().await?;
        weft_durable::checkpoint(store.as_ref(), &args.instance)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))
    })?;
    writeln!(out, "{cp}")?;
    Ok(Status::Clean)
}

/// `weft resume`: continues an instance (or a fork of it from a checkpoint) until it settles.
pub fn resume(args: &ResumeArgs, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let outcome = rt.block_on(async {
        let store = ctx.open_store().await?;
        let durable = Ctx::durable(ctx.node(), store).await?;
        let handle = durable
            .resume(&args.instance, args.from.as_deref())
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        let id = handle.id().to_string();
        let o = durable
            .wait(&handle)
            .await
            .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?;
        Ok::<_, anyhow::Error>((id, o))
    })?;
    let (id, o) = outcome;
    let status = o.status.name();
    if args.json {
        print_json(
            out,
            &serde_json::json!({"instance": id, "outcome": status, "reason": o.reason}),
        )?;
    } else {
        writeln!(
            out,
            "instance {id}: {status}{}",
            o.reason
                .as_deref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        )?;
    }
    Ok(if status == "completed" {
        Status::Clean
    } else {
        Status::PlanErrors
    })
}
