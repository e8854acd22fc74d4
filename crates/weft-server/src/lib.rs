//! weft-server: the HTTP API of weft (`weft serve`).
//!
//! [`app`] builds the axum router over an [`AppState`] (a `weft_durable::Durable` engine,
//! the tool registry, tokens → tenants, limits, metrics, an optional LLM provider); [`serve`]
//! binds it, prints where it listens and shuts down gracefully on SIGINT/SIGTERM (stop
//! accepting, let in-flight requests finish, end SSE streams; instances live on in the
//! journal and are recovered by the next start).
//!
//! Contract: `/work/api-contract.md` (kept in the repository as the OpenAPI document at
//! `/openapi.json`). Every error is `application/problem+json` with a stable `code`
//! ([`error::ApiError`]); every request has an `X-Request-Id` ([`request_id`]); everything
//! under `/v1` and `/plan` is scoped to the caller's tenant (`auth`): another tenant's
//! plan, instance or stream is `404`, and events route only within the tenant.
//!
//! Durability: `201` of a start and `202` of an event mean the instance's journal records
//! are durable (the handler waits on `StoreJournal::barrier`, which shares group commits
//! with every other waiting request).

mod app;
mod approvals;
mod auth;
mod body;
pub use weft_core::cloudevents;
mod conn;
mod dedup;
pub mod error;
mod events;
mod instances;
mod journal_trace;
mod limit;
mod llm;
pub mod metrics;
pub mod names;
mod ops;
mod plans;
mod quotas;
mod replay;
pub mod request_id;
mod state;
pub mod telemetry;
mod tools;
mod transcripts;
mod written;

use std::net::SocketAddr;

pub use app::{app, openapi_doc};
pub use state::{AppState, ConfigError, LOCAL_TENANT, ServerConfig};

/// Refuses to run without tokens on a non-loopback address.
pub fn check_listen(config: &ServerConfig) -> Result<(), ConfigError> {
    if config.tokens.is_empty() && !config.listen.ip().is_loopback() {
        return Err(ConfigError::Unsafe(config.listen));
    }
    Ok(())
}

/// Resolves on SIGINT or SIGTERM. The handlers are installed by this call, not when the
/// future is first polled: `serve` polls it from a task it spawns, which a busy runtime may
/// run only after the address is printed and requests are answered, and a SIGTERM before
/// that would kill the process instead of stopping it gracefully.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let int = signal(SignalKind::interrupt()).ok();
        let term = signal(SignalKind::terminate()).ok();
        async move {
            let wait = |s: Option<tokio::signal::unix::Signal>| async move {
                match s {
                    Some(mut s) => {
                        s.recv().await;
                    }
                    None => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(int) => {},
                () = wait(term) => {},
            }
        }
    }
    #[cfg(not(unix))]
    async {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Binds `state.config().listen`, prints `weft: listening on http://ADDR` (the bound
/// address, so `--listen 127.0.0.1:0` tells the port) to stderr and serves until
/// `shutdown` resolves; then stops accepting, ends SSE streams, waits for in-flight
/// requests, makes the journal durable and releases the instance leases
/// (`Durable::shutdown`). Returns the address it listened on.
pub async fn serve(
    state: AppState,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<SocketAddr, ConfigError> {
    check_listen(state.config())?;
    if state.config().tokens.is_empty() {
        // Once, on stderr with the other start-up lines (a `tracing` warning too would print
        // it twice on the default log output).
        eprintln!(
            "weft: warning: no API tokens configured (WEFT_API_TOKENS or --tokens): every request is tenant `local`; listening on loopback only"
        );
    }
    let listen = state.config().listen;
    let listener =
        tokio::net::TcpListener::bind(listen)
            .await
            .map_err(|e| ConfigError::Listen {
                addr: listen,
                message: e.to_string(),
            })?;
    let addr = listener.local_addr()?;
    eprintln!("weft: listening on http://{addr}");
    let s2 = state.clone();
    let durable = state.clone();
    let limits = conn::ConnLimits {
        header_timeout: state.config().header_timeout,
        max_connections: state.config().max_connections,
    };
    conn::run(listener, app(state), limits, async move {
        shutdown.await;
        eprintln!("weft: shutting down (finishing in-flight requests)");
        s2.begin_shutdown();
    })
    .await;
    // Everything recorded made durable, then the instance leases released: another
    // `weft` over the same store takes the instances over at once, not after expiry.
    match durable.inner.durable.shutdown().await {
        Ok(n) => eprintln!("weft: stopped; released {n} instance lease(s)"),
        Err(e) => eprintln!("weft: warning: instance leases not released: {e}"),
    }
    Ok(addr)
}
