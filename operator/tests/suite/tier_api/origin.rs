//! Issue 30: labels, names and the template hash of a Tier-1 pod are a tenant's to forge in its
//! namespace. Only a pod carrying the operator's proof of origin (`kubeharness.dev/origin`, an
//! HMAC of its namespace, name and uid) is claimed or has its endpoint and token handed out; any
//! other is deleted (that uid) with a Warning Event `PodOriginUnproven`.

use super::super::support::{
    drain_events, expect, expect_all, expect_unproven_pod_deleted, origin_key, Want,
};
use super::{
    auth_recorded, auth_with_records, create_record, list_pool, new_turn, ordinary_answer,
    ordinary_recorded, post, ready_status, record_name_taken, record_path, start, t1_pod, tier,
    tier_obj, turn_labels, worker_pod, NS, TOKEN,
};
use kube_harness_crds::condition::reasons;
use kube_harness_operator::origin::ANNOTATION;
use kube_harness_operator::tier1::pod;
use kube_harness_operator::tier1::record;
use serde_json::{json, Value};

/// `pod` as a tenant plants it: the operator's proof of another pod (its real one, whose
/// annotation it can read) copied on its own, which has another uid.
fn planted(mut pod: Value) -> Value {
    let name = pod["metadata"]["name"].as_str().unwrap().to_string();
    pod["metadata"]["uid"] = json!("tenants-uid");
    pod["metadata"]["annotations"][ANNOTATION] =
        json!(origin_key().proof(NS, &name, &format!("uid-{name}")));
    pod
}

fn event_reply() -> Value {
    json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": NS},
           "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "x",
           "reportingInstance": "x", "action": "x", "reason": "x", "type": "Warning"})
}

/// A planted pod with the pool's labels and current template hash, Ready, is never claimed (no
/// patch, no token read): deleted with a Warning Event, and the turn gets an ordinary pod.
#[tokio::test]
async fn a_planted_pool_pod_without_the_operators_proof_is_never_claimed() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, true)).await;
    let hash = pod::template_hash(&tier_obj(2), &super::config());
    let labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                        "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    let fake = planted(t1_pod(
        "t1-aaa",
        labels,
        json!({}),
        ready_status("10.9.9.9"),
        "10",
    ));
    list_pool(&mut server, vec![fake]).await;
    // Instead of a claim patch beside the session read: the planted pod deleted (that uid),
    // and its Event.
    let seen = expect_all(
        &mut server,
        vec![
            Want::new(
                "DELETE",
                format!("/api/v1/namespaces/{NS}/pods/t1-aaa"),
                200,
                json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
            ),
            Want::new(
                "GET",
                format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
                200,
                super::session(None),
            ),
            Want::new(
                "POST",
                format!("/apis/events.k8s.io/v1/namespaces/{NS}/events"),
                201,
                event_reply(),
            ),
        ],
    )
    .await;
    assert_eq!(seen[0].body["preconditions"]["uid"], "tenants-uid");
    assert_eq!(seen[2].body["reason"], reasons::POD_ORIGIN_UNPROVEN);
    assert_eq!(seen[2].body["type"], "Warning");
    assert_eq!(seen[2].body["regarding"]["name"], "t1-aaa");
    let (_, body) = ordinary_answer(&mut server, reply, "slot_unavailable").await;
    assert_eq!(body["source"], "ordinary", "{body}");
    assert_ne!(body["endpoint"], "http://10.9.9.9:8080", "{body}");
}

/// The turn's recorded pod deleted by the tenant and made again under its name (labels and all,
/// Ready): its endpoint and token are never handed out, it is deleted (that uid) with a Warning
/// Event, and the turn is Pending.
#[tokio::test]
async fn a_turn_pod_made_again_under_its_recorded_name_is_never_answered() {
    let (base, mut server) = start().await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let fake = planted(t1_pod(
        &name,
        turn_labels(json!({"kubeharness.dev/tier": "rust"})),
        json!({"kubeharness.dev/tier-level": "1"}),
        ready_status("10.9.9.9"),
        "7",
    ));
    auth_recorded(&mut server, vec![fake], Some(&name), tier(0, false)).await;
    // No token Secret read: the pod is deleted at once.
    expect_unproven_pod_deleted(&mut server, NS, &name).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["phase"].as_str(),
            &body["endpoint"],
            &body["token"],
            body["reason"].as_str()
        ),
        (
            Some("Pending"),
            &Value::Null,
            &Value::Null,
            Some(reasons::POD_ORIGIN_UNPROVEN)
        ),
        "{body}"
    );
}

/// Two opens of one turn race for its ordinary pod: the one whose create is refused (409, the
/// other made it) reads the pod before the other wrote its proof. A pod created a moment ago is
/// read again until the proof arrives: the turn's own pod is answered, never deleted (the
/// Tier-1 e2e `racing_opens_of_one_turn_claim_one_pod` lost its pod this way).
#[tokio::test]
async fn a_racing_open_waits_for_the_proof_of_a_pod_created_a_moment_ago() {
    use super::super::support::{already_exists, expect};
    use super::{create_record, read_record, secret, tier_policy};
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(0, false)).await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    create_record(&mut server, &name).await;
    tier_policy(&mut server).await;
    let secrets = format!("/api/v1/namespaces/{NS}/secrets");
    expect(
        &mut server,
        "POST",
        &secrets,
        201,
        secret(NS, &name, "t1-token"),
    )
    .await;
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    expect(
        &mut server,
        "POST",
        &pods,
        409,
        already_exists("pods", &name),
    )
    .await;
    let mut proven = t1_pod(
        &name,
        turn_labels(json!({"kubeharness.dev/tier": "rust"})),
        json!({"kubeharness.dev/tier-level": "1"}),
        json!({}),
        "1",
    );
    proven["metadata"]["creationTimestamp"] = json!(k8s_openapi::jiff::Timestamp::now()
        .strftime("%Y-%m-%dT%H:%M:%SZ")
        .to_string());
    let mut unproven = proven.clone();
    unproven["metadata"]["annotations"]
        .as_object_mut()
        .unwrap()
        .remove(ANNOTATION);
    let this_pod = format!("{pods}/{name}");
    expect(&mut server, "GET", &this_pod, 200, unproven).await;
    read_record(&mut server, Some(&name)).await;
    // Read again (the other open's proof has landed by now): no DELETE.
    expect(&mut server, "GET", &this_pod, 200, proven).await;
    super::super::support::drain_events(&mut server, NS, 1).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["pod"].as_str(),
            body["phase"].as_str(),
            &body["reason"]
        ),
        (Some(name.as_str()), Some("Pending"), &Value::Null),
        "{body}"
    );
}

/// A turn record lives in the session's (the tenant's) namespace. One the tenant made at the
/// turn's name, naming a pod of its choice and carrying the proof of another record, names no
/// pod: the open that meets it deletes it (that uid only) and records its own.
#[tokio::test]
async fn a_turn_record_the_operator_did_not_make_names_no_pod_and_is_replaced() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let name = record::name(NS, "demo", "turn-1");
    let forged = json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
        "metadata": {"name": name, "namespace": NS, "uid": "tenants-uid", "resourceVersion": "3",
                     "labels": turn_labels(json!({"kubeharness.dev/session-uid": "s-uid"})),
                     "annotations": {ANNOTATION: origin_key().turn_proof(NS, "demo-turn-other", "s-uid")}},
        "spec": {"session": "demo", "turn": "turn-1", "pod": "t1-tenants"}});
    auth_with_records(&mut server, vec![], vec![forged.clone()], tier(0, false)).await;
    worker_pod(&mut server).await;
    record_name_taken(&mut server, forged).await;
    let ok = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"});
    let deleted = expect(&mut server, "DELETE", &record_path(), 200, ok).await;
    assert_eq!(
        deleted.body["preconditions"],
        json!({"uid": "tenants-uid", "resourceVersion": "3"})
    );
    create_record(&mut server, &pod::ordinary_name(NS, "demo", "turn-1")).await;
    let (_, made) = ordinary_recorded(&mut server, None).await;
    drain_events(&mut server, NS, 1).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["pod"], made["metadata"]["name"]);
    assert_ne!(body["pod"], "t1-tenants");
}

/// A record at the turn's name that will not go (a tenant's, held by a finalizer, so the delete
/// only marks it): nothing is recorded and the open answers 503 and makes nothing, rather than
/// serve a turn that nothing records (racing opens would each take a pod).
#[tokio::test]
async fn a_turn_record_held_by_someone_else_that_will_not_go_makes_the_open_503_and_nothing_else() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let name = record::name(NS, "demo", "turn-1");
    let held = json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
        "metadata": {"name": name, "namespace": NS, "uid": "tenants-uid", "resourceVersion": "3",
                     "deletionTimestamp": "2026-01-01T00:00:00Z", "finalizers": ["tenant.example/hold"],
                     "labels": turn_labels(json!({"kubeharness.dev/session-uid": "s-uid"}))},
        "spec": {"session": "demo", "turn": "turn-1", "pod": "t1-tenants"}});
    auth_with_records(&mut server, vec![], vec![held.clone()], tier(0, false)).await;
    worker_pod(&mut server).await;
    record_name_taken(&mut server, held).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(
        (code, body["error"]["code"].as_str()),
        (503, Some("unavailable")),
        "{body}"
    );
    let next =
        tokio::time::timeout(std::time::Duration::from_millis(200), server.next_request()).await;
    assert!(
        next.is_err() || next.unwrap().is_none(),
        "nothing made after the 503"
    );
}
