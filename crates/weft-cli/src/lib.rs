//! weft-cli: the command-line front end, one binary (`weft`) for every command.
//!
//! Layout: `cli` holds the clap definitions (the global flags and the [`cli::Command`]
//! enum), `cmd/<name>.rs` holds one module per command with its own `Args` and `run`,
//! `input` turns paths into plans (size limits, stdin, tool files) and `output` renders
//! findings for people (rustc-like, coloured) and machines (`--json`). A new command (`weft
//! run`, `weft serve`, `weft bench`, …) is a new module plus one enum variant.
//!
//! Exit codes are part of the contract: 0 = no errors (warnings allowed), 1 = the plan has
//! errors (load errors included), 2 = usage or I/O failure. Nothing reachable from input
//! may panic: failures are values all the way up to [`main`].

pub mod cli;
pub mod cmd;
pub mod input;
pub mod llm;
pub mod output;

use std::io::Write;
use std::process::ExitCode;

use clap::Parser;

pub use cmd::Status;

/// Exit code for usage and I/O failures (clap uses the same for usage errors).
pub const EXIT_FAILURE: u8 = 2;

/// Parses the command line, runs the command and maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` exit 0 and print to stdout; usage errors exit 2 on stderr.
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(u8::try_from(e.exit_code()).unwrap_or(EXIT_FAILURE));
        }
    };
    // Plans are hostile input: control characters in their names are escaped on the way to
    // the terminal (`output::Escaping`), the palette's colours excepted.
    let history = matches!(
        cli.command,
        cli::Command::Inspect(_)
            | cli::Command::Replay(_)
            | cli::Command::Journal(_)
            | cli::Command::Checkpoint(_)
            | cli::Command::Resume(_)
            | cli::Command::Summarize(_)
            | cli::Command::Transcript(_)
            | cli::Command::Repair(_)
    );
    let colour = output::Palette::for_stdout(cli.global.color).is_on();
    let mut out = output::Escaping::new(std::io::stdout().lock(), colour);
    let result = cmd::run(cli, &mut out).and_then(|status| {
        out.flush()?;
        Ok(status)
    });
    match result {
        Ok(status) => ExitCode::from(status.exit_code()),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let palette = output::Palette::for_stderr();
            let mut err = std::io::stderr().lock();
            let _ = writeln!(
                err,
                "{}: {}",
                palette.paint("error", output::Palette::error()),
                output::clean(&error_text(&e, history))
            );
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// The message of a failed command: a stable code given twice (`[not_found] [not_found] …`,
/// a code added to an error that already starts with it) once; and, when a history command
/// (`history`) finds no such instance, how instances get a journal.
fn error_text(e: &anyhow::Error, history: bool) -> String {
    let mut text = format!("{e:#}");
    if let Some(end) = text.strip_prefix('[').and_then(|r| r.find("] ")) {
        let code = text[..end + 3].to_string();
        while text[code.len()..].starts_with(code.as_str()) {
            text.replace_range(code.len()..2 * code.len(), "");
        }
    }
    if history && text.starts_with("[not_found] instance ") {
        text.push_str(
            "\n  = hint: only runs with a store are journaled: `weft run --store .weft/weft.db \
             PLAN` (or a store set in weft.toml or WEFT_STORE_URL, or `weft serve`); a plain \
             `weft run` keeps nothing to inspect",
        );
    }
    text
}

/// `weft graph … | head` closes the pipe early; that is not a failure worth reporting.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

#[cfg(test)]
mod tests {
    use super::error_text;

    #[test]
    fn a_doubled_code_is_said_once_and_a_missing_instance_gets_the_store_hint() {
        let e = anyhow::anyhow!("[not_found] [not_found] instance i1");
        let text = error_text(&e, true);
        assert!(text.starts_with("[not_found] instance i1\n"), "{text}");
        assert!(text.contains("--store"), "{text}");
        assert_eq!(
            error_text(&anyhow::anyhow!("[io] [x] y"), false),
            "[io] [x] y"
        );
        assert_eq!(
            error_text(&anyhow::anyhow!("[a] [a] [a] b"), false),
            "[a] b"
        );
    }
}
