//! Tier-1 objects built from a SandboxTier (pod, NetworkPolicy), reading pod states, the sweep's
//! verdicts, what an escalating session's worker gets, and one warm-pool reconcile against a
//! mocked API server.

use super::support::{drain_events, expect, not_found, Handle, Seen};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::controller::Action;
use kube_harness_crds::condition::reasons;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_operator::session::resources;
use kube_harness_operator::tier1::pod::{self, Purpose, Serving};
use kube_harness_operator::tier1::state::{self, Phase};
use kube_harness_operator::tier1::sweep;
use kube_harness_operator::Result;
use kube_harness_operator::{tier, Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinHandle;

fn tier_obj(spec: Value) -> SandboxTier {
    serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "rust", "uid": "tier-uid", "generation": 4},
        "spec": spec,
    }))
    .unwrap()
}

fn rust(pool: u32) -> SandboxTier {
    tier_obj(
        json!({"level": 1, "template": {"image": "rust:1", "runtimeClassName": "gvisor",
        "resources": {"limits": {"memory": "4Gi"}}, "nodeSelector": {"pool": "build"},
        "tolerations": [{"key": "build", "operator": "Exists"}]},
        "capabilities": ["version-control", "build-toolchain"],
        "warmPool": {"size": pool, "namespaces": if pool > 0 { json!(["team-a"]) } else { json!([]) }}}),
    )
}

fn serving() -> Purpose {
    Purpose::Serving(Serving {
        session_namespace: "team-a".into(),
        session: "demo".into(),
        turn: "turn-1".into(),
        worker_uid: Some("w/0".into()),
        miss_reason: None,
        ..Serving::default()
    })
}

fn as_json(p: &Pod) -> Value {
    serde_json::to_value(p).unwrap()
}

/// Issue 30: a Tier-1 pod had no memory, CPU, storage or process bound (`pids.max=max`, no
/// memory limit, `ulimit -u` 96,367 for uid 65532, which every Tier-1 pod on the node shared).
/// Failed on the old code: no limits but the tier's memory, no `--max-processes`, uid 65532.
#[test]
fn a_tier1_pod_is_bounded_by_its_tier_with_safe_defaults_and_a_uid_of_its_own() {
    let config = OperatorConfig::for_namespace("kh");
    let agent = |tier: &SandboxTier, name: &str| {
        let p = as_json(&pod::pod(name, tier, &serving(), &config));
        p["spec"]["containers"][0].clone()
    };
    // The tier sets a memory limit only: the rest are the defaults, with small requests.
    let a = agent(&rust(0), "t1-x");
    let limits = &a["resources"]["limits"];
    assert_eq!(
        (
            &limits["memory"],
            &limits["cpu"],
            &limits["ephemeral-storage"]
        ),
        (&json!("4Gi"), &json!("2"), &json!("8Gi"))
    );
    let requests = &a["resources"]["requests"];
    assert_eq!(
        (&requests["cpu"], &requests["ephemeral-storage"]),
        (&json!("100m"), &json!("256Mi"))
    );
    assert!(
        requests.get("memory").is_none(),
        "the tier's limit is its request"
    );
    let args: Vec<&str> = a["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--max-processes", "1024"]),
        "{args:?}"
    );
    // A uid of its own, out of the worker pods' range: RLIMIT_NPROC counts this pod alone.
    let uid = a["securityContext"]["runAsUser"].as_i64().unwrap();
    assert_eq!(uid, pod::agent_uid("t1-x"));
    assert_ne!(uid, pod::agent_uid("t1-y"));
    assert!(uid >= pod::AGENT_UID_BASE && uid != pod::UID);
    // The tier's own bounds win; a request above a default limit lifts that limit to it.
    let mut bounded = rust(0);
    bounded.spec.template.max_processes = Some(300);
    bounded.spec.template.resources = Some(
        serde_json::from_value(json!({
            "limits": {"cpu": "500m"}, "requests": {"memory": "6Gi"}
        }))
        .unwrap(),
    );
    let a = agent(&bounded, "t1-x");
    assert_eq!(a["resources"]["limits"]["cpu"], "500m");
    assert_eq!(a["resources"]["limits"]["memory"], "6Gi");
    assert_eq!(a["resources"]["requests"]["memory"], "6Gi");
    let args: Vec<&str> = a["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        args.windows(2).any(|w| w == ["--max-processes", "300"]),
        "{args:?}"
    );
}

#[test]
fn the_tier1_pod_meets_restricted_pod_security_with_no_token_and_no_worker_environment() {
    let config = OperatorConfig::for_namespace("kh");
    let p = as_json(&pod::pod("t1-x", &rust(0), &serving(), &config));
    let spec = &p["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["restartPolicy"], "Never");
    for forbidden in [
        "hostNetwork",
        "hostPID",
        "hostIPC",
        "serviceAccountName",
        "imagePullSecrets",
    ] {
        assert!(spec.get(forbidden).is_none(), "{forbidden} set");
    }
    let psc = &spec["securityContext"];
    assert_eq!(psc["runAsNonRoot"], true);
    assert_eq!(
        (
            psc["runAsUser"].as_i64(),
            psc["runAsGroup"].as_i64(),
            psc["fsGroup"].as_i64()
        ),
        (
            Some(pod::agent_uid("t1-x")),
            Some(pod::agent_uid("t1-x")),
            Some(pod::agent_uid("t1-x"))
        )
    );
    assert_eq!(psc["seccompProfile"]["type"], "RuntimeDefault");
    let containers: Vec<&Value> = spec["initContainers"]
        .as_array()
        .unwrap()
        .iter()
        .chain(spec["containers"].as_array().unwrap())
        .collect();
    assert_eq!(containers.len(), 3);
    for c in &containers {
        let sc = &c["securityContext"];
        assert_eq!(sc["allowPrivilegeEscalation"], false, "{}", c["name"]);
        assert_eq!(sc["privileged"], false);
        assert_eq!(sc["runAsNonRoot"], true);
        assert_eq!(sc["capabilities"]["drop"], json!(["ALL"]));
        assert!(sc["capabilities"].get("add").is_none());
        assert_eq!(sc["seccompProfile"]["type"], "RuntimeDefault");
        assert!(c.get("envFrom").is_none(), "{}: envFrom", c["name"]);
        for m in c["volumeMounts"].as_array().unwrap() {
            assert_ne!(
                m["mountPath"],
                "/var/run/secrets/kubernetes.io/serviceaccount"
            );
        }
    }
    // The init container copies the binary from the worker image; the tier image runs it.
    let init = containers[0];
    assert_eq!(init["image"], "localhost/kube-harness/worker:dev");
    assert_eq!(
        init["command"],
        json!(["cp", "/usr/local/bin/kube-harness", "/kh/bin/kube-harness"])
    );
    assert!(init.get("env").is_none());
    let agent = containers[1];
    assert_eq!(agent["name"], "agent");
    assert_eq!(agent["image"], "rust:1");
    assert_eq!(agent["command"], json!(["/kh/bin/kube-harness"]));
    assert_eq!(agent["resources"]["limits"]["memory"], "4Gi");
    // Only HOME and TMPDIR: no token, URL or setting of the worker's (KH_*) reaches Tier-1.
    assert_eq!(
        agent["env"],
        json!([{"name": "HOME", "value": "/home/kh"}, {"name": "TMPDIR", "value": "/tmp"}])
    );
    // A tier's env comes first (HOME and TMPDIR, set last, win), and changes the pool's hash.
    let mut with_env = rust(0);
    with_env.spec.template.env = vec![kube_harness_crds::tier::TierEnvVar {
        name: "CARGO_HOME".into(),
        value: "/tmp/cargo".into(),
    }];
    let p = as_json(&pod::pod("t1-x", &with_env, &serving(), &config));
    assert_eq!(
        p["spec"]["containers"][0]["env"],
        json!([{"name": "CARGO_HOME", "value": "/tmp/cargo"}, {"name": "HOME", "value": "/home/kh"}, {"name": "TMPDIR", "value": "/tmp"}])
    );
    assert_ne!(
        pod::template_hash(&with_env, &config),
        pod::template_hash(&rust(0), &config)
    );
    assert_eq!(
        agent["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": 8080})
    );
    let mounts: Vec<(&str, &str)> = agent["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| {
            (
                m["mountPath"].as_str().unwrap(),
                m["name"].as_str().unwrap(),
            )
        })
        .collect();
    for path in [
        "/kh/bin",
        "/kh/token",
        "/session",
        "/artifacts",
        "/persistent",
        "/.agents",
        "/home/kh",
        "/tmp",
    ] {
        assert!(
            mounts.iter().any(|(p, _)| *p == path),
            "{path} not mounted: {mounts:?}"
        );
    }
    // The skills: read-only to the agent's container (and so to every command), written only by
    // the keeper beside it, which the agent reaches on loopback.
    let read_only = |c: &Value, path: &str| {
        c["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["mountPath"] == path)
            .map(|m| (m["name"].clone(), m["readOnly"].clone()))
    };
    assert_eq!(
        read_only(agent, "/.agents"),
        Some((json!("agents"), json!(true)))
    );
    let args = agent["args"].as_array().unwrap();
    let at = args.iter().position(|a| a == "--skills-keeper").unwrap();
    assert_eq!(args[at + 1], "127.0.0.1:8079");
    let keeper = containers[2];
    assert_eq!(keeper["name"], "skills-keeper");
    assert_eq!(keeper["image"], "localhost/kube-harness/worker:dev");
    assert_eq!(
        keeper["command"],
        json!([
            "/usr/local/bin/kube-harness",
            "skills-keeper",
            "--listen",
            "127.0.0.1:8079",
            "--dir",
            "/kh/agents"
        ])
    );
    assert_eq!(keeper["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(
        read_only(keeper, "/kh/agents"),
        Some((json!("agents"), json!(false)))
    );
    assert_eq!(keeper["volumeMounts"].as_array().unwrap().len(), 1);
    let agents = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["name"] == "agents")
        .unwrap();
    assert_eq!(agents["emptyDir"]["sizeLimit"], "64Mi");
    // Every volume is an emptyDir except the pod's own token Secret: nothing else to read.
    for v in spec["volumes"].as_array().unwrap() {
        match v["name"].as_str().unwrap() {
            "token" => assert_eq!(v["secret"]["secretName"], "t1-x"),
            other => assert!(v.get("emptyDir").is_some(), "{other}: {v}"),
        }
    }
    assert_eq!(spec["runtimeClassName"], "gvisor");
    assert_eq!(spec["nodeSelector"], json!({"pool": "build"}));
    assert_eq!(spec["tolerations"][0]["key"], "build");
}

#[test]
fn pool_pods_carry_the_pool_labels_and_the_template_hash_follows_the_template() {
    let config = OperatorConfig::for_namespace("kh");
    let hash = pod::template_hash(&rust(2), &config);
    let p = pod::pod(
        "t1-p",
        &rust(2),
        &Purpose::Pool {
            template_hash: hash.clone(),
            namespace: "team-a".into(),
        },
        &config,
    );
    // Kept where the sessions it serves are, not in the operator's namespace.
    assert_eq!(p.metadata.namespace.as_deref(), Some("team-a"));
    let labels = p.metadata.labels.unwrap();
    assert_eq!(labels["kubeharness.dev/pool"], "rust");
    assert_eq!(labels["kubeharness.dev/claimed"], "false");
    assert_eq!(labels["kubeharness.dev/template-hash"], hash);
    assert!(!labels.contains_key("kubeharness.dev/session"));
    // The pool size is not part of the template; the image and the worker image are.
    assert_eq!(pod::template_hash(&rust(5), &config), hash);
    let mut other = rust(2);
    other.spec.template.image = "rust:2".into();
    assert_ne!(pod::template_hash(&other, &config), hash);
    let config2 = OperatorConfig {
        worker_image: "w:2".into(),
        ..config.clone()
    };
    assert_ne!(pod::template_hash(&rust(2), &config2), hash);
}

#[test]
fn the_tier_network_policy_admits_only_workers_and_follows_the_egress_policy() {
    let np = serde_json::to_value(pod::network_policy(&rust(0), "team-a")).unwrap();
    assert_eq!(np["metadata"]["name"], "t1-rust");
    assert_eq!(np["metadata"]["namespace"], "team-a");
    assert_eq!(
        np["spec"]["podSelector"]["matchLabels"]["kubeharness.dev/tier"],
        "rust"
    );
    assert_eq!(
        np["spec"]["ingress"],
        // Only the workers of the same namespace (no namespaceSelector).
        json!([{"from": [{"podSelector": {"matchLabels": {
        "app.kubernetes.io/managed-by": "kube-harness-operator", "kubeharness.dev/role": "worker"}}}],
        "ports": [{"port": 8080, "protocol": "TCP"}]}])
    );
    let egress = np["spec"]["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 1, "Deny: DNS only");
    assert_eq!(egress[0]["ports"][0]["port"], 53);
    let mut list = rust(0);
    list.spec.egress =
        serde_json::from_value(json!({"mode": "AllowList", "cidrs": ["10.0.0.0/8"]})).unwrap();
    let np = serde_json::to_value(pod::network_policy(&list, "team-a")).unwrap();
    assert_eq!(
        np["spec"]["egress"][1]["to"],
        json!([{"ipBlock": {"cidr": "10.0.0.0/8"}}])
    );
    let mut all = rust(0);
    all.spec.egress = serde_json::from_value(json!({"mode": "AllowAll"})).unwrap();
    let np = serde_json::to_value(pod::network_policy(&all, "team-a")).unwrap();
    assert_eq!(np["spec"]["egress"], json!([{}]));
}

fn pod_with(status: Value) -> Pod {
    serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t1-x"}, "status": status}),
    )
    .unwrap()
}

fn failed_reason(status: Value) -> String {
    match state::phase(&pod_with(status)) {
        Phase::Failed { reason, .. } => reason,
        other => panic!("not failed: {other:?}"),
    }
}

#[test]
fn pod_states_map_to_sandbox_phases() {
    assert_eq!(
        state::phase(&pod_with(json!({"phase": "Pending"}))),
        Phase::Pending
    );
    assert_eq!(
        state::phase(&pod_with(
            json!({"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]})
        )),
        Phase::Ready {
            ip: "10.0.0.1".into()
        }
    );
    assert_eq!(
        state::phase(&pod_with(
            json!({"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "False"}]})
        )),
        Phase::Pending
    );
    let waiting = |reason: &str, init: bool| {
        let key = if init {
            "initContainerStatuses"
        } else {
            "containerStatuses"
        };
        json!({"phase": "Pending", key: [{"name": if init {"install-agent"} else {"agent"}, "image": "i", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": reason}}}]})
    };
    for r in [
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
    ] {
        assert_eq!(failed_reason(waiting(r, false)), "ImagePullFailed", "{r}");
        assert_eq!(
            failed_reason(waiting(r, true)),
            "ImagePullFailed",
            "{r} in the init container"
        );
    }
    assert_eq!(
        failed_reason(waiting("CreateContainerConfigError", false)),
        "ContainerFailed"
    );
    assert_eq!(
        state::phase(&pod_with(waiting("ContainerCreating", false))),
        Phase::Pending
    );
    assert_eq!(
        failed_reason(
            json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]})
        ),
        "Unschedulable"
    );
    assert_eq!(failed_reason(json!({"phase": "Failed"})), "PodFailed");
    assert_eq!(failed_reason(json!({"phase": "Succeeded"})), "PodFailed");
    assert_eq!(
        failed_reason(
            json!({"phase": "Running", "containerStatuses": [{"name": "agent", "image": "i", "imageID": "",
        "ready": false, "restartCount": 0, "state": {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}}]})
        ),
        "AgentDied"
    );
    assert_eq!(
        failed_reason(
            json!({"phase": "Running", "containerStatuses": [{"name": "agent", "image": "i", "imageID": "",
        "ready": true, "restartCount": 1, "state": {"running": {}}}]})
        ),
        "AgentDied"
    );
    // The skills keeper ending (its agent is gone, or it died and is never replaced) is the
    // agent's end, whatever its exit code; before, a keeper's clean exit was not noticed at all.
    let keeper_ended = json!({"phase": "Running", "containerStatuses": [
        {"name": "agent", "image": "i", "imageID": "", "ready": true, "restartCount": 0, "state": {"running": {}}},
        {"name": "skills-keeper", "image": "w", "imageID": "", "ready": false, "restartCount": 0,
         "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}]});
    match state::phase(&pod_with(keeper_ended)) {
        Phase::Failed { reason, message } => {
            assert_eq!(reason, "AgentDied");
            assert!(message.contains("skills keeper"), "{message}");
        }
        other => panic!("not failed: {other:?}"),
    }
    let mut deleting = pod_with(json!({"phase": "Running"}));
    deleting.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(k8s_openapi::jiff::Timestamp::now()),
    );
    assert!(matches!(state::phase(&deleting), Phase::Failed { .. }));
}

#[test]
fn the_sweep_deletes_pods_of_gone_sessions_replaced_workers_and_ended_pods_only() {
    let with = |uid: Option<&str>, status: Value| {
        let mut p = pod_with(status);
        if let Some(uid) = uid {
            p.metadata.annotations =
                Some([("kubeharness.dev/worker-uid".to_string(), uid.to_string())].into());
        }
        p
    };
    let young = Duration::from_secs(10);
    let running = json!({"phase": "Running"});
    let v =
        |uid: Option<&str>, status: Value, exists: bool, worker: Option<&str>, age: Duration| {
            sweep::verdict(&with(uid, status), exists, worker, age)
        };
    assert_eq!(
        v(Some("w/0"), running.clone(), true, Some("w/0"), young),
        None
    );
    assert!(v(Some("w/0"), running.clone(), false, None, young)
        .unwrap()
        .message
        .contains("gone"));
    assert!(v(Some("w/0"), running.clone(), true, Some("w/1"), young)
        .unwrap()
        .message
        .contains("worker"));
    assert!(v(Some("w/0"), running.clone(), true, None, young)
        .unwrap()
        .message
        .contains("worker"));
    assert!(v(
        Some("w/0"),
        json!({"phase": "Failed"}),
        true,
        Some("w/0"),
        young
    )
    .is_some());
    // Failing to start: the worker's DELETE ends it, unless no one did for FAILED_GRACE.
    let unschedulable = json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]});
    assert_eq!(
        v(Some("w/0"), unschedulable.clone(), true, Some("w/0"), young),
        None
    );
    let late = sweep::FAILED_GRACE + Duration::from_secs(1);
    assert!(v(Some("w/0"), unschedulable, true, Some("w/0"), late).is_some());
    // Starting is fine for a while; never ready is not.
    let pending = json!({"phase": "Pending"});
    assert_eq!(
        v(Some("w/0"), pending.clone(), true, Some("w/0"), late),
        None
    );
    let never = sweep::PENDING_LIMIT + Duration::from_secs(1);
    assert!(v(Some("w/0"), pending, true, Some("w/0"), never).is_some());
    // A ready pod of a live turn stays however long the turn takes.
    let ready = json!({"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]});
    assert_eq!(v(Some("w/0"), ready, true, Some("w/0"), never), None);
    let worker: Pod = serde_json::from_value(
        json!({"metadata": {"uid": "abc"}, "status": {"containerStatuses": [
        {"name": "worker", "image": "i", "imageID": "", "ready": true, "restartCount": 3}]}}),
    )
    .unwrap();
    assert_eq!(sweep::worker_identity(&worker).as_deref(), Some("abc/3"));
}

fn session(spec: Value) -> HarnessSession {
    serde_json::from_value(
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": "s1", "namespace": "ns", "uid": "u1"}, "spec": spec}),
    )
    .unwrap()
}

#[test]
fn an_escalating_session_worker_gets_the_tier_api_and_may_reach_it_and_tier1_pods() {
    let config = OperatorConfig {
        tier_api_url: Some("http://kh-operator.kh.svc:8081".into()),
        ..OperatorConfig::for_namespace("kh")
    };
    let worker_tier: kube_harness_crds::SandboxTierSpec =
        serde_json::from_value(json!({"level": 0, "template": {"image": "w:1"}})).unwrap();
    let escalating = session(json!({"escalation": {"tier": "rust"}}));
    let p = resources::worker_pod(&escalating, &worker_tier, &config, &[]);
    let args = p.spec.unwrap().containers[0].args.clone().unwrap();
    let joined = args.join(" ");
    assert!(
        joined.contains(
            "--escalation pod --tier-api-url http://kh-operator.kh.svc:8081 --session-namespace ns"
        ),
        "{joined}"
    );
    let plain = resources::worker_pod(&session(json!({})), &worker_tier, &config, &[]);
    assert!(!plain.spec.unwrap().containers[0]
        .args
        .clone()
        .unwrap()
        .contains(&"--escalation".to_string()));

    let np = serde_json::to_value(resources::network_policy(&escalating, &config)).unwrap();
    let egress = np["spec"]["egress"].as_array().unwrap();
    assert_eq!(egress.len(), 4, "{egress:?}");
    assert_eq!(
        egress[2]["ports"],
        json!([{"port": 8081, "protocol": "TCP"}])
    );
    assert_eq!(
        egress[2]["to"][0]["podSelector"]["matchLabels"],
        json!({"app.kubernetes.io/name": "kube-harness-operator"})
    );
    assert_eq!(
        egress[3]["ports"],
        json!([{"port": 8080, "protocol": "TCP"}])
    );
    assert_eq!(
        egress[3]["to"][0]["podSelector"]["matchLabels"]["kubeharness.dev/role"],
        "tier1"
    );
    // The session's own namespace, where its Tier-1 pods run.
    assert_eq!(egress[3]["to"][0].get("namespaceSelector"), None);
    let plain =
        serde_json::to_value(resources::network_policy(&session(json!({})), &config)).unwrap();
    assert_eq!(plain["spec"]["egress"].as_array().unwrap().len(), 2);
}

/// Starts one reconcile of `tier` against a mocked API server; returns the server, the tier's
/// template hash and the running reconcile.
fn start_reconcile(tier: SandboxTier) -> (Handle, String, JoinHandle<Result<Action>>) {
    let (client, server) = super::support::client();
    let config = OperatorConfig::for_namespace("kh");
    let hash = pod::template_hash(&tier, &config);
    let ctx = Arc::new(super::support::with_origin(Context::new(client, config)));
    let run = tokio::spawn(tier::reconcile(Arc::new(tier), ctx));
    (server, hash, run)
}

/// The list of the tier's idle pool pods in every namespace, answered with `items`.
async fn list_everywhere(server: &mut Handle, items: Value) -> Seen {
    expect(
        server,
        "GET",
        "/api/v1/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items}),
    )
    .await
}

/// The tier's NetworkPolicy apply in `team-a`; returns what the operator sent.
async fn apply_policy(server: &mut Handle) -> Seen {
    expect(server, "PATCH", "/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies/t1-rust", 200,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "t1-rust"}})).await
}

/// A pool pod of `team-a` deleted (answered with `reply`), then its Secret, already collected
/// with it: fine.
async fn delete_pool_pod(server: &mut Handle, name: &str, reply: Value) {
    delete_pool_pod_in(server, "team-a", name, reply).await
}

async fn delete_pool_pod_in(server: &mut Handle, ns: &str, name: &str, reply: Value) {
    expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        200,
        reply,
    )
    .await;
    expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}/secrets/{name}"),
        404,
        not_found("secrets", name),
    )
    .await;
}

/// One new pool pod makes two requests: the pod (answered with `uid`), then its token Secret,
/// owned by the pod from its creation (so no Secret is ever left without its pod). Returns the
/// name the operator chose and the pod it sent.
async fn create_pool_pod(server: &mut Handle, uid: &str) -> (String, Seen) {
    let arrived = super::support::next(server, "POST pods").await;
    assert_eq!(
        (arrived.method.as_str(), arrived.path.as_str()),
        ("POST", "/api/v1/namespaces/team-a/pods"),
        "the pod first"
    );
    let name = arrived.seen.body["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let reply = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "uid": uid}});
    let created = super::support::answer(arrived, 201, &reply);
    // Proven before its Secret is made.
    let stamp = expect(
        server,
        "PATCH",
        &format!("/api/v1/namespaces/team-a/pods/{name}"),
        200,
        reply.clone(),
    )
    .await;
    assert_eq!(
        stamp.body["metadata"]["annotations"][kube_harness_operator::origin::ANNOTATION],
        super::support::origin_key().proof("team-a", &name, uid)
    );
    let secret = expect(
        server,
        "POST",
        "/api/v1/namespaces/team-a/secrets",
        201,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name}}),
    )
    .await;
    assert_eq!(secret.body["metadata"]["name"], name.as_str());
    assert_eq!(
        secret.body["metadata"]["ownerReferences"],
        json!([{"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}])
    );
    (name, created)
}

/// The status patch of the tier `name`, answered with `reply`; returns what the operator sent.
async fn patch_tier_status(server: &mut Handle, name: &str, reply: Value) -> Seen {
    expect(
        server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/sandboxtiers/{name}/status"),
        200,
        reply,
    )
    .await
}

#[tokio::test]
async fn a_pool_reconcile_deletes_stale_pods_creates_the_missing_and_reports_counts() {
    let (mut server, hash, run) = start_reconcile(rust(2));
    let pool_pod_in = |ns: &str, name: &str, hash: &str| {
        super::support::proven(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "uid": format!("{name}-uid"), "resourceVersion": "7",
            "labels": {"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false", "kubeharness.dev/template-hash": hash}},
        "status": {"phase": "Running", "podIP": "10.0.0.3", "conditions": [{"type": "Ready", "status": "True"}]}}))
    };
    let pool_pod = |name: &str, hash: &str| pool_pod_in("team-a", name, hash);
    // A pod in a namespace the pool no longer serves goes, with its Secret, exactly as listed.
    list_everywhere(
        &mut server,
        json!([
            pool_pod_in("old-team", "t1-moved", &hash),
            pool_pod("t1-good", &hash)
        ]),
    )
    .await;
    let arrived = super::support::next(&mut server, "DELETE the unserved pod").await;
    assert_eq!(
        (arrived.method.as_str(), arrived.path.as_str()),
        ("DELETE", "/api/v1/namespaces/old-team/pods/t1-moved")
    );
    assert_eq!(
        arrived.seen.body["preconditions"],
        json!({"uid": "t1-moved-uid", "resourceVersion": "7"})
    );
    super::support::answer(arrived, 200, &pool_pod_in("old-team", "t1-moved", &hash));
    expect(
        &mut server,
        "DELETE",
        "/api/v1/namespaces/old-team/secrets/t1-moved",
        404,
        not_found("secrets", "t1-moved"),
    )
    .await;
    let np = apply_policy(&mut server).await;
    assert_eq!(np.content_type, "application/apply-patch+yaml");
    let listed = expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {},
        "items": [pool_pod("t1-stale", "0123456789abcdef"), pool_pod("t1-good", &hash)]}),
    )
    .await;
    assert!(
        listed
            .query
            .contains("kubeharness.dev%2Fpool%3Drust%2Ckubeharness.dev%2Fclaimed%3Dfalse"),
        "{}",
        listed.query
    );
    // The stale pod (another template) goes, although it is ready.
    delete_pool_pod(&mut server, "t1-stale", pool_pod("t1-stale", "x")).await;
    // One new pod makes two: the pod, then its Secret.
    let (name, created) = create_pool_pod(&mut server, "new-uid").await;
    assert_eq!(created.body["metadata"]["name"], name.as_str());
    assert_eq!(
        created.body["metadata"]["labels"]["kubeharness.dev/template-hash"],
        hash.as_str()
    );
    assert_eq!(
        created.body["metadata"]["labels"]["kubeharness.dev/claimed"],
        "false"
    );
    let status =
        patch_tier_status(&mut server, "rust", serde_json::to_value(rust(2)).unwrap()).await;
    let st = &status.body["status"];
    assert_eq!(
        (st["warmReady"].as_u64(), st["warmUpdated"].as_u64()),
        (Some(1), Some(2)),
        "{st}"
    );
    assert_eq!(
        st["selector"],
        "kubeharness.dev/pool=rust,kubeharness.dev/claimed=false"
    );
    assert_eq!(st["observedGeneration"], 4);
    assert_eq!(st["conditions"][0]["type"], "Ready");
    assert_eq!(st["conditions"][0]["status"], "True");
    drain_events(&mut server, "default", 1).await;
    run.await.unwrap().expect("reconcile");
}

#[tokio::test]
async fn pool_pods_that_cannot_start_are_kept_and_reported_and_crashed_ones_replaced_only_when_old()
{
    let (mut server, hash, run) = start_reconcile(rust(3));
    list_everywhere(&mut server, json!([])).await;
    apply_policy(&mut server).await;
    let now = k8s_openapi::jiff::Timestamp::now();
    let created =
        |secs_ago: i64| (now - k8s_openapi::jiff::SignedDuration::from_secs(secs_ago)).to_string();
    let pool_pod = |name: &str, age: i64, status: Value| {
        super::support::proven(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a", "uid": format!("{name}-uid"), "creationTimestamp": created(age),
            "labels": {"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false", "kubeharness.dev/template-hash": hash}},
        "status": status}))
    };
    let died = json!({"phase": "Failed", "containerStatuses": [{"name": "agent", "image": "rust:1", "imageID": "", "ready": false,
        "restartCount": 0, "state": {"terminated": {"exitCode": 1, "reason": "Error"}}}]});
    expect(&mut server, "GET", "/api/v1/namespaces/team-a/pods", 200, json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
        pool_pod("t1-noimage", 600, json!({"phase": "Pending", "containerStatuses": [{"name": "agent", "image": "rust:1", "imageID": "",
            "ready": false, "restartCount": 0, "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "not present"}}}]})),
        pool_pod("t1-young", 5, died.clone()),
        pool_pod("t1-old", 120, died),
    ]})).await;
    // Only the crashed pod older than a minute goes; the one that cannot pull its image stays.
    delete_pool_pod(
        &mut server,
        "t1-old",
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t1-old"}}),
    )
    .await;
    create_pool_pod(&mut server, "u").await;
    let events = drain_events(&mut server, "default", 1).await;
    assert_eq!(
        (events[0]["type"].as_str(), events[0]["reason"].as_str()),
        (Some("Warning"), Some(reasons::POOL_PODS_FAILING))
    );
    let status =
        patch_tier_status(&mut server, "rust", serde_json::to_value(rust(3)).unwrap()).await;
    let st = &status.body["status"];
    assert_eq!(
        (st["warmReady"].as_u64(), st["warmUpdated"].as_u64()),
        (Some(0), Some(3)),
        "{st}"
    );
    let degraded = st["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(
        (degraded["status"].as_str(), degraded["reason"].as_str()),
        (Some("True"), Some(reasons::POOL_PODS_FAILING))
    );
    assert!(
        degraded["message"]
            .as_str()
            .unwrap()
            .contains("ErrImageNeverPull"),
        "{degraded}"
    );
    drain_events(&mut server, "default", 1).await;
    run.await.unwrap().expect("reconcile");
}

#[tokio::test]
async fn an_escalation_tier_name_too_long_for_labels_is_not_ready_and_gets_no_pods() {
    let (client, mut server) = super::support::client();
    let name = "a".repeat(61);
    let mut t = rust(2);
    t.metadata.name = Some(name.clone());
    let ctx = Arc::new(Context::new(client, OperatorConfig::for_namespace("kh")));
    let run = tokio::spawn(tier::reconcile(Arc::new(t), ctx));
    // No NetworkPolicy, no pool: straight to status.
    let status =
        patch_tier_status(&mut server, &name, serde_json::to_value(rust(2)).unwrap()).await;
    let ready = &status.body["status"]["conditions"][0];
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("False"), Some(reasons::NAME_TOO_LONG))
    );
    drain_events(&mut server, "default", 1).await;
    run.await.unwrap().expect("reconcile");
}

/// Issue 30: a tenant's pod with the pool's labels and current template hash (and the proof of
/// another pod copied on it), Ready, is neither counted nor kept: deleted (that uid only; its
/// namesake Secret is not the operator's to delete) with a Warning Event, and the pool makes its
/// own pod, proven at once.
#[tokio::test]
async fn a_planted_pool_pod_is_deleted_not_counted_and_replaced() {
    let (mut server, hash, run) = start_reconcile(rust(1));
    list_everywhere(&mut server, json!([])).await;
    apply_policy(&mut server).await;
    let mut planted = super::support::proven(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "t1-planted", "namespace": "team-a", "uid": "t1-planted-uid", "resourceVersion": "7",
            "labels": {"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false", "kubeharness.dev/template-hash": hash}},
        "status": {"phase": "Running", "podIP": "10.0.0.3", "conditions": [{"type": "Ready", "status": "True"}]}}));
    planted["metadata"]["uid"] = json!("tenants-uid");
    expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [planted]}),
    )
    .await;
    super::support::expect_unproven_pod_deleted(&mut server, "team-a", "t1-planted").await;
    create_pool_pod(&mut server, "new-uid").await;
    let status =
        patch_tier_status(&mut server, "rust", serde_json::to_value(rust(1)).unwrap()).await;
    let st = &status.body["status"];
    assert_eq!(
        (st["warmReady"].as_u64(), st["warmUpdated"].as_u64()),
        (Some(0), Some(1)),
        "the planted pod counts for nothing: {st}"
    );
    drain_events(&mut server, "default", 1).await;
    run.await.unwrap().expect("reconcile");
}

/// Issue 30, level 0: a tenant's pod with a warm pool's labels and current template hash (and a
/// copied proof), Ready in a namespace the pool serves, is deleted (that uid) with a Warning
/// Event by the pool's reconcile, not counted, and the pool starts its own, proven at once.
#[tokio::test]
async fn a_planted_level0_warm_pod_is_deleted_not_counted_and_replaced() {
    use kube_harness_operator::warm::objects;
    let level0 = tier_obj(json!({"level": 0, "template": {"image": "w:1"},
        "capabilities": ["python"], "warmPool": {"size": 1, "namespaces": ["team-a"]}}));
    let hash = objects::template_hash(&level0, &OperatorConfig::for_namespace("kh"));
    let (mut server, _, run) = start_reconcile(level0.clone());
    list_everywhere(&mut server, json!([])).await;
    let pool = objects::pool_object_name("rust");
    expect(
        &mut server,
        "POST",
        "/api/v1/namespaces/team-a/secrets",
        201,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": pool}}),
    )
    .await;
    expect(&mut server, "PATCH", &format!("/apis/networking.k8s.io/v1/namespaces/team-a/networkpolicies/{pool}"), 200,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": pool}})).await;
    let mut planted = super::support::proven(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "kh-warm-planted", "namespace": "team-a", "uid": "ours-uid", "resourceVersion": "7",
            "labels": {"kubeharness.dev/pool": "rust", "kubeharness.dev/role": "worker",
                       "kubeharness.dev/claimed": "false", "kubeharness.dev/template-hash": hash}},
        "status": {"phase": "Running", "podIP": "10.0.0.3", "conditions": [{"type": "Ready", "status": "True"}]}}));
    planted["metadata"]["uid"] = json!("tenants-uid");
    expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [planted]}),
    )
    .await;
    super::support::expect_unproven_pod_deleted(&mut server, "team-a", "kh-warm-planted").await;
    // The pool's own pod: created, proven, then its PVC.
    let arrived = super::support::next(&mut server, "POST pods").await;
    assert_eq!(arrived.path, "/api/v1/namespaces/team-a/pods");
    let name = arrived.seen.body["metadata"]["name"]
        .as_str()
        .unwrap()
        .to_string();
    let reply = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "team-a", "uid": "new-uid"}});
    super::support::answer(arrived, 201, &reply);
    let stamp = expect(
        &mut server,
        "PATCH",
        &format!("/api/v1/namespaces/team-a/pods/{name}"),
        200,
        reply,
    )
    .await;
    assert_eq!(
        stamp.body["metadata"]["annotations"][kube_harness_operator::origin::ANNOTATION],
        super::support::origin_key().proof("team-a", &name, "new-uid")
    );
    expect(
        &mut server,
        "POST",
        "/api/v1/namespaces/team-a/persistentvolumeclaims",
        201,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"}}),
    )
    .await;
    let status =
        patch_tier_status(&mut server, "rust", serde_json::to_value(level0).unwrap()).await;
    let st = &status.body["status"];
    assert_eq!(
        st["warmReady"].as_u64(),
        Some(0),
        "the planted pod counts for nothing: {st}"
    );
    drain_events(&mut server, "default", 1).await;
    run.await.unwrap().expect("reconcile");
}
