//! A pooled worker (`--adopt-token-file`): started before its session exists, so that a warm
//! pool can hand a ready pod to a new session (docs/operator.md "Warm pool"). Until adopted it
//! serves `/healthz`, `/readyz` and `POST /v1/adopt` only, the last with the pool's bearer token.
//! The adoption binds everything session-specific at once (arguments, tokens, skills); from
//! then on every request goes to the session's worker, exactly as if it had been started for
//! it. One use: a second adoption, or any after a failed one, is refused, and a failed one
//! leaves the worker unready so that its pod is replaced.

use super::model::{adoption_settings, code, AdoptRequest, AdoptResponse, Health};
use super::refusal::Refusal;
use super::state::Worker;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use axum::{Json, Router};
use kube_harness_service_kit::body::{read_request, BodyError, BodyHead};
use kube_harness_service_kit::{AuthConfig, ConnectionLimits};
use std::future::Future;
use std::sync::{Arc, Mutex, OnceLock};
use tokio::net::TcpListener;
use tower::ServiceExt;

/// Largest adoption request: the arguments plus the skills (ConfigMaps hold at most 1 MiB each).
pub const MAX_ADOPT_BYTES: usize = 8 << 20;

/// Builds the session's worker from an adoption and writes its token files and skills (checking
/// everything in the request before writing anything, and writing only where the pooled worker
/// keeps them: `super::adopt_files`). Returns the worker and the session's bearer auth, or why it
/// cannot be bound, having written nothing.
pub type Bind =
    Box<dyn Fn(&AdoptRequest) -> Result<(Arc<Worker>, AuthConfig), String> + Send + Sync>;

struct Pool {
    auth: AuthConfig,
    bind: Bind,
    /// The session's app and worker, once adopted.
    adopted: OnceLock<(Router, Arc<Worker>)>,
    /// Set by the first adoption request, good or bad: the pod is one-use.
    taken: Mutex<Option<String>>,
}

/// Serves a pooled worker on `listener` until `shutdown`; adopted, it shuts down as [`super::serve`].
pub async fn serve_pooled(
    listener: TcpListener,
    pool_auth: AuthConfig,
    connections: ConnectionLimits,
    bind: Bind,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let pool = Arc::new(Pool {
        auth: pool_auth,
        bind,
        adopted: OnceLock::new(),
        taken: Mutex::new(None),
    });
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, "pooled worker listening, waiting to be adopted");
    }
    let app = Router::new()
        .route("/v1/adopt", post(adopt))
        .fallback(forward)
        .with_state(pool.clone());
    super::server::serve_app(
        listener,
        app,
        connections,
        move || pool.adopted.get().map(|(_, w)| w.clone()),
        shutdown,
    )
    .await
}

async fn adopt(State(pool): State<Arc<Pool>>, request: Request) -> Response {
    if !pool.auth.accepts(request.headers().get(AUTHORIZATION)) {
        return Refusal::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHORIZED,
            "missing or invalid bearer token (adoption takes the warm pool's token)",
        )
        .into_response();
    }
    {
        let mut taken = super::relock(&pool.taken);
        if let Some(by) = taken.as_ref() {
            return already(by);
        }
        *taken = Some("an adoption in progress".into());
    }
    let (parts, body) = request.into_parts();
    let head = BodyHead::of(&parts.headers, &parts.extensions);
    let result = match read_request(&head, body, MAX_ADOPT_BYTES).await {
        Err(BodyError::TooLarge { .. }) => Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!("adoption request over {MAX_ADOPT_BYTES} bytes"),
        )),
        Err(e @ BodyError::TooSlow { .. }) => Err(super::server::body_timeout(&e)),
        Err(e) => Err(bad(format!("cannot read the adoption request: {e}"))),
        Ok(raw) => match serde_json::from_slice::<AdoptRequest>(&raw) {
            Err(e) => Err(bad(format!("invalid adoption request: {e}"))),
            Ok(req) => (pool.bind)(&req)
                .map(|(worker, auth)| (req, worker, auth))
                .map_err(|why| {
                    Refusal::new(
                        StatusCode::BAD_REQUEST,
                        code::ADOPTION_FAILED,
                        format!("cannot bind this worker to the session: {why}"),
                    )
                }),
        },
    };
    let mut taken = super::relock(&pool.taken);
    match result {
        Ok((req, worker, auth)) => {
            let session = worker.config().session.clone();
            *taken = Some(format!("session {session}"));
            let app = super::router(worker.clone(), auth);
            // Only this request can get here (`taken` was set before), so the cell is empty.
            let _ = pool.adopted.set((app, worker));
            tracing::info!(session, "adopted");
            Json(AdoptResponse {
                session,
                settings: adoption_settings(&req),
            })
            .into_response()
        }
        Err(refusal) => {
            tracing::warn!(error = ?refusal, "adoption failed; this pooled worker is spent");
            *taken = Some("a failed adoption".into());
            refusal.into_response()
        }
    }
}

fn already(by: &str) -> Response {
    Refusal::new(
        StatusCode::CONFLICT,
        code::ALREADY_ADOPTED,
        format!("this worker was already taken by {by}; a pooled worker serves one session"),
    )
    .into_response()
}

fn bad(message: String) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, code::BAD_REQUEST, message)
}

/// Adopted: the session's app. Waiting: the probes answer (ready while no adoption has been
/// tried; a spent worker is unready so its pod is replaced), everything else 503.
async fn forward(State(pool): State<Arc<Pool>>, request: Request<Body>) -> Response {
    if let Some((app, _)) = pool.adopted.get() {
        return match app.clone().oneshot(request).await {
            Ok(response) => response,
            Err(never) => match never {},
        };
    }
    let spent = super::relock(&pool.taken).clone();
    match (request.uri().path(), spent) {
        ("/healthz", _) | ("/readyz", None) => Json(Health {
            status: "ready".into(),
            reason: Some("pooled: waiting to be adopted by a session".into()),
        })
        .into_response(),
        ("/readyz", Some(by)) => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::NOT_READY,
            format!("taken by {by} and not serving"),
        )
        .into_response(),
        _ => Refusal::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::NOT_ADOPTED,
            "this worker waits in a warm pool: no session has adopted it yet",
        )
        .into_response(),
    }
}
