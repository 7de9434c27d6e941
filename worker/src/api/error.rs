//! Why the worker did not do what it was asked: [`WorkerError`], what the session logic, the
//! file and archive transfers and the health checks return, and its one mapping to an HTTP
//! answer (`impl From<WorkerError> for Refusal`: status, the stable code of `model::code`,
//! message). Nothing else in the worker's logic names a status code. Also the reasons the worker
//! takes no commands ([`NotReady`], [`Broken`]) and why one could not be built ([`StartError`]).

use super::model::code;
use super::refusal::Refusal;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

/// A request the worker refused or could not complete. Each variant is one answer of the API
/// (docs/worker-api.md, "Errors"); its text is the answer's message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkerError {
    /// 400 `bad-request`: the request itself is wrong (a run id that is not one).
    #[error("{0}")]
    BadRequest(String),
    /// 400 `bad-path`: a path that is not a plain harness path under a mount, or a symlink on
    /// the way to it.
    #[error("{0}")]
    BadPath(String),
    /// 400 `not-a-file`: the path names something else than what the route moves.
    #[error("{0}")]
    NotAFile(String),
    /// 409 `not-a-file`: a directory where a file goes, or the reverse.
    #[error("{0}")]
    KindConflict(String),
    /// 400 `bad-archive`: an uploaded tar the worker does not unpack; nothing was written.
    #[error("the archive is refused, nothing was written: {0}")]
    BadArchive(String),
    /// 403 `read-only`: the mount table does not allow the write.
    #[error("{0}")]
    ReadOnly(String),
    /// 404 `not-found`.
    #[error("{0}")]
    NotFound(String),
    /// 408 `body-timeout`: the body did not keep its pace.
    #[error("{0}")]
    BodyTimeout(String),
    /// 409 `session-busy`: another command runs (`same-session: reject`).
    #[error("{0}")]
    Busy(String),
    /// 409 `turn-busy`: another client's turn (`POST /v1/turns`) is open.
    #[error("{0}")]
    TurnBusy(String),
    /// 409 `turn-ended`: the turn the request names is not open any more.
    #[error("{0}")]
    TurnEnded(String),
    /// 409 `step-incomplete`: the step started and never completed; it is not run again.
    #[error("{0}")]
    StepIncomplete(String),
    /// 409 `read-only`: a Persistent Dir that is not written back.
    #[error("{0}")]
    NotCommitted(String),
    /// 409 `turn-escalated`: the turn runs on Tier-1, whose copy of the workspace the worker's
    /// files are not.
    #[error("this turn runs on Tier-1, whose copy of the workspace the worker's files are not: end the turn (POST /v1/turns/end), which merges its changes back, and try again")]
    TurnEscalated,
    /// 413 `payload-too-large`.
    #[error("{0}")]
    TooLarge(String),
    /// 429 `uploads-busy`: as many uploads as may be spooled at once are.
    #[error("{0} uploads are being received; try again")]
    UploadsBusy(usize),
    /// 429 `too-many-requests`: the worker's one session-log read at a time stayed busy.
    #[error("{0}")]
    LogReadsBusy(String),
    /// 500 `io-failed`: the filesystem failed the worker.
    #[error("{0}")]
    Io(String),
    /// 500 `internal`: nothing else fits (a task that neither finished nor was cancelled).
    #[error("{0}")]
    Internal(String),
    /// 503 `not-ready`: the worker cannot run commands (its sandbox is not usable).
    #[error("{0}")]
    NotReady(String),
    /// 503 `shutting-down`.
    #[error("{0}")]
    ShuttingDown(String),
    /// 503 `session-log-unavailable`: the session log did not take what must be recorded first.
    #[error("{0}")]
    LogDown(String),
    /// 503 `worker-broken`: a broken invariant (see [`Broken`]).
    #[error("{}", .0.reason())]
    Broken(Broken),
}

impl WorkerError {
    /// The status and stable code the API answers this error with: the one place they are
    /// chosen.
    pub fn status_and_code(&self) -> (StatusCode, &'static str) {
        match self {
            WorkerError::BadRequest(_) => (StatusCode::BAD_REQUEST, code::BAD_REQUEST),
            WorkerError::BadPath(_) => (StatusCode::BAD_REQUEST, code::BAD_PATH),
            WorkerError::NotAFile(_) => (StatusCode::BAD_REQUEST, code::NOT_A_FILE),
            WorkerError::KindConflict(_) => (StatusCode::CONFLICT, code::NOT_A_FILE),
            WorkerError::BadArchive(_) => (StatusCode::BAD_REQUEST, code::BAD_ARCHIVE),
            WorkerError::ReadOnly(_) => (StatusCode::FORBIDDEN, code::READ_ONLY),
            WorkerError::NotFound(_) => (StatusCode::NOT_FOUND, code::NOT_FOUND),
            WorkerError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, code::BODY_TIMEOUT),
            WorkerError::Busy(_) => (StatusCode::CONFLICT, code::SESSION_BUSY),
            WorkerError::TurnBusy(_) => (StatusCode::CONFLICT, code::TURN_BUSY),
            WorkerError::TurnEnded(_) => (StatusCode::CONFLICT, code::TURN_ENDED),
            WorkerError::StepIncomplete(_) => (StatusCode::CONFLICT, code::STEP_INCOMPLETE),
            WorkerError::NotCommitted(_) => (StatusCode::CONFLICT, code::READ_ONLY),
            WorkerError::TurnEscalated => (StatusCode::CONFLICT, code::TURN_ESCALATED),
            WorkerError::TooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, code::PAYLOAD_TOO_LARGE),
            WorkerError::UploadsBusy(_) => (StatusCode::TOO_MANY_REQUESTS, code::UPLOADS_BUSY),
            WorkerError::LogReadsBusy(_) => (
                StatusCode::TOO_MANY_REQUESTS,
                kube_harness_service_kit::error::code::TOO_MANY_REQUESTS,
            ),
            WorkerError::Io(_) => (StatusCode::INTERNAL_SERVER_ERROR, code::IO_FAILED),
            WorkerError::Internal(_) => (StatusCode::INTERNAL_SERVER_ERROR, "internal"),
            WorkerError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, code::NOT_READY),
            WorkerError::ShuttingDown(_) => (StatusCode::SERVICE_UNAVAILABLE, code::SHUTTING_DOWN),
            WorkerError::LogDown(_) => (
                StatusCode::SERVICE_UNAVAILABLE,
                code::SESSION_LOG_UNAVAILABLE,
            ),
            WorkerError::Broken(_) => (StatusCode::SERVICE_UNAVAILABLE, code::WORKER_BROKEN),
        }
    }
}

impl From<WorkerError> for Refusal {
    fn from(e: WorkerError) -> Self {
        let (status, code) = e.status_and_code();
        Refusal::new(status, code, e.to_string())
    }
}

impl IntoResponse for WorkerError {
    fn into_response(self) -> Response {
        Refusal::from(self).into_response()
    }
}

/// Why the worker takes no commands: `/readyz` answers 503 with it (`worker-broken` for
/// [`NotReady::Broken`], `not-ready` otherwise).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NotReady {
    #[error("shutting down")]
    ShuttingDown,
    #[error("{}", .0.reason())]
    Broken(Broken),
    /// The Tier-0 sandbox could not be prepared at start-up (a restart would not help).
    #[error("{0}")]
    Sandbox(String),
    /// Commands would run, but their file events would be missing.
    #[error(transparent)]
    Tracking(#[from] kube_harness_runtime::TrackingFailed),
}

impl From<NotReady> for WorkerError {
    /// What `/readyz` answers.
    fn from(why: NotReady) -> Self {
        match why {
            NotReady::Broken(broken) => WorkerError::Broken(broken),
            other => WorkerError::NotReady(other.to_string()),
        }
    }
}

/// Why a worker could not be built.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("session log client: {0}")]
    SessionLog(#[source] kube_harness_session_log_client::ClientError),
}

/// A broken internal invariant: why the worker takes no commands although its sandbox is fine.
/// `/readyz` answers 503 with the reason, exec 503 `worker-broken` with it (never a run of 500s).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Broken {
    /// A panic inside the runtime left the open turn in an unknown state. Commands are refused
    /// until the turn is ended (`POST /v1/turns/end`), which disposes it (its Tier-1 pod is
    /// merged back and deleted as usual); then the worker takes commands again with a new turn.
    /// Nothing else of the worker is shared with the turn, so that recovery is safe.
    Turn(String),
    /// Nothing in the process can repair it (ending the turn panicked too, or a request panicked
    /// outside the runtime, where what it held is unknown): `/healthz` fails as well, so the
    /// kubelet restarts the container.
    Worker(String),
}

impl Broken {
    /// What the worker answers: the cause and what to do about it.
    pub fn reason(&self) -> String {
        match self {
            Broken::Turn(why) => format!(
                "{why}; the open turn is quarantined and no command runs until it is ended (POST /v1/turns/end)"
            ),
            Broken::Worker(why) => {
                format!("{why}; the worker is broken and must be restarted")
            }
        }
    }

    /// 503 `worker-broken` with the reason.
    pub fn refusal(&self) -> Refusal {
        WorkerError::Broken(self.clone()).into()
    }
}

/// The text of a caught panic's payload.
pub fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_string()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "a panic without a message".to_string()
    }
}
