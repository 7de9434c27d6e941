//! Reconciling one HarnessSession: its token Secret, workspace PVC, NetworkPolicy and worker pod;
//! idle hibernation and waking; TTL; status by server-side apply with an Event per change.

use super::observe::{
    confirmed_ready, just_started, started_ip, worker_state, WorkerState, ADOPTION_UNCONFIRMED,
    FIRST_PROBE,
};
use super::owned::worker_pod_name;
use super::status::{self, Escalation, Observed, Seen, Worker, WorkerTierProblem};
use super::{access, resources, usage};
use crate::cache::{self, Tokens};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::events;
use crate::kube_util::{
    admission_refusal, apply_owned, create_if_absent, delete_if_present, new_token, token_of,
};
use crate::labels::{self, FINALIZER, MANAGER};
use crate::tier1::pod::serving_selector;
use crate::tier1::state::phase as tier1_phase;
use crate::warm;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::{reasons, types};
use kube_harness_crds::session::TtlAction;
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, Phase, SandboxTier};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

pub async fn reconcile(session: Arc<HarnessSession>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let ns = session
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
    let session = with_known_finalizer(session, &ctx);
    let deleting = ttl_expired(&session) && ttl_action(&session) == TtlAction::Delete;
    let result = if needs_finalizer(&session) && !deleting {
        // A new session: its first apply runs while the finalizer is added (its status write
        // waits for that), instead of one round trip after the other (docs/performance.md).
        let adding = add_finalizer(&api, &session);
        // Errors as `kube::runtime::finalizer` reports them on the path below.
        match apply(session.clone(), &ctx, Some(Box::pin(adding))).await {
            Err(e @ Error::Finalizer(_)) => Err(e),
            Err(e) => Err(Error::Finalizer(Box::new(
                kube::runtime::finalizer::Error::ApplyFailed(e),
            ))),
            ok => ok,
        }
    } else {
        let session = match with_finalizer(&api, session).await {
            Ok(s) => s,
            Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
            Err(e) => {
                ctx.metrics
                    .reconciled("harnesssession", started.elapsed().as_secs_f64());
                return Err(Error::Kube(e));
            }
        };
        match finalizer(&api, FINALIZER, session, |event| async {
            match event {
                Finalizer::Apply(s) => apply(s, &ctx, None).await,
                Finalizer::Cleanup(s) => cleanup(s, &ctx).await,
            }
        })
        .await
        {
            Ok(action) => Ok(action),
            // The session went while this reconcile ran (often a second cleanup, started from a
            // cached copy, after the first removed the finalizer): nothing is left to do.
            Err(e) if already_gone(&e) => Ok(Action::await_change()),
            Err(e) => Err(Error::Finalizer(Box::new(e))),
        }
    };
    ctx.metrics
        .reconciled("harnesssession", started.elapsed().as_secs_f64());
    tracing::debug!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        ok = result.is_ok(),
        "reconciled"
    );
    result
}

pub fn error_policy(session: Arc<HarnessSession>, error: &Error, ctx: Arc<Context>) -> Action {
    if is_conflict(error) {
        // The session changed after this reconcile read it (often the tier API writing
        // Escalated): not a failure, just recompute from the fresh object.
        tracing::debug!(session = %session.name_any(), "session changed meanwhile; reconciling again");
        ctx.metrics.failed("harnesssession", "conflict");
        return Action::requeue(Duration::from_millis(200));
    }
    tracing::warn!(session = %session.name_any(), %error, "HarnessSession reconcile failed");
    ctx.metrics.failed("harnesssession", error.metric_label());
    Action::requeue(ctx.backoff(&key(&session)))
}

/// The session, with the cleanup finalizer when the copy at hand predates this operator's own
/// status write, which followed its finalizer patch: the watch lags the patch, and patching again
/// from the stale list fails its `test` (422). At 5,000 new sessions that was most of the
/// reconcile errors (docs/performance.md, "Scale").
fn with_known_finalizer(session: Arc<HarnessSession>, ctx: &Context) -> Arc<HarnessSession> {
    let stale = needs_finalizer(&session)
        && ctx
            .caches
            .newer_status(&key(&session), session.metadata.resource_version.as_deref())
            .is_some();
    if !stale {
        return session;
    }
    let mut known = HarnessSession::clone(&session);
    known
        .metadata
        .finalizers
        .get_or_insert_with(Vec::new)
        .push(FINALIZER.into());
    Arc::new(known)
}

/// Whether the cleanup finalizer is still to be added (never to a session being deleted).
fn needs_finalizer(session: &HarnessSession) -> bool {
    !session.finalizers().iter().any(|f| f == FINALIZER)
        && session.metadata.deletion_timestamp.is_none()
}

/// The session with the cleanup finalizer: added here, and the reconcile goes on with the object
/// the patch returned. `kube::runtime::finalizer` would add it and end the reconcile, leaving the
/// work to the next one, which the finalizer's own watch event starts: a round trip through the
/// API server's watch on every new session's path to Ready (docs/performance.md, "Warm start").
async fn with_finalizer(
    api: &Api<HarnessSession>,
    session: Arc<HarnessSession>,
) -> kube::Result<Arc<HarnessSession>> {
    if !needs_finalizer(&session) {
        return Ok(session);
    }
    Ok(Arc::new(add_finalizer(api, &session).await?))
}

/// Adds the cleanup finalizer: a JSON patch that tests the list it extends, as kube's does.
async fn add_finalizer(
    api: &Api<HarnessSession>,
    session: &HarnessSession,
) -> kube::Result<HarnessSession> {
    let patch = match &session.metadata.finalizers {
        Some(list) if !list.is_empty() => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": list},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ]),
        _ => json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ]),
    };
    let patch: json_patch::Patch =
        serde_json::from_value(patch).map_err(kube::Error::SerdeError)?;
    api.patch(
        &session.name_any(),
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await
}

/// The finalizer patch found no session (404): it was deleted meanwhile.
fn already_gone(error: &kube::runtime::finalizer::Error<Error>) -> bool {
    use kube::runtime::finalizer::Error as F;
    matches!(
        error,
        F::AddFinalizer(kube::Error::Api(e)) | F::RemoveFinalizer(kube::Error::Api(e)) if e.code == 404
    )
}

/// A write refused because the session changed since it was read: a 409 from the
/// resourceVersion-conditioned status write, or a 422 from the finalizer patch, whose `test` of
/// the finalizer list fails when the cached session predates a finalizer another reconcile added.
fn is_conflict(error: &Error) -> bool {
    use kube::runtime::finalizer::Error as F;
    matches!(
        error,
        Error::Finalizer(f) if matches!(
            f.as_ref(),
            F::ApplyFailed(Error::Kube(kube::Error::Api(e))) if e.code == 409
        ) || matches!(
            f.as_ref(),
            F::AddFinalizer(kube::Error::Api(e)) if e.code == 409 || e.code == 422
        )
    )
}

fn key(session: &HarnessSession) -> String {
    format!(
        "session/{}/{}",
        session.namespace().unwrap_or_default(),
        session.name_any()
    )
}

/// Deleting a session: stop its worker before anything else goes (owner references then collect
/// the PVC, Secret and NetworkPolicy). The pod is deleted explicitly so a running command is
/// interrupted now rather than whenever the garbage collector gets to it.
async fn cleanup(session: Arc<HarnessSession>, ctx: &Context) -> Result<Action> {
    let ns = session.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    delete_worker(&pods, &worker_pod_name(&session)).await?;
    // Tier-1 pods are found by their labels: none can carry a name too long to be a label
    // value (a session stored before the CRD's rule), and asking would fail for good.
    if session.name_any().len() <= kube_harness_crds::valid::MAX_SESSION_NAME {
        crate::tier1::sweep::delete_for_session(ctx, &ns, &session.name_any()).await?;
    }
    let note = if orphaning(&session) {
        "worker pod and Tier-1 pods deleted; the workspace PVC, token Secret, NetworkPolicy and Service are kept (orphan deletion)"
    } else {
        delete_children(&session, ctx).await?;
        "worker pod, Tier-1 pods, workspace PVC, token Secret, NetworkPolicy and Service deleted"
    };
    events::publish(ctx, &*session, false, "Deleting", note, "Cleanup").await;
    ctx.metrics.session(&key(&session), None);
    ctx.polls.forget(&ObjectRef::from_obj(&*session));
    ctx.caches.forget_session(&key(&session));
    ctx.succeeded(&key(&session));
    Ok(Action::await_change())
}

/// The three steps, as agent-sandbox's sandbox controller takes them: [`ensure`] the child
/// objects (observing as it goes), compute the status they call for ([`status::status`], pure),
/// and write it once, with an Event per condition that changed.
async fn apply(
    session: Arc<HarnessSession>,
    ctx: &Context,
    adding_finalizer: Option<AddingFinalizer<'_>>,
) -> Result<Action> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    // The session at hand may predate this operator's last status write (the watch has not
    // brought it back yet): then that write is the status to build on, and its resourceVersion
    // the one to condition the next write on.
    let (old, read_version, built_on_write) = match ctx
        .caches
        .newer_status(&key(&session), session.metadata.resource_version.as_deref())
    {
        Some((status, version)) => (status, Some(version), true),
        None => (
            session.status.clone().unwrap_or_default(),
            session.resource_version(),
            false,
        ),
    };

    let expired = ttl_expired(&session);
    if expired && ttl_action(&session) == TtlAction::Delete {
        let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
        events::publish(
            ctx,
            &*session,
            false,
            "TTLExpired",
            "the session's ttlSeconds passed; deleting it (ttlAction Delete)",
            "Expire",
        )
        .await;
        api.delete(&name, &DeleteParams::default()).await?;
        return Ok(Action::await_change());
    }

    let before_finalizer = adding_finalizer
        .is_some()
        .then(|| session.resource_version())
        .flatten();
    // Expired (ttlAction Release): the session stays, what it holds goes.
    let step = async {
        if expired {
            release(&session, ctx, &old).await
        } else {
            ensure(&session, ctx, &old).await
        }
    };
    let (observed, read_version) = match adding_finalizer {
        None => (step.await?, read_version),
        Some(adding) => {
            let (added, observed) = tokio::join!(adding, step);
            // The status write is conditioned on the object the finalizer patch returned.
            let added = match added {
                Ok(s) => s,
                // Deleted meanwhile: its children are owned by it and go with it.
                Err(kube::Error::Api(e)) if e.code == 404 => return Ok(Action::await_change()),
                Err(e) => {
                    return Err(Error::Finalizer(Box::new(
                        kube::runtime::finalizer::Error::AddFinalizer(e),
                    )))
                }
            };
            (observed?, added.resource_version())
        }
    };
    tracing::debug!(session = %name, "ensured");
    let (status, requeue) = status::status(&old, session.metadata.generation, &observed);

    let phase = status.phase.unwrap_or(Phase::Pending);
    let usage = status.usage.clone().unwrap_or_default();
    ctx.metrics.session(
        &key(&session),
        Some((
            phase,
            usage.commands_tier0,
            usage.commands_tier0 + usage.commands_tier1,
        )),
    );
    if old.phase != Some(Phase::Ready) && phase == Phase::Ready {
        if let Some(since) = provisioning_started(&session) {
            // An adopted warm pod keeps its own name; every other worker is `<name>-worker`.
            let warm = status
                .worker_pod
                .as_deref()
                .is_some_and(|pod| pod != labels::worker_pod(&name));
            ctx.metrics.provisioned(warm, since);
        }
    }
    if status != old {
        let written = write_status(ctx, &ns, &name, read_version.clone(), &status).await?;
        ctx.caches.wrote_status(
            &key(&session),
            read_version,
            built_on_write,
            written,
            &status,
        );
        ctx.caches
            .also_superseded(&key(&session), before_finalizer.clone());
        tracing::debug!(session = %name, "status written");
        for c in events::changed(&old.conditions, &status.conditions) {
            let note = format!("{} is {}: {}", c.type_, c.status, c.message);
            events::publish(
                ctx,
                &*session,
                events::is_warning(c),
                &c.reason,
                &note,
                "Reconcile",
            )
            .await;
        }
    }
    ctx.succeeded(&key(&session));
    // A Ready session comes back when its worker is due for a poll: every 15 s while it answers,
    // less and less often while it does not.
    let requeue = match requeue {
        Some(_) if phase == Phase::Ready => Some(ctx.polls.due_in(&ObjectRef::from_obj(&*session))),
        r => r,
    };
    // A session that will expire comes back when it does, whatever else it waits for (a
    // hibernated one waits for nothing).
    let requeue = match (requeue, ttl_left(&session)) {
        (Some(r), Some(left)) => Some(r.min(left)),
        (None, Some(left)) => Some(left),
        (r, None) => r,
    };
    Ok(requeue
        .map(Action::requeue)
        .unwrap_or_else(Action::await_change))
}

/// A worker pod the API server refuses as invalid (422): the session asked for something the
/// pod cannot be (a check the CRD and `kube_harness_crds::valid` missed), reported as a failing
/// worker (`InvalidSpec` and the API server's message) instead of an error retried forever.
fn invalid_pod(error: &kube::Error) -> Option<(&'static str, String)> {
    match error {
        kube::Error::Api(e) if e.code == 422 => Some((reasons::INVALID_SPEC, e.message.clone())),
        _ => None,
    }
}

/// A child write's outcome: `Some((reason, message))` when admission refused it (see
/// [`admission_refusal`]), any other error as it was.
fn refusal(written: Result<()>) -> Result<Option<(&'static str, String)>> {
    match written {
        Ok(()) => Ok(None),
        Err(Error::Kube(e)) => admission_refusal(&e).map(Some).ok_or(Error::Kube(e)),
        Err(e) => Err(e),
    }
}

/// The finalizer patch of a new session, made while its first apply runs.
type AddingFinalizer<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = kube::Result<HarnessSession>> + Send + 'a>>;

/// Whether the session is being deleted with `--cascade=orphan` (the API server's `orphan`
/// finalizer): its dependents are to be kept.
fn orphaning(session: &HarnessSession) -> bool {
    session.finalizers().iter().any(|f| f == "orphan")
}

/// Deletes the session's owned children by name instead of leaving them to the garbage
/// collector, which runs at the controller-manager's client rate (20 requests/s by default): at
/// 2,000 sessions deleted at once that took minutes (docs/performance.md, "Scale"). Already gone
/// is fine; the owner references stay the backstop.
async fn delete_children(session: &HarnessSession, ctx: &Context) -> Result<()> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let claim = session
        .status
        .as_ref()
        .and_then(|s| s.workspace_claim.clone())
        .unwrap_or_else(|| labels::workspace_pvc(&name));
    let client = &ctx.client;
    delete_if_present(
        &Api::<Service>::namespaced(client.clone(), &ns),
        &labels::worker_service(&name),
    )
    .await?;
    delete_if_present(
        &Api::<NetworkPolicy>::namespaced(client.clone(), &ns),
        &labels::network_policy(&name),
    )
    .await?;
    delete_if_present(
        &Api::<Secret>::namespaced(client.clone(), &ns),
        &labels::token_secret(&name),
    )
    .await?;
    delete_if_present(
        &Api::<PersistentVolumeClaim>::namespaced(client.clone(), &ns),
        &claim,
    )
    .await?;
    Ok(())
}

/// Step one for an expired session (ttlAction Release): deletes its worker pod, its Tier-1 pods
/// and its workspace PVC, and keeps the session, its token Secret, NetworkPolicy and Service (no
/// compute, no storage). Reports whether any of them is still there.
async fn release(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<Observed> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_name = old
        .worker_pod
        .clone()
        .unwrap_or_else(|| labels::worker_pod(&name));
    let claim = old
        .workspace_claim
        .clone()
        .unwrap_or_else(|| labels::workspace_pvc(&name));
    if old.phase != Some(Phase::Expired) {
        events::publish(
            ctx,
            session,
            false,
            "TTLExpired",
            "the session's ttlSeconds passed; deleting its pods and workspace PVC and keeping the session (ttlAction Release)",
            "Expire",
        )
        .await;
    }
    let pod_left = match pods.get_opt(&pod_name).await? {
        Some(pod) => {
            if pod.metadata.deletion_timestamp.is_none() {
                delete_worker(&pods, &pod_name).await?;
            }
            true
        }
        None => false,
    };
    ctx.polls.forget(&ObjectRef::from_obj(session));
    // Tier-1 pods: none is opened without a worker, and those left are deleted now.
    let tier1_left = crate::tier1::sweep::delete_for_session(ctx, &ns, &name).await? > 0;
    let claim_left = match claims.get_opt(&claim).await? {
        Some(pvc) => {
            if pvc.metadata.deletion_timestamp.is_none() {
                delete_if_present(&claims, &claim).await?;
            }
            true
        }
        None => false,
    };
    Ok(Observed::Expired {
        releasing: pod_left || tier1_left || claim_left,
    })
}

/// Step one: brings the child objects to what the session asks for (token Secret, workspace PVC,
/// NetworkPolicy, Service, worker pod: created, replaced when stale, deleted to hibernate) and reports
/// what it found and did. Sets no status: that is [`status::status`]'s job.
async fn ensure(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<Observed> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let tiers: Api<SandboxTier> = Api::all(ctx.client.clone());
    // What the CRD's rules refuse today (an object stored before them): nothing is made of it.
    let problems = kube_harness_crds::valid::problems(session);
    if !problems.is_empty() {
        return Ok(Observed::Invalid {
            message: problems.join("; "),
        });
    }

    // The level-0 tier that defines the worker pod, if the namespace may use it.
    let worker_tier = tier(ctx, &tiers, &session.spec.worker_tier).await?;
    let worker_tier = crate::grant::usable(&ctx.client, &ns, worker_tier).await?;
    let worker_tier = match worker_tier {
        Some(t) if t.spec.level == 0 => t,
        Some(t) => {
            return Ok(Observed::NoWorkerTier(WorkerTierProblem::NotLevelZero {
                tier: t.name_any(),
                level: t.spec.level,
            }))
        }
        None => {
            return Ok(Observed::NoWorkerTier(WorkerTierProblem::NotFound {
                tier: session.spec.worker_tier.clone(),
                namespace: ns.clone(),
            }))
        }
    };
    let escalation = observe_escalation(session, ctx, &tiers).await?;

    // The workspace: the session's own PVC, or the warm pod's it adopted (status keeps which).
    let own_claim = labels::workspace_pvc(&name);
    let mut claim = old
        .workspace_claim
        .clone()
        .unwrap_or_else(|| own_claim.clone());
    // A session's first worker may be a warm pod (with its own PVC); later ones (after
    // hibernation, a spec change, a lost pod) are the session's.
    let first = old.worker_pod.is_none() && old.workspace_claim.is_none();
    let may_adopt = first && worker_tier.spec.warm_pool.size > 0;

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let mut pod_name = old
        .worker_pod
        .clone()
        .unwrap_or_else(|| labels::worker_pod(&name));
    // A pod the cache does not hold yet though it exists (created a moment ago) meets a 409 on
    // create below, which reads as "starting".
    let existing = match ctx.caches.pod(&ns, &pod_name) {
        Some(pod) => pod.map(|p| Pod::clone(&p)),
        None => pods.get_opt(&pod_name).await?,
    };
    // Only the pod the operator made for this session is its worker (the uid recorded at its
    // create, and a controller reference to the session): one of its name that someone else made
    // is deleted, never served or asked, and the session's own is started once it is gone.
    let remembered = ctx.caches.worker_uid(&key(session));
    let recorded = [old.worker_pod_uid.as_deref(), remembered.as_deref()];
    let mut not_owned = None;
    let existing = match existing {
        Some(pod) if !super::trust::owned_pod(&pod, session, &recorded) => {
            delete_exactly(&pods, &pod).await?;
            not_owned = Some(pod);
            None
        }
        existing => existing,
    };
    if let Some(pod) = &not_owned {
        let note = format!(
            "pod {} (uid {}) was not created by the operator for this session: deleted, never served; the session's own worker pod starts once it is gone",
            pod.name_any(),
            pod.uid().unwrap_or_default()
        );
        events::publish(
            ctx,
            session,
            true,
            reasons::WORKER_POD_NOT_OWNED,
            &note,
            "Start",
        )
        .await;
    }
    let hibernate = hibernating(session, old);
    let config_maps = if hibernate {
        Vec::new()
    } else {
        skills_config_maps(session, ctx).await?
    };
    let desired = |claim: &str, uid: i64| {
        resources::worker_pod_with(
            session,
            &worker_tier.spec,
            &ctx.config,
            &config_maps,
            claim,
            uid,
        )
    };
    // The children and a warm pod's claim need nothing from each other: made at once, so a warm
    // start waits for one round trip of the API server instead of five (docs/performance.md).
    let adopting = may_adopt && existing.is_none() && !hibernate && not_owned.is_none();
    let warm_claim = async {
        if !adopting {
            return Ok(None);
        }
        let hash = |c: &str, u: i64| {
            desired(c, u)
                .annotations()
                .get(labels::SPEC_HASH)
                .cloned()
                .unwrap_or_default()
        };
        warm::adopt::claim(session, &worker_tier, ctx, &config_maps, hash)
            .await
            .map(Some)
    };
    let pvc = async {
        // Not for a session suspended before its first worker: its first start decides the
        // claim (a warm pod's, when its tier keeps a pool by then).
        if claim == own_claim && !may_adopt && !(first && hibernate) {
            apply_child::<PersistentVolumeClaim>(ctx, &ns, &resources::workspace_pvc(session))
                .await?;
        }
        Ok::<(), Error>(())
    };
    let (policy, service) = (
        resources::network_policy(session, &ctx.config),
        access::worker_service(session, ctx.config.worker_port),
    );
    let (policy, service) = (
        apply_child::<NetworkPolicy>(ctx, &ns, &policy),
        ensure_service(ctx, &ns, &service),
    );
    let (tokens, pvc, policy, service, warm_claim) = tokio::join!(
        session_tokens(session, ctx, old),
        pvc,
        policy,
        service,
        warm_claim
    );
    let (tokens, secret_seen) = tokens?;
    let secret_uid = tokens.secret_uid.clone();
    let mut warm_claim = warm_claim?;
    // A quota or another admission check refusing the claim or the pod is the session's to
    // report (a condition with the API server's message), not an error to back off from.
    let mut refused = refusal(pvc)?;
    policy?;
    service?;
    let token = tokens.token.clone();
    tracing::debug!(session = %name, "ensure: secret, pvc, policy, service, pod");
    let mut pod_uid = None;
    let worker = if let Some(why) = tokens.refused.clone() {
        // Never a worker on a Secret the operator did not make: its tokens are someone else's.
        Worker::Running {
            state: WorkerState::Failing {
                reason: reasons::TOKEN_SECRET_REFUSED.into(),
                message: why,
            },
            report: None,
        }
    } else if hibernate {
        // Hibernation: an idle worker is deleted, the PVC stays; a wake request brings it back.
        if let Some(pod) = &existing {
            if pod.metadata.deletion_timestamp.is_none() {
                pods.delete(&pod_name, &DeleteParams::default()).await?;
            }
        }
        Worker::Hibernating {
            suspended: session.spec.suspend,
            pod_left: existing.is_some(),
        }
    } else {
        let uid = if claim == own_claim {
            resources::worker_uid(session)
        } else {
            warm::adopt::claim_uid(&claim).unwrap_or_else(|| resources::worker_uid(session))
        };
        let pod = match existing {
            Some(pod) if stale(&pod, &desired(&claim, uid)) => {
                if pod.metadata.deletion_timestamp.is_none() {
                    pods.delete(&pod_name, &DeleteParams::default()).await?;
                }
                None
            }
            Some(pod) => Some(pod),
            None => {
                let tokens = warm::adopt::Tokens {
                    token: tokens.token.clone(),
                    session_log: tokens.session_log.clone(),
                };
                let outcome = match warm_claim.take() {
                    Some(warm::adopt::Claim::Claimed(claimed)) => {
                        warm::adopt::bind(*claimed, session, ctx, &tokens).await?
                    }
                    Some(warm::adopt::Claim::Done(outcome)) => outcome,
                    None => warm::adopt::Outcome::NoPool,
                };
                match outcome {
                    warm::adopt::Outcome::Adopted(pod) => {
                        ctx.metrics.session_started(true, None);
                        if let Some(uid) = pod.uid() {
                            ctx.caches.remember_worker(&key(session), uid);
                        }
                        pod_name = pod.name_any();
                        claim = warm::objects::claim_name(&pod_name);
                        Some(*pod)
                    }
                    miss => {
                        let miss = match miss {
                            warm::adopt::Outcome::Miss(why) => {
                                events::publish(
                                    ctx,
                                    session,
                                    false,
                                    "WarmPoolMiss",
                                    &format!("no warm worker pod adopted ({why}); starting one"),
                                    "Start",
                                )
                                .await;
                                Some(why)
                            }
                            _ => None,
                        };
                        pod_name = labels::worker_pod(&name);
                        if may_adopt {
                            let applied = apply_child::<PersistentVolumeClaim>(
                                ctx,
                                &ns,
                                &resources::workspace_pvc(session),
                            )
                            .await;
                            refused = refused.or(refusal(applied)?);
                        }
                        // The pod mounts the token Secret: make sure it is there (the tokens
                        // may be remembered from a Secret deleted since).
                        if !secret_seen {
                            ensure_secret(session, ctx, old).await?;
                        }
                        if refused.is_some() || not_owned.is_some() {
                            // Refused; or a pod someone else made still holds the name.
                            None
                        } else {
                            match create_if_absent(&pods, &desired(&claim, uid)).await {
                                Ok(created) => {
                                    if let Some(pod) = &created {
                                        ctx.metrics.session_started(false, miss);
                                        if let Some(uid) = pod.uid() {
                                            ctx.caches.remember_worker(&key(session), uid);
                                        }
                                    }
                                    created
                                }
                                Err(e) => {
                                    refused = Some(
                                        admission_refusal(&e)
                                            .or_else(|| invalid_pod(&e))
                                            .ok_or(e)?,
                                    );
                                    None
                                }
                            }
                        }
                    }
                }
            }
        };
        pod_uid = pod.as_ref().and_then(|p| p.uid());
        let state = match (&pod, refused) {
            (Some(pod), _) => worker_state(pod),
            (None, _) if not_owned.is_some() => WorkerState::Starting {
                reason: reasons::WORKER_POD_NOT_OWNED.into(),
            },
            (None, Some((reason, message))) => WorkerState::Failing {
                reason: reason.into(),
                message,
            },
            (None, None) => WorkerState::Starting {
                reason: "WorkerStarting".into(),
            },
        };
        // Only while no container runs: a running pod mounted its sources already (a source
        // deleted afterwards does not stop it).
        let state = match state {
            WorkerState::Starting { .. }
                if !session.spec.workspace.persistent_dirs.is_empty()
                    && pod.as_ref().and_then(started_ip).is_none() =>
            {
                match super::persistent::missing_source(session, &ctx.client).await? {
                    Some(message) => WorkerState::Failing {
                        reason: reasons::PERSISTENT_DIR_SOURCE_MISSING.into(),
                        message,
                    },
                    None => state,
                }
            }
            state => state,
        };
        let port = ctx.config.worker_port;
        // The kubelet's readiness probe runs once a period and sometimes misses the start (a
        // whole second lost, docs/performance.md): once the container runs, the worker's own
        // answer is as good. No poll loop: a worker not ready yet is seen again when the probe
        // passes (a pod watch event).
        // An adopted pod serves this session only once it reports this session's adoption.
        let adopted = pod
            .as_ref()
            .and_then(|p| p.annotations().get(warm::objects::ADOPTED).cloned());
        let bound = |r: &usage::WorkerReport| adopted.is_none() || r.settings == adopted;
        let (state, polled) = match (&state, pod.as_ref().and_then(started_ip)) {
            (WorkerState::Starting { .. }, Some(ip)) => {
                match usage::poll_within(&ip, port, &token, usage::EARLY_POLL_TIMEOUT)
                    .await
                    .filter(|r| r.ready && bound(r))
                {
                    Some(report) => (WorkerState::Ready { ip }, Some(report)),
                    // One slow answer (300 ms on a busy node) does not take back a Ready this
                    // pod earned since its container started: Ready would flap until the
                    // kubelet's probe passes. Past the probe's first period a worker the
                    // kubelet does not call ready is not (hung, restarted, crash-looping).
                    None if confirmed_ready(old, &pod_name, &ip, port)
                        && pod
                            .as_ref()
                            .is_some_and(|p| just_started(p, FIRST_PROBE, Timestamp::now())) =>
                    {
                        (WorkerState::Ready { ip }, None)
                    }
                    None => (state, None),
                }
            }
            _ => (state, None),
        };
        let started = pod.as_ref().and_then(super::trust::pod_started);
        let bound_report =
            |r: usage::WorkerReport| super::trust::bounded(r, started, Timestamp::now());
        match state {
            WorkerState::Ready { ip } => {
                let report = match polled {
                    Some(report) => Some(report),
                    // An adoption is confirmed by the worker's answer now.
                    None if adopted.is_some() => usage::poll(&ip, port, &token).await,
                    // Otherwise the latest background poll will do: a worker that does not
                    // answer holds up no reconcile (docs/performance.md, "Scale").
                    None => {
                        ctx.polls
                            .report(
                                ObjectRef::from_obj(session),
                                &ip,
                                port,
                                &token,
                                ctx.report_wait,
                            )
                            .await
                    }
                };
                let report = report.map(bound_report);
                match report {
                    // An adopted pod that does not answer is not known to serve this session.
                    None if adopted.is_some() => Worker::Running {
                        state: WorkerState::Starting {
                            reason: ADOPTION_UNCONFIRMED.into(),
                        },
                        report: None,
                    },
                    Some(report) if !bound(&report) => {
                        // Not the adoption this session made: never serve it.
                        delete_worker(&pods, &pod_name).await?;
                        Worker::Running {
                            state: WorkerState::Gone,
                            report: None,
                        }
                    }
                    Some(report)
                        if !report.busy && idle_expired(session, &report.last_activity) =>
                    {
                        // The report may be a poll old: only the worker's answer now decides.
                        match usage::poll(&ip, port, &token).await.map(bound_report) {
                            Some(now) if !now.busy && idle_expired(session, &now.last_activity) => {
                                delete_worker(&pods, &pod_name).await?;
                                ctx.polls.forget(&ObjectRef::from_obj(session));
                                Worker::IdledOut { report: now }
                            }
                            now => Worker::Running {
                                state: WorkerState::Ready { ip },
                                report: now.or(Some(report)),
                            },
                        }
                    }
                    report => Worker::Running {
                        state: WorkerState::Ready { ip },
                        report,
                    },
                }
            }
            WorkerState::Gone => {
                delete_worker(&pods, &pod_name).await?;
                Worker::Running {
                    state: WorkerState::Gone,
                    report: None,
                }
            }
            state => Worker::Running {
                state,
                report: None,
            },
        }
    };
    Ok(Observed::Session(Box::new(Seen {
        token_secret: labels::token_secret(&name),
        token_secret_uid: secret_uid,
        worker_pod_uid: pod_uid,
        worker_pod: pod_name,
        workspace_claim: claim,
        worker_port: ctx.config.worker_port,
        address: access::address(session, ctx.config.worker_port),
        escalation,
        worker,
    })))
}

/// The session's escalation tier and the Tier-1 pods serving the session (they live in the
/// operator's namespace), for the Escalated condition.
async fn observe_escalation(
    session: &HarnessSession,
    ctx: &Context,
    tiers: &Api<SandboxTier>,
) -> Result<Escalation> {
    let Some(t) = resources::escalation_tier(session).map(str::to_string) else {
        return Ok(Escalation::NoTier);
    };
    let ns = session.namespace().unwrap_or_default();
    let read = match crate::grant::plausible(&t) {
        true => tiers.get_opt(&t).await?,
        false => None,
    };
    Ok(match crate::grant::usable(&ctx.client, &ns, read).await? {
        None => Escalation::TierNotFound {
            tier: t,
            namespace: ns,
        },
        Some(tier) if tier.spec.level == 0 => Escalation::TierIsLevelZero { tier: t },
        Some(_) if ctx.config.tier_api_url.is_none() => Escalation::NotConfigured { tier: t },
        Some(tier) => {
            // The session's Tier-1 pods are in its own namespace.
            let pods: Api<Pod> =
                Api::namespaced(ctx.client.clone(), &session.namespace().unwrap_or_default());
            let selector = serving_selector(
                &session.namespace().unwrap_or_default(),
                &session.name_any(),
                None,
            );
            let pods = pods
                .list(&ListParams::default().labels(&selector))
                .await?
                .items
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .map(|p| (p.name_any(), tier1_phase(p)))
                .collect();
            Escalation::Usable {
                tier: t,
                level: tier.spec.level,
                pods,
            }
        }
    })
}

/// The session's tier: from the cache, else from the API server.
async fn tier(
    ctx: &Context,
    tiers: &Api<SandboxTier>,
    name: &str,
) -> Result<Option<Arc<SandboxTier>>> {
    if !crate::grant::plausible(name) {
        return Ok(None);
    }
    if let Some(t) = ctx.caches.tier(name) {
        return Ok(Some(t));
    }
    Ok(tiers.get_opt(name).await?.map(Arc::new))
}

/// Server-side apply of a child object, unless exactly this was applied last and the object has
/// not changed since ([`cache::Caches::unchanged`]).
async fn apply_child<K>(ctx: &Context, ns: &str, obj: &K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let key = cache::child_key(ns, obj);
    let desired = serde_json::to_vec(obj)?;
    if ctx.caches.unchanged(&key, &desired) {
        return Ok(());
    }
    let version = apply_owned(&ctx.client, ns, obj).await?;
    ctx.caches.applied(key, &desired, version);
    Ok(())
}

/// The session's Service. One made by an older operator has a cluster IP, which cannot be changed
/// to `None`: the API server refuses the apply (422), and the Service is made again.
async fn ensure_service(ctx: &Context, ns: &str, svc: &Service) -> Result<()> {
    match apply_child::<Service>(ctx, ns, svc).await {
        Err(Error::Kube(kube::Error::Api(e))) if e.code == 422 => {
            let services: Api<Service> = Api::namespaced(ctx.client.clone(), ns);
            let name = svc.name_any();
            tracing::info!(service = %name, namespace = ns, "making the Service again: headless now");
            services.delete(&name, &DeleteParams::foreground()).await?;
            // Foreground deletion: the name is free once the object is gone.
            for _ in 0..50 {
                if services.get_opt(&name).await?.is_none() {
                    break;
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            apply_child::<Service>(ctx, ns, svc).await
        }
        other => other,
    }
}

/// The session's tokens: remembered from the Secret once read or created (they never change),
/// else [`ensure_secret`]; `true` when the Secret was read or created just now.
async fn session_tokens(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<(SessionTokens, bool)> {
    let uid = session.uid().unwrap_or_default();
    if let Some(t) = ctx.caches.tokens(&key(session), &uid) {
        let tokens = SessionTokens {
            token: t.token,
            session_log: t.session_log,
            secret_uid: old.token_secret_uid.clone(),
            refused: None,
        };
        return Ok((tokens, false));
    }
    Ok((ensure_secret(session, ctx, old).await?, true))
}

/// The session's token Secret: created once with a random token, never rotated by a reconcile
/// (that would lock out callers mid-session). Returns the token and the session-log token, and
/// remembers them.
async fn ensure_secret(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<SessionTokens> {
    let tokens = ensure_secret_uncached(session, ctx, old).await?;
    if tokens.refused.is_some() {
        // Not remembered: the next reconcile reads the Secret again (deleted by then, perhaps).
        return Ok(tokens);
    }
    ctx.caches.remember_tokens(
        &key(session),
        Tokens {
            uid: session.uid().unwrap_or_default(),
            token: tokens.token.clone(),
            session_log: tokens.session_log.clone(),
        },
    );
    Ok(tokens)
}

/// Creates the Secret first (a new session, the common case, costs one request) and reads it only
/// when it exists already (a restarted operator, or another reconcile that won the race).
async fn ensure_secret_uncached(
    session: &HarnessSession,
    ctx: &Context,
    old: &HarnessSessionStatus,
) -> Result<SessionTokens> {
    let ns = session.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let name = labels::token_secret(&session.name_any());
    // Never the session log's own token: one scoped to this session's runs, which is all a user
    // who can read this Secret, or the worker pod, can then reach.
    let log_token = match session_log_token(ctx).await? {
        Some(server_token) => {
            let scope = resources::run_scope(session).ok_or(Error::MissingField("metadata.uid"))?;
            Some(
                kube_harness_session_log_client::scope::mint(&server_token, &scope)
                    .map_err(Error::SessionLogToken)?,
            )
        }
        None => None,
    };
    let token = new_token();
    let secret = resources::token_secret(session, &token, log_token.as_deref());
    if let Some(created) = create_if_absent(&secrets, &secret).await? {
        return Ok(SessionTokens {
            token,
            session_log: log_token,
            secret_uid: created.uid(),
            refused: None,
        });
    }
    let existing = secrets.get(&name).await?;
    // A Secret the operator did not make for this session (a tenant's, made before it) is never
    // used: its token would be the tenant's choice, and one without its keys stops the worker.
    if let Err(why) = super::trust::owned_secret(&existing, session, old, log_token.is_some()) {
        return Ok(SessionTokens {
            token: String::new(),
            session_log: None,
            secret_uid: None,
            refused: Some(why),
        });
    }
    let token = token_of(&existing).ok_or(Error::MissingField("token Secret key `token`"))?;
    let session_log = existing
        .data
        .as_ref()
        .and_then(|d| d.get("session-log-token"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned());
    Ok(SessionTokens {
        token,
        session_log,
        secret_uid: existing.uid(),
        refused: None,
    })
}

/// The session's bearer token and its session-log token (with a session log), the uid of the
/// Secret that holds them, or why that Secret is not used.
struct SessionTokens {
    token: String,
    session_log: Option<String>,
    secret_uid: Option<String>,
    refused: Option<String>,
}

/// Deletes exactly `pod` (its uid as a precondition, at once): a pod the operator did not make.
/// Already gone, or replaced since, is fine.
async fn delete_exactly(pods: &Api<Pod>, pod: &Pod) -> Result<()> {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(kube::api::Preconditions {
            uid: pod.uid(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    match pods.delete(&pod.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Deletes a worker pod; already gone is fine.
async fn delete_worker(pods: &Api<Pod>, name: &str) -> Result<()> {
    Ok(delete_if_present(pods, name).await?)
}

/// The session log token from the operator's Secret, if a session log is configured.
async fn session_log_token(ctx: &Context) -> Result<Option<String>> {
    let Some(name) = &ctx.config.session_log_token_secret else {
        return Ok(None);
    };
    if let Some(token) = ctx.caches.server_token() {
        return Ok(token);
    }
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let secret = secrets.get(name).await?;
    let token = token_of(&secret).map(|t| t.trim().to_string());
    ctx.caches.remember_server_token(token.clone());
    Ok(token)
}

async fn skills_config_maps(session: &HarnessSession, ctx: &Context) -> Result<Vec<ConfigMap>> {
    let ns = session.namespace().unwrap_or_default();
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), &ns);
    let mut out = Vec::new();
    for skill in &session.spec.workspace.skills {
        if let Some(cm) = api.get_opt(&skill.config_map).await? {
            out.push(cm);
        }
    }
    Ok(out)
}

/// Server-side apply of the whole status, conditioned on the resourceVersion the reconcile read:
/// the tier API (any replica) patches Escalated and currentTier concurrently, and a status
/// computed from an older object must not overwrite those (a 409 retries with the fresh object).
async fn write_status(
    ctx: &Context,
    ns: &str,
    name: &str,
    resource_version: Option<String>,
    status: &HarnessSessionStatus,
) -> Result<Option<String>> {
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), ns);
    let mut patch = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "status": status,
    });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    let written = api
        .patch_status(
            name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(patch),
        )
        .await?;
    Ok(written.resource_version())
}

/// The pod must be replaced: built from another spec, or finished.
fn stale(pod: &Pod, desired: &Pod) -> bool {
    let hash = |p: &Pod| p.annotations().get(labels::SPEC_HASH).cloned();
    hash(pod) != hash(desired) || worker_state(pod) == WorkerState::Gone
}

fn ttl_expired(session: &HarnessSession) -> bool {
    ttl_left(session).is_none() && ttl_end(session).is_some()
}

/// When the session's TTL ends: its creation plus `lifetime.ttlSeconds`.
fn ttl_end(session: &HarnessSession) -> Option<Timestamp> {
    let ttl = session.spec.lifetime.as_ref()?.ttl_seconds?;
    let created = session.metadata.creation_timestamp.as_ref()?.0;
    created
        .checked_add(SignedDuration::from_secs(ttl.min(i64::MAX as u64) as i64))
        .ok()
}

/// How long until the TTL ends (a second past it, so that the reconcile then sees it passed);
/// `None` without a TTL or once it passed.
fn ttl_left(session: &HarnessSession) -> Option<Duration> {
    let left = Timestamp::now().duration_until(ttl_end(session)?);
    (left > SignedDuration::ZERO).then(|| Duration::from_secs(left.as_secs() as u64 + 1))
}

fn ttl_action(session: &HarnessSession) -> TtlAction {
    session
        .spec
        .lifetime
        .as_ref()
        .map(|l| l.action())
        .unwrap_or_default()
}

/// Suspended by `spec.suspend`, or hibernated and no wake request since. A session suspended
/// until now wakes as soon as `spec.suspend` is false, with no wake request.
fn hibernating(session: &HarnessSession, status: &HarnessSessionStatus) -> bool {
    if session.spec.suspend {
        return true;
    }
    if status.phase != Some(Phase::Hibernated) {
        return false;
    }
    let hibernated = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::HIBERNATED && c.status == "True");
    if hibernated.is_some_and(|c| c.reason == reasons::SUSPENDED) {
        return false;
    }
    let since = hibernated.map(|c| c.last_transition_time.0);
    match (since, wake_requested(session)) {
        (Some(since), Some(wake)) => wake <= since,
        _ => true,
    }
}

fn wake_requested(session: &HarnessSession) -> Option<Timestamp> {
    session.annotations().get(labels::WAKE)?.parse().ok()
}

/// Idle past idleHibernateSeconds, by the worker's `last_activity` and the latest wake request.
fn idle_expired(session: &HarnessSession, last_activity: &str) -> bool {
    let idle = session
        .spec
        .lifetime
        .as_ref()
        .and_then(|l| l.idle_hibernate_seconds);
    let last = last_activity.parse::<Timestamp>().ok();
    // A wake request counts as activity: a session woken a moment ago is not idle.
    let last = match (last, wake_requested(session)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    match (idle, last) {
        (Some(idle), Some(last)) => {
            Timestamp::now().duration_since(last) > SignedDuration::from_secs(idle as i64)
        }
        _ => false,
    }
}

/// Seconds from the session's creation, or from its latest wake request, to now.
fn provisioning_started(session: &HarnessSession) -> Option<f64> {
    let created = session.metadata.creation_timestamp.as_ref()?.0;
    let from = wake_requested(session).map_or(created, |w| w.max(created));
    Some(Timestamp::now().duration_since(from).as_secs_f64())
}
