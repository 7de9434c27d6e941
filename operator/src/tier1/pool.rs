//! Warm pools: a SandboxTier with `warmPool.size` N keeps N idle, ready pods built from its
//! current template. A template change makes idle pods stale: they are deleted and replaced, and
//! the claim only takes pods with the current hash, so a stale pod is never handed out. Run by
//! the leader's SandboxTier controller.

use super::open::{self, Exactly};
use super::pod::{self, Purpose};
use super::state::{self, Phase};
use crate::context::Context;
use crate::error::Result;
use crate::kube_util::{create_if_absent, new_token};
use crate::labels;
use k8s_openapi::api::core::v1::{Pod, Secret};
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

/// Brings the idle pods of `tier` to its pool size: deletes stale, ended and surplus ones, creates
/// the missing ones. `valid`: the tier passed its checks; an invalid tier keeps no pool. Each
/// delete is of the pod as listed (uid and resourceVersion): one claimed or changed meanwhile is
/// left, and the change requeues the tier (its pods are watched).
pub async fn reconcile(tier: &SandboxTier, ctx: &Context, valid: bool) -> Result<PoolStatus> {
    let name = tier.name_any();
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    let idle = pods
        .list(&ListParams::default().labels(&pod::pool_selector(&name)))
        .await?
        .items;
    let hash = pod::template_hash(tier, &ctx.config);
    let want = if valid { tier.spec.warm_pool.size } else { 0 };
    let mut out = PoolStatus::default();
    let mut current: Vec<(Pod, bool)> = Vec::new();
    for p in idle {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let stale = p.labels().get(labels::TEMPLATE_HASH) != Some(&hash);
        let phase = state::phase(&p);
        if let Phase::Failed { reason, message } = &phase {
            out.failing.get_or_insert_with(|| {
                (
                    reason.clone(),
                    format!("pool pod {}: {message}", p.name_any()),
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
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), &ctx.config.namespace);
    // The pod first, then its token Secret owned by it from its creation: the kubelet waits for
    // the Secret before it starts the pod's containers, and no Secret is ever left without its
    // pod (an operator stopped in between leaves a pod that never starts, replaced below after
    // STUCK_AFTER).
    for _ in current.len()..want as usize {
        let pod_name = pod::pool_name();
        if let Some(created) =
            create_if_absent(&pods, &pod::pod(&pod_name, tier, &purpose, &ctx.config)).await?
        {
            let mut secret =
                pod::token_secret(&pod_name, tier, &purpose, &ctx.config, &new_token());
            secret.metadata.owner_references = Some(pod::pod_owner(&created));
            create_if_absent(&secrets, &secret).await?;
        }
        out.created += 1;
        out.updated += 1;
    }
    ctx.metrics.tier1_idle(&name, out.updated);
    ctx.metrics.warm_pool(&name, out.ready);
    Ok(out)
}
