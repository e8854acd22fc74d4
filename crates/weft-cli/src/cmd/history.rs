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

/// `weft checkpoint INSTANCE [--json]`.
#[derive(Debug, clap::Args)]
pub struct CheckpointArgs {
    /// Instance id.
    pub instance: String,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
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
    /// Verify an instance's hash-chained journal: any altered, missing or reordered record is
    /// found, and a journal ending before what the store recorded beside it (the instance's
    /// status, a snapshot). Exit 1 when it is broken, 2 when it cannot be checked.
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
            "replay of {}: MISMATCH: {}",
            report.instance,
            report
                .mismatch
                .as_deref()
                .unwrap_or("the journal does not reproduce the recorded state")
        )?;
    }
    Ok(if report.matches {
        Status::Clean
    } else {
        Status::PlanErrors
    })
}

/// What `weft journal verify` found, as `--json` prints it.
#[derive(Debug, serde::Serialize)]
struct VerifyView<'a> {
    instance: &'a str,
    /// `intact`, `broken` or `unchecked` (a keyed journal without its key).
    verdict: &'static str,
    ok: bool,
    /// `sha256` or `hmac-sha256` (absent when unchecked).
    #[serde(skip_serializing_if = "Option::is_none")]
    chain: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    from_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    to_seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    records: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    head: Option<String>,
    /// The error's stable code (`chain_broken`, `chain_keyed`).
    #[serde(skip_serializing_if = "Option::is_none")]
    code: Option<&'static str>,
    /// What is wrong, by a stable name (`record_altered`, `tail_missing`, …).
    #[serde(skip_serializing_if = "Option::is_none")]
    fault: Option<&'static str>,
    /// The first bad sequence number.
    #[serde(skip_serializing_if = "Option::is_none")]
    seq: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    hint: Option<&'static str>,
}

/// The view of a verification's outcome; `Err` for failures that are not a verdict (the
/// store cannot be read).
fn verify_view<'a>(
    instance: &'a str,
    r: Result<weft_store::VerifyReport, weft_durable::DurableError>,
) -> anyhow::Result<VerifyView<'a>> {
    let mut v = VerifyView {
        instance,
        verdict: "intact",
        ok: true,
        chain: None,
        from_seq: None,
        to_seq: None,
        records: None,
        head: None,
        code: None,
        fault: None,
        seq: None,
        message: None,
        hint: None,
    };
    match r {
        Ok(report) => {
            v.chain = Some(if report.keyed {
                "hmac-sha256"
            } else {
                "sha256"
            });
            v.from_seq = Some(report.from_seq);
            v.to_seq = Some(report.to_seq);
            v.records = Some(report.records);
            v.head = Some(report.head.to_hex());
        }
        Err(weft_durable::DurableError::Store(weft_store::Error::Chain(e))) => {
            v.verdict = "broken";
            v.ok = false;
            v.code = Some("chain_broken");
            v.fault = Some(e.reason.code());
            v.seq = Some(e.seq);
            v.hint = Some(e.reason.hint());
            v.message = Some(e.to_string());
        }
        Err(e @ weft_durable::DurableError::Store(weft_store::Error::ChainKeyed { .. })) => {
            v.verdict = "unchecked";
            v.ok = false;
            v.code = Some(e.code());
            v.message = Some(match &e {
                weft_durable::DurableError::Store(weft_store::Error::ChainKeyed { message }) => {
                    message.clone()
                }
                other => other.to_string(),
            });
            v.hint = Some(
                "give the key the journal was written with: journal.hmac_key_file in weft.toml or WEFT_JOURNAL_HMAC_KEY",
            );
        }
        Err(e) => anyhow::bail!("[{}] {e}", e.code()),
    }
    Ok(v)
}

/// `weft journal verify`: exit 1 when the chain is broken, 2 when it cannot be checked
/// (a keyed journal and no key).
pub fn journal(cmd: &JournalCommand, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let JournalCommand::Verify { instance, json, .. } = cmd;
    let rt = runtime()?;
    let r = rt.block_on(async {
        let store = ctx.open_store().await?;
        if store.get_instance(instance).await?.is_none() {
            anyhow::bail!(
                "[not_found] no instance `{instance}` in this store; hint: only runs with --store (or a server's instances) are journaled"
            );
        }
        Ok::<_, anyhow::Error>(weft_durable::verify(store.as_ref(), instance).await)
    })?;
    let v = verify_view(instance, r)?;
    if *json {
        print_json(out, &v)?;
    } else {
        let p = &ctx.palette;
        match v.verdict {
            "intact" => writeln!(
                out,
                "journal of {instance}: {} — records {}..={} ({} checked), head {}, {} chain",
                p.paint("intact", Palette::bold()),
                v.from_seq.unwrap_or(0),
                v.to_seq.unwrap_or(0),
                v.records.unwrap_or(0),
                v.head.as_deref().unwrap_or(""),
                if v.chain == Some("hmac-sha256") {
                    "keyed HMAC-SHA256"
                } else {
                    "SHA-256"
                },
            )?,
            verdict => {
                let what = if verdict == "broken" {
                    "BROKEN"
                } else {
                    "CANNOT BE CHECKED"
                };
                let code = match v.fault {
                    Some(f) => format!("{}/{f}", v.code.unwrap_or("")),
                    None => v.code.unwrap_or("").to_string(),
                };
                writeln!(
                    out,
                    "journal of {instance}: {} [{code}] {}",
                    p.paint(what, Palette::bold()),
                    v.message.as_deref().unwrap_or("")
                )?;
                if let Some(h) = v.hint {
                    writeln!(out, "  hint: {h}")?;
                }
            }
        }
    }
    Ok(match v.verdict {
        "intact" => Status::Clean,
        "broken" => Status::PlanErrors,
        _ => anyhow::bail!(
            "[chain_keyed] the journal of {instance} is keyed and cannot be checked without its key"
        ),
    })
}

/// `weft checkpoint`: prints `cp-<sha256>` naming the instance's current journal head,
/// after verifying the journal: a broken one is refused (exit 1), since the checkpoint
/// would name a state that was never recorded.
pub fn checkpoint(args: &CheckpointArgs, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let id = &args.instance;
    let r = rt.block_on(async {
        let store = ctx.open_store().await?;
        if store.get_instance(id).await?.is_none() {
            anyhow::bail!(
                "[not_found] no instance `{id}` in this store; hint: only runs with --store (or a server's instances) are journaled"
            );
        }
        let cp = weft_durable::checkpoint(store.as_ref(), id).await;
        let seq = match &cp {
            Ok(cp) => Some(
                weft_durable::checkpoint_seq(store.as_ref(), id, cp)
                    .await
                    .map_err(|e| anyhow::anyhow!("[{}] {e}", e.code()))?,
            ),
            Err(_) => None,
        };
        Ok::<_, anyhow::Error>((cp, seq))
    })?;
    match r {
        (Ok(cp), seq) => {
            if args.json {
                print_json(
                    out,
                    &serde_json::json!({"instance": id, "checkpoint": cp, "seq": seq}),
                )?;
            } else {
                writeln!(out, "{cp}")?;
            }
            Ok(Status::Clean)
        }
        (Err(weft_durable::DurableError::Store(weft_store::Error::Chain(e))), _) => {
            let p = Palette::for_stderr();
            let mut err = std::io::stderr().lock();
            writeln!(
                err,
                "{} [chain_broken/{}] no checkpoint of {id}: its journal is broken: {e}",
                p.paint("error:", Palette::bold()),
                e.reason.code()
            )?;
            writeln!(
                err,
                "  hint: {} (`weft journal verify {id}` shows the same)",
                e.reason.hint()
            )?;
            if args.json {
                print_json(
                    out,
                    &serde_json::json!({"instance": id, "ok": false, "code": "chain_broken", "fault": e.reason.code(), "seq": e.seq, "message": e.to_string(), "hint": e.reason.hint()}),
                )?;
            }
            Ok(Status::PlanErrors)
        }
        (Err(e), _) => Err(anyhow::anyhow!("[{}] {e}", e.code())),
    }
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
            .wait_written(&handle)
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
