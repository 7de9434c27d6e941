//! What a session owns, as objects built from its spec: pure functions, so tests can check the
//! exact pod the operator would create (restricted Pod Security, no token, canonical mounts).

use crate::config::OperatorConfig;
use crate::kube_util::{restricted_container, restricted_pod};
use crate::labels;
use k8s_openapi::api::core::v1::{
    ConfigMap, ConfigMapProjection, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    HTTPGetAction, KeyToPath, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec, Probe,
    ProjectedVolumeSource, Secret, SecretVolumeSource, SecurityContext, Volume, VolumeMount,
    VolumeProjection, VolumeResourceRequirements,
};
use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyEgressRule, NetworkPolicyIngressRule, NetworkPolicyPeer,
    NetworkPolicyPort, NetworkPolicySpec,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::ByteString;
use kube::ResourceExt;
use kube_harness_crds::session::SameSession;
use kube_harness_crds::{HarnessSession, SandboxTierSpec};
use kube_harness_protocol::worker_args::{self, Escalation, WorkerArgs};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::net::SocketAddr;

/// Where the token Secret is mounted in the worker pod.
pub const TOKEN_DIR: &str = "/var/run/kube-harness/token";
/// The first uid of the range worker pods run as ([`worker_uid`]).
pub const WORKER_UID_BASE: i64 = 100_000;
/// How many uids the range holds (2^30): two sessions on one node share a uid with odds of about
/// one in a billion per pair.
pub const WORKER_UID_SPAN: i64 = 1 << 30;

/// The uid (and gid, and fsGroup) a session's worker pod runs as: its own, derived from the
/// session's UID. `RLIMIT_NPROC`, the sandbox's process limit, is counted per uid across the
/// whole node: with one shared uid, one session's fork bomb would use up every other session's
/// processes (docs/security-model.md, "Processes"). Stable for the session's lifetime, so its
/// files on the PVC stay its own across worker restarts.
pub fn worker_uid(session: &HarnessSession) -> i64 {
    let key = session.metadata.uid.as_deref().unwrap_or_default();
    let digest = Sha256::digest(key.as_bytes());
    let mut first = [0u8; 8];
    first.copy_from_slice(&digest[..8]);
    WORKER_UID_BASE + (u64::from_le_bytes(first) % WORKER_UID_SPAN as u64) as i64
}

use super::owned::meta;
pub use super::owned::session_labels;

/// The session's session-log scope, `NAMESPACE:UID`: its worker's runs are this and `this:…`, and
/// its session-log token reaches nothing else. `None` only for an object never stored (no UID).
pub fn run_scope(session: &HarnessSession) -> Option<String> {
    Some(format!(
        "{}:{}",
        session.namespace().unwrap_or_default(),
        session.uid()?
    ))
}

/// The session's token Secret: `token` authenticates callers of the worker API;
/// `session-log-token` (when the operator has one) authenticates the worker to the session log.
pub fn token_secret(
    session: &HarnessSession,
    token: &str,
    session_log_token: Option<&str>,
) -> Secret {
    let mut data = BTreeMap::from([("token".to_string(), ByteString(token.as_bytes().to_vec()))]);
    if let Some(t) = session_log_token {
        data.insert(
            "session-log-token".into(),
            ByteString(t.as_bytes().to_vec()),
        );
    }
    Secret {
        metadata: meta(session, labels::token_secret(&session.name_any())),
        type_: Some("Opaque".into()),
        data: Some(data),
        ..Secret::default()
    }
}

/// The workspace PVC behind /session, /artifacts and /persistent.
pub fn workspace_pvc(session: &HarnessSession) -> PersistentVolumeClaim {
    let ws = &session.spec.workspace;
    PersistentVolumeClaim {
        metadata: meta(session, labels::workspace_pvc(&session.name_any())),
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            storage_class_name: ws.storage_class_name.clone(),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([(
                    "storage".into(),
                    Quantity(ws.size.clone()),
                )])),
                ..VolumeResourceRequirements::default()
            }),
            ..PersistentVolumeClaimSpec::default()
        }),
        ..PersistentVolumeClaim::default()
    }
}

/// Egress: nothing but DNS and the session log (and, with an escalation tier, the operator's tier
/// API and the Tier-1 pods of the session's namespace) unless the session enables network. Ingress: the
/// operator (status polling) only; `kube-harness exec` arrives through the kubelet's port-forward,
/// which NetworkPolicy does not filter.
pub fn network_policy(session: &HarnessSession, config: &OperatorConfig) -> NetworkPolicy {
    let operator_ns = || {
        Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(
                "kubernetes.io/metadata.name".into(),
                config.namespace.clone(),
            )])),
            ..LabelSelector::default()
        })
    };
    let pods = |(k, v): (&str, &str)| {
        Some(LabelSelector {
            match_labels: Some(BTreeMap::from([(k.into(), v.into())])),
            ..LabelSelector::default()
        })
    };
    let port = |p: i32, proto: &str| NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some(proto.into()),
        ..NetworkPolicyPort::default()
    };
    let egress = if session.spec.runtime.network {
        vec![NetworkPolicyEgressRule::default()]
    } else {
        let mut rules = vec![
            NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: Some(LabelSelector::default()),
                    pod_selector: pods(("k8s-app", "kube-dns")),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![port(53, "UDP"), port(53, "TCP")]),
            },
            NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: operator_ns(),
                    pod_selector: pods(labels::SESSION_LOG_POD),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![port(8080, "TCP")]),
            },
        ];
        if escalation_tier(session).is_some() {
            // Escalation: the operator's tier API, and the Tier-1 pods it opens.
            rules.push(NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    namespace_selector: operator_ns(),
                    pod_selector: pods(labels::OPERATOR_POD),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![port(i32::from(config.tier_api_listen.port()), "TCP")]),
            });
            // Tier-1 pods run in the session's own namespace: no namespaceSelector.
            rules.push(NetworkPolicyEgressRule {
                to: Some(vec![NetworkPolicyPeer {
                    pod_selector: Some(LabelSelector {
                        match_labels: Some(BTreeMap::from([
                            (labels::ROLE.into(), labels::ROLE_TIER1.into()),
                            (
                                labels::TIER1_MANAGED_BY.0.into(),
                                labels::TIER1_MANAGED_BY.1.into(),
                            ),
                        ])),
                        ..LabelSelector::default()
                    }),
                    ..NetworkPolicyPeer::default()
                }]),
                ports: Some(vec![port(i32::from(crate::tier1::pod::AGENT_PORT), "TCP")]),
            });
        }
        rules
    };
    NetworkPolicy {
        metadata: meta(session, labels::network_policy(&session.name_any())),
        spec: Some(NetworkPolicySpec {
            pod_selector: Some(LabelSelector {
                match_labels: Some(session_labels(session)),
                ..LabelSelector::default()
            }),
            policy_types: Some(vec!["Ingress".into(), "Egress".into()]),
            // The operator (usage polls), and the in-cluster clients `spec.access` admits.
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(
                    std::iter::once(NetworkPolicyPeer {
                        namespace_selector: operator_ns(),
                        pod_selector: pods(labels::OPERATOR_POD),
                        ..NetworkPolicyPeer::default()
                    })
                    .chain(super::access::client_peers(session))
                    .collect(),
                ),
                ports: Some(vec![port(i32::from(config.worker_port), "TCP")]),
            }]),
            egress: Some(egress),
        }),
    }
}

/// The SandboxTier the session escalates to, if it names one.
pub fn escalation_tier(session: &HarnessSession) -> Option<&str> {
    session
        .spec
        .escalation
        .as_ref()
        .and_then(|e| e.tier.as_deref())
        .filter(|t| !t.is_empty())
}

/// The worker's settings, from the session spec and the operator's configuration: the worker's
/// own argument type, so what is set here is what the worker parses.
pub fn worker_settings(session: &HarnessSession, config: &OperatorConfig) -> WorkerArgs {
    let spec = &session.spec;
    let mut args = WorkerArgs::new(format!("{TOKEN_DIR}/token"));
    args.listen = SocketAddr::from(([0, 0, 0, 0], config.worker_port));
    args.session = session.name_any();
    args.python = spec.runtime.python;
    args.javascript = spec.runtime.javascript;
    args.network = spec.runtime.network;
    args.same_session = match spec.same_session {
        SameSession::Queue => worker_args::SameSession::Queue,
        SameSession::Reject => worker_args::SameSession::Reject,
    };
    args.deny_command = spec.policy.deny_commands.clone();
    (args.persistent_dir, args.read_only_prefix) = super::persistent::worker_args(session);
    if let (Some(_), Some(url)) = (escalation_tier(session), &config.tier_api_url) {
        args.escalation = Escalation::Pod;
        args.tier_api_url = Some(url.clone());
        args.session_namespace = Some(session.namespace().unwrap_or_default());
    }
    if let Some(url) = &config.session_log_url {
        args.session_log_url = Some(url.clone());
        args.session_log_token_file = Some(format!("{TOKEN_DIR}/session-log-token").into());
        // Runs scoped to this session object: never shared with a same-named session in another
        // namespace, nor with an earlier session of the same name.
        args.session_log_run_scope = run_scope(session);
    }
    args
}

/// The worker container's arguments: the `worker` subcommand and [`worker_settings`], rendered.
pub fn worker_args(session: &HarnessSession, config: &OperatorConfig) -> Vec<String> {
    let mut args = vec!["worker".to_string()];
    args.extend(worker_settings(session, config).to_args());
    args
}

/// The skills ConfigMaps as one projected volume: each key becomes `<dir>/<key>` under /.agents.
fn skills_volume(session: &HarnessSession, config_maps: &[ConfigMap]) -> Volume {
    let sources: Vec<VolumeProjection> = session
        .spec
        .workspace
        .skills
        .iter()
        .map(|skill| {
            let dir = skill
                .path
                .clone()
                .unwrap_or_else(|| skill.config_map.clone());
            let keys = config_maps
                .iter()
                .find(|cm| cm.name_any() == skill.config_map)
                .map(|cm| {
                    let mut keys: Vec<String> =
                        cm.data.iter().flat_map(|d| d.keys().cloned()).collect();
                    keys.extend(cm.binary_data.iter().flat_map(|d| d.keys().cloned()));
                    keys
                })
                .unwrap_or_default();
            VolumeProjection {
                config_map: Some(ConfigMapProjection {
                    name: skill.config_map.clone(),
                    items: Some(
                        keys.into_iter()
                            .map(|k| KeyToPath {
                                path: format!("{dir}/{k}"),
                                key: k,
                                mode: None,
                            })
                            .collect(),
                    ),
                    optional: Some(false),
                }),
                ..VolumeProjection::default()
            }
        })
        .collect();
    if sources.is_empty() {
        return Volume {
            name: "agents".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("1Mi".into())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        };
    }
    Volume {
        name: "agents".into(),
        projected: Some(ProjectedVolumeSource {
            sources: Some(sources),
            default_mode: Some(0o444),
        }),
        ..Volume::default()
    }
}

pub fn mount(name: &str, path: &str, sub_path: Option<&str>, read_only: bool) -> VolumeMount {
    VolumeMount {
        name: name.into(),
        mount_path: path.into(),
        sub_path: sub_path.map(Into::into),
        read_only: Some(read_only),
        ..VolumeMount::default()
    }
}

/// The Tier-0 worker pod: restricted Pod Security (non-root, read-only root filesystem, no
/// privilege escalation, no capabilities, RuntimeDefault seccomp), no ServiceAccount token, no
/// service links (nothing about the cluster in its environment), the workspace PVC `claim` at the
/// canonical paths, skills read-only at /.agents, and a writable /tmp. `uid`: [`worker_uid`], or
/// the uid of the warm-pool pod whose claim the session adopted (its files are that uid's).
pub fn worker_pod_with(
    session: &HarnessSession,
    tier: &SandboxTierSpec,
    config: &OperatorConfig,
    config_maps: &[ConfigMap],
    claim: &str,
    uid: i64,
) -> Pod {
    let name = session.name_any();
    // The Service's selector, so the Service always finds exactly this pod.
    let mut labels = super::access::worker_selector(session);
    labels.insert(labels::NAME_WORKER.0.into(), labels::NAME_WORKER.1.into());
    let spec = worker_pod_spec(
        tier,
        config,
        WorkerPodParts {
            args: worker_args(session, config),
            uid,
            claim: claim.to_string(),
            agents: (skills_volume(session, config_maps), false),
            token: (
                Volume {
                    name: "token".into(),
                    secret: Some(SecretVolumeSource {
                        secret_name: Some(labels::token_secret(&name)),
                        default_mode: Some(0o440),
                        ..SecretVolumeSource::default()
                    }),
                    ..Volume::default()
                },
                false,
            ),
            extra: super::persistent::volumes(session),
            fs_group: super::persistent::mounts_claims(session)
                .then_some(i64::from(worker_args::SOURCES_GID)),
        },
    );
    let hash = spec_hash(&spec);
    Pod {
        metadata: ObjectMeta {
            labels: Some(labels),
            annotations: Some(BTreeMap::from([(labels::SPEC_HASH.into(), hash)])),
            ..meta(session, labels::worker_pod(&name))
        },
        spec: Some(spec),
        status: None,
    }
}

/// [`worker_pod_with`] the session's own PVC and uid (a session that adopted no warm pod).
pub fn worker_pod(
    session: &HarnessSession,
    tier: &SandboxTierSpec,
    config: &OperatorConfig,
    config_maps: &[ConfigMap],
) -> Pod {
    let claim = labels::workspace_pvc(&session.name_any());
    worker_pod_with(
        session,
        tier,
        config,
        config_maps,
        &claim,
        worker_uid(session),
    )
}

/// What differs between a session's own worker pod and a warm pool's (`crate::warm`).
pub struct WorkerPodParts {
    /// The container's arguments (`worker …`).
    pub args: Vec<String>,
    pub uid: i64,
    /// The workspace PVC.
    pub claim: String,
    /// The `agents` volume (/.agents), and whether the worker may write it (a pool pod's, which
    /// its adoption fills; commands never can).
    pub agents: (Volume, bool),
    /// The `token` volume (TOKEN_DIR), and whether the worker may write it (likewise).
    pub token: (Volume, bool),
    /// More volumes and mounts (a pool pod's adoption token, a session's Persistent Dirs).
    pub extra: (Vec<Volume>, Vec<VolumeMount>),
    /// The pod's fsGroup instead of `uid` (`SOURCES_GID` when it mounts Persistent Dir claims:
    /// the kubelet gives a claim to the pod's fsGroup as it mounts it, and sessions sharing a
    /// claim must all use the same one or each mount would take it from the others).
    pub fs_group: Option<i64>,
}

/// The worker pod's spec, from the tier's template and the parts that differ.
pub fn worker_pod_spec(
    tier: &SandboxTierSpec,
    config: &OperatorConfig,
    parts: WorkerPodParts,
) -> PodSpec {
    let template = &tier.template;
    let image = if template.image.is_empty() {
        config.worker_image.clone()
    } else {
        template.image.clone()
    };
    let probe = |path: &str, period: i32| Probe {
        http_get: Some(HTTPGetAction {
            path: Some(path.into()),
            port: IntOrString::Int(i32::from(config.worker_port)),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        failure_threshold: Some(3),
        ..Probe::default()
    };
    let mut mounts = vec![
        mount("workspace", "/session", Some("session"), false),
        mount("workspace", "/artifacts", Some("artifacts"), false),
        mount("workspace", "/persistent", Some("persistent"), false),
        mount("agents", "/.agents", None, !parts.agents.1),
        mount("tmp", "/tmp", None, false),
        mount("token", TOKEN_DIR, None, !parts.token.1),
    ];
    let mut volumes = vec![
        Volume {
            name: "workspace".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: parts.claim,
                read_only: Some(false),
            }),
            ..Volume::default()
        },
        parts.agents.0,
        Volume {
            name: "tmp".into(),
            empty_dir: Some(EmptyDirVolumeSource {
                size_limit: Some(Quantity("256Mi".into())),
                ..EmptyDirVolumeSource::default()
            }),
            ..Volume::default()
        },
        parts.token.0,
    ];
    volumes.extend(parts.extra.0);
    mounts.extend(parts.extra.1);
    let container = Container {
        name: "worker".into(),
        image: Some(image),
        image_pull_policy: template
            .image_pull_policy
            .map(|p| format!("{p:?}"))
            .or(Some("IfNotPresent".into())),
        args: Some(parts.args),
        env: Some(vec![
            EnvVar {
                name: "TMPDIR".into(),
                value: Some("/tmp".into()),
                ..EnvVar::default()
            },
            EnvVar {
                name: "HOME".into(),
                value: Some("/tmp".into()),
                ..EnvVar::default()
            },
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("worker".into()),
            container_port: i32::from(config.worker_port),
            protocol: Some("TCP".into()),
            ..ContainerPort::default()
        }]),
        readiness_probe: Some(Probe {
            initial_delay_seconds: Some(0),
            ..probe("/readyz", 1)
        }),
        liveness_probe: Some(probe("/healthz", 10)),
        resources: template.resources.clone(),
        security_context: Some(SecurityContext {
            read_only_root_filesystem: Some(true),
            ..restricted_container(parts.uid)
        }),
        volume_mounts: Some(mounts),
        ..Container::default()
    };
    PodSpec {
        containers: vec![container],
        volumes: Some(volumes),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        restart_policy: Some("Always".into()),
        termination_grace_period_seconds: Some(30),
        runtime_class_name: template.runtime_class_name.clone(),
        node_selector: (!template.node_selector.is_empty()).then(|| template.node_selector.clone()),
        tolerations: (!template.tolerations.is_empty()).then(|| template.tolerations.clone()),
        security_context: Some(match parts.fs_group {
            Some(group) => PodSecurityContext {
                fs_group: Some(group),
                // After the first mount the claim's root has the group: not walked again.
                fs_group_change_policy: Some("OnRootMismatch".into()),
                ..restricted_pod(parts.uid)
            },
            None => restricted_pod(parts.uid),
        }),
        ..PodSpec::default()
    }
}

/// Hash of a pod spec: the operator recreates the worker when the spec it would build changes.
pub fn spec_hash(spec: &PodSpec) -> String {
    let bytes = serde_json::to_vec(spec).unwrap_or_default();
    hex::encode(&Sha256::digest(bytes)[..8])
}
