//! The answer about a turn's pod: its Sandbox view (with its token once Ready), the session's
//! status and Events that go with it, and the answers for a recorded pod not read or gone.

use super::error::Result;
use crate::context::Context;
use crate::labels;
use crate::tier1::{open, pod, report, state};
use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_protocol::tier1::{Phase, Sandbox};
use std::sync::Arc;
use std::time::Duration;

/// What an answer may reuse instead of asking the API server again: the pod's token and the
/// session, read beside the claim, and the open's Event, published with the answer's.
#[derive(Default)]
pub(super) struct Known {
    pub(super) token: Option<Option<String>>,
    pub(super) session: Option<std::result::Result<Option<HarnessSession>, kube::Error>>,
    pub(super) opened: Option<report::Announcement>,
}

/// The Sandbox of a turn whose record names `holder`, a pod this request has not read: read now.
/// Not there yet (the turn's ordinary pod, recorded by an open still creating it) is Pending; any
/// other pod that is gone, or no longer serves the turn, is Failed.
pub(super) async fn recorded_pod(
    ctx: &Arc<Context>,
    ns: &str,
    session: (&str, Option<&str>),
    turn: &str,
    holder: &str,
) -> Result<Json<Sandbox>> {
    let (session, uid) = session;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match pods.get_opt(holder).await? {
        // The pod serves this turn of this session object: its turn, session and session uid.
        Some(p) if crate::tier1::record::pod_serves(&p, session, uid, turn) => {
            answer(ctx, ns, session, &p, turn, Known::default()).await
        }
        None if holder == pod::ordinary_name(ns, session, turn) => Ok(Json(Sandbox {
            turn: turn.into(),
            pod: Some(holder.into()),
            phase: Phase::Pending,
            ..Sandbox::default()
        })),
        _ => Ok(Json(gone(turn, holder))),
    }
}

/// A turn whose recorded pod is gone.
fn gone(turn: &str, holder: &str) -> Sandbox {
    Sandbox {
        turn: turn.into(),
        pod: Some(holder.into()),
        phase: Phase::Failed,
        reason: Some("PodDeleted".into()),
        message: Some(format!(
            "the turn's Tier-1 pod {holder} is gone (deleted, or its turn ended)"
        )),
        ..Sandbox::default()
    }
}

/// The Sandbox of `pod` (with its token once Ready), and what it means for the session. Its
/// Events (`known.opened`, then the status's) are published after the answer, in that order.
pub(super) async fn answer(
    ctx: &Arc<Context>,
    ns: &str,
    session: &str,
    pod: &Pod,
    turn: &str,
    known: Known,
) -> Result<Json<Sandbox>> {
    let started = std::time::Instant::now();
    let step = |what: &str| {
        tracing::debug!(
            ns,
            session,
            turn,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "tier-1 answer: {what}"
        )
    };
    let Known {
        token,
        session: session_read,
        opened,
    } = known;
    // Only a pod the operator made and proved (crate::origin) gets its endpoint and token
    // handed out (and so the workspace): one planted or made again under the turn's pod's name
    // is deleted, and the turn is Pending; the worker's next open makes the turn's ordinary pod
    // again, or finds the recorded pod gone.
    let settled;
    let pod = match proven(ctx, pod).await? {
        Some(p) => {
            settled = p;
            &settled
        }
        None => pod,
    };
    if !ctx.origin.proves(pod) {
        crate::origin::guard::refuse(ctx, pod, "a Tier-1 pod").await?;
        let mut view = state::sandbox(pod, turn, None);
        view.phase = Phase::Pending;
        view.endpoint = None;
        view.token = None;
        view.reason = Some(reasons::POD_ORIGIN_UNPROVEN.into());
        view.message = Some(format!(
            "Tier-1 pod {} carried no proof that the operator made it: deleted",
            pod.name_any()
        ));
        return Ok(Json(view));
    }
    let mut view = state::sandbox(pod, turn, None);
    if view.phase == Phase::Ready {
        let token = match token {
            Some(token) => token,
            None => match open::token(ctx, &pod.namespace().unwrap_or_default(), view.pod_name())
                .await
            {
                Ok(token) => token,
                Err(e) => {
                    // The pod was opened all the same: its Event goes out.
                    publish_after(ctx, opened.into_iter().collect());
                    return Err(e.into());
                }
            },
        };
        step("pod token read");
        match token {
            Some(token) => {
                view.token = Some(token);
                observe_ready(ctx, pod, &view);
            }
            // Ready without its Secret cannot serve: the worker keeps polling until the sweep
            // or a DELETE ends it.
            None => {
                view = state::sandbox(pod, turn, None);
                view.phase = Phase::Pending;
                view.endpoint = None;
            }
        }
    }
    let tier = pod.labels().get(labels::TIER).cloned().unwrap_or_default();
    let level = pod
        .annotations()
        .get(labels::TIER_LEVEL)
        .and_then(|l| l.parse().ok())
        .unwrap_or(1);
    let mut announce: Vec<report::Announcement> = opened.into_iter().collect();
    if let Some(update) = report::for_sandbox(&view, &tier, level) {
        announce.extend(report::write(ctx, ns, session, &update, None, session_read).await);
        step("session status reported");
    }
    publish_after(ctx, announce);
    Ok(Json(view))
}

/// How young an unproven pod may be and still be waited for: the open that creates a turn's
/// ordinary pod writes its proof just after the create (the proof covers the pod's uid, which
/// exists only then), so a racing open or a poll of the same turn can read the pod in between.
const PROOF_GRACE: Duration = Duration::from_secs(10);
/// How long such a pod is waited for, in re-reads [`PROOF_POLL`] apart.
const PROOF_WAIT: Duration = Duration::from_secs(2);
const PROOF_POLL: Duration = Duration::from_millis(100);

/// `pod` as it reads once proven: at once when it carries the proof; when it does not and was
/// created less than [`PROOF_GRACE`] ago, the same pod (its uid) read again until the proof
/// arrives, for at most [`PROOF_WAIT`]. `None`: unproven (a planted pod never gets a proof, and
/// is refused after the wait), gone, or made again.
async fn proven(ctx: &Context, pod: &Pod) -> std::result::Result<Option<Pod>, kube::Error> {
    if ctx.origin.proves(pod) {
        return Ok(Some(pod.clone()));
    }
    let young = pod.metadata.creation_timestamp.as_ref().is_some_and(|t| {
        k8s_openapi::jiff::Timestamp::now()
            .duration_since(t.0)
            .as_secs_f64()
            < PROOF_GRACE.as_secs_f64()
    });
    if !young {
        return Ok(None);
    }
    let pods: Api<Pod> = open::in_namespace_of(ctx, pod);
    let deadline = tokio::time::Instant::now() + PROOF_WAIT;
    while tokio::time::Instant::now() < deadline {
        tokio::time::sleep(PROOF_POLL).await;
        match pods.get_opt(&pod.name_any()).await? {
            Some(again) if again.metadata.uid == pod.metadata.uid => {
                if ctx.origin.proves(&again) {
                    return Ok(Some(again));
                }
            }
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// The answer to an open whose pod (or its Secret) the namespace's admission refused: a quota
/// (`QuotaExceeded`), a LimitRange or Pod Security (`AdmissionRefused`), with the API server's
/// message. Failed at once, so the worker ends the turn and the command exits 126 with that
/// message instead of waiting; the session's `Escalated` condition and a Warning Event say it.
pub(super) async fn refused_answer(
    ctx: &Arc<Context>,
    ns: &str,
    session: &str,
    tier: &SandboxTier,
    refused: Sandbox,
) -> Json<Sandbox> {
    tracing::info!(
        namespace = ns,
        session,
        turn = %refused.turn,
        reason = refused.reason.as_deref().unwrap_or_default(),
        "tier-1 pod refused by the namespace's admission"
    );
    if let Some(update) = report::for_sandbox(&refused, &tier.name_any(), tier.spec.level) {
        let announced = report::write(ctx, ns, session, &update, None, None).await;
        publish_after(ctx, announced.into_iter().collect());
    }
    Json(refused)
}

/// Publishes `events` in order, off the answer's path.
fn publish_after(ctx: &Arc<Context>, events: Vec<report::Announcement>) {
    if events.is_empty() {
        return;
    }
    let ctx = ctx.clone();
    tokio::spawn(async move {
        for event in events {
            event.publish(&ctx).await;
        }
    });
}

/// The escalation latency of a sandbox answered Ready for the first time (see
/// [`crate::metrics::Metrics::escalation_ready`]): from this replica's open, else, for an
/// ordinary pod opened by another replica, from the pod's creation.
fn observe_ready(ctx: &Context, pod: &Pod, view: &Sandbox) {
    let Some(uid) = pod.metadata.uid.as_deref() else {
        return;
    };
    let created_ago = match view.source {
        Some(kube_harness_protocol::tier1::Source::Ordinary) => {
            pod.metadata.creation_timestamp.as_ref().map(|t| {
                k8s_openapi::jiff::Timestamp::now()
                    .duration_since(t.0)
                    .as_secs_f64()
            })
        }
        _ => None,
    };
    ctx.metrics
        .escalation_ready(uid, view.source_label(), created_ago);
}
