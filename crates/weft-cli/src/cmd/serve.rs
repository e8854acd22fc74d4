//! `weft serve`: the HTTP API (crate `weft-server`) over a durable store. With no flags it is
//! fully embedded: SQLite at `.weft/weft.db`, the in-process bus, the built-in tools, one
//! local tenant on 127.0.0.1:8080. Tokens (`--tokens FILE` or `WEFT_API_TOKENS`) turn on
//! authentication and tenants; `--store postgres://…` selects PostgreSQL; `WEFT_LLM_*`
//! configures the model for the LLM routes. `--otlp-endpoint URL` (or the standard
//! `OTEL_EXPORTER_OTLP_ENDPOINT`) exports request and step spans over OTLP/HTTP.

use std::io::{Read as _, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::Context as _;
use weft_server::{AppState, ServerConfig};
use weft_tools::{Registry, ToolsConfig};

use super::{Ctx, Status};

/// Arguments of `weft serve`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (`127.0.0.1:0` picks a free port; the bound address is printed).
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// Store location: a SQLite file (default `.weft/weft.db`) or a `postgres://` URL.
    #[arg(long, value_name = "LOCATION")]
    pub store: Option<String>,
    /// API tokens: a JSON object `{"token": "tenant"}` (else env WEFT_API_TOKENS
    /// `tokA=tenant-a,tokB=tenant-b`; neither: single local tenant, loopback only).
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Tool configuration (JSON, as for `weft run --tools-config`).
    #[arg(long, value_name = "FILE")]
    pub tools_config: Option<PathBuf>,
    /// Largest request body in bytes (plan documents have their own limit).
    #[arg(long, value_name = "BYTES", default_value_t = ServerConfig::default().body_limit)]
    pub body_limit: usize,
    /// Largest plan document body in bytes.
    #[arg(long, value_name = "BYTES", default_value_t = ServerConfig::default().plan_body_limit)]
    pub plan_body_limit: usize,
    /// Requests per second per tenant (0: unlimited).
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().rate_per_sec)]
    pub rate_limit: f64,
    /// Burst size per tenant.
    #[arg(long, value_name = "N", default_value_t = ServerConfig::default().rate_burst)]
    pub rate_burst: f64,
    /// Export request and step spans over OTLP/HTTP (protobuf) to this collector base URL
    /// (`/v1/traces` is appended), service name `weft`. Default: the standard
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; neither: no export.
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Snapshot a reactive instance every N journal records and drop the journal the
    /// snapshot covers, so its storage follows its marking; what `inspect --at` can reach
    /// is the last N records at most. 0: never compact (the whole history is kept).
    #[arg(long, value_name = "N", default_value_t = weft_durable::DEFAULT_SNAPSHOT_EVERY)]
    pub snapshot_every: u64,
}

const MAX_CONFIG_BYTES: u64 = 1 << 20;

fn tools_config(path: Option<&Path>) -> anyhow::Result<ToolsConfig> {
    let Some(path) = path else {
        return Ok(ToolsConfig::default());
    };
    let name = path.display();
    let file =
        std::fs::File::open(path).with_context(|| format!("cannot open tools config `{name}`"))?;
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read tools config `{name}` (it must be UTF-8 JSON)"))?;
    serde_json::from_str(&text).with_context(|| format!("tools config `{name}` is invalid"))
}

fn config(args: &Args) -> anyhow::Result<ServerConfig> {
    let tokens = match &args.tokens {
        Some(f) => weft_server::read_tokens_file(f)?,
        None => match std::env::var("WEFT_API_TOKENS") {
            Ok(v) if !v.trim().is_empty() => weft_server::parse_tokens_env(&v)?,
            _ => Default::default(),
        },
    };
    let config = ServerConfig {
        listen: args.listen,
        tokens,
        body_limit: args.body_limit,
        plan_body_limit: args.plan_body_limit,
        rate_per_sec: args.rate_limit,
        rate_burst: args.rate_burst,
        snapshot_every: (args.snapshot_every > 0).then_some(args.snapshot_every),
        ..ServerConfig::default()
    };
    weft_server::check_listen(&config)?;
    Ok(config)
}

/// Runs `weft serve` until SIGINT/SIGTERM.
pub fn run(args: &Args, _ctx: &Ctx, _out: &mut dyn Write) -> anyhow::Result<Status> {
    let config = config(args)?;
    let otlp = weft_server::telemetry::otlp_traces_url(args.otlp_endpoint.as_deref());
    let telemetry = weft_server::telemetry::init(otlp.as_deref())?;
    if let Some(url) = &otlp {
        eprintln!("weft: exporting traces over OTLP/HTTP to {url}");
    }
    let cfg = tools_config(args.tools_config.as_deref())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(async {
        let store = crate::store::open(args.store.as_deref()).await?;
        let mut registry = Registry::new();
        weft_tools::register_all(&mut registry, &cfg);
        registry.register(Arc::new(weft_llm::LlmCompleteTool::new(
            crate::llm::for_tools()?,
        )));
        let llm = crate::llm::from_env()?;
        let (state, report): (AppState, _) =
            AppState::open(store, Arc::new(registry), llm, config).await?;
        if report.found > 0 {
            eprintln!(
                "weft: recovered {} of {} unfinished instance(s) ({} already finished, {} error(s))",
                report.restored,
                report.found,
                report.finished,
                report.errors.len()
            );
        }
        weft_server::serve(state, weft_server::shutdown_signal()).await?;
        eprintln!("weft: stopped");
        Ok::<_, anyhow::Error>(())
    });
    drop(rt);
    // After the runtime: the exporter's last batch goes out on its own thread.
    telemetry.shutdown();
    served?;
    Ok(Status::Clean)
}
