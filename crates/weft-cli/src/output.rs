//! Rendering for people and machines.
//!
//! People get rustc-like diagnostics (`error[V001 unknown-event]: …`, `  --> /steps/a/on/0`,
//! `  = hint: …`), coloured only when stdout is a terminal and `NO_COLOR` is unset. Machines
//! get `--json`: one document per run whose findings use the same field names as
//! [`weft_core::Finding`], the contract the LLM critic loop also reads. Load errors are
//! shaped like findings (code `L00x`) plus `line` and `column`, so consumers handle one list.

use std::io::{self, IsTerminal, Write};

use owo_colors::{OwoColorize, Style};
use serde::Serialize;
use weft_core::{Finding, LoadError, Severity};

use crate::cli::ColorChoice;

/// Whether and how to colour text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Palette {
    on: bool,
}

impl Palette {
    /// Colours for stdout under `choice`: `auto` means a terminal and no `NO_COLOR` (any value).
    pub fn for_stdout(choice: ColorChoice) -> Self {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => {
                std::env::var_os("NO_COLOR").is_none() && io::stdout().is_terminal()
            }
        };
        Palette { on }
    }

    /// Colours for stderr messages (auto rules only: used before or outside argument parsing).
    pub fn for_stderr() -> Self {
        Palette {
            on: std::env::var_os("NO_COLOR").is_none() && io::stderr().is_terminal(),
        }
    }

    /// No colour at all.
    pub fn plain() -> Self {
        Palette { on: false }
    }

    /// `text` in `style`, or unchanged when colour is off.
    pub fn paint(&self, text: &str, style: Style) -> String {
        if self.on {
            text.style(style).to_string()
        } else {
            text.to_string()
        }
    }

    /// Style of `error`.
    pub fn error() -> Style {
        Style::new().red().bold()
    }

    /// Style of a severity label.
    pub fn severity(s: Severity) -> Style {
        match s {
            Severity::Error => Self::error(),
            Severity::Warning => Style::new().yellow().bold(),
            Severity::Info => Style::new().cyan().bold(),
        }
    }

    /// Style of the `-->` and `=` gutters.
    pub fn gutter() -> Style {
        Style::new().blue().bold()
    }

    /// Bold, for headlines.
    pub fn bold() -> Style {
        Style::new().bold()
    }

    /// Green, for good verdicts.
    pub fn good() -> Style {
        Style::new().green().bold()
    }
}

/// Pointers longer than this are shortened in human output (a 10,000-character event name
/// should not flood the terminal); `--json` always carries them whole.
const MAX_POINTER_CHARS: usize = 160;

/// `text` cut to `max` characters, with `…` when cut.
pub fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        let mut s: String = text.chars().take(max).collect();
        s.push('…');
        s
    }
}

/// Writes one finding, rustc-style.
pub fn finding(out: &mut dyn Write, p: &Palette, f: &Finding) -> io::Result<()> {
    let label = format!("{}[{} {}]", f.severity.as_str(), f.code, f.name);
    writeln!(
        out,
        "{}{} {}",
        p.paint(&label, Palette::severity(f.severity)),
        p.paint(":", Palette::bold()),
        p.paint(&f.message, Palette::bold())
    )?;
    let arrow = p.paint("-->", Palette::gutter());
    let eq = p.paint("=", Palette::gutter());
    if !f.pointer.is_empty() {
        writeln!(out, "  {arrow} {}", shorten(&f.pointer, MAX_POINTER_CHARS))?;
    }
    if let Some(w) = &f.witness {
        let path = if w.is_empty() {
            "(the initial marking)".to_string()
        } else {
            w.join(" → ")
        };
        writeln!(out, "  {eq} witness: {path}")?;
    }
    if let Some(h) = &f.hint {
        writeln!(out, "  {eq} hint: {h}")?;
    }
    writeln!(out)
}

/// A load error in the shape of a finding, for `--json` and for rendering.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LoadDiag {
    /// `L001`…`L005`.
    pub code: &'static str,
    /// Kebab-case name of the code.
    pub name: &'static str,
    /// Always `error`.
    pub severity: Severity,
    /// JSON pointer of the value being read, when known (`""` otherwise).
    pub pointer: String,
    /// What is wrong.
    pub message: String,
    /// How to fix it.
    pub hint: &'static str,
    /// 1-based line, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// 1-based column, when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
}

impl LoadDiag {
    /// Describes `e`.
    pub fn new(e: &LoadError) -> Self {
        let (name, message, line, column) = match e {
            LoadError::TooLarge { .. } => ("too-large", e.to_string(), None, None),
            LoadError::InvalidUtf8 { line, column, .. } => {
                ("invalid-utf8", e.to_string(), Some(*line), Some(*column))
            }
            LoadError::TooDeep { line, column, .. } => {
                ("too-deep", e.to_string(), Some(*line), Some(*column))
            }
            LoadError::Syntax {
                message,
                line,
                column,
                ..
            } => ("syntax", message.clone(), Some(*line), Some(*column)),
            LoadError::TooMany { .. } => ("too-many", e.to_string(), None, None),
        };
        LoadDiag {
            code: e.code(),
            name,
            severity: Severity::Error,
            pointer: e.pointer().to_string(),
            message,
            hint: e.hint(),
            line,
            column,
        }
    }
}

/// Writes a load error, rustc-style, with its position in `file`.
pub fn load_error(out: &mut dyn Write, p: &Palette, file: &str, d: &LoadDiag) -> io::Result<()> {
    let label = format!("error[{} {}]", d.code, d.name);
    writeln!(
        out,
        "{}{} {}",
        p.paint(&label, Palette::error()),
        p.paint(":", Palette::bold()),
        p.paint(&d.message, Palette::bold())
    )?;
    let mut at = file.to_string();
    if let (Some(l), Some(c)) = (d.line, d.column) {
        at.push_str(&format!(":{l}:{c}"));
    }
    if !d.pointer.is_empty() {
        at.push_str(&format!(" at {}", shorten(&d.pointer, MAX_POINTER_CHARS)));
    }
    writeln!(out, "  {} {at}", p.paint("-->", Palette::gutter()))?;
    writeln!(
        out,
        "  {} hint: {}",
        p.paint("=", Palette::gutter()),
        d.hint
    )?;
    writeln!(out)
}

/// Errors and warnings among `findings`.
pub fn counts<'a>(findings: impl IntoIterator<Item = &'a Finding>) -> (usize, usize) {
    findings
        .into_iter()
        .fold((0, 0), |(e, w), f| match f.severity {
            Severity::Error => (e + 1, w),
            Severity::Warning => (e, w + 1),
            Severity::Info => (e, w),
        })
}

/// `1 error`, `2 warnings`.
pub fn plural(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// Writes `value` as pretty JSON and a newline.
pub fn json(out: &mut dyn Write, value: &impl Serialize) -> io::Result<()> {
    serde_json::to_writer_pretty(&mut *out, value)?;
    writeln!(out)
}

/// One entry of a `--json` findings list: a load error or a finding.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Diag<'a> {
    /// The document could not be loaded as a plan.
    Load(LoadDiag),
    /// Validation or analysis found something.
    Finding(&'a Finding),
}
