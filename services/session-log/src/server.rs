//! The HTTP face of the session log (`lh.remote-session.v1`): routes, error mapping, metrics.

use crate::model::{EventInput, PreparedEvent, RunId, ValidationError, DEFAULT_MAX_PAYLOAD_BYTES};
use crate::reads::{page_body, ReadSlot, ReadSlots, DEFAULT_READS_IN_FLIGHT};
use crate::scope::{self, Access};
use crate::store::{Store, StoreError, MAX_READ_LIMIT};
use axum::body::Body;
use axum::extract::rejection::{PathRejection, QueryRejection};
use axum::extract::{Extension, Path, Query, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use kube_harness_service_kit::auth::{bearer, unauthorized};
use kube_harness_service_kit::body::{read_request, BodyError, BodyHead};
use kube_harness_service_kit::{clients, with_health_check, ApiError, AuthConfig};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use serde::Deserialize;
use std::sync::Arc;
use std::time::Instant;

/// The OpenAPI 3 document served at `GET /v1/openapi.json`.
pub const OPENAPI_JSON: &str = include_str!("openapi.json");
/// Default page size of `GET .../events`.
pub const DEFAULT_READ_LIMIT: usize = 100;
/// Bytes of JSON a request body may hold on top of the payload limit (keys, type, framing).
const BODY_OVERHEAD: usize = 16 * 1024;

/// Server settings beyond the store.
#[derive(Clone)]
pub struct ServerConfig {
    pub auth: AuthConfig,
    /// Canonical payload size limit; over it: 413 and nothing written.
    pub max_payload_bytes: usize,
    /// Reads served at once (`reads.rs`); more wait.
    pub reads_in_flight: usize,
}

impl ServerConfig {
    pub fn new(auth: AuthConfig) -> Self {
        Self {
            auth,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            reads_in_flight: DEFAULT_READS_IN_FLIGHT,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// Metrics of the session log, registered under the `kh_session_log` prefix.
#[derive(Clone)]
struct Metrics {
    appends: Family<OutcomeLabels, Counter>,
    append_seconds: Histogram,
    reads: Family<OutcomeLabels, Counter>,
}

#[derive(Clone)]
struct AppState {
    store: Store,
    max_payload_bytes: usize,
    reads: ReadSlots,
    metrics: Metrics,
}

/// Builds the whole application: API routes behind bearer auth, plus `/healthz` (503 while the
/// store is poisoned, so a liveness probe restarts the process), `/metrics` and
/// `/v1/openapi.json` without auth. `registry` should already hold the store's batch histogram.
pub fn app(store: Store, config: ServerConfig, mut registry: Registry) -> Router {
    let metrics = Metrics {
        appends: Family::default(),
        append_seconds: Histogram::new(exponential_buckets(0.00005, 2.0, 18)),
        reads: Family::default(),
    };
    let sub = registry.sub_registry_with_prefix("kh_session_log");
    sub.register("appends", "Appends by outcome", metrics.appends.clone());
    sub.register(
        "append_duration_seconds",
        "Time from request to durable acknowledgement",
        metrics.append_seconds.clone(),
    );
    sub.register("reads", "Reads by outcome", metrics.reads.clone());
    let health_store = store.clone();
    let health = Arc::new(move || match health_store.failure() {
        Some(reason) => Err(reason),
        None => Ok(()),
    });
    let state = AppState {
        store,
        max_payload_bytes: config.max_payload_bytes,
        reads: ReadSlots::new(config.reads_in_flight),
        metrics,
    };
    let api = Router::new()
        .route(
            "/v1/runs/{run_id}/events",
            get(read_events).post(append_event),
        )
        .route_layer(axum::middleware::from_fn_with_state(config.auth, authorize))
        .route("/v1/openapi.json", get(openapi))
        .fallback(|| async {
            ApiError::not_found("not-found", "no such route; see GET /v1/openapi.json")
        })
        .with_state(state);
    with_health_check(api, Arc::new(registry), health)
}

/// Bearer auth with scopes: the server's token (or no auth configured) reaches every run; a
/// session-scoped token (`scope` module) only its own. Anything else is the kit's 401. All on the
/// request's head, before any body byte is read; then a scoped token's requests in flight are
/// bounded per scope (the kit's `--max-requests-per-client`, 429 past it), so that one session's
/// flood cannot take every other session's turn (issue 30). The server's token is the
/// operator's, not a tenant's, and is not bounded.
async fn authorize(State(auth): State<AuthConfig>, mut request: Request, next: Next) -> Response {
    let header = request.headers().get(AUTHORIZATION);
    let access = if auth.accepts(header) {
        Access::All
    } else {
        match auth
            .token_digest()
            .zip(bearer(header))
            .and_then(|(key, token)| scope::verify(key, token))
        {
            Some(s) => Access::Scope(s),
            None => return unauthorized(),
        }
    };
    let permit = match &access {
        Access::Scope(scope) => match clients::admit(&request, scope) {
            Ok(permit) => Some(permit),
            Err(refused) => return refused.into_response(),
        },
        Access::All => None,
    };
    request.extensions_mut().insert(access);
    let response = next.run(request).await;
    match permit {
        Some(permit) => permit.hold(response),
        None => response,
    }
}

/// The run a request names, if its token reaches it: 403 otherwise, before anything is read or
/// written.
fn authorized_run(
    path: Result<Path<String>, PathRejection>,
    access: &Access,
) -> Result<RunId, ApiError> {
    let run = run_id(path)?;
    if !access.allows(&run) {
        return Err(ApiError::forbidden(
            "run-out-of-scope",
            format!("this token is scoped to other runs than {run}"),
        ));
    }
    Ok(run)
}

async fn openapi() -> Response {
    ([(CONTENT_TYPE, "application/json")], OPENAPI_JSON).into_response()
}

fn run_id(path: Result<Path<String>, PathRejection>) -> Result<RunId, ApiError> {
    let Path(raw) = path.map_err(|e| ApiError::bad_request("invalid-run-id", e.body_text()))?;
    RunId::parse(&raw).map_err(validation)
}

fn validation(e: ValidationError) -> ApiError {
    if e.code == "payload-too-large" {
        ApiError::too_large(e.message)
    } else {
        ApiError::bad_request(e.code, e.message)
    }
}

fn store_error(e: StoreError) -> ApiError {
    let message = e.to_string();
    match e {
        StoreError::Conflict { .. } => ApiError::conflict("idempotency-conflict", message),
        // 413, not 429: the session (or namespace) stays over its quota, so retrying cannot help.
        StoreError::QuotaExceeded { scope, .. } => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            if scope == "namespace" {
                "namespace-quota-exceeded"
            } else {
                "session-quota-exceeded"
            },
            message,
        ),
        StoreError::RunCorrupt { .. } => ApiError::internal("run-corrupt", message),
        StoreError::Poisoned(_) => ApiError::unavailable("store-failed", message),
        StoreError::Unavailable(_) => ApiError::unavailable("store-unavailable", message),
        StoreError::Internal(_) => ApiError::internal("internal", message),
    }
}

async fn append_event(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    head: BodyHead,
    body: Body,
) -> Response {
    let started = Instant::now();
    let run = authorized_run(path, &access);
    let (outcome, response) = match append_inner(&state, run, &head, body).await {
        Ok((created, response)) => (if created { "created" } else { "duplicate" }, response),
        Err(e) => {
            let outcome = match e.status {
                StatusCode::CONFLICT => "conflict",
                s if s.is_client_error() => "rejected",
                _ => "error",
            };
            (outcome, e.into_response())
        }
    };
    state
        .metrics
        .appends
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
    state
        .metrics
        .append_seconds
        .observe(started.elapsed().as_secs_f64());
    response
}

/// The run is checked (400, 403) before the body is read; the body is read by the kit's paced
/// reader (`ConnectionLimits::body`: 408 `body-timeout` for a body that does not keep its pace,
/// 413 past the limit), so nothing is done with an append whose body did not arrive in time.
async fn append_inner(
    state: &AppState,
    run: Result<RunId, ApiError>,
    head: &BodyHead,
    body: Body,
) -> Result<(bool, Response), ApiError> {
    let run = run?;
    let limit = state.max_payload_bytes + BODY_OVERHEAD;
    let body = read_request(head, body, limit).await.map_err(|e| match e {
        BodyError::TooLarge { .. } => ApiError::too_large(format!(
            "request body over {limit} bytes; store large content as an immutable artifact and reference it (contentRef)"
        )),
        BodyError::TooSlow { .. } => ApiError::new(
            StatusCode::REQUEST_TIMEOUT,
            "body-timeout",
            format!("{e}; nothing was written"),
        ),
        other => ApiError::bad_request("invalid-body", other.to_string()),
    })?;
    let input: EventInput = serde_json::from_slice(&body).map_err(|e| {
        use serde_json::error::Category;
        match e.classify() {
            Category::Syntax | Category::Eof | Category::Io => {
                ApiError::bad_request("malformed-json", format!("body is not valid JSON: {e}"))
            }
            Category::Data => ApiError::bad_request("invalid-event", format!("{e}")),
        }
    })?;
    let prepared = PreparedEvent::new(input, state.max_payload_bytes).map_err(validation)?;
    let outcome = state
        .store
        .append(&run, prepared)
        .await
        .map_err(store_error)?;
    let body = AppendResponse {
        sequence: outcome.event.sequence,
        event: &outcome.event,
    };
    Ok((
        outcome.created,
        (StatusCode::OK, Json(body)).into_response(),
    ))
}

/// `{"sequence": N, "event": {...}}`, serialized straight from the stored event.
#[derive(serde::Serialize)]
struct AppendResponse<'a> {
    sequence: u64,
    event: &'a crate::model::StoredEvent,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ReadParams {
    #[serde(default)]
    after: u64,
    limit: Option<usize>,
}

async fn read_events(
    State(state): State<AppState>,
    Extension(access): Extension<Access>,
    path: Result<Path<String>, PathRejection>,
    query: Result<Query<ReadParams>, QueryRejection>,
) -> Response {
    let slot = state.reads.take().await;
    let result = read_inner(&state, authorized_run(path, &access), query, slot).await;
    let outcome = if result.is_ok() { "ok" } else { "error" };
    state
        .metrics
        .reads
        .get_or_create(&OutcomeLabels { outcome })
        .inc();
    match result {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

async fn read_inner(
    state: &AppState,
    run: Result<RunId, ApiError>,
    query: Result<Query<ReadParams>, QueryRejection>,
    slot: ReadSlot,
) -> Result<Response, ApiError> {
    let run = run?;
    let Query(params) = query.map_err(|e| {
        ApiError::bad_request(
            "invalid-query",
            format!(
                "{}; expected after=N (>= 0) and limit=M (1..={MAX_READ_LIMIT})",
                e.body_text()
            ),
        )
    })?;
    let limit = params.limit.unwrap_or(DEFAULT_READ_LIMIT);
    if !(1..=MAX_READ_LIMIT).contains(&limit) {
        return Err(ApiError::bad_request(
            "invalid-query",
            format!("limit must be 1..={MAX_READ_LIMIT}"),
        ));
    }
    let (events, more) = state
        .store
        .read(&run, params.after, limit)
        .await
        .map_err(store_error)?;
    let next = if more {
        events.last().map(|e| e.sequence)
    } else {
        None
    };
    Ok((
        [(CONTENT_TYPE, "application/json")],
        page_body(events, next, slot),
    )
        .into_response())
}
