//! An error answered to a client: status, stable code (`model::code`), message; as JSON
//! `{"error": {"code", "message"}}`. A leaf every part of the API answers with.

use super::model::ErrorBody;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl Refusal {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        Refusal {
            status,
            code,
            message: message.into(),
        }
    }
}

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::warn!(code = self.code, "{}", self.message);
        }
        let body = ErrorBody::new(self.code, self.message);
        (self.status, Json(body)).into_response()
    }
}
