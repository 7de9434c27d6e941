//! The in-cluster data path: a headless Service per session in front of its worker pod, the
//! stable name agents connect to, and the peers `spec.access` admits to the worker's port.
//!
//! A Service per session rather than one router: its name resolves to the worker pod's IP, so a
//! request costs what a direct pod-IP connection costs (docs/operator.md, "In-cluster data
//! path"); a router adds a userspace hop, a shared bottleneck and one more thing to fail for every
//! session. Headless (`clusterIP: None`) rather than a virtual IP: at 300 sessions created at
//! once, allocating their cluster IPs made each Service apply take 1.9 s on average (the API
//! server serialises the allocations), and every virtual IP costs kube-proxy rules on every node
//! (docs/performance.md, "Scale").

use crate::labels;
use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::api::networking::v1::NetworkPolicyPeer;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube_harness_crds::session::CLIENT_LABEL;
use kube_harness_crds::HarnessSession;
use std::collections::BTreeMap;

/// Labels of the session's worker pod that no other pod carries: the Service's selector.
pub fn worker_selector(session: &HarnessSession) -> BTreeMap<String, String> {
    let mut labels = super::owned::session_labels(session);
    labels.insert(labels::ROLE.into(), labels::ROLE_WORKER.into());
    labels
}

/// The session's Service: headless, the worker port, only the session's worker pod. Its address
/// is published before the kubelet's readiness probe passes, since the session is Ready as soon
/// as the worker itself answers ready (the reconcile asks it); a worker that cannot serve
/// answers 503 with why.
pub fn worker_service(session: &HarnessSession, port: u16) -> Service {
    Service {
        metadata: super::owned::meta(session, labels::worker_service(&session.name_any())),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".into()),
            cluster_ip: Some("None".into()),
            selector: Some(worker_selector(session)),
            publish_not_ready_addresses: Some(true),
            ports: Some(vec![ServicePort {
                name: Some("worker-api".into()),
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".into()),
                app_protocol: Some("http".into()),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// The URL `status.address` shows: the Service's cluster DNS name, stable across worker pods.
pub fn address(session: &HarnessSession, port: u16) -> String {
    format!(
        "http://{}.{}.svc:{port}",
        labels::worker_service(&session.name_any()),
        session.namespace().unwrap_or_default()
    )
}

/// The peers `spec.access` admits to the worker port (the operator is added by the caller).
/// Unset: pods of the session's namespace labelled [`CLIENT_LABEL`]; an empty list: none.
pub fn client_peers(session: &HarnessSession) -> Vec<NetworkPolicyPeer> {
    match &session.spec.access {
        None => vec![NetworkPolicyPeer {
            pod_selector: Some(LabelSelector {
                match_labels: Some(BTreeMap::from([(
                    CLIENT_LABEL.0.into(),
                    CLIENT_LABEL.1.into(),
                )])),
                ..LabelSelector::default()
            }),
            ..NetworkPolicyPeer::default()
        }],
        Some(access) => access
            .clients
            .iter()
            // The CRD's CEL rule refuses a client with neither selector; one that slipped past it
            // (an older CRD) would admit every pod of the namespace as an empty peer, so it is
            // dropped instead.
            .filter(|c| c.pod_selector.is_some() || c.namespace_selector.is_some())
            .map(|c| NetworkPolicyPeer {
                pod_selector: c.pod_selector.clone(),
                namespace_selector: c.namespace_selector.clone(),
                ip_block: None,
            })
            .collect(),
    }
}
