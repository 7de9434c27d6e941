//! A level-0 warm pool's objects, built from the tier: the warm pod is the session's worker pod
//! with nothing of a session in it (a pooled worker waiting for its adoption), the pool's
//! NetworkPolicy admits only the operator to idle pods, and a template change makes pods stale.

use k8s_openapi::api::core::v1::Pod;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_operator::session::resources;
use kube_harness_operator::warm::objects;
use kube_harness_operator::OperatorConfig;
use kube_harness_protocol::worker_args::WorkerArgs;
use serde_json::json;

fn tier(spec: serde_json::Value) -> SandboxTier {
    serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "tier0", "uid": "t-uid"},
        "spec": spec,
    }))
    .unwrap()
}

fn level0() -> SandboxTier {
    tier(json!({"level": 0, "template": {"image": "w:1"},
        "warmPool": {"size": 2, "namespaces": ["team-a"]}}))
}

fn container(p: &Pod) -> &k8s_openapi::api::core::v1::Container {
    &p.spec.as_ref().unwrap().containers[0]
}

#[test]
fn a_warm_pod_is_the_session_worker_pod_without_a_session() {
    let config = OperatorConfig::for_namespace("kh");
    let t = level0();
    let warm = objects::pool_pod(&t, "kh-warm-abc", "team-a", &config);
    let session: HarnessSession = serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": "s1", "namespace": "team-a", "uid": "u1"},
        "spec": {},
    }))
    .unwrap();
    let own = resources::worker_pod(&session, &t.spec, &config, &[]);
    // Same image, security context, probes and ports as a session's own worker pod.
    let (w, o) = (container(&warm), container(&own));
    assert_eq!(w.image, o.image);
    assert_eq!(w.readiness_probe, o.readiness_probe);
    assert_eq!(w.ports, o.ports);
    let sc = w.security_context.as_ref().unwrap();
    assert_eq!(sc.read_only_root_filesystem, Some(true));
    assert_eq!(sc.allow_privilege_escalation, Some(false));
    let uid = sc.run_as_user.unwrap();
    assert_eq!(uid, objects::pod_uid("kh-warm-abc"));
    assert!(uid >= resources::WORKER_UID_BASE);
    assert_ne!(
        uid,
        resources::worker_uid(&session),
        "its own uid, not a session's"
    );
    assert_eq!(
        warm.spec.as_ref().unwrap().automount_service_account_token,
        Some(false)
    );

    // A pooled worker: no session in its arguments, its adoption token mounted.
    let args = w.args.clone().unwrap();
    assert_eq!(args[0], "worker");
    let parsed = WorkerArgs::parse_flags(&args[1..]).unwrap();
    assert_eq!(
        parsed.session, "session",
        "no session name before the adoption"
    );
    assert_eq!(
        parsed.adopt_token_file.as_deref(),
        Some(std::path::Path::new("/var/run/kube-harness/pool/token"))
    );
    // The pooled worker builds its sandbox for its own settings while it waits; a session that
    // keeps the defaults must ask for that same sandbox, or every adoption builds one again.
    let adopted = resources::worker_settings(&session, &config);
    assert_eq!(
        (parsed.python, parsed.javascript, parsed.network),
        (adopted.python, adopted.javascript, adopted.network)
    );
    assert_eq!(parsed.deny_command, adopted.deny_command);
    assert_eq!(parsed.command_timeout, adopted.command_timeout);
    // The token dir and /.agents are empty and writable by the worker (the adoption fills them);
    // the workspace is the pod's own PVC.
    let mount = |name: &str| {
        w.volume_mounts
            .iter()
            .flatten()
            .find(|m| m.name == name)
            .unwrap()
            .clone()
    };
    assert_eq!(mount("token").read_only, Some(false));
    assert_eq!(mount("agents").read_only, Some(false));
    assert_eq!(mount("pool-token").read_only, Some(true));
    let volumes = warm.spec.as_ref().unwrap().volumes.clone().unwrap();
    let token = volumes.iter().find(|v| v.name == "token").unwrap();
    assert_eq!(
        token.empty_dir.as_ref().unwrap().medium.as_deref(),
        Some("Memory")
    );
    let ws = volumes.iter().find(|v| v.name == "workspace").unwrap();
    assert_eq!(
        ws.persistent_volume_claim.as_ref().unwrap().claim_name,
        "kh-warm-abc-workspace"
    );
    // Idle, owned by the tier, labelled for the pool.
    let labels = warm.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubeharness.dev/claimed"], "false");
    assert_eq!(labels["kubeharness.dev/pool"], "tier0");
    assert_eq!(labels["kubeharness.dev/role"], "worker");
    assert!(!labels.contains_key("kubeharness.dev/session"));
    let owner = &warm.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("SandboxTier", "t-uid")
    );
}

#[test]
fn the_claim_records_the_uid_and_is_owned_by_its_pod() {
    let config = OperatorConfig::for_namespace("kh");
    let t = level0();
    let mut warm = objects::pool_pod(&t, "kh-warm-abc", "team-a", &config);
    warm.metadata.uid = Some("pod-uid".into());
    let claim = objects::pool_claim(&t, &warm);
    assert_eq!(
        claim.metadata.name.as_deref(),
        Some("kh-warm-abc-workspace")
    );
    assert_eq!(
        claim.metadata.annotations.as_ref().unwrap()[objects::CLAIM_UID],
        objects::pod_uid("kh-warm-abc").to_string()
    );
    assert_eq!(
        kube_harness_operator::warm::adopt::claim_uid("kh-warm-abc-workspace"),
        Some(objects::pod_uid("kh-warm-abc"))
    );
    let owner = &claim.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.uid.as_str()),
        ("Pod", "pod-uid")
    );
}

#[test]
fn only_the_operator_reaches_an_idle_warm_pod_and_it_reaches_nothing() {
    let config = OperatorConfig::for_namespace("kh");
    let np = objects::pool_network_policy(&level0(), "team-a", &config);
    let spec = np.spec.unwrap();
    let selector = spec.pod_selector.unwrap().match_labels.unwrap();
    assert_eq!(
        selector["kubeharness.dev/claimed"], "false",
        "an adopted pod leaves it"
    );
    assert_eq!(spec.egress, Some(vec![]));
    let from = spec.ingress.unwrap()[0].from.clone().unwrap();
    assert_eq!(from.len(), 1);
    let pods = from[0].pod_selector.clone().unwrap().match_labels.unwrap();
    assert_eq!(pods["app.kubernetes.io/name"], "kube-harness-operator");
    let nss = from[0]
        .namespace_selector
        .clone()
        .unwrap()
        .match_labels
        .unwrap();
    assert_eq!(nss["kubernetes.io/metadata.name"], "kh");
}

#[test]
fn a_template_change_makes_warm_pods_stale_and_long_names_still_label() {
    let config = OperatorConfig::for_namespace("kh");
    let a = level0();
    let mut b = level0();
    b.spec.template.image = "w:2".into();
    let mut c = level0();
    c.spec.warm_pool.size = 5;
    assert_ne!(
        objects::template_hash(&a, &config),
        objects::template_hash(&b, &config)
    );
    assert_eq!(
        objects::template_hash(&a, &config),
        objects::template_hash(&c, &config),
        "resizing the pool does not roll it"
    );
    let long = "t".repeat(80);
    let label = objects::pool_label(&long);
    assert!(label.len() <= 63 && label.starts_with("h-"), "{label}");
    assert_eq!(objects::pool_label("tier0"), "tier0");
}

/// Security model T4 (worker uid): the claim's uid annotation is the tenant's to write (its
/// namespace); whatever it says, an adopted claim's later worker pods run as the warm pod's uid,
/// the one the claim's files belong to, and the session's own claim as the session's.
#[test]
fn a_tenant_written_uid_annotation_on_the_claim_never_becomes_the_worker_uid() {
    use kube_harness_operator::warm::adopt::claim_uid;
    let config = OperatorConfig::for_namespace("kh");
    let t = level0();
    let warm = objects::pool_pod(&t, "kh-warm-abc", "team-a", &config);
    let mut claim = objects::pool_claim(&t, &warm);
    let name = claim.metadata.name.clone().unwrap();
    let other = objects::pod_uid("kh-warm-other");
    for forged in ["-7".to_string(), "65532".to_string(), other.to_string()] {
        claim
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(objects::CLAIM_UID.into(), forged.clone());
        let uid = claim_uid(&name).unwrap();
        assert_eq!(uid, objects::pod_uid("kh-warm-abc"), "{forged}");
        assert_ne!(uid.to_string(), forged);
        assert!((resources::WORKER_UID_BASE
            ..resources::WORKER_UID_BASE + resources::WORKER_UID_SPAN)
            .contains(&uid));
    }
    assert_eq!(claim_uid("kh-warm-abc"), None, "not a claim name");
    assert_eq!(claim_uid("-workspace"), None);
}
