//! A new session adopting a warm pod: pick a ready idle pod of its worker tier's pool in its
//! namespace, claim it (a resourceVersion-conditioned patch, so two sessions never get one pod),
//! hand it and its PVC to the session (labels, owner), and bind the session to the pooled worker
//! (`POST /v1/adopt` with the pool's token). The session is Ready only once the worker reports the
//! same adoption digest (checked by the session reconcile). Any miss starts the session cold,
//! with its reason counted.

use super::objects::{self, ADOPTED, POOL_WORKSPACE_SIZE};
use crate::context::Context;
use crate::error::Result;
use crate::kube_util::{delete_if_present, pod_condition, secret_token};
use crate::labels;
use crate::session::resources;
use base64::Engine as _;
use k8s_openapi::api::core::v1::{ConfigMap, PersistentVolumeClaim, Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_protocol::worker_api::{
    adoption_settings, AdoptRequest, AdoptResponse, SkillFile,
};
use serde_json::json;
use std::time::Duration;

/// How long the pooled worker may take to answer the adoption.
const ADOPT_TIMEOUT: Duration = Duration::from_secs(5);
/// Candidates tried when other sessions claim the same pods first.
const CLAIM_TRIES: usize = 3;

/// What the warm pool did for a new session.
#[derive(Debug)]
pub enum Outcome {
    /// The tier keeps no pool: a cold start, and no miss.
    NoPool,
    /// A cold start, for this reason (a metric label and an Event).
    Miss(&'static str),
    /// This pod (claimed, owned and bound) is the session's worker now.
    Adopted(Box<Pod>),
}

/// The first half of an adoption: a pod claimed for the session, or why there is none.
pub enum Claim {
    /// Nothing claimed: this outcome is final.
    Done(Outcome),
    /// Claimed and labelled for the session; [`bind`] finishes it.
    Claimed(Box<Claimed>),
}

/// A claimed pod and what binding it takes.
pub struct Claimed {
    pod: Pod,
    /// Claimed by this session before (the operator stopped between the claim and the status).
    resumed: bool,
    /// The adoption request, without the session's tokens yet.
    req: AdoptRequest,
    /// The pool's token (read while the claim was made), if its Secret exists.
    pool_token: Option<String>,
}

/// The session's secrets, as the adoption hands them over.
pub struct Tokens {
    pub token: String,
    pub session_log: Option<String>,
}

/// Claims a warm pod of `tier` for `session`. It needs nothing from the session's own children, so
/// the reconcile makes it while it creates them (docs/performance.md, "Warm start").
/// `desired_hash(claim, uid)`: the spec hash of the worker pod the session would get with that
/// claim and uid (a later spec change then replaces the adopted pod as it would a cold one).
pub async fn claim(
    session: &HarnessSession,
    tier: &SandboxTier,
    ctx: &Context,
    config_maps: &[ConfigMap],
    desired_hash: impl Fn(&str, i64) -> String,
) -> Result<Claim> {
    let miss = |why| Ok(Claim::Done(Outcome::Miss(why)));
    let pool = &tier.spec.warm_pool;
    if pool.size == 0 {
        return Ok(Claim::Done(Outcome::NoPool));
    }
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    if !pool.namespaces.contains(&ns) {
        return miss("namespace-not-served");
    }
    let ws = &session.spec.workspace;
    if ws.size != POOL_WORKSPACE_SIZE || ws.storage_class_name.is_some() {
        return miss("workspace-differs");
    }
    // A pool pod mounts no Persistent Dir source (nor the group that shares them).
    if !ws.persistent_dirs.is_empty() {
        return miss("persistent-dirs");
    }
    let Some(req) = request(session, ctx, config_maps) else {
        return miss("skills-missing");
    };
    let settings = adoption_settings(&req);
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    // From the operator's own pod watch; a pod it shows idle that is not any more fails its claim
    // (409) and the next one is tried. Nothing there (a cache still filling after a start): from
    // the API server's watch cache (resourceVersion 0).
    let mut all = pool_pods_cached(ctx, &ns, &tier.name_any());
    if all.is_empty() {
        all = pods
            .list(
                &ListParams::default()
                    .match_any()
                    .labels(&objects::pool_selector(&tier.name_any())),
            )
            .await?
            .items;
    }
    // Only pods the operator made and proved (crate::origin): labels, owner references and
    // the template hash are a tenant's to forge. A Ready one without the proof is deleted (one
    // still starting may be the pool's own, proven a moment after its create).
    let (all, unproven): (Vec<Pod>, Vec<Pod>) = all.into_iter().partition(|p| ctx.origin.proves(p));
    for p in unproven
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && ready_ip(p).is_some())
    {
        let what = format!("a warm pod of SandboxTier {}", tier.name_any());
        crate::origin::guard::refuse(ctx, p, &what).await?;
    }
    let uid = session.meta().uid.clone().unwrap_or_default();
    let mine = all.iter().find(|p| {
        p.labels().get(labels::SESSION) == Some(&name)
            && p.owner_references().iter().any(|o| o.uid == uid)
    });
    let resumed = mine.is_some();
    let pool_token = async {
        let secrets = Api::<Secret>::namespaced(ctx.client.clone(), &ns);
        secret_token(&secrets, &objects::pool_object_name(&tier.name_any())).await
    };
    let pod = match mine {
        Some(p) => p.clone(),
        None => {
            let hash = objects::template_hash(tier, &ctx.config);
            let idle: Vec<&Pod> = all
                .iter()
                .filter(|p| {
                    p.labels().get(labels::CLAIMED).map(String::as_str) == Some("false")
                        && p.labels().get(labels::TEMPLATE_HASH) == Some(&hash)
                        && p.metadata.deletion_timestamp.is_none()
                })
                .collect();
            let mut ready: Vec<&Pod> = idle
                .iter()
                .copied()
                .filter(|p| ready_ip(p).is_some())
                .collect();
            if ready.is_empty() {
                return miss(if idle.is_empty() {
                    "pool-empty"
                } else {
                    "pool-starting"
                });
            }
            // Concurrent sessions start at different pods.
            let first = crate::kube_util::short_hash(&[&uid])
                .bytes()
                .fold(0usize, |a, b| a.wrapping_mul(31).wrapping_add(b as usize))
                % ready.len();
            ready.rotate_left(first);
            let claims = async {
                for candidate in ready.into_iter().take(CLAIM_TRIES) {
                    let claim = objects::claim_name(&candidate.name_any());
                    let pod_uid = objects::pod_uid(&candidate.name_any());
                    let hash = desired_hash(&claim, pod_uid);
                    match claim_pod(&pods, candidate, session, &settings, &hash).await {
                        Ok(p) => return Ok(Some(p)),
                        Err(kube::Error::Api(e)) if e.code == 409 || e.code == 404 => continue,
                        Err(e) => return Err(e),
                    }
                }
                Ok(None)
            };
            // The pool's token is read while the claim is made: one round trip, not two.
            let (claimed, token) = tokio::join!(claims, pool_token);
            return match claimed? {
                Some(pod) => Ok(Claim::Claimed(Box::new(Claimed {
                    pod,
                    resumed,
                    req,
                    pool_token: token?,
                }))),
                None => miss("contention"),
            };
        }
    };
    Ok(Claim::Claimed(Box::new(Claimed {
        pod,
        resumed,
        req,
        pool_token: pool_token.await?,
    })))
}

/// The second half: hands the claimed pod's PVC to the session and binds the pooled worker
/// (`POST /v1/adopt` with the pool's token) at once. A worker that cannot be bound is deleted and
/// the session starts cold.
pub async fn bind(
    claimed: Claimed,
    session: &HarnessSession,
    ctx: &Context,
    tokens: &Tokens,
) -> Result<Outcome> {
    let Claimed {
        pod,
        resumed,
        mut req,
        pool_token,
    } = claimed;
    let ns = session.namespace().unwrap_or_default();
    let name = session.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    let Some(ip) = ready_ip(&pod) else {
        // Claimed before (resumed) and not serving: replace it with a cold start.
        hand_over_claim(ctx, session, &pod).await?;
        delete_if_present(&pods, &pod.name_any()).await?;
        return Ok(Outcome::Miss("adoption-failed"));
    };
    req.token = tokens.token.clone();
    req.session_log_token = tokens.session_log.clone();
    let started = std::time::Instant::now();
    let binding = async {
        let bound = match &pool_token {
            Some(t) => bind_worker(&ip, ctx.config.worker_port, t.trim(), &req, resumed).await,
            None => Err("the pool's Secret is gone".into()),
        };
        tracing::debug!(session = %name, ms = started.elapsed().as_secs_f64() * 1e3, "adoption: bound");
        bound
    };
    let (handed, bound) = tokio::join!(hand_over_claim(ctx, session, &pod), binding);
    handed?;
    match bound {
        Ok(()) => Ok(Outcome::Adopted(Box::new(pod))),
        Err(why) => {
            tracing::warn!(session = %name, pod = %pod.name_any(), %why, "adoption failed; starting cold");
            delete_if_present(&pods, &pod.name_any()).await?;
            Ok(Outcome::Miss("adoption-failed"))
        }
    }
}

/// The pool's pods in `ns` as the operator's pod watch last saw them (without their spec, which
/// the claim does not need: it is conditioned on the resourceVersion).
fn pool_pods_cached(ctx: &Context, ns: &str, tier: &str) -> Vec<Pod> {
    let pool = objects::pool_label(tier);
    ctx.caches
        .pods
        .state()
        .iter()
        .filter(|p| {
            p.metadata.namespace.as_deref() == Some(ns)
                && p.labels().get(labels::POOL) == Some(&pool)
                && p.labels().get(labels::ROLE).map(String::as_str) == Some(labels::ROLE_WORKER)
        })
        .map(|p| Pod::clone(p))
        .collect()
}

/// The IP of a pod whose readiness probe passes.
fn ready_ip(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    pod_condition(status, "Ready", "True")?;
    status.pod_ip.clone().filter(|ip| !ip.is_empty())
}

/// The adoption request: the session's worker arguments and skills (its tokens are added by
/// [`bind`]). `None` when a skills ConfigMap is missing (the cold pod then reports it, as the
/// kubelet sees it).
fn request(
    session: &HarnessSession,
    ctx: &Context,
    config_maps: &[ConfigMap],
) -> Option<AdoptRequest> {
    let mut skills = Vec::new();
    let b64 = base64::engine::general_purpose::STANDARD;
    for skill in &session.spec.workspace.skills {
        let cm = config_maps
            .iter()
            .find(|c| c.name_any() == skill.config_map)?;
        let dir = skill
            .path
            .clone()
            .unwrap_or_else(|| skill.config_map.clone());
        for (key, value) in cm.data.iter().flatten() {
            skills.push(SkillFile {
                path: format!("{dir}/{key}"),
                content_base64: b64.encode(value),
            });
        }
        for (key, value) in cm.binary_data.iter().flatten() {
            skills.push(SkillFile {
                path: format!("{dir}/{key}"),
                content_base64: b64.encode(&value.0),
            });
        }
    }
    Some(AdoptRequest {
        args: resources::worker_settings(session, &ctx.config).to_args(),
        token: String::new(),
        session_log_token: None,
        skills,
    })
}

/// Claims `pod` for the session: labels, owner and the adoption digest, conditioned on the
/// resourceVersion the list returned (409 when another session got there first).
async fn claim_pod(
    pods: &Api<Pod>,
    pod: &Pod,
    session: &HarnessSession,
    settings: &str,
    spec_hash: &str,
) -> std::result::Result<Pod, kube::Error> {
    let mut labels = resources::session_labels(session);
    labels.insert(labels::CLAIMED.into(), "true".into());
    let owner: Vec<_> = session.controller_owner_ref(&()).into_iter().collect();
    let patch = json!({
        "metadata": {
            "resourceVersion": pod.resource_version(),
            "labels": labels,
            "annotations": { ADOPTED: settings, labels::SPEC_HASH: spec_hash },
            "ownerReferences": owner,
        }
    });
    pods.patch(
        &pod.name_any(),
        &PatchParams::default(),
        &Patch::Merge(&patch),
    )
    .await
}

/// The pod's PVC becomes the session's: its labels and owner (so it outlives the pod, through
/// hibernation, and goes with the session).
async fn hand_over_claim(ctx: &Context, session: &HarnessSession, pod: &Pod) -> Result<()> {
    let ns = session.namespace().unwrap_or_default();
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), &ns);
    let owner: Vec<_> = session.controller_owner_ref(&()).into_iter().collect();
    let patch = json!({
        "metadata": {
            "labels": resources::session_labels(session),
            "ownerReferences": owner,
        }
    });
    claims
        .patch(
            &objects::claim_name(&pod.name_any()),
            &PatchParams::default(),
            &Patch::Merge(&patch),
        )
        .await?;
    Ok(())
}

/// `POST /v1/adopt`. Already adopted is fine only for a claim this session made before (the
/// operator stopped after binding it; the status check decides); a pod someone else adopted
/// while it sat in the pool is a failure.
async fn bind_worker(
    ip: &str,
    port: u16,
    pool_token: &str,
    req: &AdoptRequest,
    resumed: bool,
) -> std::result::Result<(), String> {
    let client = crate::pod_http::client(ADOPT_TIMEOUT).map_err(|e| e.to_string())?;
    // A new connection for each try that did not connect: nothing was sent on it, so the
    // one-use adoption is not asked twice (`pod_http`: the warm start's one-second tail).
    let url = format!("http://{ip}:{port}/v1/adopt");
    let send = || client.post(&url).bearer_auth(pool_token).json(req).send();
    let response = crate::pod_http::retry_connect(ADOPT_TIMEOUT, send, reqwest::Error::is_connect)
        .await
        .map_err(|e| format!("POST /v1/adopt: {e}"))?;
    let status = response.status();
    if status == reqwest::StatusCode::CONFLICT && resumed {
        return Ok(());
    }
    if !status.is_success() {
        let body = response.text().await.unwrap_or_default();
        return Err(format!("POST /v1/adopt answered {status}: {body}"));
    }
    let answer: AdoptResponse = response.json().await.map_err(|e| e.to_string())?;
    if answer.settings != adoption_settings(req) {
        return Err("the worker bound other settings than sent".into());
    }
    Ok(())
}

/// The uid the worker pods of the warm pod's claim `claim` (a name) run as: the warm pod's that
/// first used it ([`objects::pod_uid`] of the pod the claim is named after), the uid its files
/// belong to. `None` for a claim no warm pod's name makes (the session's own: its own uid).
///
/// Never the claim's [`objects::CLAIM_UID`] annotation: the claim is in the tenant's namespace and the
/// tenant may write it (`-7` made the pod invalid and the reconcile loop on the error, `65532`
/// ran the worker as the shared services' uid, another session's uid shares that session's
/// per-uid kernel limits; docs/security-model.md, T4). The operator wrote nothing there that
/// the name does not say already.
pub fn claim_uid(claim: &str) -> Option<i64> {
    let pod = claim.strip_suffix(&objects::claim_name(""))?;
    (!pod.is_empty() && objects::claim_name(pod) == claim).then(|| objects::pod_uid(pod))
}
