//! `GET /healthz` and `GET /metrics`, merged into a service's router.
//!
//! Both stay outside bearer auth: kubelet probes and Prometheus scrapers carry no token, and
//! neither route reveals stored data.

use axum::http::header::CONTENT_TYPE;
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;
use axum::Router;
use prometheus_client::registry::Registry;
use std::sync::Arc;

/// Returns `api` plus `/healthz` (200 `ok`) and `/metrics` (OpenMetrics text of `registry`).
pub fn with_health_and_metrics(api: Router, registry: Arc<Registry>) -> Router {
    api.route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(move || metrics(registry.clone())))
}

async fn metrics(registry: Arc<Registry>) -> impl IntoResponse {
    let mut body = String::new();
    match prometheus_client::encoding::text::encode(&mut body, &registry) {
        Ok(()) => (
            StatusCode::OK,
            [(
                CONTENT_TYPE,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
            )],
            body,
        )
            .into_response(),
        Err(e) => crate::ApiError::internal("metrics_encoding", e.to_string()).into_response(),
    }
}
