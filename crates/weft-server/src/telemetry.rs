//! Logging and tracing for `weft serve`: the stderr log (`RUST_LOG`, default `warn`) and,
//! when an OTLP endpoint is configured (`--otlp-endpoint` or the standard
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` / `OTEL_EXPORTER_OTLP_ENDPOINT`), the request spans
//! (`http.request`, with the request id) and step spans (`weft.step`) exported over
//! OTLP/HTTP (protobuf) as service `weft`. Nothing configured: no exporter and no span is
//! even built at INFO (the stderr filter decides alone).

use opentelemetry::trace::TracerProvider as _;
use opentelemetry_otlp::{Protocol, WithExportConfig as _};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_subscriber::Layer as _;
use tracing_subscriber::filter::{EnvFilter, LevelFilter, Targets};
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

use crate::state::ConfigError;

/// The OTLP/HTTP traces URL: `flag` (a base URL, `/v1/traces` appended unless present), else
/// `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT` (used as is), else `OTEL_EXPORTER_OTLP_ENDPOINT`
/// (a base URL). `None`: not configured.
pub fn otlp_traces_url(flag: Option<&str>) -> Option<String> {
    let env = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
    let base = |b: &str| {
        let b = b.trim().trim_end_matches('/');
        if b.ends_with("/v1/traces") {
            b.to_string()
        } else {
            format!("{b}/v1/traces")
        }
    };
    match flag.filter(|f| !f.trim().is_empty()) {
        Some(f) => Some(base(f)),
        None => env("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .map(|u| u.trim().to_string())
            .or_else(|| env("OTEL_EXPORTER_OTLP_ENDPOINT").map(|b| base(&b))),
    }
}

/// The installed telemetry; [`Telemetry::shutdown`] flushes the exporter.
#[derive(Debug, Default)]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        self.provider.is_some()
    }

    /// Exports what is buffered and stops the exporter (call it outside the async runtime:
    /// it blocks until the last batch is sent).
    pub fn shutdown(self) {
        if let Some(p) = self.provider
            && let Err(e) = p.shutdown()
        {
            eprintln!("weft: warning: the OTLP exporter did not shut down cleanly: {e}");
        }
    }
}

/// Installs the global subscriber: the stderr log filtered by `RUST_LOG` (else `default_filter`,
/// `[telemetry] log`) and, with `otlp_url`, an OpenTelemetry layer that exports weft's INFO spans (requests,
/// steps) to it. Call it before the async runtime starts (the exporter's HTTP client runs on
/// its own thread).
pub fn init(otlp_url: Option<&str>, default_filter: &str) -> Result<Telemetry, ConfigError> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(default_filter))
        .unwrap_or_else(|_| EnvFilter::new("warn"));
    let fmt = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_filter(filter);
    let (provider, otel) = match otlp_url {
        None => (None, None),
        Some(url) => {
            // Already installed (tests, a second call): keep that one.
            let _ = rustls::crypto::ring::default_provider().install_default();
            let exporter = opentelemetry_otlp::SpanExporter::builder()
                .with_http()
                .with_protocol(Protocol::HttpBinary)
                .with_endpoint(url)
                .build()
                .map_err(|e| ConfigError::Telemetry(format!("OTLP exporter for `{url}`: {e}")))?;
            let provider = SdkTracerProvider::builder()
                .with_batch_exporter(exporter)
                .with_resource(Resource::builder().with_service_name("weft").build())
                .build();
            let layer = tracing_opentelemetry::layer()
                .with_tracer(provider.tracer("weft"))
                .with_filter(
                    Targets::new()
                        .with_target("weft", LevelFilter::INFO)
                        .with_default(LevelFilter::OFF),
                );
            (Some(provider), Some(layer))
        }
    };
    // A second `init` (tests) keeps the first subscriber.
    let _ = tracing_subscriber::registry()
        .with(fmt)
        .with(otel)
        .try_init();
    Ok(Telemetry { provider })
}
