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
/// Value of [`ROLE`] on worker pods.
pub const ROLE_WORKER: &str = "worker";
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
/// Service in front of a session's worker pod: `<session>-worker` when that is a DNS-1035 label
/// (a Service name must be one), else `hs-<hash of the name>-worker`.
pub fn worker_service(session: &str) -> String {
    let plain = format!("{session}-worker");
    let dns_1035 = plain.len() <= 63
        && plain.starts_with(|c: char| c.is_ascii_lowercase())
        && plain
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
    if dns_1035 {
        return plain;
    }
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(session.as_bytes());
    let hex: String = digest[..6].iter().map(|b| format!("{b:02x}")).collect();
    format!("hs-{hex}-worker")
}
/// NetworkPolicy of a session's pods.
pub fn network_policy(session: &str) -> String {
    format!("{session}-worker")
}

/// Tier-1 pods (docs/tier1.md): `app.kubernetes.io/managed-by=kube-harness`, deliberately not the
/// worker pods' value, so the chart's "worker pod" NetworkPolicy peers never match a Tier-1 pod.
pub const TIER1_MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "kube-harness");
/// Value of [`ROLE`] on Tier-1 pods.
pub const ROLE_TIER1: &str = "tier1";
/// Label: the SandboxTier a Tier-1 pod was built from.
pub const TIER: &str = "kubeharness.dev/tier";
/// Label: namespace of the session a Tier-1 pod serves ([`SESSION`] names the session).
pub const SESSION_NAMESPACE: &str = "kubeharness.dev/session-namespace";
/// Label: hash of the turn id a Tier-1 pod serves (turn ids need not be valid label values).
pub const TURN: &str = "kubeharness.dev/turn";
/// Label: the SandboxTier whose warm pool a pod was started for.
pub const POOL: &str = "kubeharness.dev/pool";
/// Label on pool pods: `false` while idle, `true` once a turn claimed it.
pub const CLAIMED: &str = "kubeharness.dev/claimed";
/// Label on pool pods: hash of the tier template and worker image they were built from.
pub const TEMPLATE_HASH: &str = "kubeharness.dev/template-hash";
/// Annotation on a serving Tier-1 pod: the turn id as the worker sent it.
pub const TURN_ID: &str = "kubeharness.dev/turn-id";
/// Annotation on a serving Tier-1 pod: uid of the worker pod that asked for it (a replaced
/// worker means the turn is gone, so the sweep deletes the Tier-1 pod).
pub const WORKER_UID: &str = "kubeharness.dev/worker-uid";
/// Annotation on an ordinary Tier-1 pod of a pooled tier: why no prepared pod was used.
pub const MISS_REASON: &str = "kubeharness.dev/miss-reason";

/// NetworkPolicy of a tier's Tier-1 pods (in the operator's namespace).
pub fn tier1_network_policy(tier: &str) -> String {
    format!("t1-{tier}")
}
/// Annotation on a Tier-1 pod: the level of its tier (what status.currentTier shows while it
/// serves).
pub const TIER_LEVEL: &str = "kubeharness.dev/tier-level";
/// Label on a Tier-1 pod serving (or kept for) a session: the session's uid, so a session
/// deleted and created again under the same name never gets the old one's pod.
pub const SESSION_UID: &str = "kubeharness.dev/session-uid";
/// Annotation on a serving Tier-1 pod: when its turn opened it (RFC 3339).
pub const TURN_STARTED: &str = "kubeharness.dev/turn-started";
/// Annotation on a serving Tier-1 pod: when its turn's bound (the tier's maxTurnSeconds) runs
/// out (RFC 3339); the sweep deletes the pod after it.
pub const TURN_DEADLINE: &str = "kubeharness.dev/turn-deadline";
/// Annotation on a Tier-1 pod kept idle between a session's turns (no [`TURN`] label): until when
/// it may serve the session's next turn (RFC 3339, from the tier's idleTimeoutSeconds).
pub const IDLE_UNTIL: &str = "kubeharness.dev/idle-until";
/// Annotation on a Tier-1 pod that served an earlier turn of its session: its agent holds that
/// turn's workspace, which the next bind replaces.
pub const REUSED: &str = "kubeharness.dev/reused";
/// Annotation on a turn's record (a HarnessTurn, see `tier1::record`): when the turn ended (RFC
/// 3339), written with `spec.ended`. Nothing serves that turn again, so an open still under way
/// when the turn ended creates nothing (or deletes what it made).
pub const TURN_ENDED: &str = "kubeharness.dev/turn-ended";
