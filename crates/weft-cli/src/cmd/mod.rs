//! One module per command, each with an `Args` (clap) and a `run` that writes its data to
//! the given writer and returns a [`Status`]. Errors (`anyhow`) mean usage or I/O failure.

pub mod analyze;
pub mod approve;
pub mod bench;
pub mod config;
pub mod explain;
pub mod graph;
pub mod history;
pub mod plan;
pub mod policy;
pub mod profile;
pub mod repair;
pub mod run;
pub mod schema;
pub mod serve;
pub mod summarize;
pub mod tools;
pub mod transcript;
pub mod validate;

use std::io::Write;
use std::sync::Arc;

use weft_core::Limits;
use weft_node::FlagValue;

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
#[derive(Debug, Clone)]
pub struct Ctx {
    /// Loading and validation limits (`[limits]`, the environment and the global flags).
    pub limits: Limits,
    /// Colours for stdout.
    pub palette: Palette,
    /// The effective configuration, with where each value came from.
    pub config: Arc<weft_node::Loaded>,
}

impl Ctx {
    /// A builder of the running weft this configuration describes (the assembly point).
    pub fn node(&self) -> weft_node::Builder {
        weft_node::Builder::new(self.config.config.clone())
    }

    /// The governance checks for the local tenant's plans against `catalog`: approval
    /// coverage, the cost bound, and `[policy]`'s properties and plan decision (a bundle
    /// that does not compile is an error).
    pub fn governance(
        &self,
        catalog: &weft_core::StaticCatalog,
    ) -> anyhow::Result<Arc<weft_analysis::Governance>> {
        let cfg = &self.config.config.policy;
        let policy = if cfg.any() {
            weft_policy::PolicySet::load(cfg.locations())
                .map_err(|e| anyhow::anyhow!("[policy] bundles: {e}"))?
                .for_tenant(crate::cmd::run::TENANT)
        } else {
            None
        };
        Ok(Arc::new(weft_node::governance(
            Arc::new(catalog.clone()),
            policy.as_ref(),
            crate::cmd::run::TENANT,
        )))
    }

    /// Was the store configured anywhere (file, environment or flag), rather than left at
    /// its default?
    pub fn store_configured(&self) -> bool {
        self.config
            .source("store.url")
            .is_some_and(|s| *s != weft_node::Source::Default)
    }

    /// The durable engine of `builder`'s node over `store`.
    pub async fn durable(
        builder: weft_node::Builder,
        store: Arc<dyn weft_store::Store>,
    ) -> anyhow::Result<weft_durable::Durable> {
        let node = builder
            .open_on(store)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        node.durable()
            .cloned()
            .ok_or_else(|| anyhow::anyhow!("the node has no store"))
    }

    /// Opens the configured store through the openers table (with `[journal]`'s key).
    pub async fn open_store(&self) -> anyhow::Result<Arc<dyn weft_store::Store>> {
        let openers = match self
            .config
            .config
            .journal
            .key()
            .map_err(|e| anyhow::anyhow!("[invalid_config] {e}"))?
        {
            Some(k) => weft_node::Openers::default().with_journal_key(k),
            None => weft_node::Openers::default(),
        };
        openers
            .open_store(&self.config.config.store.url)
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))
    }
}

/// The configuration values the command line sets, flag by flag.
fn flags(cli: &Cli) -> anyhow::Result<Vec<FlagValue>> {
    let g = &cli.global;
    let mut out = Vec::new();
    let mut int = |key, flag, v: Option<usize>| {
        if let Some(v) = v {
            out.push(FlagValue::new(
                key,
                flag,
                i64::try_from(v).unwrap_or(i64::MAX),
            ));
        }
    };
    int(
        "limits.max_plan_bytes",
        "--max-plan-bytes",
        g.max_plan_bytes,
    );
    int("limits.max_steps", "--max-steps", g.max_steps);
    int("limits.max_events", "--max-events", g.max_events);
    int("limits.max_depth", "--max-depth", g.max_depth);
    int("limits.max_name_len", "--max-name-len", g.max_name_len);
    int("limits.max_expr_len", "--max-expr-len", g.max_expr_len);
    let store = match &cli.command {
        Command::Run(a) => a.store.as_ref(),
        Command::Serve(a) => a.store.as_ref(),
        Command::Plan(a) => a.store.as_ref(),
        Command::Inspect(history::InspectArgs { store, .. })
        | Command::Replay(history::ReplayArgs { store, .. })
        | Command::Checkpoint(history::CheckpointArgs { store, .. })
        | Command::Resume(history::ResumeArgs { store, .. })
        | Command::Journal(history::JournalCommand::Verify { store, .. })
        | Command::Repair(repair::Args { store, .. })
        | Command::Summarize(summarize::Args { store, .. })
        | Command::Transcript(transcript::Args { store, .. }) => store.store.as_ref(),
        _ => None,
    };
    if let Some(url) = store {
        out.push(FlagValue::new("store.url", "--store", url.as_str()));
    }
    match &cli.command {
        Command::Analyze(a) => {
            if let Some(n) = a.max_states {
                out.push(FlagValue::new(
                    "limits.max_states",
                    "--max-states",
                    i64::try_from(n).unwrap_or(i64::MAX),
                ));
            }
        }
        Command::Run(a) => out.extend(tools_config(a.tools_config.as_deref())?),
        Command::Serve(a) => {
            out.extend(tools_config(a.tools_config.as_deref())?);
            out.extend(serve::flags(a));
        }
        _ => {}
    }
    Ok(out)
}

/// Largest `--tools-config` file read.
const MAX_TOOLS_CONFIG_BYTES: u64 = 1 << 20;

/// `--tools-config FILE` (JSON, as `[tools]` in weft.toml) as a flag setting the `tools`
/// table.
fn tools_config(path: Option<&std::path::Path>) -> anyhow::Result<Option<FlagValue>> {
    use std::io::Read as _;
    let Some(path) = path else {
        return Ok(None);
    };
    let name = path.display();
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOOLS_CONFIG_BYTES).read_to_string(&mut text))
        .map_err(|e| anyhow::anyhow!("cannot read tools config `{name}` (UTF-8 JSON): {e}"))?;
    let json: serde_json::Value = serde_json::from_str(&text)
        .map_err(|e| anyhow::anyhow!("tools config `{name}` is not valid JSON: {e}"))?;
    let value = toml::Value::try_from(&json)
        .map_err(|e| anyhow::anyhow!("tools config `{name}` cannot be used: {e}"))?;
    Ok(Some(FlagValue::new("tools", "--tools-config", value)))
}

/// Runs the parsed command line, writing data to `out`.
pub fn run(cli: Cli, out: &mut dyn Write) -> anyhow::Result<Status> {
    let palette = Palette::for_stdout(cli.global.color);
    let inputs = weft_node::Inputs::process(cli.global.config.clone(), flags(&cli)?);
    let loaded = weft_node::load_checked(&inputs, &weft_node::Openers::default());
    // `weft config` reports the findings itself; every other command refuses to start.
    if loaded.has_errors() && !matches!(cli.command, Command::Config(_)) {
        let p = Palette::for_stderr();
        let mut err = std::io::stderr().lock();
        for f in &loaded.findings {
            crate::output::finding(&mut err, &p, f)?;
        }
        anyhow::bail!(
            "[invalid_config] the configuration has errors{} (`weft config --check` lists them)",
            loaded
                .file
                .as_ref()
                .map(|f| format!(" ({})", f.display()))
                .unwrap_or_default()
        );
    }
    let ctx = Ctx {
        limits: loaded.config.limits.plan_limits(),
        palette,
        config: Arc::new(loaded),
    };
    match cli.command {
        Command::Validate(args) => validate::run(&args, &ctx, out),
        Command::Analyze(args) => analyze::run(&args, &ctx, out),
        Command::Graph(args) => graph::run(&args, &ctx, out),
        Command::Schema(args) => schema::run(&args, &ctx, out),
        Command::Tools(args) => tools::run(&args, &ctx, out),
        Command::Profile(args) => profile::run(&args, &ctx, out),
        Command::Run(args) => run::run(&args, &ctx, out),
        Command::Bench(args) => bench::run(&args, &ctx, out),
        Command::Plan(args) => plan::run(&args, &ctx, out),
        Command::Explain(args) => explain::run(&args, &ctx, out),
        Command::Inspect(args) => history::inspect(&args, &ctx, out),
        Command::Replay(args) => history::replay(&args, &ctx, out),
        Command::Journal(cmd) => history::journal(&cmd, &ctx, out),
        Command::Checkpoint(args) => history::checkpoint(&args, &ctx, out),
        Command::Resume(args) => history::resume(&args, &ctx, out),
        Command::Serve(args) => serve::run(&args, &ctx, out),
        Command::Repair(args) => repair::run(&args, &ctx, out),
        Command::Summarize(args) => summarize::run(&args, &ctx, out),
        Command::Transcript(args) => transcript::run(&args, &ctx, out),
        Command::Config(args) => config::run(&args, &ctx.config, &ctx.palette, out),
        Command::Policy(cmd) => policy::run(&cmd, &ctx, out),
        Command::Approve(args) => approve::run(&args, true, &ctx, out),
        Command::Deny(args) => approve::run(&args, false, &ctx, out),
    }
}
