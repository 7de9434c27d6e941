//! The Kubernetes helpers both controllers and the tier API share: idempotent writes (create if
//! absent, server-side apply, delete if present), reading a Secret's token, the restricted Pod
//! Security contexts every pod of the operator runs with, and reading a pod's status. Depends on
//! nothing else in the crate but the error type and the field manager, so `session` and `tier1`
//! both build on it without importing each other.

use crate::error::{Error, Result};
use crate::labels::MANAGER;
use k8s_openapi::api::core::v1::{
    Capabilities, PodCondition, PodSecurityContext, PodStatus, SeccompProfile, Secret,
    SecurityContext,
};
use kube::api::{DeleteParams, Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;

/// Why the API server's admission refused a write the session asked for, as a condition reason
/// and the API server's message: a ResourceQuota (`QuotaExceeded`), or another admission check
/// (`AdmissionRefused`: a LimitRange, Pod Security admission, a webhook). The operator's own
/// RBAC refusals ("... cannot create resource ...") are not the session's to report: `None`.
pub fn admission_refusal(error: &kube::Error) -> Option<(&'static str, String)> {
    use kube_harness_crds::condition::reasons;
    let kube::Error::Api(e) = error else {
        return None;
    };
    if e.code == 403 && e.message.contains("exceeded quota") {
        return Some((reasons::QUOTA_EXCEEDED, e.message.clone()));
    }
    let rbac = e.message.contains(" cannot ");
    (e.code == 403 && !rbac).then(|| (reasons::ADMISSION_REFUSED, e.message.clone()))
}

/// Creates `obj`; `None` when an object of that name already exists (409), which a later
/// reconcile reads instead.
pub async fn create_if_absent<K>(api: &Api<K>, obj: &K) -> Result<Option<K>, kube::Error>
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
        Err(e) => Err(e),
    }
}

/// Server-side apply of a namespaced object the operator owns (a session's, or a tier's
/// NetworkPolicy), forcing its field manager's ownership. Returns the object's resourceVersion
/// after the apply.
pub async fn apply_owned<K>(client: &Client, ns: &str, obj: &K) -> Result<Option<String>>
where
    K: kube::Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let api: Api<K> = Api::namespaced(client.clone(), ns);
    let name = obj
        .meta()
        .name
        .clone()
        .ok_or(Error::MissingField("metadata.name"))?;
    let mut value = serde_json::to_value(obj)?;
    value["apiVersion"] = json!(K::api_version(&()));
    value["kind"] = json!(K::kind(&()));
    let applied = api
        .patch(
            &name,
            &PatchParams::apply(MANAGER).force(),
            &Patch::Apply(value),
        )
        .await?;
    Ok(applied.meta().resource_version.clone())
}

/// Deletes `name`; already gone (404) is fine.
pub async fn delete_if_present<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The `token` key of a Secret, as text (`None` without one).
pub fn token_of(secret: &Secret) -> Option<String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get("token"))
        .map(|b| String::from_utf8_lossy(&b.0).into_owned())
}

/// The `token` of Secret `name`; `None` when the Secret or the key is absent.
pub async fn secret_token(api: &Api<Secret>, name: &str) -> Result<Option<String>, kube::Error> {
    Ok(api.get_opt(name).await?.as_ref().and_then(token_of))
}

/// Objects per page of a watch's or a list's reply: a tenant can make the pods (and sessions) of
/// its namespace megabytes each, and one page is held whole while it is read
/// (docs/security-model.md, T4).
pub const WATCH_PAGE_SIZE: u32 = 50;

/// A fresh random token (256 bits, hex), for a worker or a Tier-1 agent.
/// 16 hex digits of a SHA-256 over `parts` (each ended by a NUL, so no two lists share one): a
/// name or label value derived from arbitrary strings.
pub fn short_hash(parts: &[&str]) -> String {
    use sha2::{Digest, Sha256};
    let mut h = Sha256::new();
    for p in parts {
        h.update(p.as_bytes());
        h.update([0u8]);
    }
    hex::encode(&h.finalize()[..8])
}

pub fn new_token() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut bytes);
    hex::encode(bytes)
}

/// The pod-level half of the restricted Pod Security profile, for every pod the operator runs
/// (worker and Tier-1 alike) as `uid`; the volumes are group-owned by it.
pub fn restricted_pod(uid: i64) -> PodSecurityContext {
    PodSecurityContext {
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        fs_group: Some(uid),
        seccomp_profile: Some(runtime_default()),
        ..PodSecurityContext::default()
    }
}

/// The container-level half of the restricted profile as `uid`: no escalation, no capabilities.
pub fn restricted_container(uid: i64) -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        run_as_non_root: Some(true),
        run_as_user: Some(uid),
        run_as_group: Some(uid),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".into()]),
            add: None,
        }),
        seccomp_profile: Some(runtime_default()),
        ..SecurityContext::default()
    }
}

fn runtime_default() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".into(),
        localhost_profile: None,
    }
}

/// Container waiting reasons of an image that cannot be pulled: they do not fix themselves.
pub const IMAGE_FAILURES: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "ErrImageNeverPull",
    "InvalidImageName",
];
/// Container waiting reasons of a container that cannot be created or keeps crashing.
pub const CONTAINER_FAILURES: &[&str] = &[
    "CreateContainerConfigError",
    "CreateContainerError",
    "RunContainerError",
    "CrashLoopBackOff",
];

/// Whether a container waiting reason is one that does not fix itself (either list above).
pub fn is_failing_wait(reason: &str) -> bool {
    IMAGE_FAILURES.contains(&reason) || CONTAINER_FAILURES.contains(&reason)
}

/// The pod's condition `type_` when its status is `value` ("True" or "False").
pub fn pod_condition<'a>(
    status: &'a PodStatus,
    type_: &str,
    value: &str,
) -> Option<&'a PodCondition> {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == type_ && c.status == value)
}

/// The pod's IP once it is Ready: an address alone may belong to a pod still starting.
pub fn ready_ip(status: &PodStatus) -> Option<&String> {
    pod_condition(status, "Ready", "True").and(status.pod_ip.as_ref())
}
