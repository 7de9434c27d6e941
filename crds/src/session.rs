//! `HarnessSession`: one agent session: a workspace on a PVC, a Tier-0 worker pod that runs its
//! commands, and where to escalate what Tier-0 cannot run.

use crate::condition::Condition;

/// Annotation on a HarnessSession asking the operator to wake it from hibernation: an RFC 3339
/// time, newer than when it hibernated. `kube-harness exec` sets it.
pub const WAKE_ANNOTATION: &str = "kubeharness.dev/wake-requested";
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// An agent session: its workspace, runtime toggles, policy, escalation tier and lifetime.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "kubeharness.dev",
    version = "v1alpha1",
    kind = "HarnessSession",
    namespaced,
    shortname = "hs",
    category = "kube-harness",
    status = "HarnessSessionStatus",
    doc = "An agent session: a workspace on a PersistentVolumeClaim, a Tier-0 worker pod that runs its shell commands, and the SandboxTier commands escalate to when Tier-0 cannot run them.",
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = ".status.conditions[?(@.type==\"Ready\")].status"
    ),
    printcolumn(name = "Tier", type_ = "integer", json_path = ".status.currentTier"),
    printcolumn(name = "Turns", type_ = "integer", json_path = ".status.usage.turns"),
    printcolumn(
        name = "Tier0-Share",
        type_ = "string",
        json_path = ".status.usage.tier0Share"
    ),
    printcolumn(
        name = "Address",
        type_ = "string",
        json_path = ".status.address",
        priority = 1
    ),
    printcolumn(
        name = "Endpoint",
        type_ = "string",
        json_path = ".status.workerEndpoint",
        priority = 1
    ),
    printcolumn(
        name = "Age",
        type_ = "date",
        json_path = ".metadata.creationTimestamp"
    ),
    validation = kube::core::Rule::new("self.metadata.name.size() <= 63").message("a HarnessSession's name is at most 63 characters: it becomes a label value of its pods (kubeharness.dev/session)")
)]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.escalation) || !has(self.escalation.tier) || self.escalation.tier != self.workerTier"
).message("escalation.tier must name a tier other than workerTier").field_path(".escalation.tier"))]
#[serde(rename_all = "camelCase")]
pub struct HarnessSessionSpec {
    /// The session's files: the PVC behind /session, /artifacts and /persistent, and the skills
    /// shown read-only at /.agents.
    #[serde(default)]
    pub workspace: Workspace,
    /// What scripts may use: python, javascript, network.
    #[serde(default)]
    pub runtime: RuntimeToggles,
    /// Commands refused on every tier (exit 126).
    #[serde(default)]
    pub policy: Policy,
    /// The level-0 SandboxTier whose pod template runs the session's worker: a SandboxTier name
    /// (a DNS subdomain) granted to the session's namespace by the tier's namespaceSelector.
    #[serde(default = "default_worker_tier")]
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("workerTier must be a SandboxTier name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"))]
    #[schemars(length(max = 253))]
    pub worker_tier: String,
    /// Where commands go when Tier-0 cannot run them; without a tier they are refused (exit 126).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub escalation: Option<Escalation>,
    /// What a command arriving while another runs in the session does: queue (wait) or reject.
    #[serde(default)]
    pub same_session: SameSession,
    /// How long the session lives and when an idle session hibernates.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifetime: Option<Lifetime>,
    /// Hibernate the session and keep it so: true deletes the worker pod (and any Tier-1 pod)
    /// and keeps the workspace PVC, as idle hibernation does; false wakes it. While true,
    /// `kube-harness exec` refuses the session (exit 126) rather than waking it against the
    /// spec. The declarative counterpart of exec's wake, for GitOps.
    #[serde(default)]
    pub suspend: bool,
    /// Which pods in the cluster may connect to the worker API at `status.address` (its token is
    /// still required). Unset: pods in the session's namespace labelled
    /// `kubeharness.dev/client=true`. The API server's port-forward works either way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access: Option<Access>,
}

/// CEL: `self` is a DNS-1123 subdomain (the name of a SandboxTier, ConfigMap, claim or
/// StorageClass); with the `maxLength` 253 beside it. Never `..` or a `/`, so a name can never
/// address anything but its own object in an API path.
pub const DNS_SUBDOMAIN_RULE: &str =
    "self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')";

/// Label a pod in the session's namespace carries to reach sessions whose `spec.access` is unset.
pub const CLIENT_LABEL: (&str, &str) = ("kubeharness.dev/client", "true");

/// In-cluster clients of the worker API: the ingress rules of the session's NetworkPolicy.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Access {
    /// Peers admitted to the worker's port, as NetworkPolicy peers: podSelector alone selects pods
    /// in the session's namespace, namespaceSelector alone every pod in the namespaces it selects,
    /// both the selected pods in the selected namespaces. Empty: no pod but the operator. At most
    /// 16 clients, each selector at most 8 matchLabels and 4 matchExpressions of at most 8 values
    /// (they are copied into the session's NetworkPolicy).
    #[serde(default)]
    #[schemars(length(max = 16))]
    pub clients: Vec<AccessClient>,
}

/// One admitted peer.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = kube::core::Rule::new(
    "has(self.podSelector) || has(self.namespaceSelector)"
).message("a client must set podSelector, namespaceSelector or both"))]
#[serde(rename_all = "camelCase")]
pub struct AccessClient {
    /// Pods admitted (in the session's namespace unless namespaceSelector is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::selector::bounded_pods")]
    pub pod_selector: Option<LabelSelector>,
    /// Namespaces whose pods are admitted (all of their pods unless podSelector is set).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "crate::selector::bounded_namespaces")]
    pub namespace_selector: Option<LabelSelector>,
}

fn default_worker_tier() -> String {
    "tier0".into()
}

/// The workspace volume and what is mounted from it.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Workspace {
    /// Size of the workspace PersistentVolumeClaim, a positive quantity such as 1Gi.
    #[serde(default = "default_size")]
    #[x_kube(validation = kube::core::Rule::new("isQuantity(self) && quantity(self).isGreaterThan(quantity('0'))").message("size must be a positive quantity such as 1Gi"))]
    #[schemars(length(max = 32))]
    pub size: String,
    /// StorageClass of the PVC (a StorageClass name); the cluster default when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("storageClassName must be a StorageClass name"))]
    #[schemars(length(max = 253))]
    pub storage_class_name: Option<String>,
    /// Directories under /persistent/<name> loaded from a source that outlives the session (a
    /// PersistentVolumeClaim or a ConfigMap in the session's namespace) and committed back by
    /// their policy (docs/operator.md "Persistent Dirs"). A session with any is never adopted
    /// from a warm pool (the pool's pods do not mount its sources).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("self.all(p, self.exists_one(q, q.name == p.name))").message("persistent dir names must be unique"))]
    #[schemars(length(max = 16))]
    pub persistent_dirs: Vec<PersistentDir>,
    /// ConfigMaps whose keys appear as files under /.agents/<path>/ (read-only), in the worker
    /// pod and, as a copy handed over at each escalation, on Tier-1 (never merged back). Each
    /// skill's directory (its path, else its ConfigMap's name) is its own: no two are the same
    /// and none is inside another.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = kube::core::Rule::new(SKILL_DIRS_RULE).message("skills must each have a directory of their own: no two paths (a skill's path, else its configMap) are the same and none is inside another"))]
    #[schemars(length(max = 16))]
    pub skills: Vec<Skill>,
}

impl Default for Workspace {
    fn default() -> Self {
        Workspace {
            size: default_size(),
            storage_class_name: None,
            persistent_dirs: Vec::new(),
            skills: Vec::new(),
        }
    }
}

/// CEL over `workspace.skills`: every skill's directory is its own.
const SKILL_DIRS_RULE: &str = "self.all(s, self.exists_one(t, (has(t.path) ? t.path : t.configMap) == (has(s.path) ? s.path : s.configMap))) && self.all(s, self.all(t, !(has(t.path) ? t.path : t.configMap).startsWith((has(s.path) ? s.path : s.configMap) + '/')))";

/// CEL: `self` is a relative path of plain names (letters, digits, '.', '_', '-'), no `.`
/// segment, none starting with `..` (`..data` too: a ConfigMap volume item path may not), no
/// empty segment: canonical, and under the directory it is relative to.
pub const RELATIVE_PATH_RULE: &str =
    "self.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$') && !self.matches('(^|/)([.](/|$)|[.][.])')";

fn default_size() -> String {
    "1Gi".into()
}

/// A directory under /persistent, backed by a source outside the session.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("!has(self.source.configMap) || self.commit == 'read-only'").message("a ConfigMap source is read-only: set commit: read-only").field_path(".commit"))]
pub struct PersistentDir {
    /// Directory name under /persistent (one path segment): the agent sees /persistent/<name>.
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$')").message("name must be one path segment of letters, digits, '.', '_' or '-'"))]
    #[schemars(length(max = 63))]
    pub name: String,
    /// Where the directory's files live between sessions.
    pub source: PersistentDirSource,
    /// When the session's changes reach the source: read-only (never; writes fail), after-turn
    /// (at the end of every turn, unless another session committed since this one loaded: then
    /// the turn's version is kept as a manual commit and reported as a conflict), manual (only
    /// when `kube-harness commit` names the turn).
    #[serde(default)]
    pub commit: CommitPolicy,
    /// Paths relative to the directory that scripts may read but not change (a landlock
    /// read-only prefix, on Tier-0 and in the merge-back of Tier-1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("self.all(p, p.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$') && !p.matches('(^|/)[.][.]?(/|$)'))").message("readOnlyPrefixes must be relative paths of plain names (no '.', '..' or empty segments)"))]
    #[schemars(length(max = 32), inner(length(max = 1024)))]
    pub read_only_prefixes: Vec<String>,
}

/// Exactly one source: a claim (any policy) or a ConfigMap (read-only).
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("has(self.claim) != has(self.configMap)").message("set exactly one of claim and configMap"))]
pub struct PersistentDirSource {
    /// A PersistentVolumeClaim in the session's namespace; sessions naming the same claim and
    /// path share the directory. On a cluster with more than one node it needs an access mode
    /// that lets several pods mount it (ReadWriteMany, or ReadOnlyMany for read-only dirs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<ClaimSource>,
    /// A ConfigMap in the session's namespace, its keys shown as files (read-only only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map: Option<ConfigMapSource>,
}

/// A directory inside a PersistentVolumeClaim.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ClaimSource {
    /// Name of the PersistentVolumeClaim.
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("claimName must be a PersistentVolumeClaim name"))]
    #[schemars(length(max = 253))]
    pub claim_name: String,
    /// Directory inside the claim (plain names separated by '/'), created by the first commit.
    /// Defaults to the Persistent Dir's name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new("self.matches('^[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*$') && !self.matches('(^|/)[.][.]?(/|$)')").message("path must be a relative path of plain names (no '.', '..' or empty segments)"))]
    #[schemars(length(max = 1024))]
    pub path: Option<String>,
}

/// A ConfigMap shown as a read-only directory.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ConfigMapSource {
    /// Name of the ConfigMap.
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("name must be a ConfigMap name"))]
    #[schemars(length(max = 253))]
    pub name: String,
}

/// When changes to a Persistent Dir reach its source.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
#[serde(rename_all = "kebab-case")]
pub enum CommitPolicy {
    // Plain comments: doc comments would replace the enum's description in the schema.
    // Loaded each turn; writes fail.
    ReadOnly,
    // Committed back when each turn ends.
    #[default]
    AfterTurn,
    // Kept per turn; committed when `kube-harness commit` asks.
    Manual,
}

/// A ConfigMap of skills shown read-only under /.agents.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Skill {
    /// Name of a ConfigMap in the session's namespace.
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("configMap must be a ConfigMap name"))]
    #[schemars(length(max = 253))]
    pub config_map: String,
    /// Directory under /.agents (defaults to the ConfigMap name): a relative path of plain names
    /// (letters, digits, '.', '_', '-'), no '.' segment and none starting with '..', so it stays
    /// under /.agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new(RELATIVE_PATH_RULE).message("path must be a relative path of plain names under /.agents (no '.' segment, none starting with '..', no empty segments or leading '/')"))]
    #[schemars(length(max = 253))]
    pub path: Option<String>,
}

/// Runtime toggles, as in the classifier: python and javascript on, network off by default.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct RuntimeToggles {
    /// Allow python3 on Tier-0.
    #[serde(default = "yes")]
    pub python: bool,
    /// Allow node on Tier-0.
    #[serde(default = "yes")]
    pub javascript: bool,
    /// Allow network clients and inet sockets; egress is denied by a NetworkPolicy otherwise.
    #[serde(default)]
    pub network: bool,
}

impl Default for RuntimeToggles {
    fn default() -> Self {
        RuntimeToggles {
            python: true,
            javascript: true,
            network: false,
        }
    }
}

fn yes() -> bool {
    true
}

/// Commands the session may never run.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Policy {
    /// Command names refused wherever they appear in a script (exit 126): letters, digits, '_',
    /// '+', '.' and '-', not starting with '-' (a name, never a flag or a path).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[x_kube(validation = kube::core::Rule::new(DENY_RULE).message("denyCommands entries must be command names: letters, digits, '_', '+', '.' and '-', not starting with '-'"))]
    #[schemars(length(max = 256), inner(length(max = 128)))]
    pub deny_commands: Vec<String>,
}

/// CEL over `policy.denyCommands`: command names only.
pub const DENY_RULE: &str = "self.all(c, c.matches('^[A-Za-z0-9_+.][A-Za-z0-9_+.-]*$'))";

/// The tier escalations go to.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Escalation {
    /// Name of a SandboxTier with level 1 or more, granted to the session's namespace by the
    /// tier's namespaceSelector; unset: escalating commands are refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = kube::core::Rule::new(DNS_SUBDOMAIN_RULE).message("escalation.tier must be a SandboxTier name: lowercase letters, digits, '-' and '.', starting and ending with a letter or digit"))]
    #[schemars(length(max = 253))]
    pub tier: Option<String>,
}

/// What a second command does while one runs in the same session.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
#[serde(rename_all = "lowercase")]
pub enum SameSession {
    #[default]
    Queue,
    Reject,
}

/// Session lifetime.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.ttlSeconds) || !has(self.idleHibernateSeconds) || self.idleHibernateSeconds < self.ttlSeconds"
).message("idleHibernateSeconds must be less than ttlSeconds").field_path(".idleHibernateSeconds"))]
#[x_kube(validation = kube::core::Rule::new(
    "!has(self.ttlAction) || has(self.ttlSeconds)"
).message("ttlAction needs ttlSeconds").field_path(".ttlAction"))]
#[serde(rename_all = "camelCase")]
pub struct Lifetime {
    /// Seconds after creation when the session expires: what happens then is `ttlAction`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 60))]
    pub ttl_seconds: Option<u64>,
    /// What expiry does. Release (the default): the worker pod, Tier-1 pods and workspace PVC
    /// are deleted and the HarnessSession is kept with phase Expired and Ready False (reason
    /// Expired), so a GitOps tool that applies it does not recreate it; a larger ttlSeconds
    /// starts it again with an empty workspace. Delete: the HarnessSession itself is deleted
    /// (for sessions no tool re-applies).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl_action: Option<TtlAction>,
    /// Seconds without a command after which the worker pod is deleted (the PVC stays; the next
    /// exec wakes the session).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 10))]
    pub idle_hibernate_seconds: Option<u64>,
}

/// What a session's TTL does when it passes.
#[derive(
    schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Default,
)]
pub enum TtlAction {
    // Plain comments: doc comments would replace the enum's description in the schema.
    // Delete the pods and the workspace PVC, keep the object (phase Expired).
    #[default]
    Release,
    // Delete the HarnessSession.
    Delete,
}

impl Lifetime {
    /// What expiry does (Release unless Delete is asked for).
    pub fn action(&self) -> TtlAction {
        self.ttl_action.unwrap_or_default()
    }
}

/// Observed state of a session.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct HarnessSessionStatus {
    /// Pending, Provisioning, Ready, Hibernated (idle or spec.suspend), Failed, Expired (the TTL
    /// passed with ttlAction Release) or Terminating.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    /// The generation of the spec this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Ready, Reconciling, Stalled (kstatus), Hibernated, Escalated and Degraded, each with a
    /// stable reason and the observedGeneration it describes.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// host:port of the worker pod's API (its pod IP: changes when the pod is replaced).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_endpoint: Option<String>,
    /// Stable in-cluster URL of the worker API (the session's Service), set while Ready; pods
    /// that `spec.access` admits connect here with the session's token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    /// Name of the current worker pod: `<name>-worker`, or the warm-pool pod the session
    /// adopted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pod: Option<String>,
    /// Name of the PersistentVolumeClaim holding the workspace: `<name>-workspace`, or the
    /// adopted warm-pool pod's claim (which the session then owns and keeps across hibernation).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workspace_claim: Option<String>,
    /// Name of the Secret holding the worker API token (key `token`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret: Option<String>,
    /// The uid of the token Secret the operator created: a Secret of that name with another uid
    /// (made by someone else) is never used. Kept by the operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token_secret_uid: Option<String>,
    /// The uid of the worker pod the operator created (or claimed from a warm pool): a pod of
    /// that name with another uid is not the session's and is never served or asked. Kept by the
    /// operator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_pod_uid: Option<String>,
    /// The tier the session's commands run on now (0, or the escalation tier's level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub current_tier: Option<u8>,
    /// Usage counters of the whole session: what its earlier worker pods counted
    /// (`usageCarried`) plus what the current worker reports. They survive a worker pod's
    /// replacement (hibernation, a deleted or crashed pod), except for commands run after the
    /// operator's last poll of a worker that ended without being asked (at most one poll period,
    /// 15 s, of work).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// The counters carried over from the session's earlier workers, and the worker process whose
    /// own counters `usage` adds to them. Kept by the operator; not for users to set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_carried: Option<CarriedUsage>,
    /// When the worker last ran a command (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_activity_time: Option<String>,
}

/// Where a session is in its life.
#[derive(schemars::JsonSchema, Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Pending,
    Provisioning,
    Ready,
    Hibernated,
    Failed,
    Expired,
    Terminating,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Provisioning => "Provisioning",
            Phase::Ready => "Ready",
            Phase::Hibernated => "Hibernated",
            Phase::Failed => "Failed",
            Phase::Expired => "Expired",
            Phase::Terminating => "Terminating",
        }
    }
}

/// What a session's earlier worker processes counted, and which worker counts now.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct CarriedUsage {
    /// The current worker process's instance id (from its `GET /v1/status`).
    pub worker: String,
    /// When that worker process started (RFC 3339): a report from a worker that started
    /// earlier is from one already replaced, and is not counted again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker_started_at: Option<String>,
    /// The sum of the earlier workers' last reported counters.
    pub usage: Usage,
}

/// Counters of the session's work.
#[derive(KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq, Default)]
#[serde(rename_all = "camelCase")]
pub struct Usage {
    /// Turns ended.
    pub turns: u64,
    /// Commands run on Tier-0.
    pub commands_tier0: u64,
    /// Commands run on an escalation tier.
    pub commands_tier1: u64,
    /// Commands refused (exit 126).
    pub refusals: u64,
    /// Share of commands that ran on Tier-0, as a percentage with one decimal ("93.5%").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier0_share: Option<String>,
}

/// The largest value a usage counter takes (2^53 - 1: an integer the API server stores and every
/// JSON reader reads exactly); a larger one is clamped to it, so a status write never fails on it.
pub const MAX_COUNTER: u64 = (1 << 53) - 1;

impl Usage {
    /// The counters, each at most [`MAX_COUNTER`], with the Tier-0 share computed from them.
    pub fn new(turns: u64, commands_tier0: u64, commands_tier1: u64, refusals: u64) -> Usage {
        let [turns, commands_tier0, commands_tier1, refusals] =
            [turns, commands_tier0, commands_tier1, refusals].map(|c| c.min(MAX_COUNTER));
        let total = commands_tier0 + commands_tier1;
        Usage {
            turns,
            commands_tier0,
            commands_tier1,
            refusals,
            tier0_share: (total > 0)
                .then(|| format!("{:.1}%", commands_tier0 as f64 * 100.0 / total as f64)),
        }
    }

    /// The sum of two sets of counters (saturating: counters never wrap).
    pub fn plus(&self, other: &Usage) -> Usage {
        Usage::new(
            self.turns.saturating_add(other.turns),
            self.commands_tier0.saturating_add(other.commands_tier0),
            self.commands_tier1.saturating_add(other.commands_tier1),
            self.refusals.saturating_add(other.refusals),
        )
    }
}
