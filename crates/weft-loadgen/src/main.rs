//! The `weft-loadgen` command line: parses the flags into a [`weft_loadgen::Config`], runs it
//! on a multi-threaded tokio runtime, prints a readable summary to stderr and the report as
//! one JSON document to stdout. Exit 0 when there were no errors and the journal check passed,
//! 1 otherwise, 2 on a usage or setup error.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context as _;
use clap::Parser;
use weft_loadgen::{Config, DEFAULT_PLAN, Mode, Report};

/// Drive `weft serve` with events or state reads and report throughput and latency.
#[derive(Debug, Parser)]
#[command(name = "weft-loadgen", version)]
struct Cli {
    /// Server base URL (`http://IP:PORT`).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    url: String,
    /// API token (else env WEFT_TOKEN; none: the server must run without tokens).
    #[arg(long, env = "WEFT_TOKEN")]
    token: Option<String>,
    /// What to drive.
    #[arg(long, value_enum, default_value_t = Mode::Events)]
    mode: Mode,
    /// Reactive instances to create and feed.
    #[arg(long, short = 'n', default_value_t = 100)]
    instances: usize,
    /// Concurrent connections (closed loop: one request in flight each).
    #[arg(long, short = 'c', default_value_t = 64)]
    connections: usize,
    /// Measured seconds.
    #[arg(long, short = 'd', default_value_t = 10.0)]
    duration: f64,
    /// Warm-up seconds before measuring.
    #[arg(long, default_value_t = 2.0)]
    warmup: f64,
    /// Events per request (1: one CloudEvent; more: a cloudevents-batch).
    #[arg(long, short = 'b', default_value_t = 1)]
    batch: usize,
    /// Plan document to use instead of the built-in `loadgen` plan.
    #[arg(long)]
    plan: Option<PathBuf>,
    /// Event type to send (an input event of the plan).
    #[arg(long, default_value = "ping")]
    event_type: String,
    /// Skip the journal check.
    #[arg(long)]
    no_verify: bool,
    /// Runtime worker threads (default: the number of CPUs).
    #[arg(long)]
    threads: Option<usize>,
}

fn secs(s: f64, what: &str) -> anyhow::Result<Duration> {
    Duration::try_from_secs_f64(s)
        .with_context(|| format!("--{what} must be a non-negative number of seconds"))
}

fn config(cli: &Cli) -> anyhow::Result<Config> {
    let text = match &cli.plan {
        Some(p) => {
            std::fs::read_to_string(p).with_context(|| format!("cannot read `{}`", p.display()))?
        }
        None => DEFAULT_PLAN.to_string(),
    };
    Ok(Config {
        target: weft_loadgen::http::Target::new(&cli.url, cli.token.as_deref())?,
        mode: cli.mode,
        instances: cli.instances,
        connections: cli.connections,
        duration: secs(cli.duration, "duration")?,
        warmup: secs(cli.warmup, "warmup")?,
        batch: cli.batch,
        plan: serde_json::from_str(&text).context("the plan is not JSON")?,
        event_type: cli.event_type.clone(),
        verify: !cli.no_verify,
    })
}

fn summary(r: &Report) {
    let l = &r.latency;
    eprintln!(
        "weft-loadgen: {:?}: {} requests in {:.1} s = {:.0} req/s; {} events accepted = {:.0} events/s, {} routed",
        r.mode,
        r.requests,
        r.seconds,
        r.requests_per_s,
        r.events_accepted,
        r.events_per_s,
        r.events_routed
    );
    eprintln!(
        "  latency ms: mean {:.3}  p50 {:.3}  p90 {:.3}  p99 {:.3}  p99.9 {:.3}  max {:.3}",
        l.mean_ms, l.p50_ms, l.p90_ms, l.p99_ms, l.p999_ms, l.max_ms
    );
    eprintln!("  errors: {:?}", r.errors);
    if let Some(v) = &r.verify {
        eprintln!(
            "  journal: {} accepted, {} journaled ({} kept token.added records checked): {}",
            v.accepted,
            v.journaled,
            v.tail_tokens_checked,
            if v.ok { "OK" } else { "MISMATCH" }
        );
        for m in v.mismatches.iter().take(20) {
            eprintln!("    {m}");
        }
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let go = || -> anyhow::Result<Report> {
        let cfg = config(&cli)?;
        let mut b = tokio::runtime::Builder::new_multi_thread();
        if let Some(t) = cli.threads {
            b.worker_threads(t.max(1));
        }
        let rt = b.enable_all().build()?;
        rt.block_on(weft_loadgen::run::run(cfg))
    };
    match go() {
        Ok(r) => {
            summary(&r);
            match serde_json::to_string_pretty(&r) {
                Ok(s) => println!("{s}"),
                Err(e) => eprintln!("weft-loadgen: {e}"),
            }
            let ok = r.errors.is_empty() && r.verify.as_ref().is_none_or(|v| v.ok);
            if ok {
                ExitCode::SUCCESS
            } else {
                ExitCode::from(1)
            }
        }
        Err(e) => {
            eprintln!("weft-loadgen: error: {e:#}");
            ExitCode::from(2)
        }
    }
}
