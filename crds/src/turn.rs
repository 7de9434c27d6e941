//! `HarnessTurn`: one escalating turn of a session and the Tier-1 pod that serves it. The tier
//! API makes it (docs/tier1.md) when a worker opens a turn's sandbox, in the session's namespace
//! and owned by the session; the turn controller reports its status. `kubectl get harnessturns`
//! shows the open turns, their tier, pod and age. Users read these objects; they never write
//! them (the user role grants get, list and watch only), and the operator acts on none it did
//! not make (its origin annotation, see the operator's `origin` module).

use crate::condition::Condition;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// One escalating turn of a HarnessSession: which Tier-1 pod serves it, and whether it ended.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[kube(
    group = "kubeharness.dev",
    version = "v1alpha1",
    kind = "HarnessTurn",
    namespaced,
    shortname = "hturn",
    category = "kube-harness",
    status = "HarnessTurnStatus",
    doc = "One escalating turn of a HarnessSession and the Tier-1 pod that serves it. Made by the operator's tier API when a worker opens the turn's sandbox, owned by the session, status kept by the operator's turn controller. Read-only for users.",
    printcolumn(name = "Session", type_ = "string", json_path = ".spec.session"),
    printcolumn(name = "Tier", type_ = "string", json_path = ".spec.tier"),
    printcolumn(name = "Pod", type_ = "string", json_path = ".spec.pod"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Turn",
        type_ = "string",
        json_path = ".spec.turn",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = kube::core::Rule::new(
    "self.session == oldSelf.session && self.turn == oldSelf.turn"
).message("session and turn never change: a turn object is of one turn of one session"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(oldSelf.pod) || (has(self.pod) && self.pod == oldSelf.pod)"
).message("pod never changes once set: the first open to record a pod decided the turn's pod").field_path(".pod"))]
#[x_kube(validation = kube::core::Rule::new(
    "!oldSelf.ended || self.ended"
).message("an ended turn stays ended").field_path(".ended"))]
#[serde(rename_all = "camelCase")]
pub struct HarnessTurnSpec {
    /// The HarnessSession (in this namespace) whose turn this is.
    #[x_kube(validation = kube::core::Rule::new(crate::session::DNS_SUBDOMAIN_RULE).message("session must be a HarnessSession name"))]
    #[schemars(length(max = 253))]
    pub session: String,
    /// The turn id the worker opened the sandbox with (1 to 512 characters, no control
    /// characters).
    #[x_kube(validation = kube::core::Rule::new("!self.matches('[\\\\x00-\\\\x1f\\\\x7f]')").message("turn must not contain control characters"))]
    #[schemars(length(min = 1, max = 512))]
    pub turn: String,
    /// The SandboxTier the turn escalated to (unset on a turn ended before it recorded a pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new(crate::session::DNS_SUBDOMAIN_RULE).message("tier must be a SandboxTier name"))]
    #[schemars(length(max = 253))]
    pub tier: Option<String>,
    /// The Tier-1 pod that serves the turn: a pool pod it claimed, a pod kept from the session's
    /// previous turn, or one made for it. Set once, by the open that recorded it first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new(crate::session::DNS_SUBDOMAIN_RULE).message("pod must be a pod name"))]
    #[schemars(length(max = 253))]
    pub pod: Option<String>,
    /// True once the turn ended (the worker's DELETE, or a newer turn of the session opened):
    /// nothing serves it again, and an open of it is refused. Never goes back to false.
    #[serde(default)]
    pub ended: bool,
}

/// What the operator observed of the turn.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HarnessTurnStatus {
    /// Pending (the pod is starting or not made yet), Ready (the pod serves), Failed (the pod
    /// could not start, died or is gone), Ended (the turn ended).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<TurnPhase>,
    /// The pod's IP while Ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_ip: Option<String>,
    /// Where the pod came from: `prepared` (a warm pool's), `ordinary` (made for the turn), or
    /// `kept` (kept idle from the session's previous turn).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// Why a pooled tier gave the turn an ordinary pod (the pool was empty, or its pods could not
    /// hold the workspace).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub miss_reason: Option<String>,
    /// When the turn's pod is deleted unless the turn ends first (the tier's maxTurnSeconds),
    /// RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<String>,
    /// When the turn ended, RFC 3339.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<String>,
    /// The generation this status was computed from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: True while the pod serves the turn (reason Tier1Ready); False with
    /// Tier1Provisioning, Tier1Failed or TurnEnded.
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// Where a turn is in its life.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum TurnPhase {
    Pending,
    Ready,
    Failed,
    Ended,
}

impl TurnPhase {
    pub fn as_str(self) -> &'static str {
        match self {
            TurnPhase::Pending => "Pending",
            TurnPhase::Ready => "Ready",
            TurnPhase::Failed => "Failed",
            TurnPhase::Ended => "Ended",
        }
    }
}
