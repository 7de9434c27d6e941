//! What every tier API request checks before it acts: the names in its path, the bearer, the
//! open request's body, the session and its escalation tier as read.

use super::error::{code, ApiError, Result};
use crate::context::Context;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::http::request::Parts;
use axum::http::StatusCode;
use kube::Api;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_service_kit::body::{read_request, BodyError, BodyHead};
use serde::Deserialize;
use std::net::SocketAddr;

/// Names that end up in label values: a DNS label (63 characters at most).
pub(super) fn check_name(what: &str, v: &str) -> Result<()> {
    let ok = !v.is_empty()
        && v.len() <= 63
        && v.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && !v.starts_with(['-', '.'])
        && !v.ends_with(['-', '.']);
    if ok {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_NAME,
            format!("{what} {v:?} is not a valid name"),
        ))
    }
}

pub(super) fn check_turn(turn: &str) -> Result<()> {
    if turn.is_empty() || turn.len() > 512 || turn.chars().any(char::is_control) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            code::INVALID_NAME,
            "turn must be 1 to 512 characters without control characters".into(),
        ));
    }
    Ok(())
}

/// The bearer must equal the session's worker token, checked on the request's head before any
/// body is read ([`crate::tier1::auth`]). A missing Secret is 401 too: an unknown session reveals
/// nothing.
pub(super) async fn authorize(ctx: &Context, ns: &str, session: &str, parts: &Parts) -> Result<()> {
    check_name("namespace", ns)?;
    check_name("session", session)?;
    let bearer = parts
        .headers
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    let peer = parts
        .extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0.ip());
    Ok(ctx
        .tier_auth
        .check(&ctx.client, peer, ns, session, bearer)
        .await?)
}

/// The largest open request: a turn id (at most 512 characters) and a size, as JSON.
const MAX_OPEN_BODY: usize = 4096;

pub(super) async fn read_session(
    ctx: &Context,
    ns: &str,
    session: &str,
) -> std::result::Result<Option<HarnessSession>, kube::Error> {
    Api::<HarnessSession>::namespaced(ctx.client.clone(), ns)
        .get_opt(session)
        .await
}

/// The session as read: 404 when it is gone or going.
pub(super) fn live_session(
    read: Option<HarnessSession>,
    ns: &str,
    session: &str,
) -> Result<HarnessSession> {
    match read {
        Some(s) if s.metadata.deletion_timestamp.is_none() => Ok(s),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            code::SESSION_NOT_FOUND,
            format!("no HarnessSession {ns}/{session}"),
        )),
    }
}

/// The name of the session's escalation tier: 409 without one.
pub(super) fn escalation_tier(s: &HarnessSession, ns: &str, session: &str) -> Result<String> {
    s.spec
        .escalation
        .as_ref()
        .and_then(|e| e.tier.clone())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                code::NO_ESCALATION_TIER,
                format!("HarnessSession {ns}/{session} has no escalation tier"),
            )
        })
}

/// The escalation tier as read and granted to the session's namespace (`crate::grant`): 409 when
/// it is missing or not granted (the same words either way) or not level 1 or more.
pub(super) fn escalation_level(
    read: Option<SandboxTier>,
    name: &str,
    ns: &str,
) -> Result<SandboxTier> {
    let conflict = |m: String| ApiError::new(StatusCode::CONFLICT, code::TIER_NOT_USABLE, m);
    match read {
        Some(t) if t.spec.level >= 1 => Ok(t),
        Some(t) => Err(conflict(format!(
            "SandboxTier {name} has level {}; escalation needs level 1 or more",
            t.spec.level
        ))),
        None => Err(conflict(crate::grant::not_usable(name, ns))),
    }
}

/// 409: the turn ended (its record is a tombstone, or an earlier same-named session's).
pub(super) fn ended_turn(ns: &str, session: &str, turn: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        code::TURN_ENDED,
        format!(
            "turn {turn:?} of {ns}/{session} has ended (or is an earlier session's of that name); a new turn needs a new turn id"
        ),
    )
}

/// Unknown fields are ignored, so a newer worker can send more.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenRequest {
    pub(super) turn: String,
    #[serde(default)]
    pub(super) workspace_bytes: u64,
}

/// The open request's body, read only after the token was checked, at the pace every body of
/// the service keeps (service-kit's `BodyPace`): 408 when it comes too slowly, 413 over
/// [`MAX_OPEN_BODY`], 400 when it is not the request.
pub(super) async fn open_request(parts: &Parts, body: Body) -> Result<OpenRequest> {
    let head = BodyHead::of(&parts.headers, &parts.extensions);
    let bytes = read_request(&head, body, MAX_OPEN_BODY)
        .await
        .map_err(|e| {
            let (status, code) = match e {
                BodyError::TooLarge { .. } => {
                    (StatusCode::PAYLOAD_TOO_LARGE, code::PAYLOAD_TOO_LARGE)
                }
                BodyError::TooSlow { .. } => (StatusCode::REQUEST_TIMEOUT, code::BODY_TIMEOUT),
                _ => (StatusCode::BAD_REQUEST, code::BAD_REQUEST),
            };
            ApiError::new(status, code, e.to_string())
        })?;
    serde_json::from_slice(&bytes).map_err(|e| {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            code::BAD_REQUEST,
            format!("the open request: {e}"),
        )
    })
}
