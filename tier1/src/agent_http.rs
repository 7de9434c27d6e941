//! The agent's HTTP face (axum): the routes of docs/tier1.md behind the pod's bearer token,
//! probes without one, and `{"error": {"code", "message"}}` for every refusal.
#![deny(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::arithmetic_side_effects
)]

use super::agent::Agent;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::{Json, Router};
use kube_harness_protocol::tier1::AgentExec;
use kube_harness_service_kit::body;
use kube_harness_service_kit::{require_bearer, ApiError, AuthConfig, ConnectionLimits};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;
use tokio::net::TcpListener;

pub fn router(agent: Arc<Agent>, auth: AuthConfig) -> Router {
    // Every body is read as it arrives with the agent's own limits (413 past them) and held to
    // the server's pace (408 `body-timeout`): the archives into a spool, the exec request into
    // memory (within the JSON deadline too).
    let api = Router::new()
        .route("/v1/workspace", put(bind))
        .route("/v1/skills", put(skills))
        .route("/v1/exec", post(exec))
        .route("/v1/changes", get(changes))
        .route_layer(axum::middleware::from_fn_with_state(auth, require_bearer));
    Router::new()
        .route("/healthz", get(|| async { Json(json!({"status": "ok"})) }))
        .route("/readyz", get(readyz))
        .merge(api)
        .fallback(|| async {
            ApiError::not_found(
                "not-found",
                "no such route: the Tier-1 agent serves PUT /v1/workspace, PUT /v1/skills, POST /v1/exec, GET /v1/changes, GET /healthz, GET /readyz",
            )
        })
        .method_not_allowed_fallback(|| async {
            ApiError::new(
                StatusCode::METHOD_NOT_ALLOWED,
                "method-not-allowed",
                "method not allowed on this route",
            )
        })
        .with_state(agent)
}

/// Ready once listening: a prepared pod must be ready before anything is bound to it. An agent
/// whose bind failed half-way, or that gave the pod up (a command left processes it could not
/// end), is not ready again (503 `broken` with the reason): the operator neither keeps nor claims
/// a pod that is not Ready.
async fn readyz(State(agent): State<Arc<Agent>>) -> Response {
    if let Some(reason) = agent.broken() {
        return ApiError::unavailable("broken", reason).into_response();
    }
    Json(json!({"status": "ready", "bound": agent.is_bound()})).into_response()
}

/// `PUT /v1/workspace[?replace=true]`: `replace` binds a kept pod's next turn over its last one.
async fn bind(
    State(agent): State<Arc<Agent>>,
    axum::extract::RawQuery(query): axum::extract::RawQuery,
    head: body::BodyHead,
    archive: Body,
) -> Result<Response, ApiError> {
    let mut replace = false;
    for pair in query.as_deref().unwrap_or_default().split('&') {
        match pair {
            "" => {}
            "replace=true" => replace = true,
            "replace=false" => replace = false,
            other => {
                return Err(ApiError::bad_request(
                    "bad-request",
                    format!(
                        "unknown query {other:?}: the bind takes replace=true or replace=false"
                    ),
                ))
            }
        }
    }
    agent
        .bind(&head, archive, replace)
        .await
        .map(|r| Json(r).into_response())
}

/// `PUT /v1/skills`: the session's skills, shown read-only at `/.agents`.
async fn skills(
    State(agent): State<Arc<Agent>>,
    head: body::BodyHead,
    archive: Body,
) -> Result<Response, ApiError> {
    agent
        .put_skills(&head, archive)
        .await
        .map(|r| Json(r).into_response())
}

async fn exec(
    State(agent): State<Arc<Agent>>,
    head: body::BodyHead,
    raw: Body,
) -> Result<Response, ApiError> {
    let limit = agent.config().max_exec_body_bytes;
    let raw = body::read_request(&head, raw, limit)
        .await
        .map_err(|e| match e {
            body::BodyError::TooLarge { .. } => {
                ApiError::too_large(format!("request body over the limit of {limit} bytes"))
            }
            body::BodyError::TooSlow { .. } => super::agent::body_timeout(&e),
            other => {
                ApiError::bad_request("bad-body", format!("cannot read the request body: {other}"))
            }
        })?;
    let req: AgentExec = serde_json::from_slice(&raw)
        .map_err(|e| ApiError::bad_request("bad-request", format!("invalid exec request: {e}")))?;
    agent.exec(req).await.map(|r| Json(r).into_response())
}

/// The change archive, streamed from its spool with its length.
async fn changes(State(agent): State<Arc<Agent>>) -> Result<Response, ApiError> {
    let (archive, length) = agent.changes().await?;
    let stream = body::file_chunks(archive);
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_string()),
            (header::CONTENT_LENGTH, length.to_string()),
        ],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Serves until `shutdown` completes, then lets in-flight requests finish.
pub async fn serve(
    listener: TcpListener,
    agent: Arc<Agent>,
    auth: AuthConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    serve_with(listener, agent, auth, ConnectionLimits::default(), shutdown).await
}

/// Like [`serve`], with the given connection bounds (header read and idle timeouts, a
/// connection limit) instead of the defaults.
pub async fn serve_with(
    listener: TcpListener,
    agent: Arc<Agent>,
    auth: AuthConfig,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    kube_harness_service_kit::serve_with(listener, router(agent, auth), limits, shutdown).await
}
