//! The objects of a Tier-1 sandbox, built from a SandboxTier: the pod, its token Secret, and the
//! tier's NetworkPolicy. Pure functions, so tests check the exact objects (restricted Pod
//! Security, no ServiceAccount token, nothing of the worker's environment).

use crate::config::OperatorConfig;
use crate::kube_util::short_hash;
use crate::kube_util::{restricted_container as restricted, restricted_pod};
use crate::labels;
use k8s_openapi::api::core::v1::{
    Container, ContainerPort, EmptyDirVolumeSource, EnvVar, HTTPGetAction, Pod, PodSpec, Probe,
    ResourceRequirements, Secret, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::api::networking::v1::{
    IPBlock, NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::{Resource, ResourceExt};
use kube_harness_crds::tier::EgressMode;
use kube_harness_crds::SandboxTier;
use serde_json::json;
use std::collections::BTreeMap;

/// Port of the Tier-1 agent API in the pod.
pub const AGENT_PORT: u16 = 8080;
/// Where the init container puts the static kube-harness binary.
pub const BIN_DIR: &str = "/kh/bin";
/// Where the pod's own token Secret is mounted.
pub const TOKEN_DIR: &str = "/kh/token";
/// The writable HOME of the agent.
pub const HOME: &str = "/home/kh";
/// UID/GID of the init container and the skills keeper (as the worker image's).
pub const UID: i64 = 65532;
/// The first uid of the range Tier-1 agents run as ([`agent_uid`]): above the worker pods'
/// range (`session::resources::WORKER_UID_BASE`, 2^30 uids).
pub const AGENT_UID_BASE: i64 = 100_000 + (1 << 30);
/// How many uids the agents' range holds (2^30).
pub const AGENT_UID_SPAN: i64 = 1 << 30;

/// The uid (and gid, and fsGroup) a Tier-1 pod's agent and commands run as: its own, from the
/// pod's name. RLIMIT_NPROC is counted per uid across the node, so with a uid of its own the
/// agent's `--max-processes` bounds this pod's commands alone: an escalated fork bomb meets it,
/// and no other pod's processes count against it (docs/tier1.md "Bounds").
pub fn agent_uid(pod_name: &str) -> i64 {
    use sha2::{Digest, Sha256};
    let digest = Sha256::digest(pod_name.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    AGENT_UID_BASE + (u64::from_le_bytes(first) % AGENT_UID_SPAN as u64) as i64
}

/// Limits a Tier-1 agent container gets for what its tier's `template.resources` leaves out.
pub const DEFAULT_LIMITS: [(&str, &str); 3] = [
    ("cpu", "2"),
    ("memory", "4Gi"),
    ("ephemeral-storage", "8Gi"),
];
/// Requests it gets beside a default limit when the tier asks for none (without them the API
/// server would take the limits as the requests).
const DEFAULT_REQUESTS: [(&str, &str); 3] = [
    ("cpu", "100m"),
    ("memory", "256Mi"),
    ("ephemeral-storage", "256Mi"),
];

/// The agent container's resources: the tier's, with every limit it leaves out set to
/// [`DEFAULT_LIMITS`] (or to its request, when that asks for more), and a small request beside a
/// default limit whose resource the tier requests nothing of.
pub fn agent_resources(template: Option<&ResourceRequirements>) -> ResourceRequirements {
    let mut r = template.cloned().unwrap_or_default();
    let mut limits = r.limits.take().unwrap_or_default();
    let mut requests = r.requests.take().unwrap_or_default();
    for ((name, limit), (_, request)) in DEFAULT_LIMITS.iter().zip(DEFAULT_REQUESTS.iter()) {
        if limits.contains_key(*name) {
            continue;
        }
        let asked = requests.get(*name).cloned();
        let limit = match asked.as_ref().and_then(|q| quantity(&q.0)) {
            Some(asked_for) if quantity(limit).is_some_and(|l| asked_for > l) => {
                asked.clone().unwrap_or_default()
            }
            _ => Quantity((*limit).into()),
        };
        limits.insert((*name).into(), limit);
        if asked.is_none() {
            requests.insert((*name).into(), Quantity((*request).into()));
        }
    }
    r.limits = Some(limits);
    r.requests = Some(requests);
    r
}

/// A quantity as a number (cores or bytes), for the forms a tier writes: plain, `m`, and the
/// decimal and binary suffixes. `None` for anything else.
fn quantity(q: &str) -> Option<f64> {
    let q = q.trim();
    let units: [(&str, f64); 13] = [
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("m", 1e-3),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
    ];
    for (suffix, factor) in units {
        if let Some(n) = q.strip_suffix(suffix) {
            return n.parse::<f64>().ok().map(|n| n * factor);
        }
    }
    q.parse().ok()
}
/// Path of the binary in the worker image.
const WORKER_BINARY: &str = "/usr/local/bin/kube-harness";
/// The container that writes the skills volume (`kube-harness skills-keeper`).
pub const KEEPER_CONTAINER: &str = "skills-keeper";
/// The keeper's loopback address; the agent connects to it before it serves.
const KEEPER_ADDR: &str = "127.0.0.1:8079";
/// Where the keeper's container mounts the skills volume (read-write, the only one that does).
const KEEPER_DIR: &str = "/kh/agents";
/// What the pod's own parts are (containers, volumes, arguments), in the template hash: a pod
/// an older operator built differently is never claimed or kept. 2: the skills keeper. 3: a uid
/// of its own, default limits and the process limit (issue 30).
const POD_LAYOUT: u32 = 3;

/// Why an ordinary pod serves a pooled tier (docs/tier1.md, `missReason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MissReason {
    StockEmpty,
    WorkspaceTooLarge,
    SlotUnavailable,
    Unreported,
    /// The pool keeps no pods in the session's namespace (not in `warmPool.namespaces`).
    NamespaceNotServed,
}

impl MissReason {
    pub fn as_str(self) -> &'static str {
        match self {
            MissReason::StockEmpty => "stock_empty",
            MissReason::WorkspaceTooLarge => "workspace_too_large",
            MissReason::SlotUnavailable => "slot_unavailable",
            MissReason::Unreported => "unreported",
            MissReason::NamespaceNotServed => "namespace_not_served",
        }
    }
}

/// Whom a pod serves: a session's turn, or nobody yet (a warm-pool pod).
#[derive(Clone, Debug)]
pub enum Purpose {
    /// An idle pool pod built from the template with this hash, kept in `namespace` (one of the
    /// pool's `namespaces`: it serves the sessions there and counts against their quota).
    Pool {
        template_hash: String,
        namespace: String,
    },
    /// An ordinary pod opened for one turn.
    Serving(Serving),
}

/// The turn a pod serves, and the worker pod that asked.
#[derive(Clone, Debug, Default)]
pub struct Serving {
    pub session_namespace: String,
    pub session: String,
    /// The session's uid ([`labels::SESSION_UID`]): a kept pod serves only this session object.
    pub session_uid: Option<String>,
    pub turn: String,
    pub worker_uid: Option<String>,
    pub miss_reason: Option<MissReason>,
    /// When the turn opened and when its bound runs out (RFC 3339), see
    /// [`labels::TURN_STARTED`] and [`labels::TURN_DEADLINE`].
    pub started: Option<String>,
    pub deadline: Option<String>,
}

/// RFC 3339 time `secs` seconds from now, in whole seconds.
pub fn seconds_from_now(secs: u64) -> String {
    let now = k8s_openapi::jiff::Timestamp::now().as_second();
    let at = now.saturating_add(i64::try_from(secs).unwrap_or(i64::MAX / 2));
    k8s_openapi::jiff::Timestamp::from_second(at)
        .unwrap_or(k8s_openapi::jiff::Timestamp::MAX)
        .to_string()
}

/// Whether the RFC 3339 time in annotation `key` of `pod` has passed (`None`: no such
/// annotation, or not a time).
pub fn passed(pod: &Pod, key: &str, now: k8s_openapi::jiff::Timestamp) -> Option<bool> {
    let at: k8s_openapi::jiff::Timestamp = pod.annotations().get(key)?.parse().ok()?;
    Some(at <= now)
}

/// Label value for a turn id: any string the worker sends becomes 16 hex digits.
pub fn turn_label(turn: &str) -> String {
    short_hash(&[turn])
}

/// Name of the ordinary pod (and Secret) of a turn: the same on every replica and every retry,
/// so create-if-absent makes the open idempotent.
pub fn ordinary_name(session_namespace: &str, session: &str, turn: &str) -> String {
    format!("t1-{}", short_hash(&[session_namespace, session, turn]))
}

/// A fresh name for a pool pod.
pub fn pool_name() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 8];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("t1-{}", hex::encode(bytes))
}

/// Hash of what a pool pod is built from (the tier template and the worker image): a change
/// makes idle pool pods stale.
pub fn template_hash(tier: &SandboxTier, config: &OperatorConfig) -> String {
    let spec = json!({
        "template": tier.spec.template,
        "workerImage": config.worker_image,
        "workerImagePullPolicy": config.worker_image_pull_policy,
        "port": AGENT_PORT,
        "layout": POD_LAYOUT,
    });
    short_hash(&[&spec.to_string()])
}

/// Labels every Tier-1 pod of `tier` has; the tier NetworkPolicy's pod selector.
pub fn tier_labels(tier: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            labels::TIER1_MANAGED_BY.0.into(),
            labels::TIER1_MANAGED_BY.1.into(),
        ),
        (labels::ROLE.into(), labels::ROLE_TIER1.into()),
        (labels::TIER.into(), tier.into()),
    ])
}

/// The label selector (string form) of a tier's idle pool pods: status.selector for /scale.
pub fn pool_selector(tier: &str) -> String {
    format!("{}={tier},{}=false", labels::POOL, labels::CLAIMED)
}

/// The label selector of every Tier-1 pod of one session: serving a turn or kept idle for the
/// next.
pub fn session_selector(session_namespace: &str, session: &str) -> String {
    format!(
        "{}={},{}={session_namespace},{}={session}",
        labels::ROLE,
        labels::ROLE_TIER1,
        labels::SESSION_NAMESPACE,
        labels::SESSION
    )
}

/// The label selector of the Tier-1 pods serving one session's turns (a pod kept idle between
/// turns has no turn label), or one turn of it.
pub fn serving_selector(session_namespace: &str, session: &str, turn: Option<&str>) -> String {
    let mut s = session_selector(session_namespace, session);
    match turn {
        Some(turn) => s.push_str(&format!(",{}={}", labels::TURN, turn_label(turn))),
        None => s.push_str(&format!(",{}", labels::TURN)),
    }
    s
}

/// Labels and annotations that make a pod serve a turn (also the claim patch of a pool pod).
pub fn serving_metadata(s: &Serving) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let mut labels = BTreeMap::from([
        (
            labels::SESSION_NAMESPACE.into(),
            s.session_namespace.clone(),
        ),
        (labels::SESSION.into(), s.session.clone()),
        (labels::TURN.into(), turn_label(&s.turn)),
    ]);
    if let Some(uid) = &s.session_uid {
        labels.insert(labels::SESSION_UID.into(), uid.clone());
    }
    let mut annotations = BTreeMap::from([(labels::TURN_ID.into(), s.turn.clone())]);
    if let Some(uid) = &s.worker_uid {
        annotations.insert(labels::WORKER_UID.into(), uid.clone());
    }
    if let Some(at) = &s.started {
        annotations.insert(labels::TURN_STARTED.into(), at.clone());
    }
    if let Some(at) = &s.deadline {
        annotations.insert(labels::TURN_DEADLINE.into(), at.clone());
    }
    if let Some(miss) = s.miss_reason {
        annotations.insert(labels::MISS_REASON.into(), miss.as_str().into());
    }
    (labels, annotations)
}

/// Owner reference to the tier (cluster-scoped owners of namespaced objects are allowed): deleting
/// the tier collects its pods, Secrets and NetworkPolicy. No blockOwnerDeletion, which would need
/// update on sandboxtiers/finalizers.
pub fn tier_owner(tier: &SandboxTier) -> Vec<OwnerReference> {
    let Some(uid) = tier.metadata.uid.clone() else {
        return Vec::new();
    };
    vec![OwnerReference {
        api_version: SandboxTier::api_version(&()).into(),
        kind: SandboxTier::kind(&()).into(),
        name: tier.name_any(),
        uid,
        controller: Some(true),
        block_owner_deletion: None,
    }]
}

fn metadata(
    name: &str,
    tier: &SandboxTier,
    purpose: &Purpose,
    config: &OperatorConfig,
) -> ObjectMeta {
    let tier_name = tier.name_any();
    let mut labels = tier_labels(&tier_name);
    let mut annotations =
        BTreeMap::from([(labels::TIER_LEVEL.to_string(), tier.spec.level.to_string())]);
    match purpose {
        Purpose::Pool { template_hash, .. } => {
            labels.insert(labels::POOL.into(), tier_name.clone());
            labels.insert(labels::CLAIMED.into(), "false".into());
            labels.insert(labels::TEMPLATE_HASH.into(), template_hash.clone());
        }
        Purpose::Serving(s) => {
            let (l, a) = serving_metadata(s);
            labels.extend(l);
            annotations.extend(a);
            // What a kept pod is checked against before it serves another turn.
            labels.insert(labels::TEMPLATE_HASH.into(), template_hash(tier, config));
        }
    }
    // Every Tier-1 pod lives in the namespace of the sessions it serves: its ResourceQuota,
    // LimitRange and Pod Security admission apply, and its cost is the tenant's.
    let namespace = match purpose {
        Purpose::Pool { namespace, .. } => namespace.clone(),
        Purpose::Serving(s) => s.session_namespace.clone(),
    };
    ObjectMeta {
        name: Some(name.into()),
        namespace: Some(namespace),
        labels: Some(labels),
        annotations: Some(annotations),
        owner_references: Some(tier_owner(tier)),
        ..ObjectMeta::default()
    }
}

/// An owner reference to `pod` (a token Secret owned by its pod goes with it).
pub fn pod_owner(pod: &Pod) -> Vec<OwnerReference> {
    vec![OwnerReference {
        api_version: "v1".into(),
        kind: "Pod".into(),
        name: pod.name_any(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        controller: None,
        block_owner_deletion: None,
    }]
}

/// The pod's own token Secret (same name as the pod), key `token`.
pub fn token_secret(
    name: &str,
    tier: &SandboxTier,
    purpose: &Purpose,
    config: &OperatorConfig,
    token: &str,
) -> Secret {
    Secret {
        metadata: metadata(name, tier, purpose, config),
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "token".to_string(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

fn restricted_container() -> SecurityContext {
    SecurityContext {
        privileged: Some(false),
        ..restricted(UID)
    }
}

fn mount(name: &str, path: &str, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

fn empty_dir(name: &str, limit: Option<&str>) -> Volume {
    Volume {
        name: name.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: limit.map(|l| Quantity(l.into())),
            ..EmptyDirVolumeSource::default()
        }),
        ..Volume::default()
    }
}

/// The skills keeper: the one writer of the skills volume, which the agent's container mounts
/// read-only at /.agents (the agent and its commands share a uid, so only a mount the kubelet
/// made read-only keeps the skills from the commands). From the worker image, on loopback only.
fn keeper(config: &OperatorConfig) -> Container {
    Container {
        name: KEEPER_CONTAINER.into(),
        image: Some(config.worker_image.clone()),
        image_pull_policy: config.worker_image_pull_policy.clone(),
        command: Some(vec![
            WORKER_BINARY.into(),
            "skills-keeper".into(),
            "--listen".into(),
            KEEPER_ADDR.into(),
            "--dir".into(),
            KEEPER_DIR.into(),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("10m".into())),
                ("memory".into(), Quantity("16Mi".into())),
            ])),
            limits: Some(BTreeMap::from([
                ("memory".into(), Quantity("64Mi".into())),
                ("ephemeral-storage".into(), Quantity("128Mi".into())),
            ])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        volume_mounts: Some(vec![mount("agents", KEEPER_DIR, false)]),
        ..Container::default()
    }
}

/// The Tier-1 pod: an init container from the worker image copies the static agent binary into
/// an emptyDir; the tier's image (any image) runs it as `worker --tier 1`, with the skills keeper
/// beside it. Restricted Pod Security, no ServiceAccount token, no service links, and only its
/// own token mounted. The environment is the image's own, the tier's `env`, and HOME and TMPDIR:
/// nothing of the worker's reaches it.
pub fn pod(name: &str, tier: &SandboxTier, purpose: &Purpose, config: &OperatorConfig) -> Pod {
    let template = &tier.spec.template;
    let install = Container {
        name: "install-agent".into(),
        image: Some(config.worker_image.clone()),
        image_pull_policy: config.worker_image_pull_policy.clone(),
        command: Some(vec![
            "cp".into(),
            WORKER_BINARY.into(),
            format!("{BIN_DIR}/kube-harness"),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(BTreeMap::from([
                ("cpu".into(), Quantity("10m".into())),
                ("memory".into(), Quantity("16Mi".into())),
            ])),
            limits: Some(BTreeMap::from([("memory".into(), Quantity("64Mi".into()))])),
            ..ResourceRequirements::default()
        }),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container()
        }),
        volume_mounts: Some(vec![mount("kh-bin", BIN_DIR, false)]),
        ..Container::default()
    };
    let env = |k: &str, v: &str| EnvVar {
        name: k.into(),
        value: Some(v.into()),
        ..EnvVar::default()
    };
    let agent = Container {
        name: "agent".into(),
        image: Some(template.image.clone()),
        image_pull_policy: template.image_pull_policy.map(|p| format!("{p:?}")),
        command: Some(vec![format!("{BIN_DIR}/kube-harness")]),
        args: Some(vec![
            "worker".into(),
            "--tier".into(),
            "1".into(),
            "--listen".into(),
            format!("0.0.0.0:{AGENT_PORT}"),
            "--token-file".into(),
            format!("{TOKEN_DIR}/token"),
            "--skills-keeper".into(),
            KEEPER_ADDR.into(),
            "--max-processes".into(),
            tier.spec
                .template
                .max_processes
                .unwrap_or(kube_harness_crds::tier::DEFAULT_MAX_PROCESSES)
                .to_string(),
        ]),
        // The tier's variables first: HOME and TMPDIR are the pod's own volumes (the CRD refuses
        // them in the tier, and these come last, so they win anyway).
        env: Some(
            template
                .env
                .iter()
                .map(|v| env(&v.name, &v.value))
                .chain([env("HOME", HOME), env("TMPDIR", "/tmp")])
                .collect(),
        ),
        ports: Some(vec![ContainerPort {
            name: Some("agent".into()),
            container_port: i32::from(AGENT_PORT),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            http_get: Some(HTTPGetAction {
                path: Some("/readyz".into()),
                port: IntOrString::Int(i32::from(AGENT_PORT)),
                ..HTTPGetAction::default()
            }),
            period_seconds: Some(1),
            failure_threshold: Some(3),
            ..Probe::default()
        }),
        resources: Some(agent_resources(template.resources.as_ref())),
        // A uid of its own: the process limit above is this pod's alone.
        security_context: Some(SecurityContext {
            privileged: Some(false),
            ..restricted(agent_uid(name))
        }),
        volume_mounts: Some(vec![
            mount("kh-bin", BIN_DIR, true),
            mount("token", TOKEN_DIR, true),
            mount("session", "/session", false),
            mount("artifacts", "/artifacts", false),
            mount("persistent", "/persistent", false),
            mount("agents", "/.agents", true),
            mount("home", HOME, false),
            mount("tmp", "/tmp", false),
        ]),
        ..Container::default()
    };
    let volumes = vec![
        empty_dir("kh-bin", Some("256Mi")),
        Volume {
            name: "token".into(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.into()),
                default_mode: Some(0o440),
                ..SecretVolumeSource::default()
            }),
            ..Volume::default()
        },
        empty_dir("session", None),
        empty_dir("artifacts", None),
        empty_dir("persistent", None),
        // Skills are at most 16 MiB (docs/tier1.md); an install stages the new beside the old.
        empty_dir("agents", Some("64Mi")),
        empty_dir("home", None),
        empty_dir("tmp", None),
    ];
    Pod {
        metadata: metadata(name, tier, purpose, config),
        spec: Some(PodSpec {
            init_containers: Some(vec![install]),
            // The agent first: what reads a Tier-1 pod's image reads the first container's.
            containers: vec![agent, keeper(config)],
            volumes: Some(volumes),
            automount_service_account_token: Some(false),
            enable_service_links: Some(false),
            // A dead agent is a failed sandbox, never a silently fresh one.
            restart_policy: Some("Never".into()),
            termination_grace_period_seconds: Some(5),
            runtime_class_name: template.runtime_class_name.clone(),
            node_selector: (!template.node_selector.is_empty())
                .then(|| template.node_selector.clone()),
            tolerations: (!template.tolerations.is_empty()).then(|| template.tolerations.clone()),
            security_context: Some(restricted_pod(agent_uid(name))),
            ..PodSpec::default()
        }),
        status: None,
    }
}

/// The tier's NetworkPolicy in `namespace` (one per namespace where the tier's pods run): ingress
/// only from the worker pods of that namespace on the agent port; egress DNS plus what the tier's
/// `egress` policy allows.
pub fn network_policy(tier: &SandboxTier, namespace: &str) -> NetworkPolicy {
    let selector = |m: BTreeMap<String, String>| {
        Some(LabelSelector {
            match_labels: Some(m),
            ..LabelSelector::default()
        })
    };
    let port = |p: i32, proto: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some(proto.into()),
        ..NetworkPolicyPort::default()
    };
    let dns = NetworkPolicyEgressRule {
        to: Some(vec![NetworkPolicyPeer {
            namespace_selector: Some(LabelSelector::default()),
            pod_selector: selector(BTreeMap::from([("k8s-app".into(), "kube-dns".into())])),
            ..NetworkPolicyPeer::default()
        }]),
        ports: Some(vec![port(53, "UDP"), port(53, "TCP")]),
    };
    let egress = match tier.spec.egress.mode {
        EgressMode::AllowAll => vec![NetworkPolicyEgressRule::default()],
        EgressMode::Deny => vec![dns],
        EgressMode::AllowList => vec![
            dns,
            NetworkPolicyEgressRule {
                to: Some(
                    tier.spec
                        .egress
                        .cidrs
                        .iter()
                        .map(|c| NetworkPolicyPeer {
                            ip_block: Some(IPBlock {
                                cidr: c.clone(),
                                except: None,
                            }),
                            ..NetworkPolicyPeer::default()
                        })
                        .collect(),
                ),
                ports: None,
            },
        ],
    };
    let workers = BTreeMap::from([
        (labels::MANAGED_BY.0.into(), labels::MANAGED_BY.1.into()),
        (labels::ROLE.into(), "worker".into()),
    ]);
    let name = tier.name_any();
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(labels::tier1_network_policy(&name)),
            namespace: Some(namespace.into()),
            labels: Some(tier_labels(&name)),
            owner_references: Some(tier_owner(tier)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: selector(tier_labels(&name)),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    pod_selector: selector(workers),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![port(i32::from(AGENT_PORT), "TCP")]),
            }]),
            egress: Some(egress),
        }),
    }
}
