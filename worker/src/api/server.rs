//! The worker's HTTP face (axum): routes, bearer auth, JSON errors, graceful shutdown, and the
//! connection bounds every service has (`ConnectionLimits`: header read and idle timeouts, a
//! connection limit).
//!
//! Every answer is JSON; every error is `{"error": {"code", "message"}}` with a stable code.
//! Commands run in their own task, so a client that disconnects (or a server that stops waiting)
//! does not cut a command off: it finishes, and its events still reach the session log.

use super::error::WorkerError;
use super::model::{
    code, CommitRequest, EndTurnRequest, ExecRequest, Health, OpenTurnRequest, MAX_KEY_LEN,
    MAX_LOG_PAGE, MAX_SCRIPT_BYTES, NDJSON,
};
use super::refusal::Refusal;
use super::state::Worker;
use axum::body::{Body, Bytes};
use axum::extract::{RawQuery, Request, State};
use axum::http::header::{AUTHORIZATION, CONTENT_LENGTH, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use kube_harness_service_kit::body::{file_chunks, read_request, BodyError, BodyHead};
use kube_harness_service_kit::AuthConfig;
use kube_harness_session_log_client::RunId;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

fn bad_request(message: impl Into<String>) -> Refusal {
    Refusal::new(StatusCode::BAD_REQUEST, code::BAD_REQUEST, message)
}

/// The whole application. `/healthz` and `/readyz` need no token (kubelet probes carry none).
pub fn router(worker: Arc<Worker>, auth: AuthConfig) -> Router {
    let api = Router::new()
        .route("/v1/exec", post(exec))
        .route("/v1/turns", post(open_turn))
        .route("/v1/turns/end", post(end_turn))
        .route("/v1/persistent/commit", post(commit_persistent))
        .route("/v1/status", get(status))
        .route("/v1/log", get(get_log))
        .route("/metrics", get(metrics))
        .route("/v1/files", get(get_file).put(put_file))
        .route("/v1/archive", get(get_archive).put(put_archive))
        .route_layer(axum::middleware::from_fn_with_state(auth, require_bearer));
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .merge(api)
        .fallback(|| async {
            Refusal::new(
                StatusCode::NOT_FOUND,
                code::NOT_FOUND,
                "no such route: the worker serves POST /v1/exec, POST /v1/turns, POST /v1/turns/end, GET /v1/status, GET /v1/log, PUT and GET /v1/files and /v1/archive, GET /metrics, GET /healthz, GET /readyz",
            )
        })
        .method_not_allowed_fallback(|| async {
            Refusal::new(
                StatusCode::METHOD_NOT_ALLOWED,
                code::METHOD_NOT_ALLOWED,
                "method not allowed on this route",
            )
        })
        .with_state(worker)
}

async fn require_bearer(State(auth): State<AuthConfig>, request: Request, next: Next) -> Response {
    if auth.accepts(request.headers().get(AUTHORIZATION)) {
        return next.run(request).await;
    }
    let mut response = Refusal::new(
        StatusCode::UNAUTHORIZED,
        code::UNAUTHORIZED,
        "missing or invalid bearer token",
    )
    .into_response();
    response
        .headers_mut()
        .insert(WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

/// Liveness: 200 unless the worker is broken beyond repair ([`super::Broken::Worker`]), when
/// it is 503 `worker-broken` so that the kubelet restarts the container. A quarantined turn
/// is reported (200 with the reason) but is no reason to restart: ending the turn repairs it,
/// and a restart would lose the turn's Tier-1 changes.
async fn healthz(State(worker): State<Arc<Worker>>) -> Response {
    if let Err(broken) = worker.liveness() {
        return broken.refusal().into_response();
    }
    Json(Health {
        status: "ok".into(),
        reason: worker.broken().map(|b| b.reason()),
    })
    .into_response()
}

async fn readyz(State(worker): State<Arc<Worker>>) -> Response {
    match worker.readiness() {
        Ok(()) => Json(Health {
            status: "ready".into(),
            reason: None,
        })
        .into_response(),
        // 503: `worker-broken` with the reason when broken, `not-ready` otherwise.
        Err(why) => WorkerError::from(why).into_response(),
    }
}

/// `?path=` of the file routes, decoded strictly: its percent-escapes must make UTF-8, and
/// `path` must be given once. A lossy decoding would let two different requests name one file
/// (issue 14's outside attack). Plain percent-encoding, not a form: `+` is a plus (`%20` is a
/// space), so `a+b.txt` names `a+b.txt` (issue 29: it was decoded as `a b.txt`).
fn file_query(raw: Option<String>) -> Result<String, Refusal> {
    let bad = |why: &str| {
        Refusal::new(
            StatusCode::BAD_REQUEST,
            code::BAD_PATH,
            format!("the file routes take ?path=<harness path>: {why}"),
        )
    };
    match one_param(raw.as_deref(), "path") {
        Ok(found) => found.ok_or_else(|| bad("`path` is missing")),
        Err(Param::Twice) => Err(bad("`path` is given twice")),
        Err(Param::NotUtf8) => Err(bad("the path is not UTF-8 once decoded")),
    }
}

/// Why a query parameter read by [`one_param`] is refused.
enum Param {
    Twice,
    NotUtf8,
}

/// The query parameter `name`, percent-decoded strictly (UTF-8), given at most once; other
/// parameters are left to their routes.
fn one_param(raw: Option<&str>, name: &str) -> Result<Option<String>, Param> {
    let mut found = None;
    for pair in raw.unwrap_or("").split('&') {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != name {
            continue;
        }
        if found.is_some() {
            return Err(Param::Twice);
        }
        let decoded = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| Param::NotUtf8)?;
        found = Some(decoded.into_owned());
    }
    Ok(found)
}

/// Runs `work` in its own task, so that it completes (and is logged) even if the client goes or
/// the server stops waiting, and answers its result as JSON.
async fn in_own_task<T: serde::Serialize + Send + 'static>(
    worker: &Worker,
    what: &str,
    work: impl Future<Output = Result<T, Refusal>> + Send + 'static,
) -> Result<Response, Refusal> {
    match tokio::spawn(work).await {
        Ok(result) => result.map(|r| Json(r).into_response()),
        Err(e) => Err(worker.task_failed(what, &e)),
    }
}

/// `PUT /v1/files?path=…`: the raw body becomes the file (see `files`). Its own task, like a
/// command: once the body is in, the write completes and is recorded even if the client goes.
async fn put_file(
    State(worker): State<Arc<Worker>>,
    RawQuery(query): RawQuery,
    head: BodyHead,
    raw: Body,
) -> Result<Response, Refusal> {
    let turn = turn_query(query.as_deref())?;
    let path = file_query(query)?;
    let running = worker.clone();
    in_own_task(&worker, "upload", async move {
        running.put_file(&path, turn.as_deref(), &head, raw).await
    })
    .await
}

/// `GET /v1/files?path=…`: the file as a raw body, streamed, with its length.
async fn get_file(
    State(worker): State<Arc<Worker>>,
    RawQuery(query): RawQuery,
) -> Result<Response, Refusal> {
    let path = file_query(query)?;
    let (file, size) = worker.open_file(&path).await?;
    let mut response = Body::from_stream(file_chunks(file)).into_response();
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(CONTENT_LENGTH, HeaderValue::from(size));
    Ok(response)
}

/// `PUT /v1/archive?path=…`: the tar body is unpacked into the directory (see `archive`).
async fn put_archive(
    State(worker): State<Arc<Worker>>,
    RawQuery(query): RawQuery,
    head: BodyHead,
    raw: Body,
) -> Result<Response, Refusal> {
    let turn = turn_query(query.as_deref())?;
    let path = file_query(query)?;
    let running = worker.clone();
    in_own_task(&worker, "upload", async move {
        running
            .put_archive(&path, turn.as_deref(), &head, raw)
            .await
    })
    .await
}

/// `GET /v1/archive?path=…`: the directory as a tar, streamed as it is walked.
async fn get_archive(
    State(worker): State<Arc<Worker>>,
    RawQuery(query): RawQuery,
) -> Result<Response, Refusal> {
    let path = file_query(query)?;
    let target = worker.archive_target(&path).await?;
    let (tx, rx) = tokio::sync::mpsc::channel(4);
    tokio::task::spawn_blocking(move || super::archive::write_tar(&target, tx));
    let chunks = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    let mut response = Body::from_stream(chunks).into_response();
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/x-tar"));
    Ok(response)
}

/// `GET /v1/log?run=R&after=N&limit=L`: a page of the session's log (`Worker::read_log`).
async fn get_log(
    State(worker): State<Arc<Worker>>,
    RawQuery(query): RawQuery,
) -> Result<Response, Refusal> {
    let (mut run, mut after, mut limit) = (None, 0u64, MAX_LOG_PAGE);
    for pair in query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8()
            .map_err(|_| bad_request(format!("{key} is not UTF-8 once decoded")))?;
        let number = |what: &str| {
            value
                .parse::<u64>()
                .map_err(|_| bad_request(format!("{what} must be a number, got {value:?}")))
        };
        match key {
            "run" => {
                RunId::parse(&value).map_err(|e| bad_request(format!("run: {}", e.message)))?;
                run = Some(value.into_owned());
            }
            "after" => after = number("after")?,
            "limit" => limit = usize::try_from(number("limit")?).unwrap_or(usize::MAX),
            other => {
                return Err(bad_request(format!(
                    "unknown parameter {other:?}: the log route takes run, after and limit"
                )))
            }
        }
    }
    let page = worker.read_log(run.as_deref(), after, limit).await?;
    Ok(Json(page).into_response())
}

async fn status(State(worker): State<Arc<Worker>>) -> Response {
    Json(worker.status()).into_response()
}

/// `GET /metrics`: behind the bearer, as `/v1/status` (see [`super::metrics`] for why).
async fn metrics(State(worker): State<Arc<Worker>>) -> Response {
    (
        [(CONTENT_TYPE, super::metrics::CONTENT_TYPE)],
        worker.metrics_text(),
    )
        .into_response()
}

/// The body, read as it arrives and bounded by `--max-body-bytes`: 413 beyond (after lingering
/// over the rest, so that the client reads the answer), 408 `body-timeout` when it does not keep
/// its pace or its deadline (`ConnectionLimits::body`), 400 for any other read failure. Nothing
/// has been done with the request when it is refused.
async fn body(worker: &Worker, head: &BodyHead, raw: Body) -> Result<Bytes, Refusal> {
    let limit = worker.config().max_body_bytes;
    read_request(head, raw, limit).await.map_err(|e| match e {
        BodyError::TooLarge { .. } => Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!("request body over the limit of {limit} bytes (--max-body-bytes)"),
        ),
        BodyError::TooSlow { .. } => body_timeout(&e),
        other => bad_request(format!("cannot read the request body: {other}")),
    })
}

/// 408 `body-timeout` for a body that did not keep its pace; nothing was done with the request.
pub(crate) fn body_timeout(e: &BodyError) -> Refusal {
    Refusal::new(
        StatusCode::REQUEST_TIMEOUT,
        code::BODY_TIMEOUT,
        format!("{e}; nothing was done"),
    )
}

async fn exec(
    State(worker): State<Arc<Worker>>,
    head: BodyHead,
    headers: HeaderMap,
    raw: Body,
) -> Result<Response, Refusal> {
    let raw = body(&worker, &head, raw).await?;
    let req: ExecRequest = serde_json::from_slice(&raw)
        .map_err(|e| bad_request(format!("invalid exec request: {e}")))?;
    validate(&req, &worker)?;
    if wants_stream(&headers) {
        return Ok(super::stream::exec(worker, req));
    }
    let running = worker.clone();
    in_own_task(&worker, "exec", async move { running.exec(req).await }).await
}

/// `Accept: application/x-ndjson` asks for the streamed exec.
fn wants_stream(headers: &HeaderMap) -> bool {
    headers
        .get_all(axum::http::header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| {
            v.split(';')
                .next()
                .is_some_and(|t| t.trim().eq_ignore_ascii_case(NDJSON))
        })
}

fn validate(req: &ExecRequest, worker: &Worker) -> Result<(), Refusal> {
    if req.script.len() > MAX_SCRIPT_BYTES {
        return Err(Refusal::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!(
                "script is {} bytes, over the limit of {MAX_SCRIPT_BYTES} (bash gets it as one argument, which the kernel caps at 128 KiB); put long content in a file under /session",
                req.script.len()
            ),
        ));
    }
    if let Some(run) = &req.run_id {
        RunId::parse(run).map_err(|e| bad_request(format!("runId: {}", e.message)))?;
        if run.len() > MAX_KEY_LEN {
            return Err(bad_request(format!("runId is longer than {MAX_KEY_LEN}")));
        }
    }
    valid_key("stepKey", req.step_key.as_deref())?;
    valid_turn_id(req.turn_id.as_deref())?;
    if let Some(ms) = req.timeout_ms {
        let max = worker.config().max_timeout;
        if ms == 0 || Duration::from_millis(ms) > max {
            return Err(bad_request(format!(
                "timeoutMs must be 1..={} (the worker's --max-timeout)",
                max.as_millis()
            )));
        }
    }
    Ok(())
}

/// A `turnId` is what `POST /v1/turns` answered: bounded like a step key.
fn valid_turn_id(turn_id: Option<&str>) -> Result<(), Refusal> {
    valid_key("turnId", turn_id)
}

/// A step key or turn id, when given: 1..=[`MAX_KEY_LEN`] bytes without control characters.
fn valid_key(what: &str, key: Option<&str>) -> Result<(), Refusal> {
    match key {
        Some(k) if k.is_empty() || k.len() > MAX_KEY_LEN || k.chars().any(char::is_control) => {
            Err(bad_request(format!(
                "{what} must be 1..={MAX_KEY_LEN} bytes without control characters"
            )))
        }
        _ => Ok(()),
    }
}

/// `&turnId=` of an upload: the client's turn it belongs to (an upload while another client's
/// turn is open is 409 `turn-busy`, as a command is). Given once, UTF-8, bounded like a step key.
fn turn_query(raw: Option<&str>) -> Result<Option<String>, Refusal> {
    let found = one_param(raw, "turnId").map_err(|why| match why {
        Param::Twice => bad_request("turnId is given twice"),
        Param::NotUtf8 => bad_request("turnId is not UTF-8 once decoded"),
    })?;
    valid_turn_id(found.as_deref())?;
    Ok(found)
}

/// A JSON body that may be left out (empty or blank: the request's defaults).
async fn optional_json<T: serde::de::DeserializeOwned + Default>(
    worker: &Worker,
    head: &BodyHead,
    raw: Body,
    what: &str,
) -> Result<T, Refusal> {
    let raw = body(worker, head, raw).await?;
    if raw.iter().all(u8::is_ascii_whitespace) {
        return Ok(T::default());
    }
    serde_json::from_slice(&raw).map_err(|e| bad_request(format!("invalid {what} request: {e}")))
}

async fn end_turn(
    State(worker): State<Arc<Worker>>,
    head: BodyHead,
    raw: Body,
) -> Result<Response, Refusal> {
    let req: EndTurnRequest = optional_json(&worker, &head, raw, "end-turn").await?;
    if let Some(run) = &req.run_id {
        RunId::parse(run).map_err(|e| bad_request(format!("runId: {}", e.message)))?;
    }
    valid_turn_id(req.turn_id.as_deref())?;
    let running = worker.clone();
    in_own_task(&worker, "end-turn", async move {
        running.end_turn(req.run_id, req.turn_id).await
    })
    .await
}

async fn open_turn(
    State(worker): State<Arc<Worker>>,
    head: BodyHead,
    raw: Body,
) -> Result<Response, Refusal> {
    let req: OpenTurnRequest = optional_json(&worker, &head, raw, "open-turn").await?;
    let running = worker.clone();
    in_own_task(&worker, "open-turn", async move {
        running.open_claimed_turn(req).await
    })
    .await
}

async fn commit_persistent(
    State(worker): State<Arc<Worker>>,
    head: BodyHead,
    raw: Body,
) -> Result<Response, Refusal> {
    let raw = body(&worker, &head, raw).await?;
    let req: CommitRequest = serde_json::from_slice(&raw)
        .map_err(|e| bad_request(format!("invalid commit request: {e}")))?;
    let running = worker.clone();
    in_own_task(&worker, "commit", async move {
        running.commit_persistent(req).await
    })
    .await
}

/// Serves until `shutdown` completes, then: stops accepting, answers queued commands 503, lets
/// the running command finish within the worker's `shutdown_grace`, and ends the turn.
pub async fn serve(
    listener: TcpListener,
    worker: Arc<Worker>,
    auth: AuthConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let app = router(worker.clone(), auth);
    let connections = worker.config().connections;
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(%addr, session = worker.config().session, "worker listening");
    }
    serve_app(
        listener,
        app,
        connections,
        move || Some(worker.clone()),
        shutdown,
    )
    .await
}

/// Aborts a background task when the server it serves returns.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// [`serve`] for an app whose worker may come later (a pooled worker, [`super::adopt`]): the
/// shutdown steps apply to the worker `current` returns when the signal fires, if any.
pub(crate) async fn serve_app(
    listener: TcpListener,
    app: Router,
    connections: kube_harness_service_kit::ConnectionLimits,
    current: impl Fn() -> Option<Arc<Worker>> + Send + Sync + 'static,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let current = Arc::new(current);
    let (fired_tx, fired_rx) =
        tokio::sync::oneshot::channel::<(tokio::time::Instant, Option<Arc<Worker>>)>();
    let signal_current = current.clone();
    let signal = async move {
        shutdown.await;
        let worker = signal_current();
        if let Some(w) = &worker {
            w.begin_shutdown();
        }
        let _ = fired_tx.send((tokio::time::Instant::now(), worker));
    };
    let server = kube_harness_service_kit::serve_with(listener, app, connections, signal);
    // Ends claimed turns left idle past the bound (`Worker::end_idle_turn`), once a second.
    let idle_current = current.clone();
    let idle = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            if let Some(worker) = idle_current() {
                worker.end_idle_turn().await;
            }
        }
    });
    let _stop_idle = AbortOnDrop(idle);
    let (at_tx, at_rx) = tokio::sync::watch::channel(None::<tokio::time::Instant>);
    let deadline = async move {
        if let Ok((at, worker)) = fired_rx.await {
            let grace = worker.map_or(Duration::ZERO, |w| w.config().shutdown_grace);
            let _ = at_tx.send(Some(at));
            match at.checked_add(grace) {
                Some(end) => tokio::time::sleep_until(end).await,
                None => std::future::pending::<()>().await,
            }
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        served = server => served?,
        _ = deadline => tracing::warn!("shutdown grace passed with requests in flight"),
    }
    let Some(worker) = current() else {
        return Ok(());
    };
    // What is left of the grace period (at least a second) for the running command to let go.
    let grace = worker.config().shutdown_grace;
    let signalled = (*at_rx.borrow()).unwrap_or_else(tokio::time::Instant::now);
    let left = grace
        .saturating_sub(signalled.elapsed())
        .max(Duration::from_secs(1));
    worker.shutdown(left).await;
    Ok(())
}
