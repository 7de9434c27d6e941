//! The tier API (docs/tier1.md): workers ask for, poll and end their turn's Tier-1 sandbox over
//! HTTP, authenticated with the session's own worker token, because a worker pod has no
//! ServiceAccount token to create API objects with. Served by every replica: all state is in the
//! API server, so any replica answers any request.

use super::auth::Refused;
use super::end;
use super::open::{self, Claim, Exactly, OpenError, Take};
use super::pod::{self, Serving};
use super::record::{self, Recorded};
use super::report::{self, Update};
use super::state;
use crate::context::Context;
use crate::kube_util::admission_refusal;
use crate::labels;
use axum::body::Body;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_protocol::tier1::{Phase, Sandbox};
use kube_harness_service_kit::body::{read_request, BodyError, BodyHead};
use serde::Deserialize;
use serde_json::json;
use std::net::SocketAddr;
use std::sync::Arc;

/// An error answer: status and `{"error": message}`, with `Retry-After` (whole seconds, rounded
/// up) when the caller may try again later.
#[derive(Debug)]
pub struct ApiError(StatusCode, String, Option<std::time::Duration>);

impl ApiError {
    pub(super) fn new(status: StatusCode, message: String) -> Self {
        ApiError(status, message, None)
    }

    /// An answer the caller may try again after `wait` (`Retry-After`).
    pub(super) fn retry_after(
        status: StatusCode,
        message: String,
        wait: std::time::Duration,
    ) -> Self {
        ApiError(status, message, Some(wait))
    }

    pub fn status(&self) -> StatusCode {
        self.0
    }

    /// How long the caller is told to wait, when it is.
    pub fn retry(&self) -> Option<std::time::Duration> {
        self.2
    }

    /// 401: a missing Secret or session answers the same, so a name reveals nothing.
    pub(super) fn unauthorized() -> Self {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "bad or missing bearer token".into(),
        )
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.0, Json(json!({"error": self.1}))).into_response();
        if let Some(wait) = self.2 {
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
            format!("Kubernetes API: {e}"),
        )
    }
}

impl From<Refused> for ApiError {
    fn from(r: Refused) -> Self {
        match r {
            Refused::Limited(wait) => ApiError::retry_after(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "too many failed token checks from this client; try again in {} ms",
                    wait.as_millis()
                ),
                wait,
            ),
            Refused::Unauthorized => ApiError::unauthorized(),
            Refused::Lookup(e) => e.into(),
            Refused::ShuttingDown => {
                ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into())
            }
        }
    }
}

impl From<OpenError> for ApiError {
    fn from(e: OpenError) -> Self {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, e.to_string())
    }
}

type Result<T> = std::result::Result<T, ApiError>;

/// Unknown fields are ignored, so a newer worker can send more.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenRequest {
    turn: String,
    #[serde(default)]
    workspace_bytes: u64,
}

pub fn router(ctx: Arc<Context>) -> Router {
    Router::new()
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes",
            post(open),
        )
        .route(
            "/v1/namespaces/{ns}/sessions/{session}/sandboxes/{turn}",
            get(show).delete(end),
        )
        .route("/healthz", get(|| async { "ok" }))
        .with_state(ctx)
}

/// Serves the tier API on an already bound listener (bound by the caller, so a port that cannot be
/// bound fails the operator's start instead of a background task).
pub async fn serve(
    listener: tokio::net::TcpListener,
    ctx: Arc<Context>,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    tracing::info!(listen = ?listener.local_addr().ok(), "serving the tier API");
    kube_harness_service_kit::serve(listener, router(ctx), shutdown).await?;
    Ok(())
}

/// Names that end up in label values: a DNS label (63 characters at most).
fn check_name(what: &str, v: &str) -> Result<()> {
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
            format!("{what} {v:?} is not a valid name"),
        ))
    }
}

fn check_turn(turn: &str) -> Result<()> {
    if turn.is_empty() || turn.len() > 512 || turn.chars().any(char::is_control) {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "turn must be 1 to 512 characters without control characters".into(),
        ));
    }
    Ok(())
}

/// The bearer must equal the session's worker token, checked on the request's head before any
/// body is read ([`super::auth`]). A missing Secret is 401 too: an unknown session reveals
/// nothing.
async fn authorize(ctx: &Context, ns: &str, session: &str, parts: &Parts) -> Result<()> {
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

async fn read_session(
    ctx: &Context,
    ns: &str,
    session: &str,
) -> std::result::Result<Option<HarnessSession>, kube::Error> {
    Api::<HarnessSession>::namespaced(ctx.client.clone(), ns)
        .get_opt(session)
        .await
}

/// The session as read: 404 when it is gone or going.
fn live_session(read: Option<HarnessSession>, ns: &str, session: &str) -> Result<HarnessSession> {
    match read {
        Some(s) if s.metadata.deletion_timestamp.is_none() => Ok(s),
        _ => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            format!("no HarnessSession {ns}/{session}"),
        )),
    }
}

/// The name of the session's escalation tier: 409 without one.
fn escalation_tier(s: &HarnessSession, ns: &str, session: &str) -> Result<String> {
    s.spec
        .escalation
        .as_ref()
        .and_then(|e| e.tier.clone())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::CONFLICT,
                format!("HarnessSession {ns}/{session} has no escalation tier"),
            )
        })
}

/// The escalation tier as read and granted to the session's namespace (`crate::grant`): 409 when
/// it is missing or not granted (the same words either way) or not level 1 or more.
fn escalation_level(read: Option<SandboxTier>, name: &str, ns: &str) -> Result<SandboxTier> {
    let conflict = |m: String| ApiError::new(StatusCode::CONFLICT, m);
    match read {
        Some(t) if t.spec.level >= 1 => Ok(t),
        Some(t) => Err(conflict(format!(
            "SandboxTier {name} has level {}; escalation needs level 1 or more",
            t.spec.level
        ))),
        None => Err(conflict(crate::grant::not_usable(name, ns))),
    }
}

/// What an answer may reuse instead of asking the API server again: the pod's token and the
/// session, read beside the claim, and the open's Event, published with the answer's.
#[derive(Default)]
struct Known {
    token: Option<Option<String>>,
    session: Option<std::result::Result<Option<HarnessSession>, kube::Error>>,
    opened: Option<report::Announcement>,
}

/// 409: the turn ended (its record is a tombstone, or an earlier same-named session's).
fn ended_turn(ns: &str, session: &str, turn: &str) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        format!(
            "turn {turn:?} of {ns}/{session} has ended (or is an earlier session's of that name); a new turn needs a new turn id"
        ),
    )
}

/// Opens (or finds) the turn's sandbox. Nothing is read before the bearer is checked; then the
/// API requests that do not depend on each other go together, in six rounds on a warm claim
/// (docs/tier1.md): the token Secret; the session, its Tier-1 pods and its turns' records; the
/// tier, the worker pod and the pool's pods; the claim patch, the pod's token and the session
/// again (for its status); the turn's record; the status write. The Events are published after
/// the answer. Only pods and records of this session object (its uid) count. A turn that ended
/// is 409 for good; a new turn first ends the session's other serving turns (one serving turn
/// per session).
async fn open(
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
        if let Err(wait) = ctx.opens.check(&ns, &session) {
            ctx.metrics.tier1_open_limited();
            return Err(ApiError(
                StatusCode::TOO_MANY_REQUESTS,
                format!(
                    "session {ns}/{session} opened more than {} new Tier-1 turns in a burst or {} a minute; try again in {} ms",
                    super::limit::OPENS_BURST,
                    super::limit::OPENS_PER_MINUTE,
                    wait.as_millis()
                ),
                Some(wait),
            ));
        }
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
            return recorded_pod(&ctx, &ns, &session, &req.turn, holder).await;
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
                    recorded_pod(&ctx, &ns, &session, &req.turn, &holder).await
                }
                Recorded::Ended => {
                    open::delete(&ctx, unrecorded, Exactly::Object).await?;
                    Err(ended_turn(&ns, &session, &req.turn))
                }
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
    serving.worker_uid = worker.as_ref().and_then(super::sweep::worker_identity);
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
                return recorded_pod(&ctx, &ns, &session, &req.turn, &holder).await;
            }
            Recorded::Ended => {
                open::delete(&ctx, &claimed, Exactly::Object).await?;
                return Err(ended_turn(&ns, &session, &req.turn));
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
                    return recorded_pod(&ctx, &ns, &session, &req.turn, &holder).await;
                }
                Recorded::Ended => return Err(ended_turn(&ns, &session, &req.turn)),
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

/// The Sandbox of a turn whose record names `holder`, a pod this request has not read: read now.
/// Not there yet (the turn's ordinary pod, recorded by an open still creating it) is Pending; any
/// other pod that is gone, or no longer serves the turn, is Failed.
/// The open request's body, read only after the token was checked, at the pace every body of
/// the service keeps (service-kit's `BodyPace`): 408 when it comes too slowly, 413 over
/// [`MAX_OPEN_BODY`], 400 when it is not the request.
async fn open_request(parts: &Parts, body: Body) -> Result<OpenRequest> {
    let head = BodyHead::of(&parts.headers, &parts.extensions);
    let bytes = read_request(&head, body, MAX_OPEN_BODY)
        .await
        .map_err(|e| {
            let status = match e {
                BodyError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
                BodyError::TooSlow { .. } => StatusCode::REQUEST_TIMEOUT,
                _ => StatusCode::BAD_REQUEST,
            };
            ApiError::new(status, e.to_string())
        })?;
    serde_json::from_slice(&bytes)
        .map_err(|e| ApiError::new(StatusCode::BAD_REQUEST, format!("the open request: {e}")))
}

async fn recorded_pod(
    ctx: &Arc<Context>,
    ns: &str,
    session: &str,
    turn: &str,
    holder: &str,
) -> Result<Json<Sandbox>> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    match pods.get_opt(holder).await? {
        Some(p) if p.labels().get(labels::TURN) == Some(&pod::turn_label(turn)) => {
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

/// The turn's Sandbox: its pod of this session object (its uid); 409 when the turn ended.
async fn show(
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
            format!("no HarnessSession {ns}/{session}"),
        ));
    };
    let uid = session_obj.metadata.uid.as_deref();
    let pods = open::of_turn(&open::of_session_object(pods?, uid), &turn);
    let recorded = match record::said(recorded?.as_ref(), uid) {
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
            format!("no sandbox for turn {turn:?} of {ns}/{session}"),
        )),
    }
}

/// Ends the turn (see [`end::turn`]): its record becomes a tombstone, then its pod is kept idle
/// for the session's next turn when its tier says so or deleted. Only this session object's (its
/// uid's) turn: one of an earlier same-named session, or of a session gone, is left to the
/// sweep. 204, also when already ended or gone.
async fn end(
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
    if recorded?.is_some_and(|r| !record::belongs(r.labels(), uid)) {
        return Ok(StatusCode::NO_CONTENT);
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

/// The Sandbox of `pod` (with its token once Ready), and what it means for the session. Its
/// Events (`known.opened`, then the status's) are published after the answer, in that order.
async fn answer(
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

/// The answer to an open whose pod (or its Secret) the namespace's admission refused: a quota
/// (`QuotaExceeded`), a LimitRange or Pod Security (`AdmissionRefused`), with the API server's
/// message. Failed at once, so the worker ends the turn and the command exits 126 with that
/// message instead of waiting; the session's `Escalated` condition and a Warning Event say it.
async fn refused_answer(
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
