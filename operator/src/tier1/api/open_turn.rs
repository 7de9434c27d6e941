//! `POST .../sandboxes`: open (or find) a turn's Tier-1 sandbox.

use super::answer::{answer, recorded_pod, refused_answer, Known};
use super::checks::{
    authorize, check_turn, ended_turn, escalation_level, escalation_tier, live_session,
    open_request, read_session,
};
use super::error::{code, ApiError, Result};
use crate::context::Context;
use crate::kube_util::admission_refusal;
use crate::tier1::open::{self, Claim, Exactly, OpenError, Take};
use crate::tier1::pod::{self, Serving};
use crate::tier1::record::{self, Recorded};
use crate::tier1::{end, limit, report, state};
use axum::extract::{Path, Request, State};
use axum::http::StatusCode;
use axum::Json;
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kube_harness_crds::SandboxTier;
use kube_harness_protocol::tier1::{Phase, Sandbox};
use std::sync::Arc;

/// Opens (or finds) the turn's sandbox. Nothing is read before the bearer is checked; then the
/// API requests that do not depend on each other go together, in six rounds on a warm claim
/// (docs/tier1.md): the token Secret; the session, its Tier-1 pods and its turns' records; the
/// tier, the worker pod and the pool's pods; the claim patch, the pod's token and the session
/// again (for its status); the turn's record; the status write. The Events are published after
/// the answer. Only pods and records of this session object (its uid) count. A turn that ended
/// is 409 for good; a new turn first ends the session's other serving turns (one serving turn
/// per session).
pub(super) async fn open(
    State(ctx): State<Arc<Context>>,
    Path((ns, session)): Path<(String, String)>,
    request: Request,
) -> Result<Json<Sandbox>> {
    let started = std::time::Instant::now();
    let step = |what: &str| tracing::debug!(%ns, %session, ms = started.elapsed().as_secs_f64() * 1e3, "tier-1 open: {what}");
    let (parts, body) = request.into_parts();
    authorize(&ctx, &ns, &session, &parts).await?;
    step("authorized");
    let req = open_request(&parts, body).await?;
    check_turn(&req.turn)?;
    let (session_read, session_pods, records) = tokio::join!(
        read_session(&ctx, &ns, &session),
        open::session_pods(&ctx, &ns, &session),
        record::of_turns(&ctx, &ns, &session)
    );
    let session_obj = live_session(session_read?, &ns, &session)?;
    let tier_name = escalation_tier(&session_obj, &ns, &session)?;
    step("session, its pods and its turns' records read");
    let uid = session_obj.metadata.uid.clone();
    let session_pods = open::of_session_object(session_pods?, uid.as_deref());
    let records = records?;
    let this = record::name(&ns, &session, &req.turn);
    let recorded = match record::said(
        &ctx,
        records.iter().find(|r| r.name_any() == this),
        uid.as_deref(),
    ) {
        record::Said::Ended => return Err(ended_turn(&ns, &session, &req.turn)),
        record::Said::Held(holder) => Some(holder),
        record::Said::Nothing => None,
    };
    let turn_pods = open::of_turn(&session_pods, &req.turn);
    // A new turn also needs the worker pod and, from a pooled tier, the pool's pods: asked for
    // with the tier. The pool's pods when the tier cache (the leader's) says the tier keeps a
    // pool, with the cached tier's template hash: a hint only. The tier as read decides, and the
    // pods are asked for again when the hint was missing or its template differs.
    let new_turn = turn_pods.is_empty() && recorded.is_none();
    // Only a new turn spends the session's allowance: it is what writes (a record, a pod, a
    // Secret); repeats of a turn and refusals do not.
    if new_turn {
        spend_open(&ctx, &ns, &session)?;
    }
    let hint = ctx
        .caches
        .tier(&tier_name)
        .filter(|t| new_turn && t.spec.warm_pool.size > 0);
    let workers: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let worker_name = crate::session::owned::worker_pod_name(&session_obj);
    let tiers: Api<SandboxTier> = Api::all(ctx.client.clone());
    let (tier, worker, pool) = tokio::join!(
        async {
            match crate::grant::plausible(&tier_name) {
                true => tiers.get_opt(&tier_name).await,
                false => Ok(None),
            }
        },
        async {
            match new_turn {
                true => Some(workers.get_opt(&worker_name).await),
                false => None,
            }
        },
        async {
            match &hint {
                Some(t) => Some((
                    pod::template_hash(t, &ctx.config),
                    open::pool_pods(&ctx, t, &ns).await,
                )),
                None => None,
            }
        }
    );
    let tier = crate::grant::usable(&ctx.client, &ns, tier?).await?;
    let tier = escalation_level(tier, &tier_name, &ns)?;
    step("tier read");
    let ordinary_name = pod::ordinary_name(&ns, &session, &req.turn);
    if let Some(existing) = recorded
        .as_deref()
        .and_then(|holder| open::chosen(&turn_pods, Some(holder)))
    {
        return answer(&ctx, &ns, &session, existing, &req.turn, Known::default()).await;
    }
    let mut serving = Serving {
        session_namespace: ns.clone(),
        session: session.clone(),
        session_uid: session_obj.metadata.uid.clone(),
        turn: req.turn.clone(),
        worker_uid: None,
        miss_reason: None,
        started: Some(pod::seconds_from_now(0)),
        deadline: Some(pod::seconds_from_now(u64::from(tier.spec.max_turn_seconds))),
    };
    match (&recorded, turn_pods.first()) {
        // Recorded, and not among the turn's pods as listed: the recorded ordinary pod is created
        // below (idempotent: its open may have stopped before it did, or be creating it now);
        // any other pod is read (it may have been claimed after the list was taken).
        (Some(holder), _) if *holder != ordinary_name => {
            return recorded_pod(&ctx, &ns, (&session, uid.as_deref()), &req.turn, holder).await;
        }
        (Some(_), _) => {}
        // A pod carries the turn but nothing recorded it (its open stopped between the claim and
        // the record): it is recorded now, unless a racing open recorded another.
        (None, Some(unrecorded)) => {
            return match record::record(&ctx, &serving, &tier, &unrecorded.name_any()).await? {
                Recorded::Ours => {
                    answer(&ctx, &ns, &session, unrecorded, &req.turn, Known::default()).await
                }
                Recorded::Theirs(holder) => {
                    recorded_pod(&ctx, &ns, (&session, uid.as_deref()), &req.turn, &holder).await
                }
                Recorded::Ended => {
                    open::delete(&ctx, unrecorded, Exactly::Object).await?;
                    Err(ended_turn(&ns, &session, &req.turn))
                }
                Recorded::Contested => Err(contested(&ns, &session, &req.turn)),
            };
        }
        (None, None) => {}
    }
    if new_turn {
        let this_session = end::Session {
            namespace: &ns,
            name: &session,
            uid: uid.as_deref(),
        };
        end::others(&ctx, &this_session, &req.turn, &session_pods, &records).await?;
    }
    let worker = match worker {
        Some(read) => read?,
        None => workers.get_opt(&worker_name).await?,
    };
    serving.worker_uid = worker
        .as_ref()
        .and_then(crate::tier1::sweep::worker_identity);
    let mut miss = None;
    let mut known = Known::default();
    let mut chosen: Option<Pod> = None;
    let mut reused = false;
    // The session's own pod, kept from an earlier turn.
    if recorded.is_none() && tier.spec.idle_timeout_seconds > 0 {
        let kept = open::kept(
            &session_pods,
            &session_obj,
            &tier,
            &pod::template_hash(&tier, &ctx.config),
            serving.worker_uid.as_deref(),
            k8s_openapi::jiff::Timestamp::now(),
        );
        if !kept.is_empty() {
            match open::claim(&ctx, &serving, kept, Take::Kept).await {
                Ok(Claim::Claimed { pod, token }) => {
                    known.token = token;
                    reused = true;
                    chosen = Some(*pod);
                }
                Ok(Claim::Miss(_)) => {}
                Err(e @ OpenError::Uncertain { .. }) => {
                    tracing::warn!(error = %e, "refusing an escalation on an uncertain claim");
                    return Err(e.into());
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    if chosen.is_none() && recorded.is_none() && tier.spec.warm_pool.size > 0 {
        let candidates = match open::claimable(&ctx, &tier, &ns, req.workspace_bytes) {
            Ok(()) => open::candidates(match pool {
                Some((hash, listed)) if hash == pod::template_hash(&tier, &ctx.config) => listed?,
                _ => open::pool_pods(&ctx, &tier, &ns).await?,
            }),
            Err(reason) => Err(reason),
        };
        let claimed = match candidates {
            Ok(candidates) => {
                let (claimed, again) = tokio::join!(
                    open::claim(&ctx, &serving, candidates, Take::Pool),
                    read_session(&ctx, &ns, &session)
                );
                known.session = Some(again);
                claimed
            }
            Err(reason) => Ok(Claim::Miss(reason)),
        };
        match claimed {
            Ok(Claim::Claimed { pod, token }) => {
                known.token = token;
                chosen = Some(*pod);
            }
            Ok(Claim::Miss(reason)) => {
                miss = Some(reason.as_str());
                serving.miss_reason = Some(reason);
                known.session = None;
            }
            Err(e @ OpenError::Uncertain { .. }) => {
                tracing::warn!(error = %e, "refusing an escalation on an uncertain claim");
                return Err(e.into());
            }
            Err(e) => return Err(e.into()),
        }
    }
    let pod = match chosen {
        // A claimed pod is the turn's once recorded; an open that lost the record to another
        // pod, or whose turn ended meanwhile, gives its own up (deleted: nothing was bound to
        // it, and it is never handed back).
        Some(claimed) => match record::record(&ctx, &serving, &tier, &claimed.name_any()).await? {
            Recorded::Ours => claimed,
            Recorded::Theirs(holder) => {
                open::delete(&ctx, &claimed, Exactly::Object).await?;
                return recorded_pod(&ctx, &ns, (&session, uid.as_deref()), &req.turn, &holder)
                    .await;
            }
            Recorded::Ended => {
                open::delete(&ctx, &claimed, Exactly::Object).await?;
                return Err(ended_turn(&ns, &session, &req.turn));
            }
            Recorded::Contested => {
                open::delete(&ctx, &claimed, Exactly::Object).await?;
                return Err(contested(&ns, &session, &req.turn));
            }
        },
        // The ordinary pod is recorded before it (and its Secret) is created, and the record is
        // read again after: a turn that ended in between gets no pod.
        None => {
            let mine = match &recorded {
                Some(_) => Recorded::Ours,
                None => record::record(&ctx, &serving, &tier, &ordinary_name).await?,
            };
            match mine {
                Recorded::Ours => {
                    let made = match open::ordinary(&ctx, &tier, serving.clone()).await {
                        Ok(made) => made,
                        Err(OpenError::Api(crate::Error::Kube(e))) => {
                            let Some((reason, message)) = admission_refusal(&e) else {
                                return Err(ApiError::from(e));
                            };
                            let refused = Sandbox {
                                turn: req.turn.clone(),
                                pod: Some(ordinary_name.clone()),
                                phase: Phase::Failed,
                                reason: Some(reason.into()),
                                message: Some(message),
                                ..Sandbox::default()
                            };
                            return Ok(refused_answer(&ctx, &ns, &session, &tier, refused).await);
                        }
                        Err(e) => return Err(e.into()),
                    };
                    if record::ended_now(&ctx, &serving).await? {
                        open::delete(&ctx, &made, Exactly::Object).await?;
                        return Err(ended_turn(&ns, &session, &req.turn));
                    }
                    made
                }
                Recorded::Theirs(holder) => {
                    return recorded_pod(&ctx, &ns, (&session, uid.as_deref()), &req.turn, &holder)
                        .await;
                }
                Recorded::Ended => return Err(ended_turn(&ns, &session, &req.turn)),
                Recorded::Contested => return Err(contested(&ns, &session, &req.turn)),
            }
        }
    };
    step("pod claimed or created, and recorded");
    let view = state::sandbox(&pod, &req.turn, None);
    let source = if reused {
        "reused"
    } else {
        view.source_label()
    };
    ctx.metrics.tier1_opened(source, miss);
    if let Some(uid) = pod.metadata.uid.as_deref() {
        ctx.metrics.escalation_opened(uid);
    }
    let note = format!(
        "turn {}: Tier-1 pod {} of SandboxTier {} (source {}{}{})",
        req.turn,
        view.pod_name(),
        tier.name_any(),
        view.source_label(),
        view.miss_reason
            .as_deref()
            .map(|m| format!(", missReason {m}"))
            .unwrap_or_default(),
        if reused {
            ", kept from an earlier turn of the session"
        } else {
            ""
        }
    );
    known.opened = Some(report::Announcement {
        session: session_obj,
        warning: false,
        reason: "Tier1Opened",
        message: note,
    });
    let answered = answer(&ctx, &ns, &session, &pod, &req.turn, known).await;
    step("answered");
    answered
}

/// 503: the turn's record could not be written (something not the operator's holds its name):
/// nothing was recorded, and nothing claimed for it is kept. The worker retries.
fn contested(ns: &str, session: &str, turn: &str) -> ApiError {
    tracing::warn!(%ns, %session, %turn, "the turn's record name is held by an object the operator did not make");
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        code::UNAVAILABLE,
        format!("the record of turn {turn:?} of {ns}/{session} could not be written: an object the operator did not make holds its name"),
    )
}

/// Spends one of the session's allowance of new turns (opened, or ended before any open recorded
/// them): 429 with `Retry-After`, counted, when it is spent.
pub(super) fn spend_open(ctx: &Context, ns: &str, session: &str) -> Result<()> {
    let Err(wait) = ctx.opens.check(ns, session) else {
        return Ok(());
    };
    ctx.metrics.tier1_open_limited();
    Err(ApiError::retry_after(
        StatusCode::TOO_MANY_REQUESTS,
        code::TOO_MANY_OPENS,
        format!(
            "session {ns}/{session} opened more than {} new Tier-1 turns in a burst or {} a minute; try again in {} ms",
            limit::OPENS_BURST,
            limit::OPENS_PER_MINUTE,
            wait.as_millis()
        ),
        wait,
    ))
}
