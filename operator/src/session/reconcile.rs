//! Reconciling one HarnessSession: its token Secret, workspace PVC, NetworkPolicy and worker pod;
//! idle hibernation and waking; TTL; status by server-side apply with an Event per change.

use super::events;
use super::observe::{worker_state, WorkerState};
use super::resources;
use super::usage;
use crate::context::Context;
use crate::error::{Error, Result};
use crate::labels::{self, FINALIZER, MANAGER};
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{finalizer, Event as Finalizer};
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::{self, types};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, Phase, SandboxTier};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// Requeue while the worker is Ready: how often usage counters and idleness are refreshed.
const READY_REQUEUE: Duration = Duration::from_secs(15);
/// Requeue while waiting for something that emits no watch event (a missing tier).
const WAIT_REQUEUE: Duration = Duration::from_secs(10);

pub async fn reconcile(session: Arc<HarnessSession>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    let ns = session
        .namespace()
        .ok_or(Error::MissingField("metadata.namespace"))?;
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
    let result = finalizer(&api, FINALIZER, session, |event| async {
        match event {
            Finalizer::Apply(s) => apply(s, &ctx).await,
            Finalizer::Cleanup(s) => cleanup(s, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.metrics
        .reconciled("harnesssession", started.elapsed().as_secs_f64());
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

/// A 409 from the resourceVersion-conditioned status write.
fn is_conflict(error: &Error) -> bool {
    use kube::runtime::finalizer::Error as F;
    matches!(
        error,
        Error::Finalizer(f) if matches!(
            f.as_ref(),
            F::ApplyFailed(Error::Kube(kube::Error::Api(e))) if e.code == 409
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
    delete_worker(&pods, &session).await?;
    // Tier-1 pods live in the operator's namespace: no owner reference can reach them.
    crate::tier1::sweep::delete_for_session(ctx, &ns, &session.name_any()).await?;
    events::publish(
        ctx,
        &*session,
        false,
        "Deleting",
        "worker pod and Tier-1 pods deleted; the workspace PVC, token Secret and NetworkPolicy follow by owner reference",
        "Cleanup",
    )
    .await;
    ctx.metrics.session(&key(&session), None);
    ctx.succeeded(&key(&session));
    Ok(Action::await_change())
}

/// Everything the apply path learned, turned into status at the end.
struct Observed {
    status: HarnessSessionStatus,
    requeue: Option<Duration>,
}

async fn apply(session: Arc<HarnessSession>, ctx: &Context) -> Result<Action> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let generation = session.metadata.generation;
    let old = session.status.clone().unwrap_or_default();
    let mut status = old.clone();
    status.observed_generation = generation;

    if ttl_expired(&session) {
        let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), &ns);
        events::publish(
            ctx,
            &*session,
            false,
            "TTLExpired",
            "the session's ttlSeconds passed; deleting it",
            "Expire",
        )
        .await;
        api.delete(&name, &DeleteParams::default()).await?;
        return Ok(Action::await_change());
    }

    let observed = match ensure(&session, ctx, status).await? {
        Ok(o) => o,
        Err(o) => o,
    };
    let status = observed.status;
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
            ctx.metrics.provisioned(since);
        }
    }
    if status != old {
        write_status(ctx, &ns, &name, session.resource_version(), &status).await?;
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
    Ok(observed
        .requeue
        .map(Action::requeue)
        .unwrap_or_else(Action::await_change))
}

/// The apply steps in order. `Err(observed)` is an early stop with a status to report (a missing
/// tier), not a failure of the reconcile.
async fn ensure(
    session: &HarnessSession,
    ctx: &Context,
    mut status: HarnessSessionStatus,
) -> Result<Result<Observed, Observed>> {
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let generation = session.metadata.generation;
    let tiers: Api<SandboxTier> = Api::all(ctx.client.clone());

    // The level-0 tier that defines the worker pod.
    let worker_tier = match tiers.get_opt(&session.spec.worker_tier).await? {
        Some(t) if t.spec.level == 0 => t,
        found => {
            let (reason, message) = match found {
                Some(t) => (
                    "WorkerTierNotLevelZero",
                    format!(
                        "SandboxTier {} has level {}; workerTier must name a level-0 tier",
                        t.name_any(),
                        t.spec.level
                    ),
                ),
                None => (
                    "WorkerTierNotFound",
                    format!("SandboxTier {} does not exist", session.spec.worker_tier),
                ),
            };
            condition::set(
                &mut status.conditions,
                types::DEGRADED,
                true,
                reason,
                message.clone(),
                generation,
            );
            condition::set(
                &mut status.conditions,
                types::READY,
                false,
                reason,
                message,
                generation,
            );
            status.phase = Some(Phase::Pending);
            return Ok(Err(Observed {
                status,
                requeue: Some(WAIT_REQUEUE),
            }));
        }
    };
    let serving_level = escalation_condition(session, ctx, &tiers, &mut status).await?;

    let token = ensure_secret(session, ctx).await?;
    apply_owned::<PersistentVolumeClaim>(ctx, &ns, &resources::workspace_pvc(session)).await?;
    apply_owned::<NetworkPolicy>(ctx, &ns, &resources::network_policy(session, &ctx.config))
        .await?;
    status.token_secret = Some(labels::token_secret(&name));

    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let pod_name = labels::worker_pod(&name);
    let existing = pods.get_opt(&pod_name).await?;

    // Hibernation: an idle worker is deleted, the PVC stays; a wake request brings it back.
    if hibernating(session, &status) {
        if let Some(pod) = &existing {
            if pod.metadata.deletion_timestamp.is_none() {
                pods.delete(&pod_name, &DeleteParams::default()).await?;
            }
        }
        status.phase = Some(Phase::Hibernated);
        status.worker_endpoint = None;
        status.worker_pod = None;
        return Ok(Ok(Observed {
            status,
            requeue: None,
        }));
    }
    if status.phase == Some(Phase::Hibernated) {
        condition::set(
            &mut status.conditions,
            types::HIBERNATED,
            false,
            "WakeRequested",
            "a command asked for the session; starting its worker",
            generation,
        );
    }

    let config_maps = skills_config_maps(session, ctx).await?;
    let desired = resources::worker_pod(session, &worker_tier.spec, &ctx.config, &config_maps);
    let pod = match existing {
        Some(pod) if stale(&pod, &desired) => {
            if pod.metadata.deletion_timestamp.is_none() {
                pods.delete(&pod_name, &DeleteParams::default()).await?;
            }
            None
        }
        Some(pod) => Some(pod),
        None => create_if_absent(&pods, &desired).await?,
    };

    let state = pod
        .as_ref()
        .map(worker_state)
        .unwrap_or(WorkerState::Starting {
            reason: "WorkerStarting".into(),
        });
    status.worker_pod = Some(pod_name);
    condition::set(
        &mut status.conditions,
        types::HIBERNATED,
        false,
        "Awake",
        "the worker pod is kept",
        generation,
    );
    let requeue = match state {
        WorkerState::Ready { ip } => {
            status.worker_endpoint = Some(format!("{ip}:{}", ctx.config.worker_port));
            if let Some(report) = usage::poll(&ip, ctx.config.worker_port, &token).await {
                status.current_tier = Some(report.tier);
                status.usage = Some(report.usage);
                status.last_activity_time = Some(report.last_activity);
                if !report.busy && idle_expired(session, &status) {
                    return hibernate(session, ctx, status).await.map(Ok);
                }
            }
            status.current_tier.get_or_insert(0);
            status.phase = Some(Phase::Ready);
            condition::set(
                &mut status.conditions,
                types::READY,
                true,
                "WorkerReady",
                "the worker pod is running and answers on its API",
                generation,
            );
            condition::set(
                &mut status.conditions,
                types::DEGRADED,
                false,
                "AsExpected",
                "nothing is wrong",
                generation,
            );
            Some(READY_REQUEUE)
        }
        WorkerState::Starting { reason } => {
            status.worker_endpoint = None;
            status.phase = Some(Phase::Provisioning);
            condition::set(
                &mut status.conditions,
                types::READY,
                false,
                "WorkerStarting",
                format!("waiting for the worker pod ({reason})"),
                generation,
            );
            condition::set(
                &mut status.conditions,
                types::DEGRADED,
                false,
                "AsExpected",
                "nothing is wrong",
                generation,
            );
            Some(WAIT_REQUEUE)
        }
        WorkerState::Failing { reason, message } => {
            status.worker_endpoint = None;
            status.phase = Some(Phase::Failed);
            condition::set(
                &mut status.conditions,
                types::READY,
                false,
                "WorkerFailing",
                format!("{reason}: {message}"),
                generation,
            );
            condition::set(
                &mut status.conditions,
                types::DEGRADED,
                true,
                "WorkerFailing",
                format!("the worker pod cannot start: {reason}: {message}"),
                generation,
            );
            Some(WAIT_REQUEUE)
        }
        WorkerState::Gone => {
            delete_worker(&pods, session).await?;
            status.worker_endpoint = None;
            status.phase = Some(Phase::Provisioning);
            condition::set(
                &mut status.conditions,
                types::READY,
                false,
                "WorkerStarting",
                "the worker pod ended; replacing it",
                generation,
            );
            Some(Duration::from_secs(1))
        }
    };
    // While a Tier-1 pod serves, that is where commands run (whatever the worker said last).
    if let Some(level) = serving_level {
        status.current_tier = Some(level);
    }
    Ok(Ok(Observed { status, requeue }))
}

/// Escalated says what an escalating command meets: refused (no usable tier, with why), a Tier-1
/// pod (True while one serves), or how the last one went. The tier API sets it as it happens; this
/// derives the same from the Tier-1 pods, so a lost write converges. Returns the tier level while
/// a Tier-1 pod serves.
async fn escalation_condition(
    session: &HarnessSession,
    ctx: &Context,
    tiers: &Api<SandboxTier>,
    status: &mut HarnessSessionStatus,
) -> Result<Option<u8>> {
    use crate::tier1::report::reasons;
    use crate::tier1::state::{self, Phase as T1};
    let generation = session.metadata.generation;
    let refused = |reason: &str, message: String| (false, reason.to_string(), message);
    let wanted = resources::escalation_tier(session).map(str::to_string);
    let mut serving = None;
    let (escalated, reason, message) = match wanted {
        None => refused("NoEscalationTier", "no escalation tier is configured: commands that need more than Tier-0 are refused with exit 126".to_string()),
        Some(t) => match tiers.get_opt(&t).await? {
            None => refused("EscalationTierNotFound", format!("SandboxTier {t} does not exist: escalating commands are refused with exit 126")),
            Some(tier) if tier.spec.level == 0 => refused("EscalationTierIsLevelZero", format!("SandboxTier {t} is a level-0 tier: escalating commands are refused with exit 126")),
            Some(_) if ctx.config.tier_api_url.is_none() => refused("EscalationNotConfigured", format!("escalation to SandboxTier {t} needs the operator's tier API URL (--tier-api-url): escalating commands are refused with exit 126")),
            Some(tier) => {
                let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
                let selector = crate::tier1::pod::serving_selector(
                    &session.namespace().unwrap_or_default(),
                    &session.name_any(),
                    None,
                );
                let phases: Vec<(String, T1)> = pods
                    .list(&kube::api::ListParams::default().labels(&selector))
                    .await?
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                    .map(|p| (p.name_any(), state::phase(p)))
                    .collect();
                let now = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == types::ESCALATED)
                    .map(|c| c.reason.clone())
                    .unwrap_or_default();
                let ready = phases.iter().find(|(_, p)| matches!(p, T1::Ready { .. }));
                let failed = phases.iter().find_map(|(n, p)| match p {
                    T1::Failed { reason, message } => Some((n, reason, message)),
                    _ => None,
                });
                if let Some((pod, _)) = ready {
                    serving = Some(tier.spec.level);
                    (true, reasons::READY.to_string(), format!("Tier-1 pod {pod} of SandboxTier {t} serves a turn"))
                } else if let Some((pod, why, message)) = failed {
                    (false, reasons::FAILED.to_string(), format!("Tier-1 pod {pod} of SandboxTier {t} failed: {why}: {message}"))
                } else if let Some((pod, _)) = phases.first() {
                    (false, reasons::PROVISIONING.to_string(), format!("Tier-1 pod {pod} of SandboxTier {t} is starting"))
                } else if now == reasons::READY || now == reasons::PROVISIONING {
                    (false, reasons::ENDED.to_string(), format!("the turn's Tier-1 pod of SandboxTier {t} is gone"))
                } else if now == reasons::ENDED || now == reasons::FAILED {
                    return Ok(None);
                } else {
                    (false, "Tier1Available".to_string(), format!("escalating commands run on a Tier-1 pod of SandboxTier {t} (level {})", tier.spec.level))
                }
            }
        },
    };
    // The tier API's message names the turn; keep it while status and reason agree.
    let same = status.conditions.iter().any(|c| {
        c.type_ == types::ESCALATED && c.reason == reason && (c.status == "True") == escalated
    });
    if !same || !reason.starts_with("Tier1") {
        condition::set(
            &mut status.conditions,
            types::ESCALATED,
            escalated,
            &reason,
            message,
            generation,
        );
    }
    Ok(serving)
}

/// The session's token Secret: created once with a random token, never rotated by a reconcile
/// (that would lock out callers mid-session). Returns the token.
async fn ensure_secret(session: &HarnessSession, ctx: &Context) -> Result<String> {
    let ns = session.namespace().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let name = labels::token_secret(&session.name_any());
    if let Some(existing) = secrets.get_opt(&name).await? {
        let token = existing
            .data
            .as_ref()
            .and_then(|d| d.get("token"))
            .map(|b| String::from_utf8_lossy(&b.0).into_owned())
            .ok_or(Error::MissingField("token Secret key `token`"))?;
        return Ok(token);
    }
    // Never the session log's own token: one scoped to this session's runs, which is all a user
    // who can read this Secret, or the worker pod, can then reach.
    let log_token = match session_log_token(ctx).await? {
        Some(server_token) => {
            let scope = resources::run_scope(session).ok_or(Error::MissingField("metadata.uid"))?;
            Some(
                kube_harness_session_log::scope::mint(&server_token, &scope)
                    .map_err(Error::SessionLogToken)?,
            )
        }
        None => None,
    };
    let token = resources::new_token();
    let secret = resources::token_secret(session, &token, log_token.as_deref());
    match create_if_absent(&secrets, &secret).await? {
        Some(_) => Ok(token),
        // Another reconcile created it first: use theirs.
        None => Box::pin(ensure_secret(session, ctx)).await,
    }
}

/// Creates `obj`; `None` when an object of that name already exists (409), which a later
/// reconcile reads instead.
pub(crate) async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> Result<Option<K>>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let params = PostParams {
        field_manager: Some(MANAGER.into()),
        ..PostParams::default()
    };
    match api.create(&params, obj).await {
        Ok(created) => Ok(Some(created)),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Deletes the session's worker pod; already gone is fine.
async fn delete_worker(pods: &Api<Pod>, session: &HarnessSession) -> Result<()> {
    match pods
        .delete(
            &labels::worker_pod(&session.name_any()),
            &DeleteParams::default(),
        )
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// The session log token from the operator's Secret, if a session log is configured.
async fn session_log_token(ctx: &Context) -> Result<Option<String>> {
    let Some(name) = &ctx.config.session_log_token_secret else {
        return Ok(None);
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let secret = secrets.get(name).await?;
    Ok(secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8_lossy(&b.0).trim().to_string()))
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

/// Server-side apply of an object the operator owns (a session's, or a tier's NetworkPolicy).
pub(crate) async fn apply_owned<K>(ctx: &Context, ns: &str, obj: &K) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    let mut value = serde_json::to_value(obj)?;
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    api.patch(
        &name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(value),
    )
    .await?;
    Ok(())
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
) -> Result<()> {
    let api: Api<HarnessSession> = Api::namespaced(ctx.client.clone(), ns);
    let mut patch = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "status": status,
    });
    if let Some(rv) = resource_version {
        patch["metadata"] = json!({ "resourceVersion": rv });
    }
    api.patch_status(
        name,
        &PatchParams::apply(MANAGER).force(),
        &Patch::Apply(patch),
    )
    .await?;
    Ok(())
}

/// The pod must be replaced: built from another spec, or finished.
fn stale(pod: &Pod, desired: &Pod) -> bool {
    let hash = |p: &Pod| p.annotations().get(labels::SPEC_HASH).cloned();
    hash(pod) != hash(desired) || worker_state(pod) == WorkerState::Gone
}

fn ttl_expired(session: &HarnessSession) -> bool {
    let ttl = session.spec.lifetime.as_ref().and_then(|l| l.ttl_seconds);
    let created = session.metadata.creation_timestamp.as_ref().map(|t| t.0);
    match (ttl, created) {
        (Some(ttl), Some(created)) => {
            Timestamp::now().duration_since(created) > SignedDuration::from_secs(ttl as i64)
        }
        _ => false,
    }
}

/// Hibernated and no wake request since.
fn hibernating(session: &HarnessSession, status: &HarnessSessionStatus) -> bool {
    if status.phase != Some(Phase::Hibernated) {
        return false;
    }
    let since = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::HIBERNATED && c.status == "True")
        .map(|c| c.last_transition_time.0);
    match (since, wake_requested(session)) {
        (Some(since), Some(wake)) => wake <= since,
        _ => true,
    }
}

fn wake_requested(session: &HarnessSession) -> Option<Timestamp> {
    session.annotations().get(labels::WAKE)?.parse().ok()
}

fn idle_expired(session: &HarnessSession, status: &HarnessSessionStatus) -> bool {
    let idle = session
        .spec
        .lifetime
        .as_ref()
        .and_then(|l| l.idle_hibernate_seconds);
    let last = status
        .last_activity_time
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok());
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

async fn hibernate(
    session: &HarnessSession,
    ctx: &Context,
    mut status: HarnessSessionStatus,
) -> Result<Observed> {
    let ns = session.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    delete_worker(&pods, session).await?;
    let generation = session.metadata.generation;
    status.phase = Some(Phase::Hibernated);
    status.worker_endpoint = None;
    status.worker_pod = None;
    condition::set(&mut status.conditions, types::HIBERNATED, true, "IdleTimeout", "no command for idleHibernateSeconds: the worker pod was deleted and the workspace PVC kept; the next exec wakes the session", generation);
    condition::set(
        &mut status.conditions,
        types::READY,
        false,
        "Hibernated",
        "the session is hibernated; the next exec wakes it",
        generation,
    );
    Ok(Observed {
        status,
        requeue: None,
    })
}

/// Seconds from the session's creation, or from its latest wake request, to now.
fn provisioning_started(session: &HarnessSession) -> Option<f64> {
    let created = session.metadata.creation_timestamp.as_ref()?.0;
    let from = wake_requested(session).map_or(created, |w| w.max(created));
    Some(Timestamp::now().duration_since(from).as_secs_f64())
}
