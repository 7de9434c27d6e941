//! Request extractors whose rejections are the services' JSON errors (axum's defaults answer in
//! plain text), so a client always gets `{"error": {"code", "message"}}` with a 4xx.

use axum::extract::rejection::PathRejection;
use axum::extract::{FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use kube_harness_service_kit::body::{read_request, BodyError, BodyHead};
use kube_harness_service_kit::ApiError;
use serde::de::DeserializeOwned;

/// A JSON request body, read by the kit's paced reader (`ConnectionLimits::body`) within
/// [`super::MAX_BODY_BYTES`]: 408 `body-timeout` for a body that does not keep its pace (issue 30:
/// axum's extractor waited for a dripping body forever), 413 `too-large` past the limit. Bearer
/// auth is a route layer, so it has answered on the head before this reads a byte.
pub struct Body<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, _state: &S) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        if !is_json(&parts.headers) {
            return Err(ApiError::new(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                "Expected request with `Content-Type: application/json`",
            ));
        }
        let head = BodyHead::of(&parts.headers, &parts.extensions);
        let bytes = read_request(&head, body, super::MAX_BODY_BYTES)
            .await
            .map_err(|e| match e {
                BodyError::TooLarge { limit } => ApiError::new(
                    StatusCode::PAYLOAD_TOO_LARGE,
                    "too-large",
                    format!("request body over the limit of {limit} bytes"),
                ),
                BodyError::TooSlow { .. } => ApiError::new(
                    StatusCode::REQUEST_TIMEOUT,
                    "body-timeout",
                    format!("{e}; nothing was done"),
                ),
                other => ApiError::bad_request("invalid-body", other.to_string()),
            })?;
        let value = serde_json::from_slice(&bytes).map_err(|e| match e.classify() {
            serde_json::error::Category::Data => {
                ApiError::bad_request("invalid-input", format!("invalid request body: {e}"))
            }
            _ => ApiError::bad_request("malformed-json", format!("body is not valid JSON: {e}")),
        })?;
        Ok(Body(value))
    }
}

/// `application/json` or `application/*+json`, as axum's `Json` extractor requires.
fn is_json(headers: &axum::http::HeaderMap) -> bool {
    let Some(mime) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
    else {
        return false;
    };
    let mime = mime.trim().to_ascii_lowercase();
    mime == "application/json" || (mime.starts_with("application/") && mime.ends_with("+json"))
}

/// Path parameters.
pub struct Params<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Params<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(value)) => Ok(Params(value)),
            Err(rejection) => Err(path_rejection(rejection)),
        }
    }
}

fn path_rejection(rejection: PathRejection) -> ApiError {
    ApiError::bad_request("invalid-path", rejection.body_text())
}

/// Query-string parameters.
pub struct QueryParams<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for QueryParams<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match axum::extract::Query::<T>::from_request_parts(parts, state).await {
            Ok(axum::extract::Query(value)) => Ok(QueryParams(value)),
            Err(rejection) => Err(ApiError::bad_request(
                "invalid-query",
                rejection.body_text(),
            )),
        }
    }
}
