//! Routes of `kube-harness ledger serve`. Each handler is a thin translation between JSON and one
//! ledger call; all semantics live in `crate::ledger`. Routes are registered through utoipa-axum,
//! so the OpenAPI document at `GET /v1/openapi.json` lists exactly the routes that exist.

use super::api::*;
use super::extract::{Body, Params, QueryParams};
use super::metrics::Metrics;
use crate::ledger::*;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;
use axum::{Json, Router};
use kube_harness_service_kit::{require_bearer, with_health_and_metrics, ApiError, AuthConfig};
use prometheus_client::registry::Registry;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;

#[derive(Clone)]
struct AppState {
    services: OrchestrationServices,
    metrics: Metrics,
}

type Reply<T> = Result<(StatusCode, Json<T>), ApiError>;

fn api_error(e: LedgerError) -> ApiError {
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    ApiError::new(status, e.code(), e.to_string())
}

impl AppState {
    fn reply<T>(&self, op: &'static str, ok: StatusCode, result: LedgerResult<T>) -> Reply<T> {
        self.metrics.observe(op, &result);
        result.map(|v| (ok, Json(v))).map_err(api_error)
    }
}

#[derive(OpenApi)]
#[openapi(
    info(title = "kube-harness ledger service", description = "Orchestration ledgers: tasks, continuations, wakeups, workflow queues and results. All /v1 routes except this document need `Authorization: Bearer TOKEN`. Errors are `{\"error\": {\"code\", \"message\"}}`."),
    modifiers(&BearerAuth),
    security(("bearer" = []))
)]
struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

fn api_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::with_openapi(ApiDoc::openapi())
        .routes(routes!(create_task, list_tasks))
        .routes(routes!(get_task))
        .routes(routes!(claim_task))
        .routes(routes!(heartbeat_task))
        .routes(routes!(complete_task))
        .routes(routes!(fail_task))
        .routes(routes!(park_continuation, get_continuation))
        .routes(routes!(resume_continuation))
        .routes(routes!(list_parked))
        .routes(routes!(schedule_wakeup))
        .routes(routes!(get_wakeup, cancel_wakeup))
        .routes(routes!(due_wakeups))
        .routes(routes!(claim_wakeup))
        .routes(routes!(complete_wakeup))
        .routes(routes!(enqueue, list_messages))
        .routes(routes!(dequeue))
        .routes(routes!(ack))
        .routes(routes!(dead_letters))
        .routes(routes!(put_result, get_result))
}

/// The OpenAPI document of the service.
pub fn openapi() -> utoipa::openapi::OpenApi {
    api_routes().split_for_parts().1
}

/// The whole service: authenticated API, unauthenticated `/v1/openapi.json`, `/healthz`, `/metrics`.
pub fn router(services: OrchestrationServices, auth: AuthConfig, mut registry: Registry) -> Router {
    let metrics = Metrics::register(&mut registry);
    let (api, doc) = api_routes().split_for_parts();
    let doc = Arc::new(doc);
    let api = api
        .route_layer(axum::middleware::from_fn_with_state(auth, require_bearer))
        .with_state(AppState { services, metrics })
        .route(
            "/v1/openapi.json",
            get(move || async move { Json(doc.as_ref().clone()) }),
        )
        .fallback(|| async { ApiError::not_found("no-route", "no such route") });
    with_health_and_metrics(api, Arc::new(registry))
}

// ---- tasks ----

#[utoipa::path(post, path = "/v1/tasks", tag = "tasks", request_body = NewTask,
    responses((status = 201, body = TaskRecord), (status = 409, description = "id exists with other content")))]
async fn create_task(State(s): State<AppState>, Body(new): Body<NewTask>) -> Reply<TaskRecord> {
    let r = s.services.tasks.create(new).await;
    s.reply("task_create", StatusCode::CREATED, r)
}

#[utoipa::path(get, path = "/v1/tasks", tag = "tasks", responses((status = 200, body = Vec<TaskRecord>)))]
async fn list_tasks(State(s): State<AppState>) -> Reply<Vec<TaskRecord>> {
    let r = s.services.tasks.list().await;
    s.reply("task_list", StatusCode::OK, r)
}

#[utoipa::path(get, path = "/v1/tasks/{id}", tag = "tasks", params(("id" = String, Path)),
    responses((status = 200, body = TaskRecord), (status = 404)))]
async fn get_task(State(s): State<AppState>, Params(id): Params<String>) -> Reply<TaskRecord> {
    let r = s
        .services
        .tasks
        .get(&id)
        .await
        .and_then(|t| t.ok_or_else(|| LedgerError::NotFound(format!("task {id}"))));
    s.reply("task_get", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/task-claims", tag = "tasks", request_body = ClaimRequest,
    responses((status = 200, body = TaskClaimResponse)))]
async fn claim_task(
    State(s): State<AppState>,
    Body(req): Body<ClaimRequest>,
) -> Reply<TaskClaimResponse> {
    let r = s
        .services
        .tasks
        .claim(&req.owner, req.lease_ms)
        .await
        .map(|task| TaskClaimResponse { task });
    s.reply("task_claim", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/tasks/{id}/heartbeat", tag = "tasks", params(("id" = String, Path)),
    request_body = HeartbeatRequest, responses((status = 200, body = TaskRecord), (status = 409, description = "lease lost")))]
async fn heartbeat_task(
    State(s): State<AppState>,
    Params(id): Params<String>,
    Body(req): Body<HeartbeatRequest>,
) -> Reply<TaskRecord> {
    let r = s
        .services
        .tasks
        .heartbeat(&id, &req.token, req.lease_ms)
        .await;
    s.reply("task_heartbeat", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/tasks/{id}/complete", tag = "tasks", params(("id" = String, Path)),
    request_body = CompleteRequest, responses((status = 200, body = TaskRecord), (status = 409, description = "lease lost")))]
async fn complete_task(
    State(s): State<AppState>,
    Params(id): Params<String>,
    Body(req): Body<CompleteRequest>,
) -> Reply<TaskRecord> {
    let r = s.services.tasks.complete(&id, &req.token, req.result).await;
    s.reply("task_complete", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/tasks/{id}/fail", tag = "tasks", params(("id" = String, Path)),
    request_body = FailRequest, responses((status = 200, body = TaskRecord), (status = 409, description = "lease lost")))]
async fn fail_task(
    State(s): State<AppState>,
    Params(id): Params<String>,
    Body(req): Body<FailRequest>,
) -> Reply<TaskRecord> {
    let r = s
        .services
        .tasks
        .fail(&id, &req.token, &req.error, req.retry_after_ms)
        .await;
    s.reply("task_fail", StatusCode::OK, r)
}

// ---- continuations ----

#[utoipa::path(put, path = "/v1/continuations/{session}/{id}", tag = "continuations",
    params(("session" = String, Path), ("id" = String, Path)), request_body = ParkRequest,
    responses((status = 200, body = Continuation), (status = 409, description = "other content or already resumed")))]
async fn park_continuation(
    State(s): State<AppState>,
    Params((session, id)): Params<(String, String)>,
    Body(req): Body<ParkRequest>,
) -> Reply<Continuation> {
    let r = s
        .services
        .continuations
        .park(&session, &id, req.payload)
        .await;
    s.reply("continuation_park", StatusCode::OK, r)
}

#[utoipa::path(get, path = "/v1/continuations/{session}/{id}", tag = "continuations",
    params(("session" = String, Path), ("id" = String, Path)), responses((status = 200, body = Continuation), (status = 404)))]
async fn get_continuation(
    State(s): State<AppState>,
    Params((session, id)): Params<(String, String)>,
) -> Reply<Continuation> {
    let r = s
        .services
        .continuations
        .get(&session, &id)
        .await
        .and_then(|c| {
            c.ok_or_else(|| LedgerError::NotFound(format!("continuation {session}/{id}")))
        });
    s.reply("continuation_get", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/continuations/{session}/{id}/resume", tag = "continuations",
    params(("session" = String, Path), ("id" = String, Path)), request_body = ResumeRequest,
    responses((status = 200, body = Continuation), (status = 404), (status = 409, description = "already resumed")))]
async fn resume_continuation(
    State(s): State<AppState>,
    Params((session, id)): Params<(String, String)>,
    Body(req): Body<ResumeRequest>,
) -> Reply<Continuation> {
    let r = s
        .services
        .continuations
        .resume(&session, &id, req.input)
        .await;
    s.reply("continuation_resume", StatusCode::OK, r)
}

#[utoipa::path(get, path = "/v1/continuations/{session}", tag = "continuations",
    params(("session" = String, Path)), responses((status = 200, body = Vec<Continuation>)))]
async fn list_parked(
    State(s): State<AppState>,
    Params(session): Params<String>,
) -> Reply<Vec<Continuation>> {
    let r = s.services.continuations.list_parked(&session).await;
    s.reply("continuation_list", StatusCode::OK, r)
}

// ---- wakeups ----

#[utoipa::path(post, path = "/v1/wakeups", tag = "wakeups", request_body = NewWakeup,
    responses((status = 201, body = Wakeup), (status = 409, description = "id exists with other content")))]
async fn schedule_wakeup(State(s): State<AppState>, Body(new): Body<NewWakeup>) -> Reply<Wakeup> {
    let r = s.services.wakeups.schedule(new).await;
    s.reply("wakeup_schedule", StatusCode::CREATED, r)
}

#[utoipa::path(get, path = "/v1/wakeups/{id}", tag = "wakeups", params(("id" = String, Path)),
    responses((status = 200, body = Wakeup), (status = 404)))]
async fn get_wakeup(State(s): State<AppState>, Params(id): Params<String>) -> Reply<Wakeup> {
    let r = s
        .services
        .wakeups
        .get(&id)
        .await
        .and_then(|w| w.ok_or_else(|| LedgerError::NotFound(format!("wakeup {id}"))));
    s.reply("wakeup_get", StatusCode::OK, r)
}

#[utoipa::path(delete, path = "/v1/wakeups/{id}", tag = "wakeups", params(("id" = String, Path)),
    responses((status = 200, body = CancelResponse)))]
async fn cancel_wakeup(
    State(s): State<AppState>,
    Params(id): Params<String>,
) -> Reply<CancelResponse> {
    let r = s
        .services
        .wakeups
        .cancel(&id)
        .await
        .map(|cancelled| CancelResponse { cancelled });
    s.reply("wakeup_cancel", StatusCode::OK, r)
}

#[utoipa::path(get, path = "/v1/due-wakeups", tag = "wakeups", params(("limit" = Option<usize>, Query)),
    responses((status = 200, body = Vec<Wakeup>)))]
async fn due_wakeups(
    State(s): State<AppState>,
    QueryParams(q): QueryParams<DueQuery>,
) -> Reply<Vec<Wakeup>> {
    let r = s.services.wakeups.list_due(q.limit).await;
    s.reply("wakeup_due", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/wakeup-claims", tag = "wakeups", request_body = ClaimRequest,
    responses((status = 200, body = WakeupClaimResponse)))]
async fn claim_wakeup(
    State(s): State<AppState>,
    Body(req): Body<ClaimRequest>,
) -> Reply<WakeupClaimResponse> {
    let r = s
        .services
        .wakeups
        .claim_due(&req.owner, req.lease_ms)
        .await
        .map(|wakeup| WakeupClaimResponse { wakeup });
    s.reply("wakeup_claim", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/wakeups/{id}/complete", tag = "wakeups", params(("id" = String, Path)),
    request_body = TokenRequest, responses((status = 200, body = Wakeup), (status = 409, description = "lease lost")))]
async fn complete_wakeup(
    State(s): State<AppState>,
    Params(id): Params<String>,
    Body(req): Body<TokenRequest>,
) -> Reply<Wakeup> {
    let r = s.services.wakeups.complete(&id, &req.token).await;
    s.reply("wakeup_complete", StatusCode::OK, r)
}

// ---- workflow queues ----

#[utoipa::path(post, path = "/v1/queues/{queue}/messages", tag = "queues", params(("queue" = String, Path)),
    request_body = EnqueueRequest, responses((status = 201, body = QueueMessage)))]
async fn enqueue(
    State(s): State<AppState>,
    Params(queue): Params<String>,
    Body(req): Body<EnqueueRequest>,
) -> Reply<QueueMessage> {
    let r = s.services.queues.enqueue(&queue, req).await;
    s.reply("queue_enqueue", StatusCode::CREATED, r)
}

#[utoipa::path(get, path = "/v1/queues/{queue}/messages", tag = "queues", params(("queue" = String, Path)),
    responses((status = 200, body = Vec<QueueMessage>)))]
async fn list_messages(
    State(s): State<AppState>,
    Params(queue): Params<String>,
) -> Reply<Vec<QueueMessage>> {
    let r = s.services.queues.list(&queue).await;
    s.reply("queue_list", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/deliveries", tag = "queues", params(("queue" = String, Path)),
    request_body = DequeueRequest, responses((status = 200, body = DequeueResponse)))]
async fn dequeue(
    State(s): State<AppState>,
    Params(queue): Params<String>,
    Body(req): Body<DequeueRequest>,
) -> Reply<DequeueResponse> {
    let r = s
        .services
        .queues
        .dequeue(&queue, &req.consumer, req.visibility_timeout_ms)
        .await
        .map(|message| DequeueResponse { message });
    s.reply("queue_dequeue", StatusCode::OK, r)
}

#[utoipa::path(post, path = "/v1/queues/{queue}/messages/{id}/ack", tag = "queues",
    params(("queue" = String, Path), ("id" = String, Path)), request_body = AckRequest,
    responses((status = 200, body = AckResponse), (status = 404), (status = 409, description = "receipt expired or superseded")))]
async fn ack(
    State(s): State<AppState>,
    Params((queue, id)): Params<(String, String)>,
    Body(req): Body<AckRequest>,
) -> Reply<AckResponse> {
    let r = s
        .services
        .queues
        .ack(&queue, &id, &req.receipt)
        .await
        .map(|()| AckResponse { acked: true });
    s.reply("queue_ack", StatusCode::OK, r)
}

#[utoipa::path(get, path = "/v1/queues/{queue}/dead-letters", tag = "queues", params(("queue" = String, Path)),
    responses((status = 200, body = Vec<QueueMessage>)))]
async fn dead_letters(
    State(s): State<AppState>,
    Params(queue): Params<String>,
) -> Reply<Vec<QueueMessage>> {
    let r = s.services.queues.dead_letters(&queue).await;
    s.reply("queue_dead_letters", StatusCode::OK, r)
}

// ---- results ----

#[utoipa::path(put, path = "/v1/results/{key}", tag = "results", params(("key" = String, Path)),
    request_body = PutResultRequest,
    responses((status = 201, body = PutResultResponse, description = "stored"), (status = 200, body = PutResultResponse, description = "same value already stored"), (status = 409, description = "other value already stored")))]
async fn put_result(
    State(s): State<AppState>,
    Params(key): Params<String>,
    Body(req): Body<PutResultRequest>,
) -> Reply<PutResultResponse> {
    let r = s.services.results.put(&key, req.value).await;
    let status = match r {
        Ok(PutOutcome::Created) => StatusCode::CREATED,
        _ => StatusCode::OK,
    };
    s.reply(
        "result_put",
        status,
        r.map(|outcome| PutResultResponse { outcome }),
    )
}

#[utoipa::path(get, path = "/v1/results/{key}", tag = "results", params(("key" = String, Path)),
    responses((status = 200, body = StoredResult), (status = 404)))]
async fn get_result(State(s): State<AppState>, Params(key): Params<String>) -> Reply<StoredResult> {
    let r = s
        .services
        .results
        .get(&key)
        .await
        .and_then(|v| v.ok_or_else(|| LedgerError::NotFound(format!("result {key}"))));
    s.reply("result_get", StatusCode::OK, r)
}
