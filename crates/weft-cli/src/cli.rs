//! The command-line surface: global flags (limits, colour) and the [`Command`] enum.
//!
//! Kept apart from the commands so that `--help` reads as one document and adding a command
//! is one variant here plus one module under `cmd/`.

use clap::{Args, Parser, Subcommand, ValueEnum};

use crate::cmd::{
    analyze, approve, bench, config, explain, graph, history, plan, policy, profile, repair, run,
    schema, serve, summarize, tools, transcript, validate,
};

/// weft: check, analyse and export AI plans (colored Petri nets) before they run.
#[derive(Debug, Parser)]
#[command(
    name = "weft",
    version,
    after_help = "Exit codes: 0 = no errors (warnings allowed; `run`: completed), 1 = the plan \
                  has errors (including load errors: malformed JSON, limits) or the run did not \
                  complete, 2 = usage or I/O failure.\n\
                  Colour: off when NO_COLOR is set to a non-empty value or stdout is not a terminal \
                  (see --color)."
)]
pub struct Cli {
    /// Flags every command accepts.
    #[command(flatten)]
    pub global: GlobalArgs,
    /// The command to run.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands. Each variant's args and behaviour live in `cmd/<name>.rs`.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Load a plan (with limits) and validate it against the tool catalog.
    Validate(validate::Args),
    /// Validate, then analyse the plan's behaviour (deadlocks, dead steps, boundedness,
    /// soundness). Also accepts a PNML net.
    Analyze(analyze::Args),
    /// Export a plan as a graph (DOT, Mermaid or PNML) to stdout.
    Graph(graph::Args),
    /// Print the JSON Schema of the plan format.
    Schema(schema::Args),
    /// List the tools (built-in and declared in weft.toml) with their effect class,
    /// idempotency and source.
    Tools(tools::Args),
    /// Print each step's security profile (network and filesystem access, limits, isolation,
    /// determinism), derived from its tool as weft.toml configures it.
    Profile(profile::Args),
    /// Run one instance of a plan in-process (built-in tools, email to ./.weft/outbox/) and
    /// print its outcome, result tokens and a trace of every firing.
    Run(run::Args),
    /// Run the benchmark workloads of BENCHMARKS.md (JSON lines on stdout, progress on stderr).
    Bench(bench::Args),
    /// Ask a model for a plan; the critic loop validates and analyses every candidate.
    Plan(plan::Args),
    /// Explain a plan in plain language (template by default, the model with --llm).
    Explain(explain::Args),
    /// Show an instance's marking, waiting steps and in-flight actions at any point of its journal.
    Inspect(history::InspectArgs),
    /// Re-fold an instance's journal and check that it reproduces the recorded state.
    Replay(history::ReplayArgs),
    /// Journal maintenance.
    #[command(subcommand)]
    Journal(history::JournalCommand),
    /// Name an instance's current journal head as a checkpoint `cp-<sha256>`.
    Checkpoint(history::CheckpointArgs),
    /// Continue an instance from its journal (or fork it from a checkpoint) until it settles.
    Resume(history::ResumeArgs),
    /// Serve the HTTP API and web UI (embedded SQLite store and one local tenant by default).
    Serve(serve::Args),
    /// Repair a paused, stuck or running instance with the model (a revised plan, its
    /// marking mapped by event name) and continue it until it settles.
    Repair(repair::Args),
    /// Summarize a run from its journal: what happened, problems, suggestions (template by
    /// default, the model with --llm).
    Summarize(summarize::Args),
    /// Show the language-model exchanges an instance's steps made, from the store.
    Transcript(transcript::Args),
    /// Print the effective configuration (weft.toml, WEFT_… variables, flags) with where
    /// each value came from; --check validates it.
    Config(config::Args),
    /// Try the Rego policy bundle that decides every tool call: `eval` one input, `test`.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// Grant a step's pending approval on a running `weft serve` (without a step: list what
    /// waits).
    Approve(approve::Args),
    /// Deny a step's pending approval on a running `weft serve`: the step fails with
    /// `approval_denied` and its tool is never called.
    Deny(approve::Args),
}

/// When to colour human output.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ColorChoice {
    /// Colour when stdout is a terminal and NO_COLOR is unset or empty.
    Auto,
    /// Always colour.
    Always,
    /// Never colour.
    Never,
}

/// Global flags: the configuration file, the plan loading limits and colour. A limit given
/// here wins over `[limits]` in the configuration and its `WEFT_LIMITS_…` variable.
#[derive(Debug, Args)]
pub struct GlobalArgs {
    /// The configuration file (default: `weft.toml` in the working directory, if any).
    #[arg(long, global = true, value_name = "FILE")]
    pub config: Option<std::path::PathBuf>,
    /// Largest accepted plan document, in bytes [default: 8 MiB].
    #[arg(long, global = true, value_name = "BYTES", help_heading = "Limits")]
    pub max_plan_bytes: Option<usize>,
    /// Most steps a plan may have [default: 50,000].
    #[arg(long, global = true, value_name = "N", help_heading = "Limits")]
    pub max_steps: Option<usize>,
    /// Most events a plan may have [default: 50,000].
    #[arg(long, global = true, value_name = "N", help_heading = "Limits")]
    pub max_events: Option<usize>,
    /// Deepest JSON nesting anywhere in the plan [default: 64].
    #[arg(long, global = true, value_name = "N", help_heading = "Limits")]
    pub max_depth: Option<usize>,
    /// Longest event or step name, in characters [default: 256].
    #[arg(long, global = true, value_name = "N", help_heading = "Limits")]
    pub max_name_len: Option<usize>,
    /// Longest CEL expression, in bytes [default: 4,096].
    #[arg(long, global = true, value_name = "BYTES", help_heading = "Limits")]
    pub max_expr_len: Option<usize>,
    /// When to use colour in human output.
    #[arg(long, global = true, value_enum, default_value_t = ColorChoice::Auto)]
    pub color: ColorChoice,
}
