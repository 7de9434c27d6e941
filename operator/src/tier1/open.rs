//! Opening a turn's sandbox: find the pod already serving the turn (the request is idempotent),
//! else claim a prepared warm-pool pod, else create an ordinary one. Everything is decided from
//! the API server's state (labels, resourceVersions), so any replica can answer and a retry after
//! a crash lands on the same pod.

use super::pod::{self, MissReason, Purpose, Serving};
use crate::context::Context;
use crate::kube_util::{apply_owned, create_if_absent, delete_if_present, new_token, secret_token};
use crate::labels;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessSession, SandboxTier};
use serde_json::json;

/// Failure of an open the worker must not guess about.
#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    /// A claim patch failed without a definite answer: the pod may or may not be ours.
    #[error("uncertain claim of warm pod {pod}: {source}")]
    Uncertain {
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("{0}")]
    Api(#[from] crate::Error),
}

impl From<kube::Error> for OpenError {
    fn from(e: kube::Error) -> Self {
        OpenError::Api(crate::Error::Kube(e))
    }
}

/// How a pooled tier's open went.
#[derive(Debug)]
pub enum Claim {
    /// The pod, claimed, and its token as read beside the claim (`None`: the read failed).
    Claimed {
        pod: Box<Pod>,
        token: Option<Option<String>>,
    },
    Miss(MissReason),
}

/// Every Tier-1 pod of the session (serving a turn, or kept idle for the next), by name. One
/// list answers both "which pod serves this turn" ([`of_turn`]) and "which kept pod may serve a
/// new one" ([`kept`]).
pub async fn session_pods(
    ctx: &Context,
    session_namespace: &str,
    session: &str,
) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), session_namespace);
    let selector = pod::session_selector(session_namespace, session);
    let mut found = pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items;
    found.sort_by_key(|p| p.name_any());
    Ok(found)
}

/// The pods of `pods` that belong to the session object with `uid` (not to an earlier session of
/// the same name, see [`super::record::belongs`]).
pub fn of_session_object(pods: Vec<Pod>, uid: Option<&str>) -> Vec<Pod> {
    pods.into_iter()
        .filter(|p| super::record::belongs(p.labels(), uid))
        .collect()
}

/// The pods of `pods` labelled with `turn` (normally one), by name.
pub fn of_turn(pods: &[Pod], turn: &str) -> Vec<Pod> {
    let label = pod::turn_label(turn);
    pods.iter()
        .filter(|p| p.labels().get(labels::TURN) == Some(&label))
        .cloned()
        .collect()
}

/// The turn's pod: the one its record names when there is a record (`None` when that pod is not
/// among `turn_pods`), else the first.
pub fn chosen<'a>(turn_pods: &'a [Pod], recorded: Option<&str>) -> Option<&'a Pod> {
    match recorded {
        Some(holder) => turn_pods.iter().find(|p| p.name_any() == holder),
        None => turn_pods.first(),
    }
}

/// The kept pods of `pods` that may serve a new turn of `session` (docs/tier1.md, "Lifetimes"):
/// idle (no turn label), labelled with exactly this session's namespace, name and uid, built from
/// `tier`'s current template (`hash`), Ready, not being deleted, still within their idle time, and
/// opened by the same worker (`worker_uid`). Every label is checked here on the object as read,
/// not only by the list's selector.
pub fn kept(
    pods: &[Pod],
    session: &HarnessSession,
    tier: &SandboxTier,
    hash: &str,
    worker_uid: Option<&str>,
    now: k8s_openapi::jiff::Timestamp,
) -> Vec<Pod> {
    let (Some(ns), Some(uid), Some(worker)) = (
        session.metadata.namespace.as_deref(),
        session.metadata.uid.as_deref(),
        worker_uid,
    ) else {
        return Vec::new();
    };
    let name = session.name_any();
    let tier_name = tier.name_any();
    pods.iter()
        .filter(|p| {
            let l = p.labels();
            let is = |k: &str, v: &str| l.get(k).map(String::as_str) == Some(v);
            p.metadata.deletion_timestamp.is_none()
                && !l.contains_key(labels::TURN)
                && is(labels::ROLE, labels::ROLE_TIER1)
                && is(labels::SESSION_NAMESPACE, ns)
                && is(labels::SESSION, &name)
                && is(labels::SESSION_UID, uid)
                && is(labels::TIER, &tier_name)
                && is(labels::TEMPLATE_HASH, hash)
                && p.annotations().get(labels::WORKER_UID).map(String::as_str) == Some(worker)
                && pod::passed(p, labels::IDLE_UNTIL, now) == Some(false)
                && matches!(super::state::phase(p), super::state::Phase::Ready { .. })
        })
        .cloned()
        .collect()
}

/// The idle pool pods of `tier` in `namespace` (the session's) built from its current template
/// (by the template hash label).
pub async fn pool_pods(
    ctx: &Context,
    tier: &SandboxTier,
    namespace: &str,
) -> Result<Vec<Pod>, kube::Error> {
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), namespace);
    let selector = format!(
        "{},{}={}",
        pod::pool_selector(&tier.name_any()),
        labels::TEMPLATE_HASH,
        pod::template_hash(tier, &ctx.config)
    );
    Ok(pods
        .list(&ListParams::default().labels(&selector))
        .await?
        .items)
}

/// Whether a claim may be tried at all for a workspace of `workspace_bytes` in `namespace`: the
/// pool serves that namespace, not over the prepared-pod limit, and the pool's state known. Asked
/// before the pool's pods.
pub fn claimable(
    ctx: &Context,
    tier: &SandboxTier,
    namespace: &str,
    workspace_bytes: u64,
) -> Result<(), MissReason> {
    if !tier
        .spec
        .warm_pool
        .namespaces
        .iter()
        .any(|n| n == namespace)
    {
        return Err(MissReason::NamespaceNotServed);
    }
    let limit = tier
        .spec
        .warm_pool
        .max_workspace_bytes
        .unwrap_or(ctx.config.prepared_max_bytes);
    if workspace_bytes > limit {
        return Err(MissReason::WorkspaceTooLarge);
    }
    if tier.status.as_ref().and_then(|s| s.warm_ready).is_none() {
        return Err(MissReason::Unreported);
    }
    Ok(())
}

/// The pods of `pool` (see [`pool_pods`]) a claim may take: the ready ones, by name.
pub fn candidates(pool: Vec<Pod>) -> Result<Vec<Pod>, MissReason> {
    let mut candidates: Vec<Pod> = pool
        .into_iter()
        .filter(|p| matches!(super::state::phase(p), super::state::Phase::Ready { .. }))
        .collect();
    if candidates.is_empty() {
        return Err(MissReason::StockEmpty);
    }
    candidates.sort_by_key(|p| p.name_any());
    Ok(candidates)
}

/// What a claim takes: an idle pool pod, or a pod the session kept from an earlier turn.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Take {
    Pool,
    Kept,
}

/// Tries to claim one of `candidates` (see [`candidates`] and [`kept`]) for `serving`. Each
/// claim is a patch carrying the pod's resourceVersion: of two replicas racing for one pod,
/// exactly one wins (the other gets 409 and tries the next pod). The pod's token is read beside
/// each patch (a Tier-1 pod's token Secret is made with it and never changes), so a won claim
/// needs no request more.
pub async fn claim(
    ctx: &Context,
    serving: &Serving,
    candidates: Vec<Pod>,
    take: Take,
) -> Result<Claim, OpenError> {
    let started = std::time::Instant::now();
    let step = |what: &str, pod: &str| {
        tracing::debug!(
            pod,
            ms = started.elapsed().as_secs_f64() * 1e3,
            "tier-1 claim: {what}"
        )
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &serving.session_namespace);
    let (mut labels_patch, annotations) = pod::serving_metadata(serving);
    let mut annotations = json!(annotations);
    match take {
        Take::Pool => {
            labels_patch.insert(labels::CLAIMED.into(), "true".into());
        }
        Take::Kept => {
            // Its agent holds the last turn's workspace: the worker replaces it (docs/tier1.md).
            annotations[labels::REUSED] = json!("true");
            annotations[labels::IDLE_UNTIL] = serde_json::Value::Null;
        }
    }
    for candidate in candidates {
        let name = candidate.name_any();
        // Only pods of the session's namespace are candidates (listed there); checked again on
        // the object, as a pod elsewhere would serve outside the session's quota.
        if candidate.namespace().as_deref() != Some(serving.session_namespace.as_str()) {
            continue;
        }
        // Labels, names and the template hash are a tenant's to forge in its namespace: only a
        // pod the operator made and proved (crate::origin) is claimed; any other is deleted.
        if !ctx.origin.proves(&candidate) {
            crate::origin::guard::refuse(ctx, &candidate, "a Tier-1 pod").await?;
            continue;
        }
        let patch = json!({"metadata": {
            "resourceVersion": candidate.resource_version(),
            "labels": labels_patch,
            "annotations": annotations,
        }});
        let params = PatchParams {
            field_manager: Some(labels::MANAGER.into()),
            ..PatchParams::default()
        };
        let patch = Patch::Merge(patch);
        let (patched, token) = tokio::join!(
            pods.patch(&name, &params, &patch),
            token(ctx, &serving.session_namespace, &name)
        );
        match patched {
            Ok(claimed) => {
                step("claimed", &name);
                return Ok(Claim::Claimed {
                    pod: Box::new(claimed),
                    // Not read (an error): the answer reads it again.
                    token: token.ok(),
                });
            }
            // Someone else changed it first (claimed it, or it was deleted): the next one.
            Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => {
                step("taken first", &name);
            }
            Err(source) => return Err(OpenError::Uncertain { pod: name, source }),
        }
    }
    Ok(Claim::Miss(MissReason::SlotUnavailable))
}

/// Keeps `pod` for its session's next turn instead of deleting it (the tier's
/// idleTimeoutSeconds > 0): its turn label and turn annotations go, and it is idle until
/// `idle_seconds` from now. Conditioned on the pod's resourceVersion; `false` when the pod changed
/// or went meanwhile (the caller deletes it instead).
pub async fn release(ctx: &Context, pod: &Pod, idle_seconds: u32) -> Result<bool, kube::Error> {
    let pods: Api<Pod> = in_namespace_of(ctx, pod);
    let mut released = serde_json::Map::new();
    for key in [labels::TURN_ID, labels::TURN_STARTED, labels::TURN_DEADLINE] {
        released.insert(key.into(), serde_json::Value::Null);
    }
    released.insert(
        labels::IDLE_UNTIL.into(),
        json!(pod::seconds_from_now(u64::from(idle_seconds))),
    );
    let mut turn = serde_json::Map::new();
    turn.insert(labels::TURN.into(), serde_json::Value::Null);
    let patch = json!({"metadata": {
        "resourceVersion": pod.resource_version(),
        "labels": turn,
        "annotations": released,
    }});
    let params = PatchParams {
        field_manager: Some(labels::MANAGER.into()),
        ..PatchParams::default()
    };
    match pods
        .patch(&pod.name_any(), &params, &Patch::Merge(patch))
        .await
    {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// Creates (or finds) the ordinary pod of the turn and its token Secret.
pub async fn ordinary(
    ctx: &Context,
    tier: &SandboxTier,
    serving: Serving,
) -> Result<Pod, OpenError> {
    let ns = serving.session_namespace.clone();
    let name = pod::ordinary_name(&serving.session_namespace, &serving.session, &serving.turn);
    // The tier's policy in this namespace before its first pod there (idempotent).
    apply_owned::<NetworkPolicy>(&ctx.client, &ns, &pod::network_policy(tier, &ns)).await?;
    let purpose = Purpose::Serving(serving);
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ns);
    let secret = pod::token_secret(&name, tier, &purpose, &ctx.config, &new_token());
    create_if_absent(&secrets, &secret).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let desired = pod::pod(&name, tier, &purpose, &ctx.config);
    let pod = match create_if_absent(&pods, &desired).await {
        Ok(Some(created)) => crate::origin::guard::stamp(ctx, created).await?,
        // Made by an earlier open of the turn, or planted under the turn's name: the answer
        // refuses it unless it carries the proof.
        Ok(None) => pods.get(&name).await?,
        // Refused (a quota, admission): its Secret would serve nothing.
        Err(e) => {
            if let Err(left) = delete_if_present(&secrets, &name).await {
                tracing::warn!(error = %left, secret = %name, "deleting the Secret of a refused Tier-1 pod; the sweep will");
            }
            return Err(e.into());
        }
    };
    // The token Secret goes with the pod only to a pod the operator made.
    if ctx.origin.proves(&pod) {
        adopt_secret(ctx, &pod).await?;
    }
    Ok(pod)
}

/// Makes the pod the owner of its token Secret, so the garbage collector deletes the Secret with
/// the pod however the pod goes (deleted by hand, by the sweep, or with its tier).
pub async fn adopt_secret(ctx: &Context, pod: &Pod) -> Result<(), kube::Error> {
    let secrets: Api<Secret> = in_namespace_of(ctx, pod);
    let owner = json!([{
        "apiVersion": "v1",
        "kind": "Pod",
        "name": pod.name_any(),
        "uid": pod.metadata.uid,
    }]);
    let params = PatchParams {
        field_manager: Some(labels::MANAGER.into()),
        ..PatchParams::default()
    };
    secrets
        .patch(
            &pod.name_any(),
            &params,
            &Patch::Merge(json!({"metadata": {"ownerReferences": owner}})),
        )
        .await?;
    Ok(())
}

/// The token of a Tier-1 pod in `namespace` (its Secret of the same name).
pub async fn token(
    ctx: &Context,
    namespace: &str,
    pod: &str,
) -> Result<Option<String>, kube::Error> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), namespace);
    secret_token(&secrets, pod).await
}

/// An API for objects of kind `K` in the namespace of `pod` (a Tier-1 pod's token Secret is
/// beside it).
pub fn in_namespace_of<K>(ctx: &Context, pod: &Pod) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    <K as kube::Resource>::DynamicType: Default,
{
    Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default())
}

/// Which object a delete may hit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exactly {
    /// The pod as read (its uid): never another pod made under the same name since.
    Object,
    /// The pod as read, unchanged since (uid and resourceVersion): for a decision made on what
    /// was read (a sweep's, a pool's), which a claim or a release in between voids.
    Version,
}

/// Deletes a Tier-1 pod (with a precondition, see [`Exactly`]) and then its token Secret.
/// `false`: the precondition failed (the pod changed, or is another one now) and nothing was
/// deleted; already gone is `true`.
pub async fn delete(ctx: &Context, pod: &Pod, exactly: Exactly) -> Result<bool, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: match exactly {
                Exactly::Object => None,
                Exactly::Version => pod.metadata.resource_version.clone(),
            },
        }),
        ..DeleteParams::default()
    };
    let pods: Api<Pod> = in_namespace_of(ctx, pod);
    match pods.delete(&pod.name_any(), &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(kube::Error::Api(e)) if e.code == 409 => return Ok(false),
        Err(e) => return Err(e),
    }
    // The Secret has the pod's name, made with the pod (a pool pod's, or a turn's ordinary pod's
    // under a name unique to the turn) and owned by it.
    delete_if_present(&in_namespace_of::<Secret>(ctx, pod), &pod.name_any()).await?;
    Ok(true)
}
