//! `GET` and `DELETE .../sandboxes/{turn}`: show a turn's sandbox, end a turn.

use super::answer::{answer, Known};
use super::checks::{authorize, check_turn, ended_turn, read_session};
use super::error::{code, ApiError, Result};
use crate::context::Context;
use crate::tier1::report::{self, Update};
use crate::tier1::{end, open, record};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::Json;
use kube::ResourceExt;
use kube_harness_crds::condition::reasons;
use kube_harness_protocol::tier1::Sandbox;
use std::sync::Arc;

/// The turn's Sandbox: its pod of this session object (its uid); 409 when the turn ended.
pub(super) async fn show(
    State(ctx): State<Arc<Context>>,
    Path((ns, session, turn)): Path<(String, String, String)>,
    request: Request,
) -> Result<Json<Sandbox>> {
    authorize(&ctx, &ns, &session, &request.into_parts().0).await?;
    check_turn(&turn)?;
    let (session_read, pods, recorded) = tokio::join!(
        read_session(&ctx, &ns, &session),
        open::session_pods(&ctx, &ns, &session),
        record::get(&ctx, &ns, &session, &turn)
    );
    let Some(session_obj) = session_read? else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            code::SESSION_NOT_FOUND,
            format!("no HarnessSession {ns}/{session}"),
        ));
    };
    let uid = session_obj.metadata.uid.as_deref();
    let pods = open::of_turn(&open::of_session_object(pods?, uid), &turn);
    let recorded = match record::said(&ctx, recorded?.as_ref(), uid) {
        record::Said::Ended => return Err(ended_turn(&ns, &session, &turn)),
        record::Said::Held(holder) => Some(holder),
        record::Said::Nothing => None,
    };
    match open::chosen(&pods, recorded.as_deref()) {
        Some(pod) => answer(&ctx, &ns, &session, pod, &turn, Known::default()).await,
        // 404 also while the recorded pod is not there yet: the worker opens again, which creates
        // a recorded ordinary pod whose open stopped half-way.
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            code::SANDBOX_NOT_FOUND,
            format!("no sandbox for turn {turn:?} of {ns}/{session}"),
        )),
    }
}

/// Ends the turn (see [`end::turn`]): its record becomes a tombstone, then its pod is kept idle
/// for the session's next turn when its tier says so or deleted. Only this session object's (its
/// uid's) turn: one of an earlier same-named session, or of a session gone, is left to the
/// sweep. 204, also when already ended or gone.
pub(super) async fn end(
    State(ctx): State<Arc<Context>>,
    Path((ns, session, turn)): Path<(String, String, String)>,
    request: Request,
) -> Result<StatusCode> {
    authorize(&ctx, &ns, &session, &request.into_parts().0).await?;
    check_turn(&turn)?;
    let (session_read, recorded) = tokio::join!(
        read_session(&ctx, &ns, &session),
        record::get(&ctx, &ns, &session, &turn)
    );
    let Some(session_obj) = session_read? else {
        return Ok(StatusCode::NO_CONTENT);
    };
    let uid = session_obj.metadata.uid.as_deref();
    let recorded = recorded?;
    if recorded
        .as_ref()
        .is_some_and(|r| !record::belongs(r.labels(), uid))
    {
        return Ok(StatusCode::NO_CONTENT);
    }
    // Ending a turn that has no record writes one (ended): as an open does, it spends the
    // session's allowance, so a token cannot mint records without bound.
    if recorded.is_none() {
        super::open_turn::spend_open(&ctx, &ns, &session)?;
    }
    let this_session = end::Session {
        namespace: &ns,
        name: &session,
        uid,
    };
    let ended = end::turn(&ctx, &this_session, &turn).await?;
    if let Some(pod) = ended.pod {
        let message = match &ended.kept {
            Some((pod, idle)) => format!(
                "turn {turn} ended; Tier-1 pod {pod} is kept for the session's next turn for {idle}s"
            ),
            None => format!("turn {turn} ended; Tier-1 pod {pod} was deleted"),
        };
        let update = Update {
            escalated: false,
            reason: reasons::TURN_ENDED,
            message,
            current_tier: 0,
            failure: None,
        };
        report::set(&ctx, &ns, &session, &update, Some(&[reasons::TIER1_READY])).await;
    }
    Ok(StatusCode::NO_CONTENT)
}
