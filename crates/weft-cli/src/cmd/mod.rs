//! One module per command, each with an `Args` (clap) and a `run` that writes its data to
//! the given writer and returns a [`Status`]. Errors (`anyhow`) mean usage or I/O failure.

pub mod analyze;
pub mod bench;
pub mod explain;
pub mod graph;
pub mod journal;
pub mod plan;
pub mod repair;
pub mod run;
pub mod schema;
pub mod serve;
pub mod summarize;
pub mod tools;
pub mod validate;

use std::io::Write;

use weft_core::Limits;

use crate::cli::{Cli, Command};
use crate::output::Palette;

/// How a command ended, when it did not fail outright.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// Nothing wrong (warnings allowed): exit 0.
    Clean,
    /// The plan has errors, load errors included: exit 1.
    PlanErrors,
}

impl Status {
    /// The process exit code.
    pub fn exit_code(self) -> u8 {
        match self {
            Status::Clean => 0,
            Status::PlanErrors => 1,
        }
    }

    /// `PlanErrors` when `has_errors`.
    pub fn from_errors(has_errors: bool) -> Self {
        if has_errors {
            Status::PlanErrors
        } else {
            Status::Clean
        }
    }
}

/// What every command gets besides its own args.
#[derive(Debug, Clone, Copy)]
pub struct Ctx {
    /// Loading and validation limits from the global flags.
    pub limits: Limits,
    /// Colours for stdout.
    pub palette: Palette,
}

/// Runs the parsed command line, writing data to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<Status> {
    let ctx = Ctx {
        limits: cli.global.limits(),
        palette: Palette::for_stdout(cli.global.color),
    };
    match cli.command {
        Command::Validate(args) => validate::run(&args, &ctx, out),
        Command::Analyze(args) => analyze::run(&args, &ctx, out),
        Command::Graph(args) => graph::run(&args, &ctx, out),
        Command::Schema(args) => schema::run(&args, &ctx, out),
        Command::Tools(args) => tools::run(&args, &ctx, out),
        Command::Run(args) => run::run(&args, &ctx, out),
        Command::Bench(args) => bench::run(&args, &ctx, out),
        Command::Plan(args) => plan::run(&args, &ctx, out),
        Command::Explain(args) => explain::run(&args, &ctx, out),
        Command::Inspect(args) => journal::inspect(&args, &ctx, out),
        Command::Replay(args) => journal::replay(&args, &ctx, out),
        Command::Journal(cmd) => journal::journal(&cmd, &ctx, out),
        Command::Checkpoint(args) => journal::checkpoint(&args, &ctx, out),
        Command::Resume(args) => journal::resume(&args, &ctx, out),
        Command::Serve(args) => serve::run(&args, &ctx, out),
        Command::Repair(args) => repair::run(&args, &ctx, out),
        Command::Summarize(args) => summarize::run(&args, &ctx, out),
    }
}
