//! `weft transcript INSTANCE`: the language-model exchanges an instance's steps made
//! (`llm.complete`, `agent.react`, repairs), read from the store's transcripts: purpose,
//! tokens, time, the last message asked and the answer (`--json`: every exchange in full).

use std::io::Write;

use serde_json::Value;

use super::history::{StoreArg, runtime};
use super::{Ctx, Status};
use crate::output::Palette;

/// Arguments of `weft transcript`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Instance id.
    pub instance: String,
    /// Print `{instance, tenant, exchanges: [...], usage}`.
    #[arg(long)]
    pub json: bool,
    #[command(flatten)]
    pub store: StoreArg,
}

/// At most this many characters of a message are printed (`--json` has them all).
const SHOWN: usize = 400;

/// Runs `weft transcript`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let rt = runtime()?;
    let (tenant, exchanges) = rt.block_on(async {
        let store = ctx.open_store().await?;
        let rec = store.get_instance(&args.instance).await?.ok_or_else(|| {
            anyhow::anyhow!(
                "[not_found] instance `{}` is not in the store {} (only runs with a store are journaled: `weft run --store …`, `weft serve`)",
                args.instance,
                ctx.config.config.store.url
            )
        })?;
        let scope = weft_llm::TranscriptScope::Instance(args.instance.clone());
        let ex = weft_llm::list_transcripts(store.as_ref(), &rec.tenant, &scope)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::Ok((rec.tenant, ex))
    })?;
    let (prompt, completion) = weft_llm::token_totals(&exchanges);
    if args.json {
        serde_json::to_writer_pretty(
            &mut *out,
            &serde_json::json!({
                "instance": args.instance,
                "tenant": tenant,
                "exchanges": exchanges,
                "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
            }),
        )?;
        writeln!(out)?;
        return Ok(Status::Clean);
    }
    let p = &ctx.palette;
    writeln!(
        out,
        "{} {} (tenant {tenant}): {} exchange{}, {prompt} prompt and {completion} completion tokens",
        p.paint("instance", Palette::bold()),
        args.instance,
        exchanges.len(),
        if exchanges.len() == 1 { "" } else { "s" }
    )?;
    for (i, e) in exchanges.iter().enumerate() {
        writeln!(
            out,
            "\n{} {} via {} — {} + {} tokens, {} ms",
            p.paint(&format!("#{}", i + 1), Palette::bold()),
            e.purpose,
            e.provider,
            e.usage.prompt_tokens,
            e.usage.completion_tokens,
            e.latency_ms
        )?;
        let asked = serde_json::to_value(&e.request)
            .ok()
            .and_then(|r| r["messages"].as_array().and_then(|m| m.last().cloned()))
            .map(|m| text_of(&m["content"]))
            .unwrap_or_default();
        writeln!(out, "  asked: {}", shorten(&asked))?;
        match (&e.response, &e.error) {
            (Some(r), _) => {
                let said = serde_json::to_value(r)
                    .map(|v| {
                        let c = text_of(&v["content"]);
                        if c.is_empty() {
                            v["tool_calls"].to_string()
                        } else {
                            c
                        }
                    })
                    .unwrap_or_default();
                writeln!(out, "  answer: {}", shorten(&said))?;
            }
            (None, Some(err)) => writeln!(out, "  error: {}", shorten(err))?,
            (None, None) => {}
        }
    }
    Ok(Status::Clean)
}

/// A message content as text (a string, or the text parts of a list).
fn text_of(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn shorten(s: &str) -> String {
    let one_line = s.split_whitespace().collect::<Vec<_>>().join(" ");
    if one_line.chars().count() > SHOWN {
        let cut: String = one_line.chars().take(SHOWN).collect();
        format!("{cut}…")
    } else {
        one_line
    }
}
