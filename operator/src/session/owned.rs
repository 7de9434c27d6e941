//! What every object a session owns carries: its labels and the owner reference that lets the
//! garbage collector remove it with the session.

use crate::labels;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::{Resource, ResourceExt};
use kube_harness_crds::HarnessSession;
use std::collections::BTreeMap;

/// Labels on everything a session owns; the pod selector of its NetworkPolicy.
pub fn session_labels(session: &HarnessSession) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::SESSION.into(), session.name_any()),
        (labels::MANAGED_BY.0.into(), labels::MANAGED_BY.1.into()),
    ])
}

fn owner(session: &HarnessSession) -> Vec<OwnerReference> {
    session.controller_owner_ref(&()).into_iter().collect()
}

/// Name, namespace, labels and owner reference of an object the session owns.
pub fn meta(session: &HarnessSession, name: String) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: session.namespace(),
        labels: Some(session_labels(session)),
        owner_references: Some(owner(session)),
        ..ObjectMeta::default()
    }
}

/// The session's current worker pod: the one status names (an adopted warm pod keeps its own
/// name), else `<name>-worker`.
pub fn worker_pod_name(session: &HarnessSession) -> String {
    session
        .status
        .as_ref()
        .and_then(|s| s.worker_pod.clone())
        .unwrap_or_else(|| labels::worker_pod(&session.name_any()))
}

/// The session's key in the operator's caches, metrics and error backoff:
/// `session/<namespace>/<name>`.
pub fn session_key(session: &HarnessSession) -> String {
    format!(
        "session/{}/{}",
        session.namespace().unwrap_or_default(),
        session.name_any()
    )
}
