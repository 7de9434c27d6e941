//! The agent's HTTP face (axum): the routes of docs/tier1.md behind the pod's bearer token,
//! probes without one, and `{"error": {"code", "message"}}` for every refusal.

use super::agent::Agent;
use super::wire::AgentExec;
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use kube_harness_service_kit::{require_bearer, ApiError, AuthConfig};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

pub fn router(agent: Arc<Agent>, auth: AuthConfig) -> Router {
    let exec_limit = agent.config().max_exec_body_bytes;
    let api = Router::new()
        // The archive is streamed to a spool with the agent's own limit (413 past it).
        .route(
            "/v1/workspace",
            put(bind).layer(DefaultBodyLimit::disable()),
        )
        .route(
            "/v1/exec",
            post(exec).layer(DefaultBodyLimit::max(exec_limit)),
        )
        .route("/v1/changes", get(changes))
        .route_layer(axum::middleware::from_fn_with_state(auth, require_bearer));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .merge(api)
        .fallback(|| async {
            ApiError::not_found(
                "not_found",
                "no such route: the Tier-1 agent serves PUT /v1/workspace, POST /v1/exec, GET /v1/changes, GET /healthz, GET /readyz",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method_not_allowed",
                "method not allowed on this route",
            )
        })
        .with_state(agent)
}

/// Ready once listening: a prepared pod must be ready before anything is bound to it.
async fn readyz(State(agent): State<Arc<Agent>>) -> Json<serde_json::Value> {
    Json(json!({"status": "ready", "bound": agent.is_bound()}))
}

async fn bind(State(agent): State<Arc<Agent>>, body: Body) -> Result<Response, ApiError> {
    agent.bind(body).await.map(|r| Json(r).into_response())
}

async fn exec(
    State(agent): State<Arc<Agent>>,
    raw: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let raw = raw.map_err(|e| {
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::too_large(format!("request body over the limit: {}", e.body_text()))
        } else {
            ApiError::bad_request(
                "bad_body",
                format!("cannot read the request body: {}", e.body_text()),
            )
        }
    })?;
    let req: AgentExec = serde_json::from_slice(&raw)
        .map_err(|e| ApiError::bad_request("bad_request", format!("invalid exec request: {e}")))?;
    agent.exec(req).await.map(|r| Json(r).into_response())
}

async fn changes(State(agent): State<Arc<Agent>>) -> Result<Response, ApiError> {
    let archive = agent.changes().await?;
    Ok(([(header::CONTENT_TYPE, "application/x-tar")], archive).into_response())
}

/// Serves until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    agent: Arc<Agent>,
    auth: AuthConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    kube_harness_service_kit::serve(listener, router(agent, auth), shutdown).await
}
