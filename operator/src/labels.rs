//! Names, labels and annotations the operator puts on what it creates. One place, so the chart's
//! NetworkPolicies and the e2e tests can rely on them.

/// Field manager for server-side apply.
pub const MANAGER: &str = "kube-harness-operator";
/// Finalizer on every HarnessSession.
pub const FINALIZER: &str = "kubeharness.dev/cleanup";
/// Label: which session a pod, PVC, Secret or NetworkPolicy belongs to.
pub const SESSION: &str = "kubeharness.dev/session";
/// Label: the role of a pod (worker).
pub const ROLE: &str = "kubeharness.dev/role";
/// Annotation on the worker pod: hash of the spec it was built from (a change recreates it).
pub const SPEC_HASH: &str = "kubeharness.dev/spec-hash";
/// Annotation on a HarnessSession: set by `kube-harness exec` to wake a hibernated session.
pub const WAKE: &str = kube_harness_crds::session::WAKE_ANNOTATION;
/// Label values every object created by the operator carries.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kube-harness-operator");
pub const NAME_WORKER: (&str, &str) = ("app.kubernetes.io/name", "kube-harness-worker");
/// Labels of the chart's pods the worker NetworkPolicy refers to.
pub const OPERATOR_POD: (&str, &str) = ("app.kubernetes.io/name", "kube-harness-operator");
pub const SESSION_LOG_POD: (&str, &str) = ("app.kubernetes.io/name", "kube-harness-session-log");

/// Worker pod of a session.
pub fn worker_pod(session: &str) -> String {
    format!("{session}-worker")
}
/// Workspace PVC of a session.
pub fn workspace_pvc(session: &str) -> String {
    format!("{session}-workspace")
}
/// Token Secret of a session (keys `token` and, with a session log, `session-log-token`).
pub fn token_secret(session: &str) -> String {
    format!("{session}-token")
}
/// NetworkPolicy of a session's pods.
pub fn network_policy(session: &str) -> String {
    format!("{session}-worker")
}
