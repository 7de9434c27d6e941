//! Issue 30: what a tenant with `edit` in its own namespace did to the operator, against a mocked
//! API server that asserts every request. Each test names the failure it holds; each failed on
//! the old code (a130265), as its comment says.

use super::support::{
    condition, drain_events, existing_token_secret, expect, expect_all, not_found, owned_by_demo,
    Handle, Seen, Want,
};
use kube::runtime::controller::Action;
use kube_harness_crds::condition::reasons;
use kube_harness_crds::HarnessSession;
use kube_harness_operator::{session, Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;

const NS: &str = "team-a";

fn session_obj(name: &str, extra: Value) -> HarnessSession {
    let mut v = json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": name, "namespace": NS, "uid": "uid-1", "generation": 3,
                     "resourceVersion": "10", "finalizers": ["kubeharness.dev/cleanup"]},
        "spec": {},
    });
    for (k, val) in extra.as_object().unwrap() {
        for (k2, v2) in val.as_object().unwrap() {
            v[k][k2] = v2.clone();
        }
    }
    serde_json::from_value(v).unwrap()
}

fn tier(name: &str, level: u8, selector: Option<Value>) -> Value {
    let mut spec = json!({"level": level, "template": {"image": "example.org/kh:1"},
                          "capabilities": if level == 0 { json!(["python"]) } else { json!(["build-toolchain"]) }});
    if let Some(s) = selector {
        spec["namespaceSelector"] = s;
    }
    json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
           "metadata": {"name": name, "uid": format!("{name}-uid"), "generation": 1}, "spec": spec})
}

fn context(client: kube::Client, worker_port: u16) -> Arc<Context> {
    let config = OperatorConfig {
        worker_port,
        tier_api_url: Some("http://kh-operator.kube-harness.svc:8081".into()),
        ..OperatorConfig::for_namespace("kube-harness")
    };
    Arc::new(Context::new(client, config))
}

async fn get(server: &mut Handle, path: &str, reply: Option<Value>) {
    match reply {
        Some(r) => expect(server, "GET", path, 200, r).await,
        None => expect(server, "GET", path, 404, not_found("x", "y")).await,
    };
}

const TIERS: &str = "/apis/kubeharness.dev/v1alpha1/sandboxtiers";

fn children(secret: Vec<Want>, name: &str) -> Vec<Want> {
    let mut wants = secret;
    let apply = |prefix: &str, plural: &str, n: String| {
        Want::new(
            "PATCH",
            format!("{prefix}/namespaces/{NS}/{plural}/{n}"),
            200,
            json!({"metadata": {"name": n}}),
        )
    };
    wants.push(apply(
        "/api/v1",
        "persistentvolumeclaims",
        format!("{name}-workspace"),
    ));
    wants.push(apply(
        "/apis/networking.k8s.io/v1",
        "networkpolicies",
        format!("{name}-worker"),
    ));
    wants.push(apply("/api/v1", "services", format!("{name}-worker")));
    wants
}

async fn status_patch(server: &mut Handle, name: &str) -> Seen {
    expect(
        server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/{name}/status"),
        200,
        json!(session_obj(name, json!({}))),
    )
    .await
}

async fn done(run: tokio::task::JoinHandle<kube_harness_operator::Result<Action>>) -> Action {
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("a condition, not an error")
}

/// Item 4: a tenant deleted its session's worker pod and made one of the same name, labels,
/// owner reference and hash; the operator marked the session Ready, polled the fake with the
/// session's token and wrote its figures into the status. Now a pod whose uid is not the one the
/// operator recorded is deleted (exactly that uid), never asked, and the session waits for its
/// own. Failed on the old code: no DELETE came; the session was written Ready after a poll.
#[tokio::test]
async fn a_pod_of_the_workers_name_the_operator_did_not_make_is_deleted_and_never_asked() {
    let (client, mut server) = super::support::client();
    // Where the fake "worker" listens: it must never be asked.
    let fake = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    fake.set_nonblocking(true).unwrap();
    let ctx = context(client, fake.local_addr().unwrap().port());
    let obj = session_obj(
        "demo",
        json!({"status": {"phase": "Ready", "workerPod": "demo-worker", "workerPodUid": "pod-uid-1",
                          "tokenSecret": "demo-token", "tokenSecretUid": "secret-uid-1",
                          "conditions": [{"type": "Ready", "status": "True", "reason": "WorkerReady",
                              "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}),
    );
    let run = tokio::spawn(session::reconcile(Arc::new(obj), ctx));
    get(
        &mut server,
        &format!("{TIERS}/tier0"),
        Some(tier("tier0", 0, Some(json!({})))),
    )
    .await;
    let desired = kube_harness_operator::session::resources::worker_pod(
        &session_obj("demo", json!({})),
        &serde_json::from_value(tier("tier0", 0, Some(json!({})))["spec"].clone()).unwrap(),
        &OperatorConfig::for_namespace("kube-harness"),
        &[],
    );
    // The fake: the operator's own pod as it would build it, the session's owner reference, a
    // Ready status on loopback; only its uid is not the recorded one.
    let mut fake_pod = serde_json::to_value(&desired).unwrap();
    fake_pod["metadata"]["uid"] = json!("fake-uid");
    fake_pod["metadata"]["ownerReferences"] = owned_by_demo();
    fake_pod["status"] = serde_json::to_value(super::support::running_ready_on_loopback()).unwrap();
    get(
        &mut server,
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        Some(fake_pod),
    )
    .await;
    let deleted = expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker"}}),
    )
    .await;
    assert_eq!(
        deleted.body["preconditions"]["uid"], "fake-uid",
        "exactly the pod seen: {}",
        deleted.body
    );
    let warned = drain_events(&mut server, NS, 1).await;
    assert_eq!(warned[0]["reason"], reasons::WORKER_POD_NOT_OWNED);
    assert_eq!(warned[0]["type"], "Warning");
    expect_all(
        &mut server,
        children(existing_token_secret(NS, "demo-token"), "demo"),
    )
    .await;
    // No pod is created while the fake holds the name: straight to the status.
    let written = status_patch(&mut server, "demo").await;
    let st = &written.body["status"];
    assert_eq!(st["phase"], "Provisioning", "{st}");
    assert!(
        st.get("workerEndpoint").is_none() && st.get("usage").is_none(),
        "{st}"
    );
    assert!(st.get("workerPodUid").is_none(), "{st}");
    let ready = condition(st, "Ready");
    assert_eq!(ready["status"], "False");
    assert!(
        ready["message"]
            .as_str()
            .unwrap()
            .contains(reasons::WORKER_POD_NOT_OWNED),
        "{ready}"
    );
    drain_events(&mut server, NS, 1).await;
    assert_eq!(
        done(run).await,
        Action::requeue(Duration::from_secs(10)),
        "looked at again soon (the fake's deletion is also an event)"
    );
    assert!(
        fake.accept().is_err(),
        "the fake was asked with the session's token"
    );
}

/// The Escalated condition a reconcile writes when the escalation tier is answered `rust`.
async fn escalated_with(rust: Option<Value>, ns_read: Option<Value>, granted: bool) -> Value {
    let (client, mut server) = super::support::client();
    let obj = session_obj("demo", json!({"spec": {"escalation": {"tier": "rust"}}}));
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client, 8080)));
    get(
        &mut server,
        &format!("{TIERS}/tier0"),
        Some(tier("tier0", 0, Some(json!({})))),
    )
    .await;
    get(&mut server, &format!("{TIERS}/rust"), rust).await;
    if let Some(ns) = ns_read {
        get(&mut server, &format!("/api/v1/namespaces/{NS}"), Some(ns)).await;
    }
    if granted {
        // A usable tier: the session's Tier-1 pods are listed for the condition.
        let list = json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": []});
        expect(
            &mut server,
            "GET",
            &format!("/api/v1/namespaces/{NS}/pods"),
            200,
            list,
        )
        .await;
    }
    get(
        &mut server,
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        None,
    )
    .await;
    let secret = Want::new(
        "POST",
        format!("/api/v1/namespaces/{NS}/secrets"),
        201,
        json!({"metadata": {"name": "demo-token", "uid": "secret-uid-1"}}),
    );
    expect_all(&mut server, children(vec![secret], "demo")).await;
    expect(
        &mut server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/pods"),
        201,
        json!({"metadata": {"name": "demo-worker", "uid": "pod-uid-1"}}),
    )
    .await;
    let written = status_patch(&mut server, "demo").await;
    done(run).await;
    let st = &written.body["status"];
    assert_eq!(
        st["tokenSecretUid"], "secret-uid-1",
        "the Secret it made is recorded"
    );
    assert_eq!(
        st["workerPodUid"], "pod-uid-1",
        "the pod it made is recorded"
    );
    condition(st, "Escalated").clone()
}

/// Item 5: every tenant could use every SandboxTier, and could tell which exist from the
/// condition (EscalationTierNotFound against Tier1Available). Now a tier without a grant for the
/// namespace (no namespaceSelector, or one that does not select it) reads exactly as a missing
/// one. Failed on the old code: the ungranted tier was Tier1Available.
#[tokio::test]
async fn a_tier_not_granted_to_the_namespace_reads_exactly_as_a_missing_one() {
    let missing = escalated_with(None, None, false).await;
    let ungranted = escalated_with(Some(tier("rust", 1, None)), None, false).await;
    let elsewhere = escalated_with(
        Some(tier(
            "rust",
            1,
            Some(json!({"matchLabels": {"kubernetes.io/metadata.name": "team-b"}})),
        )),
        Some(json!({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": NS, "labels": {"kubernetes.io/metadata.name": NS}}})),
        false,
    )
    .await;
    let granted = escalated_with(Some(tier("rust", 1, Some(json!({})))), None, true).await;
    let said = |c: &Value| {
        (
            c["status"].clone(),
            c["reason"].clone(),
            c["message"].clone(),
        )
    };
    assert_eq!(missing["reason"], reasons::ESCALATION_TIER_NOT_FOUND);
    assert_eq!(said(&ungranted), said(&missing), "no selector: none");
    assert_eq!(said(&elsewhere), said(&missing), "another namespace's");
    assert_eq!(granted["reason"], reasons::TIER1_AVAILABLE);
}

/// Item 5, the worker tier: one the namespace is not granted reads as a missing one.
#[tokio::test]
async fn a_worker_tier_not_granted_reads_as_a_missing_one() {
    let mut said = Vec::new();
    for reply in [None, Some(tier("tier0", 0, None))] {
        let (client, mut server) = super::support::client();
        let obj = session_obj("demo", json!({}));
        let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client, 8080)));
        get(&mut server, &format!("{TIERS}/tier0"), reply).await;
        let written = status_patch(&mut server, "demo").await;
        drain_events(&mut server, NS, 2).await;
        done(run).await;
        let c = condition(&written.body["status"], "Ready").clone();
        said.push((c["reason"].clone(), c["message"].clone()));
    }
    assert_eq!(said[0].0, reasons::WORKER_TIER_NOT_FOUND);
    assert_eq!(said[0], said[1]);
}

/// Item 7: a spec stored before the CRD's rules (or under a CRD without them) that names a flag,
/// a path out of its mount or a tier path: a condition naming each field, nothing created, no
/// error loop. Failed on the old code: the worker pod was created with `--deny-command
/// --network=true` and the skills path `../session` (an invalid pod and an error loop).
#[tokio::test]
async fn a_spec_the_crd_would_refuse_today_is_a_condition_and_makes_nothing() {
    let (client, mut server) = super::support::client();
    let obj = session_obj(
        "demo",
        json!({"spec": {"policy": {"denyCommands": ["--network=true"]},
                        "escalation": {"tier": "../sandboxtiers/x"},
                        "workspace": {"skills": [{"configMap": "s", "path": "../session"}]}}}),
    );
    let run = tokio::spawn(session::reconcile(Arc::new(obj), context(client, 8080)));
    let written = status_patch(&mut server, "demo").await;
    let st = &written.body["status"];
    assert_eq!(st["phase"], "Failed");
    for type_ in ["Ready", "Degraded", "Stalled"] {
        assert_eq!(
            condition(st, type_)["reason"],
            reasons::INVALID_SPEC,
            "{st}"
        );
    }
    let message = condition(st, "Ready")["message"]
        .as_str()
        .unwrap()
        .to_string();
    for field in [
        "policy.denyCommands[0]",
        "escalation.tier",
        "workspace.skills[0].path",
    ] {
        assert!(message.contains(field), "{field}: {message}");
    }
    drain_events(&mut server, NS, 2).await;
    assert_eq!(
        done(run).await,
        Action::await_change(),
        "until the spec changes"
    );
}

/// Item 7: a 70-character session name was never reconciled, and its finalizer failed on delete
/// for good (a label selector with the name is refused), blocking its namespace's deletion. Now
/// it is InvalidSpec, and its cleanup deletes by name only. Failed on the old code: the cleanup
/// listed Tier-1 pods by a selector the API server refuses (400), again and again.
#[tokio::test]
async fn a_name_too_long_for_a_label_is_a_condition_and_its_cleanup_finishes() {
    let long = "a".repeat(70);
    let (client, mut server) = super::support::client();
    let run = tokio::spawn(session::reconcile(
        Arc::new(session_obj(&long, json!({}))),
        context(client.clone(), 8080),
    ));
    let written = status_patch(&mut server, &long).await;
    assert_eq!(
        condition(&written.body["status"], "Ready")["reason"],
        reasons::INVALID_SPEC
    );
    drain_events(&mut server, NS, 2).await;
    done(run).await;

    let deleting = session_obj(
        &long,
        json!({"metadata": {"deletionTimestamp": "2026-11-30T10:00:00Z"}}),
    );
    let run = tokio::spawn(session::reconcile(
        Arc::new(deleting),
        context(client, 8080),
    ));
    let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    let base = format!("/api/v1/namespaces/{NS}");
    expect(
        &mut server,
        "DELETE",
        &format!("{base}/pods/{long}-worker"),
        200,
        ok.clone(),
    )
    .await;
    let service = kube_harness_operator::labels::worker_service(&long);
    expect(
        &mut server,
        "DELETE",
        &format!("{base}/services/{service}"),
        200,
        ok.clone(),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/{long}-worker"),
        200,
        ok.clone(),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &format!("{base}/secrets/{long}-token"),
        200,
        ok.clone(),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &format!("{base}/persistentvolumeclaims/{long}-workspace"),
        200,
        ok,
    )
    .await;
    drain_events(&mut server, NS, 1).await;
    let fin = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/{long}"),
        200,
        json!(session_obj(&long, json!({}))),
    )
    .await;
    assert!(fin.body.to_string().contains("remove"), "{}", fin.body);
    done(run).await;
}

/// Item 7: a token Secret a tenant made before its session was used as it was (the tenant chose
/// the token). Now a Secret the operator did not make is refused with a condition, and no worker
/// pod mounts it. Failed on the old code: the worker pod was created on the tenant's Secret.
#[tokio::test]
async fn a_token_secret_the_operator_did_not_make_is_refused_with_a_condition() {
    let (client, mut server) = super::support::client();
    let run = tokio::spawn(session::reconcile(
        Arc::new(session_obj("demo", json!({}))),
        context(client, 8080),
    ));
    get(
        &mut server,
        &format!("{TIERS}/tier0"),
        Some(tier("tier0", 0, Some(json!({})))),
    )
    .await;
    get(
        &mut server,
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        None,
    )
    .await;
    let base = format!("/api/v1/namespaces/{NS}");
    let planted = vec![
        Want::new(
            "POST",
            format!("{base}/secrets"),
            409,
            super::support::already_exists("secrets", "demo-token"),
        ),
        Want::new(
            "GET",
            format!("{base}/secrets/demo-token"),
            200,
            json!({"apiVersion": "v1", "kind": "Secret",
                   "metadata": {"name": "demo-token", "uid": "tenants", "creationTimestamp": "2026-01-01T00:00:00Z"},
                   "data": {"token": "Y2hvc2Vu"}}),
        ),
    ];
    expect_all(&mut server, children(planted, "demo")).await;
    let written = status_patch(&mut server, "demo").await;
    let st = &written.body["status"];
    assert_eq!(st["phase"], "Pending");
    let ready = condition(st, "Ready");
    assert_eq!(ready["reason"], reasons::TOKEN_SECRET_REFUSED, "{ready}");
    assert!(ready["message"].as_str().unwrap().contains("demo-token"));
    assert!(st.get("tokenSecretUid").is_none());
    drain_events(&mut server, NS, 2).await;
    assert_eq!(done(run).await, Action::requeue(Duration::from_secs(10)));
}
