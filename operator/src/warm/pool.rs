//! Keeping a level-0 warm pool: in each namespace it serves, `size` idle warm pods built from
//! the current template (stale ones deleted and replaced, a finished one replaced, surplus
//! removed), the pool's Secret and NetworkPolicy; idle pods left in a namespace the pool no
//! longer serves are deleted. Run by the SandboxTier controller.

use super::objects::{self, pool_claim, pool_network_policy, pool_pod, pool_secret};
use crate::context::Context;
use crate::error::Result;
use crate::kube_util::{
    apply_owned, create_if_absent, delete_if_present, new_token, pod_condition,
};
use crate::labels;
use crate::session::observe::{worker_state, WorkerState};
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use kube_harness_crds::SandboxTier;

/// The pool after one pass, over all its namespaces.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PoolStatus {
    /// Fewest idle, current, ready pods in any served namespace (comparable with `size`).
    pub ready: u32,
    /// Fewest idle, current pods (ready or starting) in any served namespace.
    pub updated: u32,
    /// Idle ready pods in all namespaces (for the metric).
    pub ready_total: u32,
    /// Why a warm pod or a namespace is failing, if one is: (reason, message).
    pub failing: Option<(String, String)>,
}

/// Brings the tier's warm pods to its pool size in every namespace it serves. `valid`: the tier
/// passed its checks; an invalid tier keeps no pool.
pub async fn reconcile(tier: &SandboxTier, ctx: &Context, valid: bool) -> Result<PoolStatus> {
    let name = tier.name_any();
    let want = if valid { tier.spec.warm_pool.size } else { 0 };
    let served: std::collections::BTreeSet<String> =
        tier.spec.warm_pool.namespaces.iter().cloned().collect();
    let mut out = PoolStatus {
        ready: u32::MAX,
        updated: u32::MAX,
        ..PoolStatus::default()
    };
    // Idle pods anywhere the pool no longer serves (or at all, for a pool of size 0).
    let everywhere: Api<Pod> = Api::all(ctx.client.clone());
    for pod in everywhere
        .list(&ListParams::default().labels(&objects::idle_selector(&name)))
        .await?
        .items
    {
        let ns = pod.namespace().unwrap_or_default();
        if want == 0 || !served.contains(&ns) {
            delete_if_present(
                &Api::<Pod>::namespaced(ctx.client.clone(), &ns),
                &pod.name_any(),
            )
            .await?;
        }
    }
    if want == 0 {
        return Ok(PoolStatus::default());
    }
    for ns in &served {
        match namespace(tier, ctx, ns, want).await {
            Ok((ready, updated, failing)) => {
                out.ready = out.ready.min(ready);
                out.updated = out.updated.min(updated);
                out.ready_total += ready;
                if let Some(f) = failing {
                    out.failing.get_or_insert(f);
                }
            }
            Err(failing) => {
                out.ready = 0;
                out.updated = 0;
                out.failing.get_or_insert(failing);
            }
        }
    }
    if out.ready == u32::MAX {
        out.ready = 0;
        out.updated = 0;
    }
    ctx.metrics.warm_pool(&name, out.ready_total);
    Ok(out)
}

/// One namespace: `Ok((ready, updated, a failing pod))`, or why its pool cannot be kept there
/// (no such namespace, quota), which the tier reports as Degraded.
async fn namespace(
    tier: &SandboxTier,
    ctx: &Context,
    ns: &str,
    want: u32,
) -> std::result::Result<(u32, u32, Option<(String, String)>), (String, String)> {
    let api_failed = |what: &str, e: &dyn std::fmt::Display| {
        (
            "PoolNamespaceFailing".to_string(),
            format!("warm pool in namespace {ns}: {what}: {e}"),
        )
    };
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    let secret = pool_secret(tier, ns, &new_token());
    create_if_absent(&secrets, &secret)
        .await
        .map_err(|e| api_failed("creating its Secret", &e))?;
    apply_owned::<NetworkPolicy>(&ctx.client, ns, &pool_network_policy(tier, ns, &ctx.config))
        .await
        .map_err(|e| api_failed("applying its NetworkPolicy", &e))?;
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), ns);
    let idle = pods
        .list(&ListParams::default().labels(&objects::idle_selector(&tier.name_any())))
        .await
        .map_err(|e| api_failed("listing its pods", &e))?
        .items;
    let hash = objects::template_hash(tier, &ctx.config);
    let mut current: Vec<(Pod, bool)> = Vec::new();
    let mut failing = None;
    for p in idle {
        if p.metadata.deletion_timestamp.is_some() {
            continue;
        }
        // Not made by the operator (a tenant's pod with the pool's labels), or made and never
        // proven: deleted, and neither counted nor ever claimed.
        if !ctx.origin.proves(&p) {
            let what = format!("a warm pod of SandboxTier {}", tier.name_any());
            crate::origin::guard::refuse(ctx, &p, &what)
                .await
                .map_err(|e| api_failed("deleting an unproven warm pod", &e))?;
            continue;
        }
        let stale = p.labels().get(labels::TEMPLATE_HASH) != Some(&hash);
        match worker_state(&p) {
            _ if stale => delete(&pods, &p).await?,
            WorkerState::Gone => delete(&pods, &p).await?,
            WorkerState::Failing { reason, message } => {
                failing
                    .get_or_insert((reason, format!("warm pod {ns}/{}: {message}", p.name_any())));
                current.push((p, false));
            }
            _ => {
                let ready = p
                    .status
                    .as_ref()
                    .and_then(|s| pod_condition(s, "Ready", "True"))
                    .is_some();
                current.push((p, ready));
            }
        }
    }
    // Surplus: starting pods first, then the newest ready ones.
    current.sort_by_key(|(p, ready)| (!*ready, std::cmp::Reverse(p.name_any())));
    while current.len() > want as usize {
        if let Some((p, _)) = current.pop() {
            delete(&pods, &p).await?;
        }
    }
    let updated = current.len() as u32;
    let ready = current.iter().filter(|(_, r)| *r).count() as u32;
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(ctx.client.clone(), ns);
    for _ in current.len()..want as usize {
        let pod = pool_pod(tier, &objects::pod_name(), ns, &ctx.config);
        let created = create_if_absent(&pods, &pod)
            .await
            .map_err(|e| api_failed("creating a warm pod", &e))?;
        if let Some(created) = created {
            // Proven before anything else is made for it: a pod the operator stops before this
            // is refused and replaced by the next pass.
            let created = crate::origin::guard::stamp(ctx, created)
                .await
                .map_err(|e| api_failed("proving a warm pod's origin", &e))?;
            create_if_absent(&claims, &pool_claim(tier, &created))
                .await
                .map_err(|e| api_failed("creating a warm pod's PVC", &e))?;
        }
    }
    Ok((ready, updated, failing))
}

async fn delete(pods: &Api<Pod>, pod: &Pod) -> std::result::Result<(), (String, String)> {
    delete_if_present(pods, &pod.name_any()).await.map_err(|e| {
        (
            "PoolNamespaceFailing".to_string(),
            format!("deleting warm pod {}: {e}", pod.name_any()),
        )
    })
}
