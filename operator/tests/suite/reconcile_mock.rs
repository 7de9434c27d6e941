//! Reconcile logic against a mocked API server that asserts every request, in order. The real
//! thing is proven by the e2e suite (tests/e2e); these pin down exactly what one reconcile asks.

use super::support::{
    condition, drain_events, existing_token_secret, expect, expect_all, not_found, Handle, Seen,
    Want,
};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::HarnessSession;
use kube_harness_operator::{session, Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;

const NS: &str = "team-a";

fn session_obj(extra: Value) -> HarnessSession {
    let mut v = json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "metadata": {"name": "demo", "namespace": NS, "uid": "uid-1", "generation": 3, "resourceVersion": "10"},
        "spec": {"policy": {"denyCommands": ["shutdown"]}},
    });
    merge(&mut v, extra);
    serde_json::from_value(v).unwrap()
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (slot, v) => *slot = v,
    }
}

fn tier0() -> Value {
    json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "tier0", "uid": "t0", "generation": 1},
        "spec": {"namespaceSelector": {}, "level": 0, "template": {"image": "example.org/kh:1"}, "capabilities": ["python", "javascript"]}
    })
}

fn context(client: kube::Client) -> Arc<Context> {
    Arc::new(Context::new(
        client,
        OperatorConfig::for_namespace("kube-harness"),
    ))
}

/// The worker tier's read, answered with [`tier0`].
async fn read_tier0(server: &mut Handle) {
    expect(
        server,
        "GET",
        "/apis/kubeharness.dev/v1alpha1/sandboxtiers/tier0",
        200,
        tier0(),
    )
    .await;
}

/// The server-side apply of child `name` of `kind` (`plural` under the API `prefix`).
fn apply_child(prefix: &str, api_version: &str, plural: &str, kind: &str, name: &str) -> Want {
    Want::new(
        "PATCH",
        format!("{prefix}/namespaces/{NS}/{plural}/{name}"),
        200,
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": name}}),
    )
}

/// The workspace PVC apply.
fn apply_workspace() -> Want {
    apply_child(
        "/api/v1",
        "v1",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        "demo-workspace",
    )
}

/// The worker's NetworkPolicy apply.
fn apply_worker_policy() -> Want {
    let api = "networking.k8s.io/v1";
    apply_child(
        &format!("/apis/{api}"),
        api,
        "networkpolicies",
        "NetworkPolicy",
        "demo-worker",
    )
}

/// The session's Service apply.
fn apply_worker_service() -> Want {
    apply_child("/api/v1", "v1", "services", "Service", "demo-worker")
}

/// A new session's token Secret, workspace PVC, NetworkPolicy and Service, made at once; returns
/// what the operator sent, in that order.
async fn make_children(server: &mut Handle, secret: Vec<Want>) -> (Vec<Seen>, Seen, Seen, Seen) {
    let n = secret.len();
    let mut wants = secret;
    wants.extend([
        apply_workspace(),
        apply_worker_policy(),
        apply_worker_service(),
    ]);
    let mut seen = expect_all(server, wants).await;
    let rest = seen.split_off(n);
    let [pvc, np, svc]: [Seen; 3] = rest.try_into().ok().unwrap();
    (seen, pvc, np, svc)
}

/// The worker pod looked up (absent: the operator's pod cache is empty in these tests).
async fn worker_pod_absent(server: &mut Handle) {
    expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        404,
        not_found("pods", "demo-worker"),
    )
    .await;
}

/// The worker pod created; returns the pod the operator sent.
async fn create_worker_pod(server: &mut Handle) -> Seen {
    expect(server, "POST", &format!("/api/v1/namespaces/{NS}/pods"), 201,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS}})).await
}

/// The session's status patch; returns what the operator sent.
async fn patch_session_status(server: &mut Handle) -> Seen {
    expect(
        server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo/status"),
        200,
        json!(session_obj(json!({}))),
    )
    .await
}

#[tokio::test]
async fn a_new_session_first_gets_the_finalizer() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(json!({}));
    let ctx = context(client);
    let run = tokio::spawn(session::reconcile(Arc::new(obj.clone()), ctx));
    let seen = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(
            json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"], "resourceVersion": "11"}})
        )),
    )
    .await;
    assert!(
        seen.content_type.contains("json-patch"),
        "{}",
        seen.content_type
    );
    assert!(
        seen.body.to_string().contains("kubeharness.dev/cleanup"),
        "{}",
        seen.body
    );
    // The same reconcile applies while the patch is made (no round trip through the watch, and
    // none waiting for the patch): here its tier is missing, which it reports, in a status write
    // conditioned on the object the patch returned.
    expect(
        &mut server,
        "GET",
        "/apis/kubeharness.dev/v1alpha1/sandboxtiers/tier0",
        404,
        not_found("sandboxtiers", "tier0"),
    )
    .await;
    let status = patch_session_status(&mut server).await;
    assert_eq!(status.body["status"]["phase"], "Pending");
    assert_eq!(status.body["metadata"]["resourceVersion"], "11");
    drain_events(&mut server, NS, 2).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
}

#[tokio::test]
async fn a_session_gone_before_its_finalizer_is_added_is_done() {
    let (client, mut server) = super::support::client();
    let run = tokio::spawn(session::reconcile(
        Arc::new(session_obj(json!({}))),
        context(client),
    ));
    expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        404,
        not_found("harnesssessions", "demo"),
    )
    .await;
    // The first apply runs alongside the finalizer patch; nothing is written after the 404.
    expect(
        &mut server,
        "GET",
        "/apis/kubeharness.dev/v1alpha1/sandboxtiers/tier0",
        404,
        not_found("sandboxtiers", "tier0"),
    )
    .await;
    assert_eq!(
        run.await.unwrap().expect("no error"),
        kube::runtime::controller::Action::await_change()
    );
}

/// A first reconcile of a session with its finalizer, up to the worker pod's create: the tier
/// read, the pod looked up (absent), the token Secret created and the children applied. Returns
/// the reconcile and what the Secret, PVC, NetworkPolicy and Service requests carried.
async fn a_cold_start_up_to_its_pod(
    client: kube::Client,
    server: &mut Handle,
) -> (
    tokio::task::JoinHandle<kube_harness_operator::Result<kube::runtime::controller::Action>>,
    (Vec<Seen>, Seen, Seen, Seen),
) {
    let obj = session_obj(json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"]}}));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    read_tier0(server).await;
    worker_pod_absent(server).await;
    let children = make_children(server, vec![Want::new("POST", format!("/api/v1/namespaces/{NS}/secrets"), 201, json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-token", "namespace": NS}}))]).await;
    (run, children)
}

#[tokio::test]
async fn a_session_gets_secret_pvc_policy_restricted_pod_and_status_in_order() {
    let (client, mut server) = super::support::client();
    let (run, (secret, pvc, np, svc)) = a_cold_start_up_to_its_pod(client, &mut server).await;
    let secret = &secret[0];
    assert_eq!(
        secret.body["metadata"]["ownerReferences"][0]["uid"],
        "uid-1"
    );
    assert_eq!(
        secret.body["metadata"]["ownerReferences"][0]["controller"],
        true
    );
    assert_eq!(
        secret.body["data"]["token"].as_str().map(str::len),
        Some(88),
        "base64 of 64 hex chars"
    );

    assert_eq!(pvc.content_type, "application/apply-patch+yaml");
    assert!(
        pvc.query.contains("fieldManager=kube-harness-operator")
            && pvc.query.contains("force=true"),
        "{}",
        pvc.query
    );
    assert_eq!(pvc.body["spec"]["resources"]["requests"]["storage"], "1Gi");

    let egress = np.body["spec"]["egress"].as_array().unwrap();
    assert_eq!(
        egress.len(),
        2,
        "network off: DNS and the session log only: {egress:?}"
    );
    assert!(
        egress.iter().all(|r| r.get("to").is_some()),
        "no allow-all egress rule"
    );
    // Ingress: the operator, and (spec.access unset) the session namespace's labelled clients.
    let from = &np.body["spec"]["ingress"][0]["from"];
    assert_eq!(from.as_array().unwrap().len(), 2, "{from}");
    assert_eq!(
        from[1],
        json!({"podSelector": {"matchLabels": {"kubeharness.dev/client": "true"}}})
    );

    assert_eq!(svc.content_type, "application/apply-patch+yaml");
    assert_eq!(svc.body["spec"]["type"], "ClusterIP");
    assert_eq!(
        svc.body["spec"]["clusterIP"], "None",
        "headless: no virtual IP to allocate"
    );
    assert_eq!(
        svc.body["spec"]["selector"],
        json!({"kubeharness.dev/session": "demo", "kubeharness.dev/role": "worker",
               "app.kubernetes.io/managed-by": "kube-harness-operator"})
    );
    assert_eq!(svc.body["spec"]["ports"][0]["port"], 8080);
    assert_eq!(
        svc.body["metadata"]["ownerReferences"][0]["kind"],
        "HarnessSession"
    );

    let pod = create_worker_pod(&mut server).await;
    let spec = &pod.body["spec"];
    assert_eq!(spec["automountServiceAccountToken"], false);
    assert_eq!(spec["enableServiceLinks"], false);
    assert_eq!(spec["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        spec["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let c = &spec["containers"][0];
    assert_eq!(c["image"], "example.org/kh:1");
    assert_eq!(c["securityContext"]["readOnlyRootFilesystem"], true);
    assert_eq!(c["securityContext"]["allowPrivilegeEscalation"], false);
    assert_eq!(c["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
    let args: Vec<&str> = c["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(args.contains(&"--deny-command=shutdown"), "{args:?}");
    assert!(args.contains(&"--network=false"), "{args:?}");
    let mounts: Vec<&str> = c["volumeMounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["mountPath"].as_str().unwrap())
        .collect();
    for path in ["/session", "/artifacts", "/persistent", "/.agents", "/tmp"] {
        assert!(mounts.contains(&path), "{path} not mounted: {mounts:?}");
    }

    let status = patch_session_status(&mut server).await;
    assert_eq!(status.content_type, "application/apply-patch+yaml");
    assert_eq!(
        status.body["metadata"]["resourceVersion"], "10",
        "conditioned on the object the reconcile read"
    );
    let st = &status.body["status"];
    assert_eq!(st["phase"], "Provisioning");
    assert_eq!(st["observedGeneration"], 3);
    assert_eq!(condition(st, "Ready")["status"], "False");
    assert_eq!(condition(st, "Ready")["reason"], reasons::WORKER_STARTING);
    assert_eq!(
        condition(st, "Escalated")["reason"],
        reasons::NO_ESCALATION_TIER
    );
    assert!(condition(st, "Escalated")["message"]
        .as_str()
        .unwrap()
        .contains("126"));
    assert_eq!(condition(st, "Ready")["observedGeneration"], 3);
    assert!(condition(st, "Ready")["lastTransitionTime"].is_string());

    // The first status is the initial state, not a change: no Event (events::changed). A request
    // the mock does not answer would hold the reconcile past the timeout.
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("the reconcile publishes no Event for the initial conditions")
        .unwrap()
        .expect("reconcile");
}

#[tokio::test]
async fn a_worker_pod_refused_by_the_namespaces_quota_is_a_condition_with_its_message() {
    let (client, mut server) = super::support::client();
    let base = format!("/api/v1/namespaces/{NS}");
    let (run, _) = a_cold_start_up_to_its_pod(client, &mut server).await;
    let quota = "pods \"demo-worker\" is forbidden: exceeded quota: team-quota, requested: pods=1, used: pods=0, limited: pods=0";
    expect(&mut server, "POST", &format!("{base}/pods"), 403, json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Forbidden", "code": 403,
        "message": quota
    }))
    .await;
    let written = patch_session_status(&mut server).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Pending");
    for type_ in ["Ready", "Degraded"] {
        let c = condition(status, type_);
        assert_eq!(c["reason"], reasons::QUOTA_EXCEEDED, "{c}");
        assert!(c["message"].as_str().unwrap().contains(quota), "{c}");
    }
    // Ready False and Degraded True: both Warning Events, with the quota's reason.
    for event in drain_events(&mut server, NS, 2).await {
        assert_eq!(
            (event["type"].as_str(), event["reason"].as_str()),
            (Some("Warning"), Some(reasons::QUOTA_EXCEEDED)),
            "{event}"
        );
    }
    let action = tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("the reconcile ends")
        .unwrap()
        .expect("a refusal is reported, not an error");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10)),
        "freed quota sends no event: asked again"
    );
}

/// Security model B (issue 30): a worker pod the API server refuses as invalid (422, a skill
/// path the checks let through) is a `WorkerFailing` condition saying `InvalidSpec` and the API
/// server's message (Failed, Stalled), not an error the reconcile retries forever.
#[tokio::test]
async fn a_worker_pod_refused_as_invalid_is_an_invalid_spec_condition() {
    let (client, mut server) = super::support::client();
    let base = format!("/api/v1/namespaces/{NS}");
    let (run, _) = a_cold_start_up_to_its_pod(client, &mut server).await;
    let invalid = "Pod \"demo-worker\" is invalid: spec.volumes[3].configMap.items[0].path: Invalid value: \"..data/SKILL.md\": must not start with '..'";
    expect(&mut server, "POST", &format!("{base}/pods"), 422, json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
        "message": invalid
    }))
    .await;
    let written = patch_session_status(&mut server).await;
    let status = &written.body["status"];
    assert_eq!(status["phase"], "Failed");
    for type_ in ["Ready", "Degraded", "Stalled"] {
        let c = condition(status, type_);
        assert_eq!(c["reason"], reasons::WORKER_FAILING, "{c}");
        let message = c["message"].as_str().unwrap();
        assert!(message.contains(reasons::INVALID_SPEC), "{c}");
        assert!(message.contains(invalid), "{c}");
    }
    drain_events(&mut server, NS, 2).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("the reconcile ends")
        .unwrap()
        .expect("an invalid pod is reported, not an error");
}

/// Security model T4 (worker uid): a session that adopted a warm pod keeps its claim
/// (`kh-warm-abc-workspace`); its next worker pod runs as the warm pod's uid, taken from the
/// claim's name. The claim's `kubeharness.dev/uid` annotation, which the tenant may set to `-7`,
/// `65532` or another session's uid, is not even read: the next request after the children is
/// the pod's create, never a read of the claim.
#[tokio::test]
async fn an_adopted_claims_next_worker_runs_as_the_warm_pods_uid_never_the_claims_annotation() {
    use kube_harness_operator::warm::objects;
    let (client, mut server) = super::support::client();
    let mut status = ready_status();
    status["workerPod"] = json!("kh-warm-abc");
    status["workspaceClaim"] = json!("kh-warm-abc-workspace");
    let obj = session_obj(json!({
        "metadata": {"finalizers": ["kubeharness.dev/cleanup"], "generation": 3},
        "status": status,
    }));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    read_tier0(&mut server).await;
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/kh-warm-abc"),
        404,
        not_found("pods", "kh-warm-abc"),
    )
    .await;
    expect_all(
        &mut server,
        vec![
            Want::new(
                "POST",
                format!("/api/v1/namespaces/{NS}/secrets"),
                201,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-token", "namespace": NS}}),
            ),
            apply_worker_policy(),
            apply_worker_service(),
        ],
    )
    .await;
    let pod = create_worker_pod(&mut server).await;
    let spec = &pod.body["spec"];
    let want = objects::pod_uid("kh-warm-abc");
    assert_eq!(spec["securityContext"]["runAsUser"].as_i64(), Some(want));
    assert_eq!(
        spec["containers"][0]["securityContext"]["runAsUser"].as_i64(),
        Some(want)
    );
    let claims: Vec<&str> = spec["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["persistentVolumeClaim"]["claimName"].as_str())
        .collect();
    assert_eq!(claims, ["kh-warm-abc-workspace"]);
    run.abort();
}

#[tokio::test]
async fn a_missing_worker_tier_is_reported_degraded_without_creating_anything() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(
        json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"]}, "spec": {"workerTier": "gone"}}),
    );
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    expect(
        &mut server,
        "GET",
        "/apis/kubeharness.dev/v1alpha1/sandboxtiers/gone",
        404,
        not_found("sandboxtiers", "gone"),
    )
    .await;
    let status = patch_session_status(&mut server).await;
    let st = &status.body["status"];
    assert_eq!(st["phase"], "Pending");
    assert_eq!(condition(st, "Degraded")["status"], "True");
    assert_eq!(
        condition(st, "Degraded")["reason"],
        reasons::WORKER_TIER_NOT_FOUND
    );
    let events = drain_events(&mut server, NS, 2).await;
    assert!(events.iter().any(|e| e["type"] == "Warning"), "{events:?}");
    run.await.unwrap().expect("reconcile");
}

#[tokio::test]
async fn deleting_a_session_stops_its_worker_then_drops_the_finalizer() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(
        json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"], "deletionTimestamp": "2026-11-30T10:00:00Z"}}),
    );
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker"}}),
    )
    .await;
    // Its Tier-1 pods, in the operator's namespace, found by label and deleted with their Secrets.
    let list = expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [
            {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t1-abc", "namespace": "team-a"}}
        ]}),
    )
    .await;
    assert!(
        list.query
            .contains("kubeharness.dev%2Fsession-namespace%3Dteam-a")
            && list.query.contains("kubeharness.dev%2Fsession%3Ddemo"),
        "{}",
        list.query
    );
    expect(
        &mut server,
        "DELETE",
        "/api/v1/namespaces/team-a/pods/t1-abc",
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t1-abc"}}),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        "/api/v1/namespaces/team-a/secrets/t1-abc",
        404,
        not_found("secrets", "t1-abc"),
    )
    .await;
    // Its own children by name, not left to the garbage collector.
    super::support::expect_children_deleted(&mut server, NS, 200).await;
    drain_events(&mut server, NS, 1).await;
    let fin = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(json!({}))),
    )
    .await;
    assert!(fin.content_type.contains("json-patch"));
    assert!(fin.body.to_string().contains("remove"), "{}", fin.body);
    run.await.unwrap().expect("reconcile");
}

/// A session escalating to `rust`, with the operator's tier API configured.
/// `events`: how many conditions change (one Event each).
async fn escalating_reconcile(
    escalated: Option<(&str, &str)>,
    tier1_pods: Value,
    events: usize,
) -> (Value, Value, Vec<Value>) {
    let (client, mut server) = super::support::client();
    let mut extra = json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"]}, "spec": {"escalation": {"tier": "rust"}}});
    // A session whose token Secret the operator made (its uid recorded): read back, not refused.
    extra["status"] = json!({"tokenSecret": "demo-token", "tokenSecretUid": "secret-uid-1"});
    if let Some((status, reason)) = escalated {
        extra["status"]["conditions"] = json!([{"type": "Escalated", "status": status, "reason": reason,
            "message": "earlier", "lastTransitionTime": "2026-01-01T00:00:00Z"}]);
    }
    let obj = session_obj(extra);
    let config = OperatorConfig {
        tier_api_url: Some("http://kh-operator.kube-harness.svc:8081".into()),
        ..OperatorConfig::for_namespace("kube-harness")
    };
    let run = tokio::spawn(session::reconcile(
        Arc::new(obj),
        Arc::new(Context::new(client, config)),
    ));
    read_tier0(&mut server).await;
    expect(&mut server, "GET", "/apis/kubeharness.dev/v1alpha1/sandboxtiers/rust", 200, json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "rust", "uid": "t1", "generation": 1},
        "spec": {"namespaceSelector": {}, "level": 2, "template": {"image": "rust:1"}, "capabilities": ["build-toolchain"]}
    })).await;
    let list = expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        tier1_pods,
    )
    .await;
    assert!(
        list.query.contains("kubeharness.dev%2Fsession%3Ddemo"),
        "{}",
        list.query
    );
    worker_pod_absent(&mut server).await;
    let (_, _, np, _) = make_children(&mut server, existing_token_secret(NS, "demo-token")).await;
    let pod = create_worker_pod(&mut server).await;
    let args = pod.body["spec"]["containers"][0]["args"].clone();
    let status = patch_session_status(&mut server).await;
    let events = drain_events(&mut server, NS, events).await;
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("the reconcile waits for no further request")
        .unwrap()
        .expect("reconcile");
    let np_egress = np.body["spec"]["egress"].clone();
    assert_eq!(
        np_egress.as_array().unwrap().len(),
        4,
        "tier API and Tier-1 pods reachable: {np_egress}"
    );
    let joined: Vec<&str> = args
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert!(
        joined.windows(2).any(|w| w == ["--escalation", "pod"]),
        "{joined:?}"
    );
    (status.body["status"].clone(), np_egress, events)
}

#[tokio::test]
async fn a_serving_tier1_pod_makes_the_session_escalated_on_its_level() {
    let ready = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": [{
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "t1-abc", "namespace": "team-a"},
        "status": {"phase": "Running", "podIP": "10.0.0.5", "conditions": [{"type": "Ready", "status": "True"}]}
    }]});
    let (st, _, events) = escalating_reconcile(None, ready, 1).await;
    assert_eq!(condition(&st, "Escalated")["status"], "True");
    assert_eq!(condition(&st, "Escalated")["reason"], reasons::TIER1_READY);
    assert_eq!(
        st["currentTier"], 2,
        "the tier's level while its pod serves"
    );
    assert!(
        events.iter().any(|e| e["reason"] == reasons::TIER1_READY),
        "{events:?}"
    );
}

#[tokio::test]
async fn a_failed_escalation_keeps_its_reason_after_the_pod_is_gone() {
    let none = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []});
    let (st, _, _) =
        escalating_reconcile(Some(("False", reasons::TIER1_FAILED)), none.clone(), 0).await;
    assert_eq!(condition(&st, "Escalated")["reason"], reasons::TIER1_FAILED);
    assert_eq!(condition(&st, "Escalated")["message"], "earlier");
    // A pod that served and is gone: the turn ended.
    let (st, _, _) =
        escalating_reconcile(Some(("True", reasons::TIER1_READY)), none.clone(), 1).await;
    assert_eq!(
        (
            condition(&st, "Escalated")["status"].as_str(),
            condition(&st, "Escalated")["reason"].as_str()
        ),
        (Some("False"), Some(reasons::TURN_ENDED))
    );
    // Nothing escalated yet: available, not refused.
    let (st, _, _) = escalating_reconcile(None, none, 0).await;
    assert_eq!(
        condition(&st, "Escalated")["reason"],
        reasons::TIER1_AVAILABLE
    );
    assert!(!condition(&st, "Escalated")["message"]
        .as_str()
        .unwrap()
        .contains("126"));
}

#[tokio::test]
async fn a_status_write_conflict_recomputes_soon_without_backoff() {
    let (client, _server) = super::support::client();
    let ctx = context(client);
    let status: kube::core::Status = serde_json::from_value(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409,
        "message": "Operation cannot be fulfilled on harnesssessions.kubeharness.dev \"demo\": the object has been modified"
    }))
    .unwrap();
    let conflict = kube_harness_operator::Error::Finalizer(Box::new(
        kube::runtime::finalizer::Error::ApplyFailed(kube_harness_operator::Error::Kube(
            kube::Error::Api(Box::new(status)),
        )),
    ));
    // The finalizer patch's `test` fails when a second reconcile started from a cached copy
    // that does not show the finalizer another one just added.
    let stale: kube::core::Status = serde_json::from_value(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422,
        "message": "the server rejected our request due to an error in our request"
    }))
    .unwrap();
    let stale = kube_harness_operator::Error::Finalizer(Box::new(
        kube::runtime::finalizer::Error::AddFinalizer(kube::Error::Api(Box::new(stale))),
    ));
    let obj = Arc::new(session_obj(json!({})));
    for error in [&conflict, &stale, &conflict] {
        assert_eq!(
            session::error_policy(obj.clone(), error, ctx.clone()),
            kube::runtime::controller::Action::requeue(std::time::Duration::from_millis(200))
        );
    }
    // Any other failure backs off: 1 s, then 2 s.
    let other = kube_harness_operator::Error::MissingField("x");
    let first = session::error_policy(obj.clone(), &other, ctx.clone());
    let second = session::error_policy(obj, &other, ctx.clone());
    assert_eq!(
        (first, second),
        (
            kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1)),
            kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(2))
        )
    );
    assert!(ctx.metrics.encode().contains("error=\"conflict\"} 3"));
}

#[tokio::test]
async fn deleting_a_session_with_cascade_orphan_keeps_its_children() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(
        json!({"metadata": {"finalizers": ["orphan", "kubeharness.dev/cleanup"], "deletionTimestamp": "2026-11-30T10:00:00Z"}}),
    );
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        404,
        not_found("pods", "demo-worker"),
    )
    .await;
    expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
    )
    .await;
    // No DELETE of the Service, policy, Secret or PVC: the next request is the Event.
    let events = drain_events(&mut server, NS, 1).await;
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap_or_default()
            .contains("kept"),
        "{events:?}"
    );
    expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(json!({}))),
    )
    .await;
    run.await.unwrap().expect("reconcile");
}

/// A Ready session's status, as an earlier reconcile left it (worker `demo-worker`).
fn ready_status() -> Value {
    let c = |type_: &str, status: &str, reason: &str| {
        json!({"type": type_, "status": status, "reason": reason, "message": "earlier",
            "lastTransitionTime": "2026-11-30T10:00:00Z", "observedGeneration": 3})
    };
    json!({
        "phase": "Ready", "observedGeneration": 3, "workerPod": "demo-worker",
        "workspaceClaim": "demo-workspace", "tokenSecret": "demo-token",
        "workerPodUid": "pod-uid-1", "tokenSecretUid": "secret-uid-1",
        "conditions": [
            c("Ready", "True", reasons::WORKER_READY),
            c("Reconciling", "False", reasons::RECONCILED),
            c("Stalled", "False", reasons::AS_EXPECTED),
            c("Hibernated", "False", reasons::AWAKE),
            c("Escalated", "False", reasons::NO_ESCALATION_TIER),
            c("Degraded", "False", reasons::AS_EXPECTED),
        ]
    })
}

/// The worker pod looked up and found (running).
async fn worker_pod_present(server: &mut Handle) {
    expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS,
                "uid": "pod-uid-1", "ownerReferences": super::support::owned_by_demo()},
            "status": super::support::running_ready_on_loopback()}),
    )
    .await;
}

#[tokio::test]
async fn spec_suspend_deletes_the_worker_keeps_the_workspace_and_reports_reconciling_until_it_is_gone(
) {
    let (client, mut server) = super::support::client();
    let obj = session_obj(json!({
        "metadata": {"finalizers": ["kubeharness.dev/cleanup"], "generation": 4},
        "spec": {"suspend": true},
        "status": ready_status(),
    }));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    read_tier0(&mut server).await;
    worker_pod_present(&mut server).await;
    // The token Secret (read back: it exists), the workspace PVC kept, the NetworkPolicy and the
    // Service: all still applied.
    let (_, pvc, _, _) = make_children(
        &mut server,
        vec![Want::new(
            "POST",
            format!("/api/v1/namespaces/{NS}/secrets"),
            201,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-token", "namespace": NS}}),
        )],
    )
    .await;
    assert_eq!(pvc.body["metadata"]["name"], "demo-workspace");
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker"}}),
    )
    .await;
    let written = patch_session_status(&mut server).await;
    let st = &written.body["status"];
    assert_eq!(st["phase"], "Hibernated");
    assert_eq!(st["observedGeneration"], 4);
    assert!(st.get("workerPod").is_none(), "{st}");
    let is = |type_: &str, status: &str, reason: &str| {
        let c = condition(st, type_);
        assert_eq!(
            (c["status"].as_str(), c["reason"].as_str()),
            (Some(status), Some(reason)),
            "{c}"
        );
        assert_eq!(c["observedGeneration"], 4, "{c}");
    };
    is("Ready", "False", reasons::SUSPENDED);
    is("Hibernated", "True", reasons::SUSPENDED);
    // The pod is still terminating: kstatus reads InProgress until its deletion comes back.
    is("Reconciling", "True", reasons::HIBERNATING);
    is("Stalled", "False", reasons::AS_EXPECTED);
    // Ready and Hibernated changed: two Normal Events (Reconciling and Stalled make none).
    for event in drain_events(&mut server, NS, 2).await {
        assert_eq!(event["type"], "Normal", "{event}");
        assert_eq!(event["reason"], reasons::SUSPENDED, "{event}");
    }
    let action = tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
    assert_eq!(
        action,
        kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(10))
    );
}

#[tokio::test]
async fn an_expired_session_releases_its_pods_and_workspace_and_is_kept() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(json!({
        "metadata": {"finalizers": ["kubeharness.dev/cleanup"], "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"lifetime": {"ttlSeconds": 60}},
        "status": ready_status(),
    }));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    let note = drain_events(&mut server, NS, 1).await;
    assert_eq!(note[0]["reason"], "TTLExpired", "{}", note[0]);
    worker_pod_present(&mut server).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker"}}),
    )
    .await;
    // Its Tier-1 pods, found by label (none left).
    expect(
        &mut server,
        "GET",
        "/api/v1/namespaces/team-a/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []}),
    )
    .await;
    let claim = format!("/api/v1/namespaces/{NS}/persistentvolumeclaims/demo-workspace");
    expect(&mut server, "GET", &claim, 200,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "demo-workspace", "namespace": NS}})).await;
    expect(
        &mut server,
        "DELETE",
        &claim,
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
    .await;
    // No DELETE of the session itself: the next request is its status.
    let written = patch_session_status(&mut server).await;
    let st = &written.body["status"];
    assert_eq!(st["phase"], "Expired");
    assert!(
        st.get("workerPod").is_none() && st.get("address").is_none(),
        "{st}"
    );
    let c = |type_: &str| {
        let c = condition(st, type_);
        (
            c["status"].as_str().unwrap().to_string(),
            c["reason"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(c("Ready"), ("False".into(), reasons::EXPIRED.into()));
    assert_eq!(c("Reconciling"), ("True".into(), reasons::EXPIRING.into()));
    assert_eq!(c("Stalled"), ("False".into(), reasons::AS_EXPECTED.into()));
    let ready = drain_events(&mut server, NS, 1).await;
    assert_eq!(
        (ready[0]["type"].as_str(), ready[0]["reason"].as_str()),
        (Some("Normal"), Some(reasons::EXPIRED))
    );
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
}

#[tokio::test]
async fn an_expired_session_with_ttl_action_delete_is_deleted() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(json!({
        "metadata": {"finalizers": ["kubeharness.dev/cleanup"], "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"lifetime": {"ttlSeconds": 60, "ttlAction": "Delete"}},
        "status": ready_status(),
    }));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    drain_events(&mut server, NS, 1).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(json!({}))),
    )
    .await;
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
}

/// A session whose TTL (ttlAction Delete) passed before its first reconcile: the finalizer is
/// added first, so that its cleanup stops the worker, and only then is the session deleted.
#[tokio::test]
async fn a_session_the_ttl_deletes_before_it_has_the_finalizer_gets_it_first() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(json!({
        "metadata": {"creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"lifetime": {"ttlSeconds": 60, "ttlAction": "Delete"}},
    }));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client)));
    let seen = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(
            json!({"metadata": {"finalizers": ["kubeharness.dev/cleanup"], "resourceVersion": "11"}})
        )),
    )
    .await;
    assert!(
        seen.body.to_string().contains("kubeharness.dev/cleanup"),
        "{}",
        seen.body
    );
    drain_events(&mut server, NS, 1).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        json!(session_obj(json!({}))),
    )
    .await;
    tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
}
