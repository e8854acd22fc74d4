//! Rendering for people and machines.
//!
//! People get rustc-like diagnostics (`error[V001 unknown-event]: …`, `  --> /steps/a/on/0`,
//! `  = hint: …`), coloured only when stdout is a terminal and `NO_COLOR` is unset or empty. Machines
//! get `--json`: one document per run whose findings use the same field names as
//! [`weft_core::Finding`], the contract the LLM critic loop also reads. Load errors are
//! shaped like findings (code `L00x`) plus `line` and `column`, so consumers handle one list.
//!
//! Plans are hostile input: an event named `"\u001b]0;…\u0007"` must not retitle the
//! terminal. Everything a command writes to stdout passes [`Escaping`], which writes control
//! characters as `\u00XX` (valid inside `--json` strings too); [`clean`] does the same for
//! single messages on stderr.

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

/// Does `NO_COLOR` turn colour off? Only a non-empty value does (<https://no-color.org>:
/// "when present and not an empty string").
fn no_color() -> bool {
    no_color_in(std::env::var_os("NO_COLOR").as_deref())
}

fn no_color_in(value: Option<&std::ffi::OsStr>) -> bool {
    value.is_some_and(|v| !v.is_empty())
}

impl Palette {
    /// Colours for stdout under `choice`: `auto` means a terminal and no non-empty
    /// `NO_COLOR`.
    pub fn for_stdout(choice: ColorChoice) -> Self {
        let on = match choice {
            ColorChoice::Always => true,
            ColorChoice::Never => false,
            ColorChoice::Auto => !no_color() && io::stdout().is_terminal(),
        };
        Palette { on }
    }

    /// Colours for stderr messages (auto rules only: used before or outside argument parsing).
    pub fn for_stderr() -> Self {
        Palette {
            on: !no_color() && io::stderr().is_terminal(),
        }
    }

    /// No colour at all.
    pub fn plain() -> Self {
        Palette { on: false }
    }

    /// Is colour on?
    pub fn is_on(&self) -> bool {
        self.on
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

/// Is `c` a character that must not reach a terminal raw: C0 controls other than newline
/// and tab, DEL and the C1 controls.
fn is_unsafe(c: char) -> bool {
    c.is_control() && c != '\n' && c != '\t'
}

/// `text` with every unsafe control character written as `\u00XX`.
pub fn clean(text: &str) -> std::borrow::Cow<'_, str> {
    if !text.chars().any(is_unsafe) {
        return text.into();
    }
    let mut s = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        if is_unsafe(c) {
            s.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            s.push(c);
        }
    }
    s.into()
}

/// The SGR parameters [`Palette`]'s styles produce (reset, bold, normal intensity, red,
/// green, yellow, blue, cyan, default colour): the only escape sequences [`Escaping`] lets
/// through, and only when colour is on. They can recolour text, never hide it, move the
/// cursor or talk to the terminal.
const PALETTE_SGR: [&[u8]; 9] = [b"0", b"1", b"22", b"31", b"32", b"33", b"34", b"36", b"39"];

/// Length of the palette SGR sequence (`ESC [ params m`) at the start of `b`, if it is one.
fn palette_sgr(b: &[u8]) -> Option<usize> {
    let rest = b.strip_prefix(b"\x1b[")?;
    let end = rest.iter().take(24).position(|c| *c == b'm')?;
    let params = &rest[..end];
    let ok = params.is_empty()
        || params
            .split(|c| *c == b';')
            .all(|p| PALETTE_SGR.contains(&p));
    ok.then_some(end + 3)
}

/// A writer that escapes unsafe control characters on their way to a terminal (see
/// [`clean`]); with `colour`, the palette's own SGR sequences pass. Text is UTF-8 (C1
/// controls are two bytes, `C2 80`–`C2 9F`); a C1 control split across two writes is
/// written unescaped, which a UTF-8 terminal shows as a replacement character.
pub struct Escaping<W: Write> {
    inner: W,
    colour: bool,
}

impl<W: Write> Escaping<W> {
    /// Escapes what is written to `inner`; `colour`: let the palette's colours through.
    pub fn new(inner: W, colour: bool) -> Self {
        Escaping { inner, colour }
    }

    /// The writer underneath.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

impl<W: Write> Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut start = 0;
        let mut i = 0;
        while i < buf.len() {
            let b = buf[i];
            let c1 = b == 0xc2 && buf.get(i + 1).is_some_and(|n| (0x80..=0x9f).contains(n));
            let c0 = (b < 0x20 && b != b'\n' && b != b'\t') || b == 0x7f;
            if !c0 && !c1 {
                i += 1;
                continue;
            }
            if b == 0x1b
                && self.colour
                && let Some(n) = palette_sgr(&buf[i..])
            {
                i += n;
                continue;
            }
            self.inner.write_all(&buf[start..i])?;
            let code = if c1 {
                u32::from(buf[i + 1])
            } else {
                u32::from(b)
            };
            write!(self.inner, "\\u{code:04x}")?;
            i += if c1 { 2 } else { 1 };
            start = i;
        }
        self.inner.write_all(&buf[start..])?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
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
        p.paint(&clean(&f.message), Palette::bold())
    )?;
    let arrow = p.paint("-->", Palette::gutter());
    let eq = p.paint("=", Palette::gutter());
    if !f.pointer.is_empty() {
        let pointer = shorten(&f.pointer, MAX_POINTER_CHARS);
        writeln!(out, "  {arrow} {}", clean(&pointer))?;
    }
    if let Some(w) = &f.witness {
        let path = if w.is_empty() {
            "(the initial marking)".to_string()
        } else {
            w.join(" → ")
        };
        writeln!(out, "  {eq} witness: {}", clean(&path))?;
    }
    if let Some(h) = &f.hint {
        writeln!(out, "  {eq} hint: {}", clean(h))?;
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
        p.paint(&clean(&d.message), Palette::bold())
    )?;
    let mut at = clean(file).into_owned();
    if let (Some(l), Some(c)) = (d.line, d.column) {
        at.push_str(&format!(":{l}:{c}"));
    }
    if !d.pointer.is_empty() {
        let pointer = shorten(&d.pointer, MAX_POINTER_CHARS);
        at.push_str(&format!(" at {}", clean(&pointer)));
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

#[cfg(test)]
mod tests {
    use super::*;

    fn escaped(text: &str, colour: bool) -> String {
        let mut w = Escaping::new(Vec::new(), colour);
        w.write_all(text.as_bytes()).unwrap();
        String::from_utf8(w.into_inner()).unwrap()
    }

    #[test]
    fn control_characters_are_escaped_on_the_way_out() {
        let name = "a\u{1b}]0;owned\u{7}b\0c\rd\u{7f}e\u{9b}31mf";
        let want = "a\\u001b]0;owned\\u0007b\\u0000c\\u000dd\\u007fe\\u009b31mf";
        assert_eq!(clean(name), want);
        assert_eq!(
            escaped(&format!("{name}\n\tx"), false),
            format!("{want}\n\tx")
        );
        assert_eq!(escaped("plain → text", false), "plain → text");
    }

    #[test]
    fn only_the_palettes_own_colours_pass_and_only_with_colour_on() {
        let p = Palette { on: true };
        let painted = format!(
            "{} {} {}",
            p.paint("error", Palette::error()),
            p.paint("ok", Palette::good()),
            p.paint("-->", Palette::gutter())
        );
        assert!(painted.contains('\u{1b}'));
        assert_eq!(escaped(&painted, true), painted);
        assert!(!escaped(&painted, false).contains('\u{1b}'));
        // Hiding text (8: conceal), moving the cursor, an OSC title: escaped even with colour.
        for hostile in ["\u{1b}[8m", "\u{1b}[2J", "\u{1b}[1;8m", "\u{1b}]0;t\u{7}"] {
            assert!(!escaped(hostile, true).contains('\u{1b}'), "{hostile:?}");
        }
    }

    #[test]
    fn a_finding_naming_control_characters_prints_them_escaped() {
        let f = Finding::new(
            weft_core::Code::UnknownEvent,
            Severity::Error,
            "/steps/a\u{1b}[2J/on/0",
            "unknown event `b\u{7}\0`",
        );
        let mut out = Vec::new();
        finding(&mut out, &Palette::plain(), &f).unwrap();
        let text = String::from_utf8(out).unwrap();
        assert!(!text.chars().any(is_unsafe), "{text:?}");
        assert!(text.contains("unknown event `b\\u0007\\u0000`"), "{text}");
        assert!(text.contains("/steps/a\\u001b[2J/on/0"), "{text}");
    }

    #[test]
    fn only_a_non_empty_no_color_turns_colour_off() {
        use std::ffi::OsStr;
        assert!(!no_color_in(None));
        assert!(!no_color_in(Some(OsStr::new(""))));
        assert!(no_color_in(Some(OsStr::new("1"))));
        assert!(no_color_in(Some(OsStr::new("0"))));
    }
}
