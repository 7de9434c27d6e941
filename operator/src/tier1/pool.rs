//! Warm pools: a SandboxTier with `warmPool.size` N keeps N idle, ready pods built from its
//! current template. A template change makes idle pods stale: they are deleted and replaced, and
//! the claim only takes pods with the current hash, so a stale pod is never handed out. The pods
//! are kept in the namespaces the pool serves (`warmPool.namespaces`), as level-0 pools are. Run
//! by the leader's SandboxTier controller.

use super::open::{self, Exactly};
use super::pod::{self, Purpose};
use super::state::{self, Phase};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::kube_util::{admission_refusal, apply_owned, create_if_absent, new_token};
use crate::labels;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::SandboxTier;

/// What the pool looks like after one reconcile.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Idle, current and ready.
    pub ready: u32,
    /// Idle and current (ready or starting).
    pub updated: u32,
    /// Pods created by this reconcile.
    pub created: u32,
    /// Pods deleted by this reconcile (stale, ended or surplus).
    pub deleted: u32,
    /// Why a pool pod is failing, if one is: (reason, message).
    pub failing: Option<(String, String)>,
}

/// Failed reasons of a pod whose agent ran and ended (as opposed to one that cannot start).
const ENDED: &[&str] = &["PodFailed", "AgentDied", "InitFailed"];
/// Minimum age of an ended pool pod before it is replaced.
const REPLACE_AFTER: std::time::Duration = std::time::Duration::from_secs(60);
/// Age after which a pool pod still starting is replaced.
pub const STUCK_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Brings the idle pods of `tier` to its pool size in every namespace of `warmPool.namespaces`
/// (where the sessions it serves are: the pods count against their quota), with the tier's
/// NetworkPolicy there; idle pods anywhere else are deleted. `valid`: the tier passed its checks;
/// an invalid tier keeps no pool. `ready` and `updated` are the fewest in any one namespace, so
/// they compare with `size`; a namespace that cannot hold its pool (missing, quota) is reported
/// as failing and the others go on.
pub async fn reconcile(tier: &SandboxTier, ctx: &Context, valid: bool) -> Result<PoolStatus> {
    let name = tier.name_any();
    let want = if valid { tier.spec.warm_pool.size } else { 0 };
    let served: std::collections::BTreeSet<&str> = tier
        .spec
        .warm_pool
        .namespaces
        .iter()
        .map(String::as_str)
        .collect();
    let mut out = PoolStatus::default();
    let everywhere: Api<Pod> = Api::all(ctx.client.clone());
    for p in everywhere
        .list(&ListParams::default().labels(&pod::pool_selector(&name)))
        .await?
        .items
    {
        if want == 0 || !served.contains(p.namespace().unwrap_or_default().as_str()) {
            out.deleted += u32::from(open::delete(ctx, &p, Exactly::Version).await?);
        }
    }
    if want == 0 {
        // No idle series for a tier without a pool: the sweep's snapshot drops a tier's series
        // once it has no pods, and setting it here would bring it back every pass.
        ctx.metrics.warm_pool(&name, 0);
        return Ok(out);
    }
    let (mut ready, mut updated, mut total) = (u32::MAX, u32::MAX, 0);
    for ns in served {
        match namespace(tier, ctx, ns, want).await {
            Ok(one) => {
                ready = ready.min(one.ready);
                updated = updated.min(one.updated);
                total += one.ready;
                out.created += one.created;
                out.deleted += one.deleted;
                if let Some(f) = one.failing {
                    out.failing.get_or_insert(f);
                }
            }
            // A quota or another admission check of the namespace (or the namespace missing):
            // the tier is Degraded with the API server's message; the other namespaces go on.
            Err(e) => {
                ready = 0;
                updated = 0;
                let (reason, message) = match &e {
                    Error::Kube(k) => admission_refusal(k)
                        .map(|(r, m)| (r.to_string(), m))
                        .unwrap_or_else(|| ("PoolNamespaceFailed".into(), e.to_string())),
                    _ => ("PoolNamespaceFailed".into(), e.to_string()),
                };
                out.failing
                    .get_or_insert((reason, format!("warm pool in namespace {ns}: {message}")));
            }
        }
    }
    out.ready = if ready == u32::MAX { 0 } else { ready };
    out.updated = if updated == u32::MAX { 0 } else { updated };
    ctx.metrics.tier1_idle(&name, out.updated);
    ctx.metrics.warm_pool(&name, total);
    Ok(out)
}

/// The pool of `tier` in one namespace: its policy, then stale, ended and surplus pods deleted
/// and the missing ones created. Each delete is of the pod as listed (uid and resourceVersion):
/// one claimed or changed meanwhile is left, and the change requeues the tier (its pods are
/// watched).
async fn namespace(tier: &SandboxTier, ctx: &Context, ns: &str, want: u32) -> Result<PoolStatus> {
    let name = tier.name_any();
    apply_owned::<NetworkPolicy>(&ctx.client, ns, &pod::network_policy(tier, ns)).await?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let idle = pods
        .list(&ListParams::default().labels(&pod::pool_selector(&name)))
        .await?
        .items;
    let hash = pod::template_hash(tier, &ctx.config);
    let mut out = PoolStatus::default();
    let mut current: Vec<(Pod, bool)> = Vec::new();
    for p in idle {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // Not made by the operator (a tenant's pod with the pool's labels), or made and never
        // proven (crate::origin): deleted (that uid), neither counted nor ever claimed.
        if !ctx.origin.proves(&p) {
            let what = format!("a Tier-1 pool pod of SandboxTier {name}");
            crate::origin::guard::refuse(ctx, &p, &what).await?;
            out.deleted += 1;
            continue;
        }
        let stale = p.labels().get(labels::TEMPLATE_HASH) != Some(&hash);
        let phase = state::phase(&p);
        if let Phase::Failed { reason, message } = &phase {
            out.failing.get_or_insert_with(|| {
                (
                    reason.clone(),
                    format!("pool pod {ns}/{}: {message}", p.name_any()),
                )
            });
        }
        match phase {
            _ if stale => {
                out.deleted += u32::from(open::delete(ctx, &p, Exactly::Version).await?);
            }
            // An ended pod is replaced, but not before it is a minute old: an agent that dies at
            // once must not turn the pool into a create/delete loop.
            Phase::Failed { reason, .. } if ENDED.contains(&reason.as_str()) => {
                if super::sweep::age(&p) > REPLACE_AFTER {
                    out.deleted += u32::from(open::delete(ctx, &p, Exactly::Version).await?);
                } else {
                    current.push((p, false));
                }
            }
            // Cannot start (image, scheduling, config): kept, as the kubelet retries and a fix
            // makes it ready; replacing it would only repeat the failure.
            Phase::Failed { .. } => current.push((p, false)),
            Phase::Ready { .. } => current.push((p, true)),
            // Starting for this long: stuck (its token Secret never came, or it waits for a
            // node that never frees up): replaced.
            Phase::Pending if super::sweep::age(&p) > STUCK_AFTER => {
                out.deleted += u32::from(open::delete(ctx, &p, Exactly::Version).await?);
            }
            Phase::Pending => current.push((p, false)),
        }
    }
    // Surplus: drop starting pods first, then the newest ready ones.
    current.sort_by_key(|(p, ready)| (!*ready, std::cmp::Reverse(p.name_any())));
    while current.len() > want as usize {
        let (p, _) = current.pop().expect("len > want >= 0");
        out.deleted += u32::from(open::delete(ctx, &p, Exactly::Version).await?);
    }
    out.updated = current.len() as u32;
    out.ready = current.iter().filter(|(_, ready)| *ready).count() as u32;
    let purpose = Purpose::Pool {
        template_hash: hash,
        namespace: ns.into(),
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    // The pod first, then its token Secret owned by it from its creation: the kubelet waits for
    // the Secret before it starts the pod's containers, and no Secret is ever left without its
    // pod (an operator stopped in between leaves a pod that never starts, replaced below after
    // STUCK_AFTER).
    for _ in current.len()..want as usize {
        let pod_name = pod::pool_name();
        if let Some(created) =
            create_if_absent(&pods, &pod::pod(&pod_name, tier, &purpose, &ctx.config)).await?
        {
            // Proven before its Secret is made: a pod the operator stops before this never
            // starts, and the next pass refuses and replaces it.
            let created = crate::origin::guard::stamp(ctx, created).await?;
            let mut secret =
                pod::token_secret(&pod_name, tier, &purpose, &ctx.config, &new_token());
            secret.metadata.owner_references = Some(pod::pod_owner(&created));
            create_if_absent(&secrets, &secret).await?;
        }
        out.created += 1;
        out.updated += 1;
    }
    Ok(out)
}
