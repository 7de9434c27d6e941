//! Acting on the proof of origin: writing it on a pod the operator has just made, and
//! refusing (deleting, with a Warning Event) a pod that does not carry it.

use super::ANNOTATION;
use crate::context::Context;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Api, ResourceExt};
use kube_harness_crds::condition::reasons;

/// Writes the proof on `created`, a pod the operator has just created (as the create answered:
/// with its uid), and returns it with the proof. Written on whatever pod has that name: the proof
/// is of `created`'s uid, so on another pod it proves nothing.
pub async fn stamp(ctx: &Context, created: Pod) -> Result<Pod, kube::Error> {
    let pod = ctx.origin.stamped(created);
    let Some(proof) = pod.annotations().get(ANNOTATION).cloned() else {
        // No uid in the create's answer: nothing to prove; the pod is refused and replaced.
        return Ok(pod);
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &pod.namespace().unwrap_or_default());
    let params = PatchParams {
        field_manager: Some(crate::labels::MANAGER.into()),
        ..PatchParams::default()
    };
    let patch = serde_json::json!({"metadata": {"annotations": {ANNOTATION: proof}}});
    pods.patch(&pod.name_any(), &params, &Patch::Merge(patch))
        .await?;
    Ok(pod)
}

/// Deletes `pod`, which failed the check, with a Warning Event about it: that very pod (a uid
/// precondition, so never one made since under its name); gone already or replaced is fine.
/// `what`: what it was refused as ("a warm pod of SandboxTier x").
pub async fn refuse(ctx: &Context, pod: &Pod, what: &str) -> Result<(), kube::Error> {
    let name = pod.name_any();
    let ns = pod.namespace().unwrap_or_default();
    tracing::warn!(pod = %name, namespace = %ns, uid = ?pod.metadata.uid, "{what} without the operator's proof of origin: deleted");
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: pod.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let pods: Api<Pod> = Api::namespaced(ctx.client.clone(), &ns);
    match pods.delete(&name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
        Err(e) => return Err(e),
    }
    let note = format!(
        "pod {ns}/{name} (uid {}) looks like {what} but carries no valid {ANNOTATION} proof that the operator made it: deleted, never claimed or handed a token",
        pod.metadata.uid.as_deref().unwrap_or_default()
    );
    crate::events::publish(
        ctx,
        pod,
        true,
        reasons::POD_ORIGIN_UNPROVEN,
        &note,
        "Refuse",
    )
    .await;
    Ok(())
}
