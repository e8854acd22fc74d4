//! `weft validate PLAN`: load with limits, validate against the built-in tool catalog (plus
//! an optional static tool description file), print the findings.
//!
//! [`check`] is shared with `weft analyze`, which validates before it analyses.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::Serialize;
use weft_core::{Finding, Plan, validate};

use super::{Ctx, Status};
use crate::input;
use crate::output::{self, Diag, LoadDiag, Palette};

/// Arguments of `weft validate`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The plan file (JSON), or `-` for stdin.
    #[arg(value_name = "PLAN")]
    pub plan: PathBuf,
    /// A static tool description file (`{"tools": [...]}`) adding to the built-in tools.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,
    /// Print one JSON document instead of human-readable output.
    #[arg(long)]
    pub json: bool,
}

/// A plan after loading and validation.
#[derive(Debug)]
pub enum Checked {
    /// The document is not a loadable plan.
    LoadFailed {
        /// The file as named by the user.
        file: String,
        /// What went wrong.
        error: LoadDiag,
    },
    /// The plan loaded; these are the validation findings.
    Validated {
        /// The file as named by the user.
        file: String,
        /// The plan.
        plan: Box<Plan>,
        /// Validation findings, errors first.
        findings: Vec<Finding>,
    },
}

impl Checked {
    /// Does the plan have errors (load errors included)?
    pub fn has_errors(&self) -> bool {
        match self {
            Checked::LoadFailed { .. } => true,
            Checked::Validated { findings, .. } => findings.iter().any(Finding::is_error),
        }
    }

    /// The findings list for `--json`.
    pub fn diags(&self) -> Vec<Diag<'_>> {
        match self {
            Checked::LoadFailed { error, .. } => vec![Diag::Load(error.clone())],
            Checked::Validated { findings, .. } => findings.iter().map(Diag::Finding).collect(),
        }
    }

    /// Writes the load error or the findings, human-style.
    pub fn render(&self, out: &mut dyn Write, p: &Palette) -> std::io::Result<()> {
        match self {
            Checked::LoadFailed { file, error } => output::load_error(out, p, file, error),
            Checked::Validated { findings, .. } => {
                for f in findings {
                    output::finding(out, p, f)?;
                }
                Ok(())
            }
        }
    }
}

/// Loads and validates the plan at `path`. `Err` only for I/O failures and bad tool files.
pub fn check(path: &Path, tools: Option<&Path>, ctx: &Ctx) -> anyhow::Result<Checked> {
    check_with(path, &input::catalog(ctx, tools)?, ctx)
}

/// [`check`] against a catalog the caller already has.
pub fn check_with(
    path: &Path,
    catalog: &weft_core::StaticCatalog,
    ctx: &Ctx,
) -> anyhow::Result<Checked> {
    let file = display_name(path);
    match input::load_plan(path, &ctx.limits)? {
        Err(e) => Ok(Checked::LoadFailed {
            file,
            error: LoadDiag::new(&e),
        }),
        Ok(plan) => {
            let findings = validate(&plan, Some(catalog), &ctx.limits).findings;
            Ok(Checked::Validated {
                file,
                plan: Box::new(plan),
                findings,
            })
        }
    }
}

/// The name used in messages for `path`.
pub fn display_name(path: &Path) -> String {
    if path.as_os_str() == "-" {
        "<stdin>".to_string()
    } else {
        path.display().to_string()
    }
}

#[derive(Serialize)]
struct Report<'a> {
    file: &'a str,
    valid: bool,
    errors: usize,
    warnings: usize,
    findings: Vec<Diag<'a>>,
}

/// Runs `weft validate`.
pub fn run(args: &Args, ctx: &Ctx, out: &mut dyn Write) -> anyhow::Result<Status> {
    let checked = check(&args.plan, args.tools.as_deref(), ctx)?;
    let (errors, warnings) = match &checked {
        Checked::LoadFailed { .. } => (1, 0),
        Checked::Validated { findings, .. } => output::counts(findings),
    };
    let file = match &checked {
        Checked::LoadFailed { file, .. } | Checked::Validated { file, .. } => file.as_str(),
    };
    if args.json {
        output::json(
            out,
            &Report {
                file,
                valid: errors == 0,
                errors,
                warnings,
                findings: checked.diags(),
            },
        )?;
    } else {
        let p = &ctx.palette;
        checked.render(out, p)?;
        let verdict = if errors == 0 {
            p.paint("valid", Palette::good())
        } else {
            p.paint("invalid", Palette::error())
        };
        writeln!(
            out,
            "{file}: {verdict} ({}, {})",
            output::plural(errors, "error"),
            output::plural(warnings, "warning")
        )?;
    }
    Ok(Status::from_errors(errors > 0))
}
