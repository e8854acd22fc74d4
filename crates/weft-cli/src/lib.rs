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
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
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
                "{}: {e:#}",
                palette.paint("error", output::Palette::error())
            );
            ExitCode::from(EXIT_FAILURE)
        }
    }
}

/// `weft graph … | head` closes the pipe early; that is not a failure worth reporting.
fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}
