//! `SandboxTier`: a kind of sandbox a session can run commands in. Level 0 is the per-session
//! worker pod; levels 1 and up are the real-toolchain pods a turn escalates to. Cluster-scoped,
//! like a StorageClass: platform teams define tiers, sessions in any namespace name them.

use crate::condition::Condition;
use k8s_openapi::api::core::v1::{ResourceRequirements, Toleration};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Selector, SelectorExt};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// A kind of sandbox: its pod template, what it can run, and how it is reached.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kubeharness.dev",
    version = "v1alpha1",
    kind = "SandboxTier",
    shortname = "sbt",
    category = "kube-harness",
    status = "SandboxTierStatus",
    scale(
        spec_replicas_path = ".spec.warmPool.size",
        status_replicas_path = ".status.warmReady",
        label_selector_path = ".status.selector"
    ),
    doc = "A kind of sandbox a HarnessSession runs commands in: level 0 is the per-session worker pod, levels 1 and up are real-toolchain pods a turn escalates to.",
    printcolumn(name = "Level", type_ = "integer", json_path = ".spec.level"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.template.image"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(
        name = "Warm",
        type_ = "integer",
        json_path = ".spec.warmPool.size",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    )
)]
#[x_kube(validation = kube::core::Rule::new(
    "self.level > 0 || !self.capabilities.exists(c, c in ['version-control', 'containers', 'build-toolchain', 'package-manager'])"
).message("a level-0 tier is the Tier-0 worker and cannot provide version-control, containers, build-toolchain or package-manager; give the tier a level of 1 or more").field_path(".capabilities"))]
#[x_kube(validation = kube::core::Rule::new(
    "self.level > 0 || !has(self.template.env) || size(self.template.env) == 0"
).message("env is for escalation tiers (level 1 and up); the Tier-0 worker gives commands an empty environment").field_path(".template.env"))]
#[x_kube(validation = kube::core::Rule::new(
    "self.level > 0 || !has(self.egress) || self.egress.mode == 'Deny'"
).message("egress is for escalation tiers (level 1 and up); a level-0 tier's worker pods get their egress from their session's runtime.network").field_path(".egress"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.warmPool) || self.warmPool.size == 0 || (has(self.warmPool.namespaces) && size(self.warmPool.namespaces) > 0)"
).message("a warm pool keeps its pods in the namespaces of the sessions it serves (they count against those namespaces' quotas): list them in warmPool.namespaces").field_path(".warmPool.namespaces"))]
#[serde(rename_all = "camelCase")]
pub struct SandboxTierSpec {
    /// The tier level: 0 is the Tier-0 worker tier, 1 and up are escalation tiers.
    #[schemars(range(min = 0, max = 9))]
    pub level: u8,
    /// The pod every sandbox of this tier runs in.
    pub template: TierTemplate,
    /// The namespaces whose HarnessSessions may use this tier (as workerTier or escalation.tier),
    /// by their labels (`kubernetes.io/metadata.name` names one). `{}` selects every namespace.
    /// Unset selects none: a tier is granted on purpose, never by omission. A session naming a
    /// tier its namespace is not granted is refused exactly as if the tier did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
    /// What the tier can run beyond the Tier-0 toolset. The classifier's escalation reasons
    /// (version-control, containers, build-toolchain, package-manager, network-client) and the
    /// runtime toggles (python, javascript, network) name them.
    #[serde(default)]
    #[x_kube(validation = kube::core::Rule::new("self.all(c, self.exists_one(d, d == c))").message("capabilities must not repeat"))]
    #[schemars(length(max = 8))]
    pub capabilities: Vec<Capability>,
    /// Outbound traffic the tier's Tier-1 pods may open (escalation tiers only). A level-0
    /// tier must leave it Deny: a worker pod's egress follows its session's runtime.network.
    #[serde(default)]
    pub egress: EgressPolicy,
    /// Escalation tiers: seconds a Tier-1 pod is kept after its turn ended, idle, for the same
    /// session's next escalating turn (same session namespace, name and uid, and the same worker
    /// pod). A later turn gets the kept pod with its whole workspace handed over again (the
    /// files of /session, /artifacts and /persistent are replaced; HOME and /tmp keep what the
    /// session's earlier turns left there). It is deleted once idle for this long (by the
    /// operator's sweep, within 30 seconds after), and never serves another session. 0: the
    /// pod is deleted at the end of its turn. Not used by level 0.
    #[serde(default = "default_idle_timeout")]
    #[schemars(range(min = 0, max = 86400))]
    pub idle_timeout_seconds: u32,
    /// Escalation tiers: the longest a turn may hold a Tier-1 pod without ending (from the
    /// open of its sandbox). Past it the operator's sweep deletes the pod (within 30 seconds),
    /// the session's Escalated condition becomes False with reason TurnTimedOut and a Warning
    /// Event Tier1TurnTimedOut names the pod; the turn's later commands get exit 126. Not used by
    /// level 0.
    #[serde(default = "default_max_turn")]
    #[schemars(range(min = 1, max = 604800))]
    pub max_turn_seconds: u32,
    /// Pre-started pods kept ready so an escalation claims one instead of waiting for a cold start.
    /// Always present (size 0 by default) so the /scale subresource can read and set its size.
    #[serde(default)]
    pub warm_pool: WarmPool,
}

impl SandboxTierSpec {
    /// Whether a session in a namespace with `labels` may use this tier: its
    /// `namespaceSelector` selects the namespace (unset: no namespace; a selector that cannot
    /// be read: none).
    pub fn grants(&self, labels: &BTreeMap<String, String>) -> bool {
        let Some(selector) = &self.namespace_selector else {
            return false;
        };
        match Selector::try_from(selector.clone()) {
            Ok(s) => s.matches(labels),
            Err(_) => false,
        }
    }

    /// Whether the tier grants every namespace or none whatever its labels (no need to read
    /// them): `Some(true)` for `{}`, `Some(false)` when unset or unreadable.
    pub fn grants_without_labels(&self) -> Option<bool> {
        let Some(selector) = &self.namespace_selector else {
            return Some(false);
        };
        match Selector::try_from(selector.clone()) {
            Ok(s) if s.selects_all() => Some(true),
            Ok(_) => None,
            Err(_) => Some(false),
        }
    }
}

/// Default of `template.maxProcesses` on escalation tiers.
pub const DEFAULT_MAX_PROCESSES: u32 = 1024;

fn default_idle_timeout() -> u32 {
    300
}

/// Default of `maxTurnSeconds`: six hours.
pub const DEFAULT_MAX_TURN_SECONDS: u32 = 21600;

fn default_max_turn() -> u32 {
    DEFAULT_MAX_TURN_SECONDS
}

/// The pod template of a tier: any image works for levels 1 and up (the kube-harness agent binary
/// is copied in by an init container).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct TierTemplate {
    /// Container image of the sandbox.
    #[x_kube(validation = kube::core::Rule::new("self.size() > 0").message("image must not be empty"))]
    #[schemars(length(max = 512))]
    pub image: String,
    /// Image pull policy: Always, IfNotPresent or Never.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<PullPolicy>,
    /// CPU and memory requests and limits of the sandbox container. On escalation tiers (level
    /// 1 and up) a limit left out gets the operator's default: cpu 2, memory 4Gi,
    /// ephemeral-storage 8Gi (the Tier-1 pod's writable layer, logs, /tmp and HOME).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Escalation tiers: the most processes (and threads) a Tier-1 pod's commands may have at
    /// once, set by its agent as RLIMIT_NPROC; each Tier-1 pod runs as a uid of its own, so the
    /// bound is the pod's alone. Default 1024. Not used by level 0 (its worker has its own).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 16, max = 65536))]
    pub max_processes: Option<u32>,
    /// RuntimeClass for stronger isolation (gVisor, Kata), if the cluster has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    /// Node labels the sandbox pod must match.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub node_selector: BTreeMap<String, String>,
    /// Taints the sandbox pod tolerates.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tolerations: Vec<Toleration>,
    /// Environment of the sandbox's commands on top of the image's own (levels 1 and up), e.g.
    /// CARGO_HOME=/tmp/cargo for an image whose toolchain home is owned by root: commands run as
    /// uid 65532. Plain values only, never Secret references (the sandbox must hold no
    /// credentials). HOME and TMPDIR are the pod's writable volumes and KH_* is reserved.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub env: Vec<TierEnvVar>,
}

/// One environment variable of a tier's commands.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default)]
#[x_kube(validation = kube::core::Rule::new(
    "self.name.matches('^[A-Za-z_][A-Za-z0-9_]*$') && !self.name.startsWith('KH_') && !(self.name in ['HOME', 'TMPDIR'])"
).message("env names are shell identifiers; HOME, TMPDIR and KH_* are set by kube-harness").field_path(".name"))]
pub struct TierEnvVar {
    /// Variable name: a shell identifier, not HOME, TMPDIR or KH_*.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// Its value.
    #[serde(default)]
    #[schemars(length(max = 4096))]
    pub value: String,
}

/// When the kubelet pulls the image.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum PullPolicy {
    Always,
    IfNotPresent,
    Never,
}

/// Something a tier can run.
#[derive(
    schemars::JsonSchema,
    Serialize,
    Deserialize,
    Clone,
    Copy,
    Debug,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
)]
#[serde(rename_all = "kebab-case")]
pub enum Capability {
    VersionControl,
    BuildToolchain,
    PackageManager,
    NetworkClient,
    Containers,
    Python,
    Javascript,
    Network,
}

impl Capability {
    /// The name used in the API and by the classifier.
    pub fn as_str(self) -> &'static str {
        match self {
            Capability::VersionControl => "version-control",
            Capability::BuildToolchain => "build-toolchain",
            Capability::PackageManager => "package-manager",
            Capability::NetworkClient => "network-client",
            Capability::Containers => "containers",
            Capability::Python => "python",
            Capability::Javascript => "javascript",
            Capability::Network => "network",
        }
    }
}

/// Outbound traffic of a tier's pods besides DNS, which is always allowed. The session log and
/// the ledger admit worker pods only, so a Tier-1 pod reaches neither, whatever this allows.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = kube::core::Rule::new(
    "self.mode == 'AllowList' ? (has(self.cidrs) && self.cidrs.size() > 0) : !has(self.cidrs) || self.cidrs.size() == 0"
).message("cidrs are required with mode AllowList and not allowed with Deny or AllowAll").field_path(".cidrs"))]
#[serde(rename_all = "camelCase")]
pub struct EgressPolicy {
    /// Deny (the default: no egress), AllowAll, or AllowList (only the listed CIDRs).
    #[serde(default)]
    pub mode: EgressMode,
    /// Destination CIDRs allowed with mode AllowList.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("self.all(c, isCIDR(c))").message("every entry must be a CIDR such as 10.0.0.0/8"))]
    #[schemars(length(max = 64), inner(length(max = 64)))]
    pub cidrs: Vec<String>,
}

/// How much egress a tier allows.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum EgressMode {
    #[default]
    Deny,
    AllowList,
    AllowAll,
}

/// Pre-started sandboxes of a tier.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct WarmPool {
    /// Number of ready, unclaimed pods to keep in each of `namespaces` (0: no pool). Escalation
    /// tiers (level 1 and up): prepared Tier-1 pods an escalation claims instead of starting one. Level 0: pre-started
    /// worker pods, each with its workspace PVC, kept in every namespace of `namespaces`, that a
    /// new HarnessSession adopts instead of waiting for a cold start. Set through /scale by
    /// `kubectl scale sandboxtier/<name> --replicas N` or an HPA.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub size: u32,
    /// Largest workspace archive, in bytes, a prepared pod takes; a larger workspace is served by
    /// an ordinary pod (miss reason `workspace_too_large`). Unset: the operator's
    /// `--prepared-max-bytes` (128 KiB by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1073741824))]
    pub max_workspace_bytes: Option<u64>,
    /// The namespaces whose sessions this pool serves; `size` pods are kept in each (they count
    /// against that namespace's quota): worker pods at level 0, prepared Tier-1 pods at levels 1
    /// and up (a session elsewhere gets an ordinary Tier-1 pod, miss reason
    /// `namespace_not_served`). Required when the pool has a size. A namespace listed twice
    /// counts once.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 64))]
    pub namespaces: Vec<String>,
}

/// What the operator found when it checked the tier.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct SandboxTierStatus {
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready: the tier is usable (image set, capabilities consistent with the classifier's matrix).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The capability matrix version the tier was checked against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub matrix_version: Option<String>,
    /// Unclaimed warm pods that are ready now (the /scale status replicas). Level 0: the
    /// fewest ready in any one of its namespaces, so that it compares with `size`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_ready: Option<u32>,
    /// Unclaimed warm pods built from the current template (ready or still starting); fewer than
    /// the pool size while a template change rolls the pool.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub warm_updated: Option<u32>,
    /// Label selector of the tier's unclaimed warm pods (the /scale selector, for an HPA).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
}
