//! The turn controller (leader only): keeps each HarnessTurn's status (phase, pod, source,
//! deadline, the Ready condition) true to the pod its record names, so `kubectl get
//! harnessturns` shows what is open. The tier API makes the objects and decides their pod
//! (`tier1::record`); ending and sweeping them is `tier1::end` and `tier1::sweep`. A turn object
//! without the operator's proof (a tenant's own) is never written to.

pub mod status;

use crate::context::Context;
use crate::error::Result;
use crate::labels;
use crate::tier1::record;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::ObjectRef;
use kube::{Api, ResourceExt};
use kube_harness_crds::HarnessTurn;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

/// How often a turn is looked at again without a change (its pod's changes requeue it sooner).
const RESYNC: Duration = Duration::from_secs(300);

/// The turn object a Tier-1 pod serves, from its labels and turn annotation (`None`: an idle
/// pool pod, or a pod serving no turn).
pub fn turn_of(pod: &Pod) -> Option<ObjectRef<HarnessTurn>> {
    let ns = pod.labels().get(labels::SESSION_NAMESPACE)?;
    let session = pod.labels().get(labels::SESSION)?;
    let turn = pod.annotations().get(labels::TURN_ID)?;
    // The operator makes a session's pods in its namespace; any other is not a turn's.
    (pod.namespace().as_deref() == Some(ns.as_str()))
        .then(|| ObjectRef::new(&record::name(ns, session, turn)).within(ns))
}

/// Writes `turn`'s status when it differs from what the record and its pod say now.
pub async fn reconcile(turn: Arc<HarnessTurn>, ctx: Arc<Context>) -> Result<Action> {
    let started = std::time::Instant::now();
    if !record::proven(&ctx, &turn) {
        return Ok(Action::await_change());
    }
    let ns = turn.namespace().unwrap_or_default();
    let pod = match record::holder(&turn).filter(|_| !record::ended(&turn)) {
        Some(holder) => {
            Api::<Pod>::namespaced(ctx.client.clone(), &ns)
                .get_opt(holder)
                .await?
        }
        None => None,
    };
    let now = k8s_openapi::jiff::Timestamp::now();
    let want = status::status(&turn, pod.as_ref(), now);
    if turn.status.as_ref() != Some(&want) {
        let patch = json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn", "status": want});
        Api::<HarnessTurn>::namespaced(ctx.client.clone(), &ns)
            .patch_status(
                &turn.name_any(),
                &PatchParams::apply(labels::MANAGER).force(),
                &Patch::Apply(patch),
            )
            .await?;
    }
    ctx.metrics
        .reconciled("harnessturn", started.elapsed().as_secs_f64());
    ctx.succeeded(&format!("turn/{ns}/{}", turn.name_any()));
    // A recorded pod not made yet is looked for again when its grace ends (its create also
    // requeues the turn, through the pod watch).
    let pending = want.phase == Some(kube_harness_crds::TurnPhase::Pending) && pod.is_none();
    Ok(Action::requeue(match pending {
        true => status::POD_MISSING_GRACE + Duration::from_secs(1),
        false => RESYNC,
    }))
}

/// A failed reconcile: logged, counted, retried with the per-object backoff.
pub fn error_policy(turn: Arc<HarnessTurn>, error: &crate::Error, ctx: Arc<Context>) -> Action {
    tracing::warn!(turn = %turn.name_any(), %error, "HarnessTurn reconcile failed");
    ctx.metrics.failed("harnessturn", error.metric_label());
    let ns = turn.namespace().unwrap_or_default();
    Action::requeue(ctx.backoff(&format!("turn/{ns}/{}", turn.name_any())))
}

/// The pod label selector the controller's pod watch uses: every Tier-1 pod serving a turn.
pub fn pod_selector() -> String {
    format!("{}={},{}", labels::ROLE, labels::ROLE_TIER1, labels::TURN)
}
