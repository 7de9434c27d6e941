//! Status conditions in the metav1.Condition shape, and the one way to set them: a transition
//! time that changes only when the status does.

pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;

/// Condition types of a HarnessSession and a SandboxTier.
pub mod types {
    /// Session: the worker answers commands. Tier: the tier passed its checks and can be used.
    pub const READY: &str = "Ready";
    /// Session: the worker pod was deleted for idleness and the workspace PVC kept.
    pub const HIBERNATED: &str = "Hibernated";
    /// Session: what an escalating command meets (a serving Tier-1 pod, or why not).
    pub const ESCALATED: &str = "Escalated";
    /// Session or tier: something needs a human (a failing worker, a missing tier, failing pool pods).
    pub const DEGRADED: &str = "Degraded";
    /// kstatus (sigs.k8s.io/cli-utils): True while the operator works toward the spec (a worker
    /// pod starting, waking or being released, a warm pool filling); False once it is done.
    pub const RECONCILING: &str = "Reconciling";
    /// kstatus: True when the operator cannot make progress without a change (a missing or
    /// unusable tier, a quota or admission refusal, an image that cannot run); False otherwise.
    pub const STALLED: &str = "Stalled";
}

/// Condition reasons, by the condition types they go with (docs/operator.md has the table). They
/// are part of the API: users and tests match on them, so a value never changes.
pub mod reasons {
    // Shared by Degraded of sessions and tiers.

    /// Degraded False: nothing is wrong.
    pub const AS_EXPECTED: &str = "AsExpected";

    // HarnessSession Ready and Degraded.

    /// Ready True: the worker pod is running and answers on its API.
    pub const WORKER_READY: &str = "WorkerReady";
    /// Ready False and Reconciling True: the worker pod is being created, scheduled or started
    /// (a new session, a wake, a spec change), or replaced.
    pub const WORKER_STARTING: &str = "WorkerStarting";
    /// Ready False, Degraded True and Stalled True: the worker pod cannot start without help
    /// (image, crash loop).
    pub const WORKER_FAILING: &str = "WorkerFailing";
    /// Ready False, Degraded True and Stalled True (phase Pending): the namespace's ResourceQuota refused the
    /// worker pod or the workspace claim; the message is the quota's. Tried again every 10 s.
    pub const QUOTA_EXCEEDED: &str = "QuotaExceeded";
    /// Ready False, Degraded True and Stalled True (phase Pending): an admission check other than a quota (a
    /// LimitRange, Pod Security admission, a webhook) refused the worker pod or the workspace
    /// claim; the message is the API server's. Tried again every 10 s.
    pub const ADMISSION_REFUSED: &str = "AdmissionRefused";
    /// Ready False, Degraded True and Stalled True: the session's workerTier names no SandboxTier
    /// that its namespace may use: none exists by that name, or its namespaceSelector does not
    /// select the namespace (the message is the same either way, so a tenant cannot tell).
    pub const WORKER_TIER_NOT_FOUND: &str = "WorkerTierNotFound";
    /// Ready False, Degraded True and Stalled True (phase Failed): the spec passed the CRD's
    /// validation of its day (or was stored before today's rules) but names something the
    /// operator cannot use as a name, path, flag or label (the message names each field).
    /// Nothing is created; the session is looked at again when its spec changes.
    pub const INVALID_SPEC: &str = "InvalidSpec";
    /// Ready False, Degraded True and Stalled True (phase Pending): a Secret of the token
    /// Secret's name exists that the operator did not create for this session (made before it,
    /// or by someone else), or it lacks its keys. It is never used; delete it and the operator
    /// makes the session's own. Tried again every 10 s.
    pub const TOKEN_SECRET_REFUSED: &str = "TokenSecretRefused";
    /// Ready False and Reconciling True, in the message of WorkerStarting: a pod of the worker
    /// pod's name exists that the operator did not create (another uid than the one it
    /// recorded, or no controller reference to the session); it is deleted, never served or
    /// asked, and the session's own pod is started. Also a Warning Event.
    pub const WORKER_POD_NOT_OWNED: &str = "WorkerPodNotOwned";
    /// A Warning Event only (about the pod): a pod that looks like a warm-pool pod (level 0) or
    /// a Tier-1 pod (its labels, template hash, name) carries no valid `kubeharness.dev/origin`
    /// proof that the operator made it (a tenant's pod, or one the operator stopped before
    /// proving). It is deleted (that uid), never claimed, adopted or handed a token or a
    /// workspace.
    pub const POD_ORIGIN_UNPROVEN: &str = "PodOriginUnproven";
    /// Ready False, Degraded True and Stalled True: the session's workerTier is not a level-0 tier.
    pub const WORKER_TIER_NOT_LEVEL_ZERO: &str = "WorkerTierNotLevelZero";
    /// Ready False: the session is hibernated; the next exec wakes it.
    pub const HIBERNATED: &str = "Hibernated";
    /// Ready False and Hibernated True: `spec.suspend` is true, so the worker pod is deleted and
    /// the workspace PVC kept; `kube-harness exec` refuses it (exit 126) instead of waking it.
    pub const SUSPENDED: &str = "Suspended";
    /// Ready False (phase Expired): `lifetime.ttlSeconds` passed and `ttlAction` is Release: the
    /// worker pod, Tier-1 pods and workspace PVC were deleted, the HarnessSession is kept.
    pub const EXPIRED: &str = "Expired";

    // HarnessSession and SandboxTier Reconciling (kstatus).

    /// Reconciling False: nothing is left to do for the current spec (the session may be Ready,
    /// hibernated, suspended or expired; the tier checked and its warm pool full).
    pub const RECONCILED: &str = "Reconciled";
    /// Reconciling True: the worker pod is being deleted to hibernate or suspend the session.
    pub const HIBERNATING: &str = "Hibernating";
    /// Reconciling True: the TTL passed; the session's pods and PVC are being deleted.
    pub const EXPIRING: &str = "Expiring";
    /// Reconciling True: the tier's warm pool has fewer ready pods than its size.
    pub const WARM_POOL_FILLING: &str = "WarmPoolFilling";

    // HarnessSession Hibernated.

    /// Hibernated True: no command for idleHibernateSeconds, so the worker pod was deleted.
    pub const IDLE_TIMEOUT: &str = "IdleTimeout";
    /// Hibernated False: the worker pod is kept.
    pub const AWAKE: &str = "Awake";

    // HarnessSession Escalated.

    /// Escalated True: a Tier-1 pod serves a turn.
    pub const TIER1_READY: &str = "Tier1Ready";
    /// Escalated False: escalation works and no turn has escalated yet.
    pub const TIER1_AVAILABLE: &str = "Tier1Available";
    /// Escalated False: a turn's Tier-1 pod is starting.
    pub const TIER1_PROVISIONING: &str = "Tier1Provisioning";
    /// Escalated False: a turn's Tier-1 pod could not start or died (kept after it is deleted).
    pub const TIER1_FAILED: &str = "Tier1Failed";
    /// Escalated False: the turn ended; its Tier-1 pod was deleted, or kept idle for the
    /// session's next turn (the tier's idleTimeoutSeconds).
    pub const TURN_ENDED: &str = "TurnEnded";
    /// Escalated False: a turn held its Tier-1 pod longer than the tier's maxTurnSeconds without
    /// ending, so the pod was deleted.
    pub const TURN_TIMED_OUT: &str = "TurnTimedOut";
    /// Escalated False: the session names no escalation tier; escalating commands get exit 126.
    pub const NO_ESCALATION_TIER: &str = "NoEscalationTier";
    /// Escalated False: the escalation tier does not exist, or is not granted to the session's
    /// namespace (its namespaceSelector; the message is the same either way); escalating
    /// commands get exit 126.
    pub const ESCALATION_TIER_NOT_FOUND: &str = "EscalationTierNotFound";
    /// Escalated False: the escalation tier is level 0; escalating commands get exit 126.
    pub const ESCALATION_TIER_IS_LEVEL_ZERO: &str = "EscalationTierIsLevelZero";
    /// Escalated False: the operator has no tier API URL; escalating commands get exit 126.
    pub const ESCALATION_NOT_CONFIGURED: &str = "EscalationNotConfigured";

    // SandboxTier Ready and Degraded. A tier that is not Ready is also Stalled True, with the
    // same reason.

    /// Ready True: the tier passed every check against the capability matrix.
    pub const VALID: &str = "Valid";
    /// Ready False: the operator was built without a capability matrix.
    pub const MATRIX_UNAVAILABLE: &str = "MatrixUnavailable";
    /// Ready False: a capability the capability matrix does not know.
    pub const UNKNOWN_CAPABILITY: &str = "UnknownCapability";
    /// Ready False: template.image is empty.
    pub const IMAGE_MISSING: &str = "ImageMissing";
    /// Ready False: an escalation tier that provides nothing beyond Tier-0.
    pub const NO_ESCALATION_CAPABILITY: &str = "NoEscalationCapability";
    /// Ready False: an escalation tier's name is too long to be a label value of its pods.
    pub const NAME_TOO_LONG: &str = "NameTooLong";
    /// Degraded True and Stalled True: a warm-pool pod is failing (the message has its reason).
    pub const POOL_PODS_FAILING: &str = "PoolPodsFailing";
    /// Ready False, Degraded True and Stalled True: a Persistent Dir's claim or ConfigMap does
    /// not exist in the session's namespace (the message names it); the session starts once it
    /// is created.
    pub const PERSISTENT_DIR_SOURCE_MISSING: &str = "PersistentDirSourceMissing";
}

/// Sets `type_` in `conditions` (adding it if absent). `lastTransitionTime` moves only when the
/// status changes, as metav1.Condition requires; reason, message and observedGeneration always
/// follow the latest observation. Returns whether anything changed.
pub fn set(
    conditions: &mut Vec<Condition>,
    type_: &str,
    status: bool,
    reason: &str,
    message: impl Into<String>,
    generation: Option<i64>,
) -> bool {
    let status = if status { "True" } else { "False" }.to_string();
    let message = message.into();
    match conditions.iter_mut().find(|c| c.type_ == type_) {
        Some(c) => {
            let changed = c.status != status
                || c.reason != reason
                || c.message != message
                || c.observed_generation != generation;
            if c.status != status {
                c.last_transition_time = now();
            }
            c.status = status;
            c.reason = reason.into();
            c.message = message;
            c.observed_generation = generation;
            changed
        }
        None => {
            conditions.push(Condition {
                type_: type_.into(),
                status,
                reason: reason.into(),
                message,
                observed_generation: generation,
                last_transition_time: now(),
            });
            true
        }
    }
}

/// Whether `type_` is present with status True.
pub fn is_true(conditions: &[Condition], type_: &str) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == type_ && c.status == "True")
}

fn now() -> Time {
    Time(Timestamp::now())
}
