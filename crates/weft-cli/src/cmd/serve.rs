//! `weft serve`: the HTTP API (crate `weft-server`) over the durable node the configuration
//! describes (`weft-node`). With no configuration it is fully embedded: SQLite at
//! `.weft/weft.db`, the in-process bus, the built-in tools, one local tenant on
//! 127.0.0.1:8080. Tokens (`[server] tokens_file`, `--tokens FILE` or `WEFT_API_TOKENS`) turn
//! on authentication and tenants; a `postgres://` store selects PostgreSQL; `[llm]`
//! (`WEFT_LLM_*`) configures the model for the LLM routes; `[telemetry] otlp_endpoint` (or
//! the standard `OTEL_EXPORTER_OTLP_ENDPOINT`) exports request and step spans over OTLP/HTTP;
//! `[planner] nats_url` also serves the ReAct planner over NATS request/reply
//! (`weft_node::planner_bus`), stopped with the server.

use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context as _;
use weft_node::FlagValue;
use weft_server::{AppState, ServerConfig};

use super::{Ctx, Status};

/// Arguments of `weft serve`. Each flag sets a key of the configuration (shown in
/// brackets) and wins over weft.toml and the environment.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Address to listen on (`127.0.0.1:0` picks a free port; the bound address is printed)
    /// [server.listen; default 127.0.0.1:8080].
    #[arg(long, value_name = "ADDR")]
    pub listen: Option<SocketAddr>,
    /// Store location: a SQLite file (default `.weft/weft.db`) or a `postgres://` URL
    /// [store.url].
    #[arg(long, value_name = "LOCATION")]
    pub store: Option<String>,
    /// API tokens: a JSON object `{"token": "tenant"}` (else WEFT_API_TOKENS
    /// `tokA=tenant-a,tokB=tenant-b`; neither: single local tenant, loopback only)
    /// [server.tokens_file].
    #[arg(long, value_name = "FILE")]
    pub tokens: Option<PathBuf>,
    /// Tool configuration (JSON, as for `weft run --tools-config`) [tools.*].
    #[arg(long, value_name = "FILE")]
    pub tools_config: Option<PathBuf>,
    /// Largest request body in bytes (plan documents have their own limit)
    /// [server.body_limit].
    #[arg(long, value_name = "BYTES")]
    pub body_limit: Option<usize>,
    /// Largest plan document body in bytes [server.plan_body_limit].
    #[arg(long, value_name = "BYTES")]
    pub plan_body_limit: Option<usize>,
    /// Requests per second per tenant (0: unlimited) [server.rate_limit].
    #[arg(long, value_name = "N")]
    pub rate_limit: Option<f64>,
    /// Burst size per tenant [server.rate_burst].
    #[arg(long, value_name = "N")]
    pub rate_burst: Option<f64>,
    /// Export request and step spans over OTLP/HTTP (protobuf) to this collector base URL
    /// (`/v1/traces` is appended), service name `weft`. Default: the standard
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT / OTEL_EXPORTER_OTLP_ENDPOINT; neither: no export
    /// [telemetry.otlp_endpoint].
    #[arg(long, value_name = "URL")]
    pub otlp_endpoint: Option<String>,
    /// Snapshot a reactive instance every N journal records and drop the journal the
    /// snapshot covers, so its storage follows its marking; what `inspect --at` can reach
    /// is the last N records at most. 0: never compact (the whole history is kept)
    /// [store.snapshot_every; default 100].
    #[arg(long, value_name = "N")]
    pub snapshot_every: Option<u64>,
}

/// The configuration values `weft serve`'s own flags set.
pub(crate) fn flags(args: &Args) -> Vec<FlagValue> {
    let mut out = Vec::new();
    if let Some(a) = args.listen {
        out.push(FlagValue::new("server.listen", "--listen", a.to_string()));
    }
    if let Some(t) = &args.tokens {
        out.push(FlagValue::new(
            "server.tokens_file",
            "--tokens",
            t.display().to_string(),
        ));
    }
    let int = |v: usize| i64::try_from(v).unwrap_or(i64::MAX);
    if let Some(v) = args.body_limit {
        out.push(FlagValue::new("server.body_limit", "--body-limit", int(v)));
    }
    if let Some(v) = args.plan_body_limit {
        out.push(FlagValue::new(
            "server.plan_body_limit",
            "--plan-body-limit",
            int(v),
        ));
    }
    if let Some(v) = args.rate_limit {
        out.push(FlagValue::new("server.rate_limit", "--rate-limit", v));
    }
    if let Some(v) = args.rate_burst {
        out.push(FlagValue::new("server.rate_burst", "--rate-burst", v));
    }
    if let Some(v) = &args.otlp_endpoint {
        out.push(FlagValue::new(
            "telemetry.otlp_endpoint",
            "--otlp-endpoint",
            v.as_str(),
        ));
    }
    if let Some(v) = args.snapshot_every {
        out.push(FlagValue::new(
            "store.snapshot_every",
            "--snapshot-every",
            i64::try_from(v).unwrap_or(i64::MAX),
        ));
    }
    out
}

/// Runs `weft serve` until SIGINT/SIGTERM.
pub fn run(_args: &Args, ctx: &Ctx, _out: &mut dyn Write) -> anyhow::Result<Status> {
    let cfg = &ctx.config.config;
    let config = ServerConfig::from_section(&cfg.server)?;
    weft_server::check_listen(&config)?;
    let otlp = weft_server::telemetry::otlp_traces_url(cfg.telemetry.otlp_endpoint.as_deref());
    let telemetry = weft_server::telemetry::init(otlp.as_deref(), &cfg.telemetry.log)?;
    if let Some(url) = &otlp {
        eprintln!("weft: exporting traces over OTLP/HTTP to {url}");
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let served = rt.block_on(async {
        let (state, report): (AppState, _) = AppState::open(ctx.node(), None, config).await?;
        if report.found > 0 {
            eprintln!(
                "weft: recovered {} of {} unfinished instance(s) ({} already finished, {} error(s))",
                report.restored,
                report.found,
                report.finished,
                report.errors.len()
            );
        }
        // `[planner] nats_url`: the ReAct planner also answers on a NATS subject.
        let planner = match &cfg.planner.nats_url {
            Some(url) => {
                let bus = weft_node::planner_bus::spawn_node(&cfg.planner, state.node()).await?;
                eprintln!(
                    "weft: serving the ReAct planner on NATS subject {} at {url} (tenant {})",
                    bus.subject(),
                    cfg.planner.tenant
                );
                Some(bus)
            }
            None => None,
        };
        let node = state.node().clone();
        let served = weft_server::serve(state, weft_server::shutdown_signal()).await;
        if let Some(bus) = planner {
            bus.stop().await;
        }
        // What the quotas counted since their last sync, so a restart goes on from it.
        if let Err(e) = node.sync_counts().await {
            eprintln!("weft: cannot add the last quota counts to the store: {e}");
        }
        served?;
        eprintln!("weft: stopped");
        Ok::<_, anyhow::Error>(())
    });
    drop(rt);
    // After the runtime: the exporter's last batch goes out on its own thread.
    telemetry.shutdown();
    served?;
    Ok(Status::Clean)
}
