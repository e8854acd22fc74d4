//! The connection loop of [`crate::serve`]: accepts TCP connections up to
//! `ServerConfig::max_connections` (one over is closed at once), serves each with hyper's
//! HTTP/1 server under a header-read timeout (which also bounds how long an idle keep-alive
//! connection waits for its next request), and shuts down gracefully: stop accepting, let
//! every connection finish its request, then return.
//!
//! Why not `axum::serve`: it sets no timeouts, so a client trickling a header line or never
//! sending the next request holds its connection (and a file descriptor) for ever, and nothing
//! bounds how many it may open. Body reads are bounded in `body.rs` (`408`).

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tower::ServiceExt;

/// How the loop treats connections.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ConnLimits {
    pub header_timeout: Duration,
    pub max_connections: usize,
}

/// Serves `router` on `listener` until `shutdown` resolves, then drains the connections.
pub(crate) async fn run(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) {
    let max = limits.max_connections.clamp(1, Semaphore::MAX_PERMITS);
    let slots = Arc::new(Semaphore::new(max));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            () = &mut shutdown => break,
            a = listener.accept() => a,
        };
        let (stream, _peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!(error = %e, "Accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(permit) = Arc::clone(&slots).try_acquire_owned() else {
            tracing::warn!(
                weft.max_connections = max,
                "Connection refused: too many open connections"
            );
            drop(stream);
            continue;
        };
        let _ = stream.set_nodelay(true);
        let service = TowerToHyperService::new(router.clone().map_request(
            |req: axum::http::Request<hyper::body::Incoming>| req.map(axum::body::Body::new),
        ));
        let mut stop = stop_rx.clone();
        let header_timeout = limits.header_timeout;
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder
                .timer(TokioTimer::new())
                .header_read_timeout(header_timeout)
                .keep_alive(true);
            let conn = builder.serve_connection(TokioIo::new(stream), service);
            let mut conn = std::pin::pin!(conn);
            let mut stopping = false;
            loop {
                tokio::select! {
                    r = conn.as_mut() => {
                        if let Err(e) = r {
                            tracing::debug!(error = %e, "Connection ended with an error");
                        }
                        break;
                    }
                    changed = stop.wait_for(|s| *s), if !stopping => {
                        let _ = changed;
                        stopping = true;
                        conn.as_mut().graceful_shutdown();
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let _ = stop_tx.send(true);
    // Every connection holds a permit until it ends: all of them back means all ended.
    let _ = slots
        .acquire_many(u32::try_from(max).unwrap_or(u32::MAX))
        .await;
}
