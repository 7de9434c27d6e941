//! What goes when a session ends: everything it owns when it is deleted (the finalizer's
//! cleanup), its compute and storage when its TTL passes with ttlAction Release.

use super::pod::delete_worker;
use crate::context::Context;
use crate::error::Result;
use crate::events;
use crate::kube_util::delete_if_present;
use crate::labels;
use crate::session::owned::{session_key, worker_pod_name};
use crate::session::status::Observed;
use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, Phase};
use std::sync::Arc;

/// Deleting a session: stop its worker before anything else goes (owner references then collect
/// the PVC, Secret and NetworkPolicy). The pod is deleted explicitly so a running command is
/// interrupted now rather than whenever the garbage collector gets to it.
pub async fn cleanup(session: Arc<HarnessSession>, ctx: &Context) -> Result<Action> {
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
    let key = session_key(&session);
    ctx.metrics.session(&key, None);
    ctx.polls.forget(&ObjectRef::from_obj(&*session));
    ctx.caches.forget_session(&key);
    ctx.succeeded(&key);
    Ok(Action::await_change())
}

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
pub async fn release(
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
