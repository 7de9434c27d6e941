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

/// Tells whether the service can still do its job; `Err(reason)` makes `/healthz` answer 503, so
/// a liveness probe restarts a process that cannot recover by itself (e.g. a store that failed
/// an fsync and refuses writes until restarted).
pub type HealthCheck = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;

/// Returns `api` plus `/healthz` (200 `ok`) and `/metrics` (OpenMetrics text of `registry`).
pub fn with_health_and_metrics(api: Router, registry: Arc<Registry>) -> Router {
    with_health_check(api, registry, Arc::new(|| Ok(())))
}

/// Like [`with_health_and_metrics`], with `/healthz` answering 503 `{"error":...}` while `check`
/// fails.
pub fn with_health_check(api: Router, registry: Arc<Registry>, check: HealthCheck) -> Router {
    api.route(
        "/healthz",
        get(move || {
            let check = check.clone();
            async move {
                match check() {
                    Ok(()) => "ok\n".into_response(),
                    Err(reason) => {
                        crate::ApiError::unavailable(crate::error::code::UNHEALTHY, reason)
                            .into_response()
                    }
                }
            }
        }),
    )
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
        Err(e) => crate::ApiError::internal(crate::error::code::METRICS_ENCODING, e.to_string())
            .into_response(),
    }
}
