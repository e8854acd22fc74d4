//! `weft config [--check] [--json]`: the effective configuration — every key with its value
//! and where it came from (default, file, env, flag) — and, with `--check`, what is wrong
//! with it, in the finding style of plans (code, path, message, hint).
//!
//! Exit codes: 0 = no errors; 1 = `--check` found errors (without `--check` they are listed
//! after the keys and the exit code is 1 too); 2 = usage or I/O.

use std::io::Write;

use serde_json::json;
use weft_node::{Loaded, Source};

use super::Status;
use crate::output::{self, Palette};

/// Arguments of `weft config`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Only validate: print the findings (nothing when the configuration is fine).
    #[arg(long)]
    pub check: bool,
    /// Print one JSON document `{file, keys: [{key, value, source, env}], findings}`.
    #[arg(long)]
    pub json: bool,
}

/// Runs `weft config`.
pub fn run(
    args: &Args,
    loaded: &Loaded,
    palette: &Palette,
    out: &mut dyn Write,
) -> anyhow::Result<Status> {
    let status = Status::from_errors(loaded.has_errors());
    let file = loaded.file.as_ref().map(|f| f.display().to_string());
    if args.json {
        let keys = if args.check {
            serde_json::Value::Array(Vec::new())
        } else {
            serde_json::to_value(loaded.entries())?
        };
        output::json(
            out,
            &json!({"file": file, "keys": keys, "findings": loaded.findings}),
        )?;
        return Ok(status);
    }
    if !args.check {
        match &file {
            Some(f) => writeln!(out, "# configuration file: {f}")?,
            None => writeln!(out, "# no configuration file (weft.toml): defaults apply")?,
        }
        let entries = loaded.entries();
        let shown = |e: &weft_node::Entry| match &e.value {
            Some(v) => format!("{} = {v}", e.key),
            None => format!("# {}", e.key),
        };
        let width = entries.iter().map(|e| shown(e).len()).max().unwrap_or(0);
        let mut section = "";
        for e in &entries {
            let table = e.key.rsplit_once('.').map_or("", |(t, _)| t);
            let top = table.split('.').next().unwrap_or("");
            if top != section {
                writeln!(out)?;
                section = top;
            }
            let line = shown(e);
            let env = e
                .env
                .as_ref()
                .map(|v| format!(" (env {v})"))
                .unwrap_or_default();
            let from = match &e.source {
                Source::Default => format!("# default{env}"),
                Source::Unset => format!("# unset{env}"),
                s => format!("# {s}"),
            };
            let from = if matches!(e.source, Source::Default | Source::Unset) {
                palette.paint(&from, Palette::gutter())
            } else {
                palette.paint(&from, Palette::good())
            };
            writeln!(out, "{line:<width$} {from}")?;
        }
    }
    if loaded.findings.is_empty() {
        if args.check {
            writeln!(
                out,
                "{}: {}",
                file.as_deref().unwrap_or("the configuration"),
                palette.paint("ok", Palette::good())
            )?;
        }
        return Ok(status);
    }
    if !args.check {
        writeln!(out)?;
    }
    for f in &loaded.findings {
        output::finding(out, palette, f)?;
    }
    let (errors, warnings) = output::counts(&loaded.findings);
    writeln!(
        out,
        "{}: {}, {}",
        file.as_deref().unwrap_or("the configuration"),
        output::plural(errors, "error"),
        output::plural(warnings, "warning")
    )?;
    Ok(status)
}
