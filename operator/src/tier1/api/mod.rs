//! The tier API (docs/tier1.md): workers ask for, poll and end their turn's Tier-1 sandbox over
//! HTTP, authenticated with the session's own worker token, because a worker pod has no
//! ServiceAccount token to create API objects with. Served by every replica: all state is in the
//! API server, so any replica answers any request.

mod answer;
mod checks;
pub mod error;
mod open_turn;
mod turn;

use crate::context::Context;
use axum::routing::{get, post};
use axum::Router;
use std::sync::Arc;

pub fn router(ctx: Arc<Context>) -> Router {
    Router::new()
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes",
            post(open_turn::open),
        )
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes/{turn}",
            get(turn::show).delete(turn::end),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(ctx)
}

/// Serves the tier API on an already bound listener (bound by the caller, so a port that cannot be
/// bound fails the operator's start instead of a background task).
pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tracing::info!(listen = ?listener.local_addr().ok(), "serving the tier API");
    kube_harness_service_kit::serve(listener, router(ctx), shutdown).await?;
    Ok(())
}
