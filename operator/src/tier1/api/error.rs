//! The tier API's error answer: [`ErrorBody`], the `{"error": {"code", "message"}}` every HTTP
//! service of the project answers with (docs/worker-api.md#errors), with `Retry-After` when the
//! caller may try again.

use crate::tier1::auth::Refused;
use crate::tier1::open::OpenError;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use kube_harness_protocol::error::ErrorBody;
use std::time::Duration;

/// The stable codes of the tier API's errors (docs/worker-api.md#errors): clients branch on these, the
/// message is for people.
pub mod code {
    /// 401 `unauthorized` (no bearer, a wrong one, or an unknown session: the same answer for
    /// each), 408 `body-timeout` and 413 `payload-too-large`: the kit's codes.
    pub use kube_harness_service_kit::error::code::{
        BODY_TIMEOUT, PAYLOAD_TOO_LARGE, UNAUTHORIZED,
    };
    /// 429: this client failed too many token checks; `Retry-After` says when to try again.
    pub const TOO_MANY_FAILED_CHECKS: &str = "too-many-failed-checks";
    /// 429: the session opened too many new turns; `Retry-After` says when to try again.
    pub const TOO_MANY_OPENS: &str = "too-many-opens";
    /// 400: a namespace, session or turn in the path or body that is not a valid name.
    pub const INVALID_NAME: &str = "invalid-name";
    /// 400: the open request's body is not the request.
    pub const BAD_REQUEST: &str = "bad-request";
    /// 404: no such (live) HarnessSession.
    pub const SESSION_NOT_FOUND: &str = "session-not-found";
    /// 404: no sandbox for the turn (yet).
    pub const SANDBOX_NOT_FOUND: &str = "sandbox-not-found";
    /// 409: the session has no escalation tier.
    pub const NO_ESCALATION_TIER: &str = "no-escalation-tier";
    /// 409: the escalation tier is missing, not granted to the namespace, or below level 1.
    pub const TIER_NOT_USABLE: &str = "tier-not-usable";
    /// 409: the turn ended; a new turn needs a new turn id.
    pub const TURN_ENDED: &str = "turn-ended";
    /// 503: the Kubernetes API failed or a claim's outcome is uncertain; try again.
    pub const UNAVAILABLE: &str = "unavailable";
    /// 503: this replica is shutting down.
    pub const SHUTTING_DOWN: &str = "shutting-down";
}

/// An error answer: status, stable code, message, and `Retry-After` (whole seconds, rounded up)
/// when the caller may try again later.
#[derive(Debug)]
pub struct ApiError {
    status: StatusCode,
    code: &'static str,
    message: String,
    retry: Option<Duration>,
}

impl ApiError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: String) -> Self {
        ApiError {
            status,
            code,
            message,
            retry: None,
        }
    }

    /// An answer the caller may try again after `wait` (`Retry-After`).
    pub(crate) fn retry_after(
        status: StatusCode,
        code: &'static str,
        message: String,
        wait: Duration,
    ) -> Self {
        ApiError {
            retry: Some(wait),
            ..ApiError::new(status, code, message)
        }
    }

    pub fn status(&self) -> StatusCode {
        self.status
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    /// How long the caller is told to wait, when it is.
    pub fn retry(&self) -> Option<Duration> {
        self.retry
    }

    /// 401: a missing Secret or session answers the same, so a name reveals nothing.
    pub(crate) fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            code::UNAUTHORIZED,
            "bad or missing bearer token".into(),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody::new(self.code, self.message);
        let mut response = (self.status, Json(body)).into_response();
        if let Some(wait) = self.retry {
            let seconds = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.max(1).into());
        }
        response
    }
}

impl From<kube::Error> for ApiError {
    fn from(e: kube::Error) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::UNAVAILABLE,
            format!("Kubernetes API: {e}"),
        )
    }
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Limited(wait) => ApiError::retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                code::TOO_MANY_FAILED_CHECKS,
                format!(
                    "too many failed token checks from this client; try again in {} ms",
                    wait.as_millis()
                ),
                wait,
            ),
            Refused::Unauthorized => ApiError::unauthorized(),
            Refused::Lookup(e) => e.into(),
            Refused::ShuttingDown => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::SHUTTING_DOWN,
                "shutting down".into(),
            ),
        }
    }
}

impl From<OpenError> for ApiError {
    fn from(e: OpenError) -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::UNAVAILABLE,
            e.to_string(),
        )
    }
}

pub(crate) type Result<T> = std::result::Result<T, ApiError>;
