//! `weft profile PLAN`: each step's security profile (`weft_tools::profile`) — network and
//! filesystem ACLs, resource limits, isolation, determinism — derived from its tool as
//! `weft.toml` configures it and from the step's `timeout_ms`, before anything runs. The same
//! derivation the policy input's `profile` and the sandbox of `command` tools use.

use std::io::Write;
use std::path::{Path, PathBuf};

use weft_builtins::ToolsConfig;
use weft_core::catalog::ToolCatalog;
use weft_tools::{Isolation, Needs, Profile};

use super::validate::display_name;
use super::{Ctx, Status};
use crate::input;
use crate::output::{self, LoadDiag, Palette};

/// Arguments of `weft profile`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON), or `-` for stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Print `{plan, steps: [{step, profile}], unknown: [tools]}` as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `weft profile`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let plan = match input::load_plan(&args.plan, &ctx.limits)? {
        Ok(plan) => plan,
        Err(e) => {
            if args.json {
                output::json(
                    out,
                    &serde_json::json!({"plan": null, "error": LoadDiag::new(&e)}),
                )?;
            } else {
                output::load_error(
                    &mut std::io::stderr().lock(),
                    &Palette::for_stderr(),
                    &display_name(&args.plan),
                    &LoadDiag::new(&e),
                )?;
            }
            return Ok(Status::PlanErrors);
        }
    };
    let catalog = input::catalog(ctx, None)?;
    let mut profiles: Vec<(String, Profile)> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    for (name, step) in &plan.steps {
        match catalog.spec(&step.action) {
            Some(spec) => {
                let needs = needs(ctx, &step.action);
                let p = weft_tools::profile::derive(spec, needs.as_ref(), step.timeout_ms);
                profiles.push((name.clone(), p));
            }
            None => unknown.push(step.action.clone()),
        }
    }
    if args.json {
        let steps: Vec<_> = profiles
            .iter()
            .map(|(step, p)| serde_json::json!({"step": step, "profile": p}))
            .collect();
        output::json(
            out,
            &serde_json::json!({"plan": plan.plan_name, "steps": steps, "unknown": unknown}),
        )?;
    } else {
        human(out, &ctx.palette, &profiles)?;
        if !unknown.is_empty() {
            writeln!(
                std::io::stderr(),
                "error: no profile for unknown tools: {} (`weft tools` lists the known ones)",
                unknown.join(", ")
            )?;
        }
    }
    Ok(Status::from_errors(!unknown.is_empty()))
}

/// What `tool` says it needs under this configuration: declared (weft.toml), on an MCP
/// server, or built in; `None` when nothing says.
fn needs(ctx: &Ctx, tool: &str) -> Option<Needs> {
    let tools = &ctx.config.config.tools;
    if let Some(def) = tools.declared.iter().find(|d| d.name == tool) {
        return Some(def.needs());
    }
    if let Some(server) = tools.mcp.iter().find(|m| {
        tool.strip_prefix(m.name.as_str())
            .is_some_and(|r| r.starts_with('.'))
    }) {
        return Some(server.needs());
    }
    let cfg = ToolsConfig {
        http: tools.http.clone(),
        email: tools.email.clone(),
        process: tools.process.clone(),
    };
    weft_builtins::needs(tool, &cfg)
}

fn human(out: &mut dyn Write, p: &Palette, profiles: &[(String, Profile)]) -> std::io::Result<()> {
    for (i, (step, prof)) in profiles.iter().enumerate() {
        if i > 0 {
            writeln!(out)?;
        }
        let effect = serde_json::to_value(prof.effect)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        writeln!(
            out,
            "{}  {} ({}, {effect})",
            p.paint(step, Palette::bold()),
            prof.tool,
            prof.source
        )?;
        let hosts = match prof.network.hosts.as_slice() {
            [] => "none".to_string(),
            [one] if one == "*" => "any host (special addresses only when named)".to_string(),
            many => many.join(", "),
        };
        writeln!(out, "  network        {hosts}")?;
        writeln!(out, "  read           {}", paths(&prof.filesystem.read))?;
        let write = if prof.filesystem.read_only {
            "nothing (read-only)".to_string()
        } else {
            paths(&prof.filesystem.write)
        };
        writeln!(out, "  write          {write}")?;
        let l = &prof.limits;
        let or_none = |v: Option<u64>, unit: &str| {
            v.map(|v| format!("{v} {unit}"))
                .unwrap_or_else(|| "none".into())
        };
        writeln!(
            out,
            "  limits         time {}, memory {}, cpu {}",
            or_none(l.time_ms, "ms"),
            or_none(l.memory_mb, "MiB"),
            or_none(l.cpu_seconds, "s")
        )?;
        let isolation = match prof.isolation {
            Isolation::None => "none (in weft's process)",
            Isolation::Process => "process (a child process, not confined)",
            Isolation::Sandboxed => "sandboxed (Landlock, network namespace, rlimits)",
            Isolation::Remote => "remote (runs elsewhere)",
        };
        writeln!(out, "  isolation      {isolation}")?;
        let det = if prof.deterministic { "yes" } else { "no" };
        writeln!(out, "  deterministic  {det}")?;
    }
    Ok(())
}

fn paths(list: &[PathBuf]) -> String {
    match list {
        [] => "nothing".into(),
        [one] if one == Path::new("/") => "everything".into(),
        many => many
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
    }
}
