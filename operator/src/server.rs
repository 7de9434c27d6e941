//! `/metrics`, `/healthz` and `/readyz` of the operator.

use crate::context::Context;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::Router;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone)]
struct Shared {
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
}

pub fn router(ctx: Arc<Context>, ready: Arc<AtomicBool>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .with_state(Shared { ctx, ready })
}

async fn metrics(State(s): State<Shared>) -> ([(&'static str, &'static str); 1], String) {
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        s.ctx.metrics.encode(),
    )
}

/// Ready once start-up checks passed (the API server answers and the CRDs are installed); a
/// standby replica is ready too: it serves metrics and takes over when the leader goes.
async fn readyz(State(s): State<Shared>) -> (StatusCode, &'static str) {
    if s.ready.load(Ordering::Relaxed) {
        (StatusCode::OK, "ready")
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, "starting")
    }
}

pub async fn serve(
    listen: SocketAddr,
    ctx: Arc<Context>,
    ready: Arc<AtomicBool>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    tracing::info!(%listen, "serving /metrics, /healthz, /readyz");
    kube_harness_service_kit::serve(listener, router(ctx, ready), shutdown).await?;
    Ok(())
}
