//! One JSON error shape for every service: `{"error": {"code": "...", "message": "..."}}`
//! ([`ErrorBody`]; the table of codes is in `docs/worker-api.md#errors`).
//!
//! `code` is a stable machine-readable kebab-case string (clients branch on it); `message` is
//! for humans. Server-side failures (5xx) are logged here, so handlers can just return them.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

pub use kube_harness_protocol::error::{is_kebab_case, ErrorBody, ErrorDetail};

/// The codes the kit itself answers with (each service adds its own).
pub mod code {
    /// 401: no valid credentials; the same for a missing and a wrong token.
    pub const UNAUTHORIZED: &str = "unauthorized";
    /// 413: the body or a field over a documented limit.
    pub const PAYLOAD_TOO_LARGE: &str = "payload-too-large";
    /// 408: a request body that did not keep its pace (`ConnectionLimits::body`).
    pub const BODY_TIMEOUT: &str = "body-timeout";
    /// 429: a client at its bound of requests in flight, or past its request rate.
    pub const TOO_MANY_REQUESTS: &str = "too-many-requests";
    /// 429: a source address holding its share of the connections.
    pub const TOO_MANY_CONNECTIONS: &str = "too-many-connections";
    /// 503: the health check failed.
    pub const UNHEALTHY: &str = "unhealthy";
    /// 500: the metrics could not be encoded.
    pub const METRICS_ENCODING: &str = "metrics-encoding";
}

/// An error answered to an HTTP client.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{status} {code}: {message}")]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        debug_assert!(is_kebab_case(code), "error code {code:?} is not kebab-case");
        Self {
            status,
            code,
            message: message.into(),
        }
    }
    /// 400: the request itself is wrong (malformed JSON, missing field, bad parameter).
    pub fn bad_request(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, message)
    }
    /// 401: no valid credentials; deliberately says nothing about why.
    pub fn unauthorized(message: impl Into<String>) -> Self {
        Self::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, message)
    }
    /// 403: valid credentials that do not reach the addressed thing.
    pub fn forbidden(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, message)
    }
    /// 404: the addressed thing does not exist.
    pub fn not_found(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code, message)
    }
    /// 409: the request conflicts with what is stored (e.g. an idempotency key reused).
    pub fn conflict(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::CONFLICT, code, message)
    }
    /// 408 `body-timeout`: the request body did not keep its pace; nothing was done.
    pub fn body_timeout(message: impl Into<String>) -> Self {
        Self::new(StatusCode::REQUEST_TIMEOUT, code::BODY_TIMEOUT, message)
    }
    /// 413: the body or a field exceeds a documented limit.
    pub fn too_large(message: impl Into<String>) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            message,
        )
    }
    /// 500: the server failed; the request may be retried.
    pub fn internal(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code, message)
    }
    /// 503: a dependency (disk, database) is unavailable; retry later.
    pub fn unavailable(code: &'static str, message: impl Into<String>) -> Self {
        Self::new(StatusCode::SERVICE_UNAVAILABLE, code, message)
    }
    /// The body this error is answered with.
    pub fn body(&self) -> ErrorBody {
        ErrorBody::new(self.code, self.message.clone())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(code = self.code, status = %self.status, "{}", self.message);
        }
        let body = ErrorBody::new(self.code, self.message);
        (self.status, Json(body)).into_response()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_kebab_case() {
        for good in [
            "unauthorized",
            "payload-too-large",
            "step-incomplete",
            "v1-gone",
        ] {
            assert!(is_kebab_case(good), "{good}");
        }
        for bad in ["", "payload_too_large", "Bad", "a--b", "-a", "a-", "a b"] {
            assert!(!is_kebab_case(bad), "{bad}");
        }
    }

    #[test]
    fn an_api_error_is_the_one_body() {
        let e = ApiError::too_large("over");
        let json = serde_json::to_value(e.body()).unwrap();
        assert_eq!(
            json,
            serde_json::json!({"error": {"code": "payload-too-large", "message": "over"}})
        );
        let back: ErrorBody = serde_json::from_value(json).unwrap();
        assert_eq!(back.error.code, code::PAYLOAD_TOO_LARGE);
    }
}
