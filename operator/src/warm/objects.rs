//! What a level-0 warm pool is made of, as pure functions: per served namespace, a Secret with
//! the pool's adoption token and a NetworkPolicy; per warm pod, the pod (a pooled worker) and its
//! workspace PVC, which the pod owns until a session adopts both.

use crate::config::OperatorConfig;
use crate::kube_util::short_hash;
use crate::labels;
use crate::session::resources::{self, mount, WorkerPodParts, TOKEN_DIR};
use k8s_openapi::api::core::v1::{
    EmptyDirVolumeSource, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod, Secret,
    SecretVolumeSource, Volume, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta, OwnerReference};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::{Resource, ResourceExt};
use kube_harness_crds::SandboxTier;
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Where a warm pod finds the pool's adoption token.
pub const POOL_TOKEN_DIR: &str = "/var/run/kube-harness/pool";
/// Annotation on a pool PVC (and so on an adopted session's claim): the uid the pod that first
/// used it ran as, which every later worker pod of the claim runs as (its files are that uid's).
/// For people reading the claim only: the tenant may write it, so the operator never reads it
/// back (`warm::adopt::claim_uid` takes the uid from the claim's name).
pub const CLAIM_UID: &str = "kubeharness.dev/uid";
/// Annotation on an adopted pod: the digest of its adoption
/// (`worker_api::adoption_settings`), which the worker must report before the session is Ready.
pub const ADOPTED: &str = "kubeharness.dev/adopted-settings";
/// Annotation on a warm pod: the tier whose pool it was started for (its pool label may be a
/// hash), so that its claim, too, requeues the tier and the pool refills at once.
pub const POOL_TIER: &str = "kubeharness.dev/pool-tier";
/// Workspace size of a warm pod's PVC: the HarnessSession default. A session asking for another
/// size or a storage class starts cold (miss reason `workspace-differs`).
pub const POOL_WORKSPACE_SIZE: &str = "1Gi";

/// The POOL label value of a tier's warm pods: its name when that is a label value, else a hash.
pub fn pool_label(tier: &str) -> String {
    let plain = tier.len() <= 63
        && tier
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_');
    if plain {
        tier.to_string()
    } else {
        format!("h-{}", short_hash(&[tier]))
    }
}

/// Labels of every warm pod of `tier` (claimed or not).
pub fn pool_pod_labels(tier: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (labels::POOL.into(), pool_label(tier)),
        (labels::ROLE.into(), labels::ROLE_WORKER.into()),
        (labels::MANAGED_BY.0.into(), labels::MANAGED_BY.1.into()),
        (labels::NAME_WORKER.0.into(), labels::NAME_WORKER.1.into()),
    ])
}

/// Selector of every warm pod of `tier`, claimed or not.
pub fn pool_selector(tier: &str) -> String {
    format!(
        "{}={},{}={}",
        labels::POOL,
        pool_label(tier),
        labels::ROLE,
        labels::ROLE_WORKER
    )
}

/// Selector of the idle (unclaimed) warm pods of `tier`: the /scale selector.
pub fn idle_selector(tier: &str) -> String {
    format!("{},{}=false", pool_selector(tier), labels::CLAIMED)
}

/// Name of a new warm pod.
pub fn pod_name() -> String {
    use rand::RngCore;
    let mut bytes = [0u8; 6];
    rand::thread_rng().fill_bytes(&mut bytes);
    format!("kh-warm-{}", hex::encode(bytes))
}

/// The pool's Secret and NetworkPolicy in each namespace it serves.
pub fn pool_object_name(tier: &str) -> String {
    format!("kh-pool-{}", short_hash(&[tier]))
}

/// The uid a warm pod runs as: its own, from its name, in the range the sessions' pods use (the
/// per-uid process limit then isolates it as it does a session's pod).
pub fn pod_uid(pod: &str) -> i64 {
    let digest = Sha256::digest(pod.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    resources::WORKER_UID_BASE
        + (u64::from_le_bytes(first) % resources::WORKER_UID_SPAN as u64) as i64
}

fn tier_owner(tier: &SandboxTier) -> Vec<OwnerReference> {
    tier.controller_owner_ref(&()).into_iter().collect()
}

/// The pool's adoption token in one namespace (random, created once; the operator reads it).
pub fn pool_secret(tier: &SandboxTier, namespace: &str, token: &str) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(pool_object_name(&tier.name_any())),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([
                (labels::POOL.into(), pool_label(&tier.name_any())),
                (labels::MANAGED_BY.0.into(), labels::MANAGED_BY.1.into()),
            ])),
            owner_references: Some(tier_owner(tier)),
            ..ObjectMeta::default()
        },
        type_: Some("Opaque".into()),
        data: Some(BTreeMap::from([(
            "token".into(),
            ByteString(token.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

/// Idle warm pods: reached by the operator only (to adopt them), and reach nothing. Once
/// adopted a pod loses the `claimed=false` label this selects, and its session's policy alone
/// applies.
pub fn pool_network_policy(
    tier: &SandboxTier,
    namespace: &str,
    config: &OperatorConfig,
) -> NetworkPolicy {
    let mut selector: BTreeMap<String, String> = BTreeMap::from([
        (labels::POOL.into(), pool_label(&tier.name_any())),
        (labels::CLAIMED.into(), "false".into()),
    ]);
    selector.insert(labels::ROLE.into(), labels::ROLE_WORKER.into());
    NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(pool_object_name(&tier.name_any())),
            namespace: Some(namespace.into()),
            labels: Some(BTreeMap::from([(
                labels::MANAGED_BY.0.into(),
                labels::MANAGED_BY.1.into(),
            )])),
            owner_references: Some(tier_owner(tier)),
            ..ObjectMeta::default()
        },
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(selector),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            "kubernetes.io/metadata.name".into(),
                            config.namespace.clone(),
                        )])),
                        ..LabelSelector::default()
                    }),
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([(
                            labels::OPERATOR_POD.0.into(),
                            labels::OPERATOR_POD.1.into(),
                        )])),
                        ..LabelSelector::default()
                    }),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![NetworkPolicyPort {
                    port: Some(IntOrString::Int(i32::from(config.worker_port))),
                    protocol: Some("TCP".into()),
                    ..NetworkPolicyPort::default()
                }]),
            }]),
            egress: Some(Vec::new()),
        }),
    }
}

/// A warm pod: a pooled worker (`--adopt-token-file`) with the session layout, whose token
/// directory and /.agents are empty and writable by the worker until its adoption fills them.
/// Owned by the tier until a session adopts it.
pub fn pool_pod(tier: &SandboxTier, name: &str, namespace: &str, config: &OperatorConfig) -> Pod {
    let port = config.worker_port;
    let args = vec![
        "worker".to_string(),
        "--listen".into(),
        format!("0.0.0.0:{port}"),
        "--token-file".into(),
        format!("{TOKEN_DIR}/token"),
        "--adopt-token-file".into(),
        format!("{POOL_TOKEN_DIR}/token"),
    ];
    let empty = |volume: &str, limit: &str, medium: Option<&str>| Volume {
        name: volume.into(),
        empty_dir: Some(EmptyDirVolumeSource {
            size_limit: Some(Quantity(limit.into())),
            medium: medium.map(Into::into),
        }),
        ..Volume::default()
    };
    let spec = resources::worker_pod_spec(
        &tier.spec,
        config,
        WorkerPodParts {
            args,
            uid: pod_uid(name),
            claim: claim_name(name),
            agents: (empty("agents", "8Mi", None), true),
            token: (empty("token", "1Mi", Some("Memory")), true),
            extra: (
                vec![Volume {
                    name: "pool-token".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(pool_object_name(&tier.name_any())),
                        default_mode: Some(0o440),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                }],
                vec![mount("pool-token", POOL_TOKEN_DIR, None, true)],
            ),
            fs_group: None,
        },
    );
    let mut labels = pool_pod_labels(&tier.name_any());
    labels.insert(labels::CLAIMED.into(), "false".into());
    labels.insert(labels::TEMPLATE_HASH.into(), template_hash(tier, config));
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(namespace.into()),
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(POOL_TIER.into(), tier.name_any())])),
            owner_references: Some(tier_owner(tier)),
            ..ObjectMeta::default()
        },
        spec: Some(spec),
        status: None,
    }
}

/// The workspace PVC of warm pod `pod`.
pub fn claim_name(pod: &str) -> String {
    labels::workspace_pvc(pod)
}

/// A warm pod's workspace PVC, owned by the pod (a stale pod takes it along) until adopted.
pub fn pool_claim(tier: &SandboxTier, pod: &Pod) -> PersistentVolumeClaim {
    let name = pod.name_any();
    let owner = pod.controller_owner_ref(&()).into_iter().collect();
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(&name)),
            namespace: pod.namespace(),
            labels: Some(BTreeMap::from([
                (labels::POOL.into(), pool_label(&tier.name_any())),
                (labels::MANAGED_BY.0.into(), labels::MANAGED_BY.1.into()),
            ])),
            annotations: Some(BTreeMap::from([(
                CLAIM_UID.into(),
                pod_uid(&name).to_string(),
            )])),
            owner_references: Some(owner),
            ..ObjectMeta::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(POOL_WORKSPACE_SIZE.into()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// Hash of what a warm pod is built from (the tier template and the operator's worker image,
/// pull policy and port): a change makes idle warm pods stale.
pub fn template_hash(tier: &SandboxTier, config: &OperatorConfig) -> String {
    let spec = serde_json::json!({
        "template": tier.spec.template,
        "workerImage": config.worker_image,
        "workerImagePullPolicy": config.worker_image_pull_policy,
        "port": config.worker_port,
    });
    short_hash(&[&spec.to_string()])
}
