//! `weft analyze PLAN`: validate, then (when there are no errors) explore the plan's
//! behaviour on its P/T net: deadlocks with witnesses, dead steps, boundedness and, for
//! acyclic plans, soundness with respect to their outputs; then governance: approval
//! coverage, the properties and plan decision of `[policy]`'s bundle, and for acyclic plans
//! the most tool calls, LLM calls and declared cost a run can spend (against the plan's
//! `limits`). A PNML file is imported and analysed as a net: classical workflow-net soundness
//! against its final marking (or sink).

use std::io::Write;
use std::path::PathBuf;

use serde::Serialize;
use weft_analysis::{AnalysisOptions, AnalysisReport, NetKind, Verdict};
use weft_core::Finding;

use super::validate::{Checked, check_with, display_name};
use super::{Ctx, Status};
use crate::input;
use crate::output::{self, Diag, LoadDiag, Palette};

/// Arguments of `weft analyze`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON) or a PNML net (`.pnml`, or content starting with `<`); `-` = stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// Reachable markings to explore before giving up (the verdict is then `unknown`)
    /// [limits.max_states; default 1,000,000].
    #[arg(long, value_name = "N")]
    pub max_states: Option<usize>,
    /// Bytes the explored markings may take before the analysis stops (partial result,
    /// verdict `unknown`) [default: 1 GiB].
    #[arg(long, value_name = "BYTES", default_value_t = weft_analysis::DEFAULT_MAX_BYTES)]
    pub max_analysis_bytes: usize,
    /// Seconds the analysis may run before it stops (partial result, verdict `unknown`).
    #[arg(long, value_name = "SECS", default_value_t = 60.0)]
    pub analysis_timeout: f64,
    /// Tokens the environment may put on each `kind: input` event that is not initial.
    #[arg(long, value_name = "N", default_value_t = AnalysisOptions::default().env_tokens)]
    pub env_tokens: u32,
    /// A static tool description file (`{"tools": [...]}`) adding to the built-in tools.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Print one JSON document instead of human-readable output.
    #[arg(long)]
    pub json: bool,
}

impl Args {
    fn options(&self, ctx: &Ctx) -> AnalysisOptions {
        // The deadline is the caller's: weft-analysis reads no clock.
        let deadline = std::time::Duration::try_from_secs_f64(self.analysis_timeout)
            .ok()
            .and_then(|d| std::time::Instant::now().checked_add(d));
        AnalysisOptions {
            max_states: ctx.config.config.limits.max_states,
            env_tokens: self.env_tokens,
            max_bytes: self.max_analysis_bytes,
            interrupt: deadline.map(|at| -> weft_analysis::Interrupt {
                std::sync::Arc::new(move || std::time::Instant::now() >= at)
            }),
            ..AnalysisOptions::default()
        }
    }
}

/// The analysis part of `--json` (the report without its findings, which are merged into the
/// top-level list).
#[derive(Serialize)]
struct Summary<'a> {
    states: usize,
    edges: usize,
    complete: bool,
    verdict: Verdict,
    bounded: Option<bool>,
    notes: &'a [String],
    /// Approval coverage, declared properties and the cost bound (plans only).
    #[serde(skip_serializing_if = "Option::is_none")]
    governance: Option<&'a weft_analysis::GovernanceReport>,
}

#[derive(Serialize)]
struct Report<'a> {
    file: &'a str,
    input: &'static str,
    errors: usize,
    warnings: usize,
    findings: Vec<Diag<'a>>,
    /// `null` when validation errors stopped the analysis.
    analysis: Option<Summary<'a>>,
}

/// What was analysed: the validated plan, or an imported net.
struct Outcome {
    file: String,
    input: &'static str,
    checked: Option<Checked>,
    report: Option<AnalysisReport>,
    net_kind: Option<NetKind>,
}

/// Runs `weft analyze`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let outcome = if is_pnml(args, ctx)? {
        analyze_pnml(args, ctx)?
    } else {
        let catalog = input::catalog(ctx, args.tools.as_deref())?;
        let checked = check_with(&args.plan, &catalog, ctx)?;
        let mut report = None;
        let mut net_kind = None;
        if let Checked::Validated { plan, .. } = &checked
            && !checked.has_errors()
        {
            let opts = AnalysisOptions {
                governance: Some(ctx.governance(&catalog)?),
                ..args.options(ctx)
            };
            report = Some(weft_analysis::analyze_plan(plan, &opts));
            net_kind = Some(match plan.graph_type {
                weft_core::GraphType::Acyclic => NetKind::Acyclic,
                weft_core::GraphType::Reactive => NetKind::Reactive,
            });
        }
        Outcome {
            file: display_name(&args.plan),
            input: "plan",
            checked: Some(checked),
            report,
            net_kind,
        }
    };
    emit(args, ctx, out, &outcome)
}

fn is_pnml(args: &Args, ctx: &Ctx) -> anyhow::Result<bool> {
    if args
        .plan
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("pnml"))
    {
        return Ok(true);
    }
    if args.plan.as_os_str() == "-" {
        // Stdin can only be read once; treat it as a JSON plan.
        return Ok(false);
    }
    Ok(match input::read_source(&args.plan, &ctx.limits)? {
        Ok(src) => src.looks_like_pnml(&args.plan),
        Err(_) => false,
    })
}

fn analyze_pnml(args: &Args, ctx: &Ctx) -> anyhow::Result<Outcome> {
    let file = display_name(&args.plan);
    let failed = |error: LoadDiag| Outcome {
        file: file.clone(),
        input: "pnml",
        checked: Some(Checked::LoadFailed {
            file: file.clone(),
            error,
        }),
        report: None,
        net_kind: None,
    };
    let src = match input::read_source(&args.plan, &ctx.limits)? {
        Ok(src) => src,
        Err(e) => return Ok(failed(LoadDiag::new(&e))),
    };
    let text = match std::str::from_utf8(&src.bytes) {
        Ok(t) => t,
        Err(e) => {
            let offset = e.valid_up_to();
            let (line, column) = weft_core::load::line_col(&src.bytes, offset);
            let e = weft_core::LoadError::InvalidUtf8 {
                offset,
                line,
                column,
            };
            return Ok(failed(LoadDiag::new(&e)));
        }
    };
    match weft_analysis::pnml::import(text) {
        Err(e) => Ok(failed(LoadDiag {
            code: e.code,
            name: pnml_error_name(e.code),
            severity: weft_core::Severity::Error,
            pointer: String::new(),
            message: e.message,
            hint: e.hint,
            line: None,
            column: None,
        })),
        Ok(net) => Ok(Outcome {
            file: file.clone(),
            input: "pnml",
            checked: None,
            report: Some(weft_analysis::analyze_net(&net, &args.options(ctx))),
            net_kind: Some(net.kind),
        }),
    }
}

/// Kebab-case names for the PNML import codes documented on [`weft_analysis::PnmlError`].
fn pnml_error_name(code: &str) -> &'static str {
    match code {
        "P001" => "malformed-xml",
        "P002" => "no-net",
        "P003" => "not-pt-net",
        "P004" => "unknown-arc-endpoint",
        "P005" => "bad-number",
        "P006" => "bad-id",
        "P007" => "bad-arc",
        "P008" => "net-too-large",
        _ => "pnml-import",
    }
}

fn emit(args: &Args, ctx: &Ctx, out: &mut dyn Write, o: &Outcome) -> anyhow::Result<Status> {
    let mut findings: Vec<Diag<'_>> = o.checked.as_ref().map(Checked::diags).unwrap_or_default();
    if let Some(r) = &o.report {
        findings.extend(r.findings.iter().map(Diag::Finding));
    }
    let all: Vec<&Finding> = findings
        .iter()
        .filter_map(|d| match d {
            Diag::Finding(f) => Some(*f),
            Diag::Load(_) => None,
        })
        .collect();
    let (mut errors, warnings) = output::counts(all.iter().copied());
    errors += findings
        .iter()
        .filter(|d| matches!(d, Diag::Load(_)))
        .count();

    if args.json {
        output::json(
            out,
            &Report {
                file: &o.file,
                input: o.input,
                errors,
                warnings,
                analysis: o.report.as_ref().map(|r| Summary {
                    states: r.states,
                    edges: r.edges,
                    complete: r.complete,
                    verdict: r.verdict,
                    bounded: r.bounded,
                    notes: &r.notes,
                    governance: r.governance.as_ref(),
                }),
                findings,
            },
        )?;
        return Ok(Status::from_errors(errors > 0));
    }

    let p = &ctx.palette;
    if let Some(c) = &o.checked {
        c.render(out, p)?;
    }
    if let Some(r) = &o.report {
        for f in &r.findings {
            output::finding(out, p, f)?;
        }
    }
    writeln!(
        out,
        "{}: {}, {}",
        o.file,
        output::plural(errors, "error"),
        output::plural(warnings, "warning")
    )?;
    match &o.report {
        None => {
            writeln!(
                out,
                "analysis: skipped (fix the errors above first)\nverdict: {}",
                p.paint("not analysed", Palette::error())
            )?;
        }
        Some(r) => {
            writeln!(
                out,
                "analysis: {} explored, {}, exploration {}",
                output::plural(r.states, "reachable state"),
                output::plural(r.edges, "firing"),
                if r.complete { "complete" } else { "incomplete" }
            )?;
            let bounded = match r.bounded {
                Some(true) => "yes",
                Some(false) => "no",
                None => "unknown",
            };
            writeln!(out, "bounded: {bounded}")?;
            if let Some(g) = &r.governance {
                governance_lines(out, g)?;
            }
            for n in &r.notes {
                writeln!(out, "note: {n}")?;
            }
            writeln!(
                out,
                "verdict: {}",
                verdict_text(r, o.net_kind, ctx.config.config.limits.max_states, p)
            )?;
        }
    }
    Ok(Status::from_errors(errors > 0))
}

/// The governance report in words: each property, then the cost bound.
fn governance_lines(
    out: &mut dyn Write,
    g: &weft_analysis::GovernanceReport,
) -> std::io::Result<()> {
    for p in &g.properties {
        let name = if p.name == weft_analysis::governance::APPROVAL_COVERAGE {
            "approval coverage".to_string()
        } else {
            format!("property {}", p.name)
        };
        let required = if p.required { "" } else { " (not required)" };
        let state = match p.holds {
            _ if p.steps.is_empty() => "no step it applies to".to_string(),
            Some(true) => format!("holds for {}", p.steps.join(", ")),
            Some(false) => format!("violated{required}: {}", p.witness.join(" → ")),
            None => "undecided (exploration limit)".to_string(),
        };
        writeln!(out, "{name}: {state}")?;
    }
    if let Some(b) = &g.bound {
        let n = weft_analysis::governance::number;
        let mut line = format!(
            "bound per run: {} tool calls, {} LLM calls",
            n(b.tool_calls.max),
            n(b.llm_calls.max)
        );
        if let Some(c) = &b.cost {
            line.push_str(&format!(", cost {}", n(c.max)));
        }
        if b.tool_calls.max > 0.0 {
            line.push_str(&format!(
                " (most calls: {})",
                b.tool_calls.witness.join(" → ")
            ));
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// `sound`, `not sound`, `unknown (state limit reached after N states)`, `not applicable (…)`.
fn verdict_text(
    r: &AnalysisReport,
    kind: Option<NetKind>,
    max_states: usize,
    p: &Palette,
) -> String {
    match r.verdict {
        Verdict::Sound => p.paint("sound", Palette::good()),
        Verdict::NotSound => p.paint("not sound", Palette::error()),
        Verdict::Unknown => {
            let why = if r.states >= max_states {
                format!(
                    "state limit reached after {}",
                    output::plural(r.states, "state")
                )
            } else {
                format!(
                    "exploration stopped after {}",
                    output::plural(r.states, "state")
                )
            };
            format!(
                "{} ({why})",
                p.paint("unknown", Palette::severity(weft_core::Severity::Warning))
            )
        }
        Verdict::NotApplicable => {
            let why = match kind {
                Some(NetKind::Reactive) => {
                    "soundness is defined for acyclic plans; this plan is reactive"
                }
                _ => {
                    "soundness is defined for workflow nets; this net is none and has no final marking (see A008)"
                }
            };
            format!("not applicable ({why})")
        }
    }
}
