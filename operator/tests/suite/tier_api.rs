//! The tier API over real HTTP on loopback, against a mocked API server that asserts every request
//! the operator makes, in order: opening ordinary and prepared sandboxes, idempotent repeats, the
//! claim races and misses, failure mapping, ending, and auth.

use super::support::{drain_events, expect, not_found, Handle, Seen};
use kube_harness_crds::condition::reasons;
use kube_harness_crds::SandboxTier;
use kube_harness_operator::tier1::{api, pod, record};
use kube_harness_operator::{Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;

mod origin;
mod turns;

const NS: &str = "team-a";
const OP: &str = "kube-harness";
const TOKEN: &str = "worker-token";

fn config() -> OperatorConfig {
    OperatorConfig {
        tier_api_url: Some("http://kh-operator.kube-harness.svc:8081".into()),
        ..OperatorConfig::for_namespace(OP)
    }
}

/// Serves the tier API on 127.0.0.1 with a mocked Kubernetes API; returns its base URL.
async fn start() -> (String, Handle) {
    let (base, server, _) = start_with_context().await;
    (base, server)
}

/// As [`start`], also returning the Context (for its metrics).
async fn start_with_context() -> (String, Handle, Arc<Context>) {
    let (client, server) = super::support::client();
    let ctx = Arc::new(super::support::with_origin(Context::new(client, config())));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = api::router(ctx.clone());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), server, ctx)
}

fn b64(s: &str) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (c[0] as u32) << 16
            | (*c.get(1).unwrap_or(&0) as u32) << 8
            | *c.get(2).unwrap_or(&0) as u32;
        for i in 0..4 {
            if i <= c.len() {
                out.push(T[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn secret(ns: &str, name: &str, token: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": ns},
           "data": {"token": b64(token)}})
}

fn session(escalated: Option<(&str, &str)>) -> Value {
    let mut v = json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
        "metadata": {"name": "demo", "namespace": NS, "uid": "s-uid", "generation": 2},
        "spec": {"escalation": {"tier": "rust"}},
    });
    if let Some((status, reason)) = escalated {
        v["status"] = json!({"conditions": [{"type": "Escalated", "status": status, "reason": reason,
            "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]});
    }
    v
}

fn tier(pool: u32, observed: bool) -> Value {
    let mut v = json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "rust", "uid": "tier-uid", "generation": 1},
        "spec": {"namespaceSelector": {}, "level": 1, "template": {"image": "example.org/toolchain:1", "imagePullPolicy": "Never"},
                 "capabilities": ["version-control"], "warmPool": {"size": pool, "namespaces": [NS]}},
    });
    if observed {
        v["status"] = json!({"warmReady": pool});
    }
    v
}

fn tier_obj(pool: u32) -> SandboxTier {
    serde_json::from_value(tier(pool, true)).unwrap()
}

fn list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": items})
}

fn ready_status(ip: &str) -> Value {
    json!({"phase": "Running", "podIP": ip, "conditions": [{"type": "Ready", "status": "True"}]})
}

/// A Tier-1 pod as the API server would return it.
fn t1_pod(name: &str, labels: Value, annotations: Value, status: Value, rv: &str) -> Value {
    super::support::proven(json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": rv,
                        "labels": labels, "annotations": annotations},
           "spec": {"containers": [{"name": "agent", "image": "example.org/toolchain:1"}]},
           "status": status}))
}

fn conflict(name: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": format!("Operation cannot be fulfilled on pods \"{name}\": the object has been modified"),
           "reason": "Conflict", "details": {"name": name, "kind": "pods"}, "code": 409})
}

/// The session's token Secret, read first by every request to the tier API.
async fn session_token(server: &mut Handle) {
    expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/secrets/demo-token"),
        200,
        secret(NS, "demo-token", TOKEN),
    )
    .await;
}

/// The HarnessSession read, answered with `session`.
async fn read_session(server: &mut Handle, session: Value) {
    expect(
        server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        session,
    )
    .await;
}

/// The HarnessSession status patch; returns what the operator sent.
async fn patch_session_status(server: &mut Handle) -> Seen {
    expect(
        server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo/status"),
        200,
        session(None),
    )
    .await
}

/// A Tier-1 pod's token Secret read, answered with `token`.
async fn read_t1_secret(server: &mut Handle, name: &str, token: &str) {
    expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        200,
        secret(NS, name, token),
    )
    .await;
}

/// The warm-pool lookup, answered with `items`; returns what the operator sent.
async fn list_pool(server: &mut Handle, items: Vec<Value>) -> Seen {
    expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods"),
        200,
        list(items),
    )
    .await
}

/// A claim patch of the warm pod `name`, answered with `code` and `reply`; returns what the operator sent.
async fn patch_pod(server: &mut Handle, name: &str, code: u16, reply: Value) -> Seen {
    expect(
        server,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        code,
        reply,
    )
    .await
}

/// The requests every authorized open makes first: the token; then together the session, its
/// Tier-1 pods (answered with `session_pods`) and the turn's record (none); then the tier.
async fn auth_session_tier(server: &mut Handle, session_pods: Vec<Value>, tier_obj: Value) {
    auth_recorded(server, session_pods, None, tier_obj).await;
}

/// As [`auth_session_tier`], the turn's record naming `recorded`.
async fn auth_recorded(
    server: &mut Handle,
    session_pods: Vec<Value>,
    recorded: Option<&str>,
    tier_obj: Value,
) {
    let records = recorded.map(lease).into_iter().collect();
    auth_with_records(server, session_pods, records, tier_obj).await;
}

/// As [`auth_session_tier`], the session's turn records answered with `records`.
async fn auth_with_records(
    server: &mut Handle,
    session_pods: Vec<Value>,
    records: Vec<Value>,
    tier_obj: Value,
) {
    session_token(server).await;
    read_session(server, session(None)).await;
    find_turn(server, session_pods).await;
    list_records(server, records).await;
    read_tier(server, tier_obj).await;
}

/// The create of turn-1's record refused (409: an object holds its name), then that object read,
/// answered with `found`.
async fn record_name_taken(server: &mut Handle, found: Value) {
    expect(
        server,
        "POST",
        &records_path(),
        409,
        super::support::already_exists("harnessturns", &record::name(NS, "demo", "turn-1")),
    )
    .await;
    expect(server, "GET", &record_path(), 200, found).await;
}

fn records_path() -> String {
    format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnessturns")
}

/// A list of turn records, as the API server returns it.
fn record_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurnList", "metadata": {}, "items": items})
}

/// The label lookup of the session's turn records, answered with `items`.
async fn list_records(server: &mut Handle, items: Vec<Value>) {
    let seen = expect(server, "GET", &records_path(), 200, record_list(items)).await;
    let want = format!(
        "labelSelector={}",
        pod::session_selector(NS, "demo")
            .replace('/', "%2F")
            .replace('=', "%3D")
            .replace(',', "%2C")
    );
    assert!(seen.query.contains(&want), "{} !~ {want}", seen.query);
}

fn record_path() -> String {
    format!("{}/{}", records_path(), record::name(NS, "demo", "turn-1"))
}

/// A turn record as the API server returns it, naming `holder`.
fn lease(holder: &str) -> Value {
    super::support::proven_turn(
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
           "metadata": {"name": record::name(NS, "demo", "turn-1"), "namespace": NS, "resourceVersion": "5",
                        "labels": {"kubeharness.dev/session-uid": "s-uid"}},
           "spec": {"session": "demo", "turn": "turn-1", "pod": holder}}),
    )
}

/// The read of the turn's record, answered with one naming `holder` (or 404).
async fn read_record(server: &mut Handle, holder: Option<&str>) {
    match holder {
        Some(h) => expect(server, "GET", &record_path(), 200, lease(h)).await,
        None => {
            expect(
                server,
                "GET",
                &record_path(),
                404,
                not_found("harnessturns", &record::name(NS, "demo", "turn-1")),
            )
            .await
        }
    };
}

/// The create of the turn's record naming `holder`, answered 201; returns what was sent.
async fn create_record(server: &mut Handle, holder: &str) -> Seen {
    let seen = expect(server, "POST", &records_path(), 201, lease(holder)).await;
    assert_eq!(seen.body["spec"]["pod"], holder, "{}", seen.body);
    assert_eq!(
        seen.body["metadata"]["name"],
        record::name(NS, "demo", "turn-1")
    );
    assert_eq!(
        seen.body["metadata"]["labels"]["kubeharness.dev/session-uid"], "s-uid",
        "a record is of one session object: {}",
        seen.body
    );
    seen
}

/// The turn's label, as a pod serving it carries it.
fn turn_labels(more: Value) -> Value {
    let mut l = json!({"kubeharness.dev/role": "tier1", "kubeharness.dev/session-namespace": NS,
                       "kubeharness.dev/session": "demo", "kubeharness.dev/turn": pod::turn_label("turn-1")});
    for (k, v) in more.as_object().unwrap() {
        l[k] = v.clone();
    }
    l
}

async fn read_tier(server: &mut Handle, tier_obj: Value) {
    expect(
        server,
        "GET",
        "/apis/kubeharness.dev/v1alpha1/sandboxtiers/rust",
        200,
        tier_obj,
    )
    .await;
}

/// The label lookup of the session's Tier-1 pods, answered with `items`.
async fn find_turn(server: &mut Handle, items: Vec<Value>) {
    let seen = expect(
        server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods"),
        200,
        list(items),
    )
    .await;
    let want = format!(
        "labelSelector={}",
        pod::session_selector(NS, "demo")
            .replace('/', "%2F")
            .replace('=', "%3D")
            .replace(',', "%2C")
    );
    assert!(seen.query.contains(&want), "{} !~ {want}", seen.query);
}

/// What an open of a turn with no pod yet asks before choosing a source: the token, the session,
/// the turn's (absent) pods, the tier (`tier_obj`), the worker pod.
async fn new_turn(server: &mut Handle, tier_obj: Value) {
    auth_session_tier(server, vec![], tier_obj).await;
    worker_pod(server).await;
}

async fn worker_pod(server: &mut Handle) {
    expect(server, "GET", &format!("/api/v1/namespaces/{NS}/pods/demo-worker"), 200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS, "uid": "w-uid"},
               "status": {"containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": true, "restartCount": 2}]}})).await;
}

/// The tier's NetworkPolicy applied in the session's namespace before an ordinary pod there.
async fn tier_policy(server: &mut Handle) -> Seen {
    let np = expect(
        server,
        "PATCH",
        &format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/t1-rust"),
        200,
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy", "metadata": {"name": "t1-rust", "namespace": NS}}),
    )
    .await;
    assert_eq!(np.content_type, "application/apply-patch+yaml");
    np
}

/// The ordinary pod: its Secret, the pod, the Secret adopted by the pod. Returns (secret, pod).
async fn ordinary(server: &mut Handle, miss: Option<&str>) -> (Value, Value) {
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    // Recorded before anything of it is created.
    create_record(server, &name).await;
    ordinary_recorded(server, miss).await
}

/// As [`ordinary`], from after the record's create.
async fn ordinary_recorded(server: &mut Handle, miss: Option<&str>) -> (Value, Value) {
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    tier_policy(server).await;
    let created_secret = expect(
        server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/secrets"),
        201,
        secret(NS, &name, "t1-token"),
    )
    .await;
    let mut annotations = json!({"kubeharness.dev/turn-id": "turn-1", "kubeharness.dev/tier-level": "1",
                                 "kubeharness.dev/worker-uid": "w-uid/2"});
    if let Some(m) = miss {
        annotations["kubeharness.dev/miss-reason"] = json!(m);
    }
    let created = t1_pod(&name, json!({}), annotations, json!({}), "1");
    let p = expect(
        server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/pods"),
        201,
        created.clone(),
    )
    .await;
    // Its proof of origin, written at once.
    let stamp = expect(
        server,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        200,
        created,
    )
    .await;
    assert_eq!(
        stamp.body["metadata"]["annotations"][kube_harness_operator::origin::ANNOTATION],
        super::support::origin_key().proof(NS, &name, &format!("uid-{name}"))
    );
    let adopt = expect(
        server,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        200,
        secret(NS, &name, "t1-token"),
    )
    .await;
    assert_eq!(adopt.body["metadata"]["ownerReferences"][0]["kind"], "Pod");
    assert_eq!(
        adopt.body["metadata"]["ownerReferences"][0]["uid"],
        format!("uid-{name}")
    );
    // The record read again: the turn did not end meanwhile.
    read_record(server, Some(&name)).await;
    (created_secret.body, p.body)
}

/// An open that misses the pool with `miss`: the ordinary pod is created, the open event sent and
/// the answer is 200 with that miss reason. Returns (the pod created, the answer).
async fn ordinary_answer(
    server: &mut Handle,
    reply: tokio::task::JoinHandle<(u16, Value)>,
    miss: &str,
) -> (Value, Value) {
    let (_, p) = ordinary(server, Some(miss)).await;
    drain_events(server, NS, 1).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(
        (code, body["missReason"].as_str()),
        (200, Some(miss)),
        "{body}"
    );
    (p, body)
}

/// Bounded: a handler stuck on an unanswered API request fails the test instead of hanging it.
fn http_client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(10))
        .build()
        .unwrap()
}

async fn post(base: &str, token: &str, body: Value) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = format!("{base}/v1/namespaces/{NS}/sessions/demo/sandboxes");
    let token = token.to_string();
    tokio::spawn(async move {
        let r = http_client()
            .post(url)
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}

async fn call(
    base: &str,
    method: reqwest::Method,
    turn: &str,
) -> tokio::task::JoinHandle<(u16, Value)> {
    let url = format!("{base}/v1/namespaces/{NS}/sessions/demo/sandboxes/{turn}");
    tokio::spawn(async move {
        let r = http_client()
            .request(method, url)
            .bearer_auth(TOKEN)
            .send()
            .await
            .unwrap();
        let status = r.status().as_u16();
        (status, r.json().await.unwrap_or(Value::Null))
    })
}

#[tokio::test]
async fn post_creates_an_ordinary_pod_and_its_secret() {
    let (base, mut server) = start().await;
    let reply = post(
        &base,
        TOKEN,
        json!({"turn": "turn-1", "workspaceBytes": 1000}),
    )
    .await;
    new_turn(&mut server, tier(0, false)).await;
    let (secret, p) = ordinary(&mut server, None).await;

    let name = pod::ordinary_name(NS, "demo", "turn-1");
    assert!(name.starts_with("t1-") && name.len() == 19, "{name}");
    // The Secret: the pod's own random 256-bit token (hex), owned by the tier until adopted.
    assert_eq!(secret["metadata"]["name"], name);
    assert_eq!(secret["metadata"]["namespace"], NS);
    assert_eq!(
        secret["data"]["token"].as_str().map(str::len),
        Some(88),
        "base64 of 64 hex digits"
    );
    assert_eq!(
        secret["metadata"]["ownerReferences"][0]["kind"],
        "SandboxTier"
    );
    // The pod: exactly the labels of docs/tier1.md, in the operator's namespace.
    let meta = &p["metadata"];
    assert_eq!(meta["namespace"], NS);
    assert_eq!(
        meta["labels"],
        json!({
            "app.kubernetes.io/managed-by": "kube-harness",
            "kubeharness.dev/role": "tier1",
            "kubeharness.dev/tier": "rust",
            "kubeharness.dev/session-namespace": NS,
            "kubeharness.dev/session": "demo",
            "kubeharness.dev/session-uid": "s-uid",
            "kubeharness.dev/turn": pod::turn_label("turn-1"),
            "kubeharness.dev/template-hash": pod::template_hash(&tier_obj(0), &config()),
        })
    );
    let mut annotations = meta["annotations"].clone();
    // The turn's start and its bound (the tier's default maxTurnSeconds, six hours later).
    let at = |k: &str| {
        annotations[k]
            .as_str()
            .unwrap()
            .parse::<k8s_openapi::jiff::Timestamp>()
            .unwrap()
    };
    let bound = at("kubeharness.dev/turn-deadline").as_second()
        - at("kubeharness.dev/turn-started").as_second();
    assert_eq!(bound, 21600, "{annotations}");
    let obj = annotations.as_object_mut().unwrap();
    obj.remove("kubeharness.dev/turn-started");
    obj.remove("kubeharness.dev/turn-deadline");
    assert_eq!(
        annotations,
        json!({
            "kubeharness.dev/turn-id": "turn-1",
            "kubeharness.dev/tier-level": "1",
            "kubeharness.dev/worker-uid": "w-uid/2",
        })
    );
    assert_eq!(
        meta["ownerReferences"],
        json!([{"apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "SandboxTier", "name": "rust", "uid": "tier-uid", "controller": true}])
    );
    let spec = &p["spec"];
    assert_eq!(spec["containers"][0]["image"], "example.org/toolchain:1");
    assert_eq!(spec["containers"][0]["imagePullPolicy"], "Never");
    assert_eq!(
        spec["containers"][0]["args"],
        json!([
            "worker",
            "--tier",
            "1",
            "--listen",
            "0.0.0.0:8080",
            "--token-file",
            "/kh/token/token",
            "--skills-keeper",
            "127.0.0.1:8079",
            "--max-processes",
            "1024"
        ])
    );
    assert_eq!(
        spec["initContainers"][0]["image"],
        "localhost/kube-harness/worker:dev"
    );
    assert_eq!(spec["volumes"][1]["secret"]["secretName"], name);

    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(events[0]["reason"], "Tier1Opened");
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap()
            .contains("source ordinary"),
        "{}",
        events[0]
    );
    let (status, body) = reply.await.unwrap();
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body,
        json!({"turn": "turn-1", "pod": name, "phase": "Pending", "endpoint": null, "token": null,
        "source": "ordinary", "missReason": null, "reason": null, "message": null})
    );
}

#[tokio::test]
async fn a_repeated_post_finds_the_turns_pod_and_reports_it_ready() {
    let (base, mut server) = start().await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let existing = t1_pod(
        &name,
        turn_labels(json!({"kubeharness.dev/tier": "rust"})),
        json!({"kubeharness.dev/tier-level": "1"}),
        ready_status("10.1.2.3"),
        "7",
    );
    auth_recorded(&mut server, vec![existing], Some(&name), tier(0, false)).await;
    // Nothing is created (and the worker pod not read): the token is read, the session told.
    read_t1_secret(&mut server, &name, "t1-token").await;
    read_session(&mut server, session(None)).await;
    let status = patch_session_status(&mut server).await;
    assert_eq!(status.content_type, "application/merge-patch+json");
    let esc = &status.body["status"]["conditions"][0];
    assert_eq!(
        (
            esc["type"].as_str(),
            esc["status"].as_str(),
            esc["reason"].as_str()
        ),
        (Some("Escalated"), Some("True"), Some(reasons::TIER1_READY))
    );
    assert_eq!(status.body["status"]["currentTier"], 1);
    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(events[0]["reason"], reasons::TIER1_READY);
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["phase"].as_str(),
            body["endpoint"].as_str(),
            body["token"].as_str()
        ),
        (
            Some("Ready"),
            Some("http://10.1.2.3:8080"),
            Some("t1-token")
        ),
        "{body}"
    );
}

#[tokio::test]
async fn a_pooled_tier_claims_a_ready_current_pod_with_its_resource_version() {
    let (base, mut server) = start().await;
    let reply = post(
        &base,
        TOKEN,
        json!({"turn": "turn-1", "workspaceBytes": 4096}),
    )
    .await;
    new_turn(&mut server, tier(2, true)).await;
    let hash = pod::template_hash(&tier_obj(2), &config());
    let pool_labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                             "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    let listed = list_pool(
        &mut server,
        vec![
            t1_pod(
                "t1-bbb",
                pool_labels.clone(),
                json!({}),
                ready_status("10.0.0.2"),
                "41",
            ),
            t1_pod(
                "t1-aaa",
                pool_labels.clone(),
                json!({}),
                json!({"phase": "Pending"}),
                "40",
            ),
        ],
    )
    .await;
    assert!(
        listed
            .query
            .contains(&format!("kubeharness.dev%2Ftemplate-hash%3D{hash}")),
        "only current pods: {}",
        listed.query
    );
    // Only the ready pod is tried; the patch carries its resourceVersion (optimistic concurrency).
    let mut claimed_labels = pool_labels.clone();
    claimed_labels["kubeharness.dev/claimed"] = json!("true");
    let claim = patch_pod(
        &mut server,
        "t1-bbb",
        200,
        t1_pod(
            "t1-bbb",
            claimed_labels,
            json!({"kubeharness.dev/tier-level": "1"}),
            ready_status("10.0.0.2"),
            "42",
        ),
    )
    .await;
    assert_eq!(claim.content_type, "application/merge-patch+json");
    assert_eq!(claim.body["metadata"]["resourceVersion"], "41");
    assert_eq!(
        claim.body["metadata"]["labels"]["kubeharness.dev/claimed"],
        "true"
    );
    assert_eq!(
        claim.body["metadata"]["labels"]["kubeharness.dev/session"],
        "demo"
    );
    assert_eq!(
        claim.body["metadata"]["annotations"]["kubeharness.dev/worker-uid"],
        "w-uid/2"
    );
    // Beside the claim: the pod's token and the session (for its status); then the record.
    read_t1_secret(&mut server, "t1-bbb", "pool-token").await;
    read_session(&mut server, session(None)).await;
    create_record(&mut server, "t1-bbb").await;
    patch_session_status(&mut server).await;
    // The Events follow: opened, then ready.
    let events = drain_events(&mut server, NS, 2).await;
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap()
            .contains("source prepared"),
        "{}",
        events[0]
    );
    assert_eq!(events[1]["reason"], reasons::TIER1_READY);
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["source"].as_str(),
            body["phase"].as_str(),
            body["token"].as_str(),
            &body["missReason"]
        ),
        (
            Some("prepared"),
            Some("Ready"),
            Some("pool-token"),
            &Value::Null
        ),
        "{body}"
    );
}

#[tokio::test]
async fn lost_claim_races_try_the_next_pod_then_fall_back_with_slot_unavailable() {
    let (base, mut server, ctx) = start_with_context().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, true)).await;
    let labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false"});
    list_pool(
        &mut server,
        vec![
            t1_pod(
                "t1-aaa",
                labels.clone(),
                json!({}),
                ready_status("10.0.0.1"),
                "10",
            ),
            t1_pod(
                "t1-bbb",
                labels.clone(),
                json!({}),
                ready_status("10.0.0.2"),
                "11",
            ),
        ],
    )
    .await;
    // Each claim patch goes with a read of its pod's token; the session is read beside the first.
    let first = patch_pod(&mut server, "t1-aaa", 409, conflict("t1-aaa")).await;
    assert_eq!(first.body["metadata"]["resourceVersion"], "10");
    read_t1_secret(&mut server, "t1-aaa", "pool-token").await;
    read_session(&mut server, session(None)).await;
    let second = patch_pod(&mut server, "t1-bbb", 409, conflict("t1-bbb")).await;
    assert_eq!(second.body["metadata"]["resourceVersion"], "11");
    read_t1_secret(&mut server, "t1-bbb", "pool-token").await;
    let (p, body) = ordinary_answer(&mut server, reply, "slot_unavailable").await;
    assert_eq!(
        p["metadata"]["annotations"]["kubeharness.dev/miss-reason"],
        "slot_unavailable"
    );
    assert_eq!(body["source"], "ordinary", "{body}");
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains(
            "kube_harness_tier1_opens_total{source=\"ordinary\",miss_reason=\"slot_unavailable\"} 1"
        ),
        "{metrics}"
    );
}

/// A pod that carries the pool's labels but lives in another namespace (listed by a confused or
/// hostile API answer, or planted there) is never claimed: the session would be served outside
/// its namespace's quota, by a pod its namespace's policies do not cover.
#[tokio::test]
async fn a_pool_pod_of_another_namespace_is_never_claimed() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, true)).await;
    let mut elsewhere = t1_pod(
        "t1-aaa",
        json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false"}),
        json!({}),
        ready_status("10.0.0.1"),
        "10",
    );
    elsewhere["metadata"]["namespace"] = json!("team-b");
    list_pool(&mut server, vec![elsewhere]).await;
    // No claim patch: only the session read that goes beside a claim, then an ordinary pod.
    read_session(&mut server, session(None)).await;
    let (p, _) = ordinary_answer(&mut server, reply, "slot_unavailable").await;
    assert_eq!(p["metadata"]["namespace"], NS);
}

#[tokio::test]
async fn a_workspace_over_the_prepared_limit_gets_an_ordinary_pod_without_touching_the_pool() {
    let (base, mut server) = start().await;
    let reply = post(
        &base,
        TOKEN,
        json!({"turn": "turn-1", "workspaceBytes": 128 * 1024 + 1}),
    )
    .await;
    new_turn(&mut server, tier(2, true)).await;
    let (p, _) = ordinary_answer(&mut server, reply, "workspace_too_large").await;
    assert_eq!(
        p["metadata"]["annotations"]["kubeharness.dev/miss-reason"],
        "workspace_too_large"
    );
}

#[tokio::test]
async fn a_pool_that_does_not_serve_the_sessions_namespace_gives_an_ordinary_pod_there() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let mut elsewhere = tier(2, true);
    elsewhere["spec"]["warmPool"]["namespaces"] = json!(["team-b"]);
    new_turn(&mut server, elsewhere).await;
    // No pool pod of another namespace is listed or claimed: the pod is made in the session's.
    let (p, _) = ordinary_answer(&mut server, reply, "namespace_not_served").await;
    assert_eq!(p["metadata"]["namespace"], NS);
}

/// A Tier-1 pod the session's namespace refuses (its ResourceQuota): Failed at once with reason
/// QuotaExceeded and the API server's message, which the session's Escalated condition and a
/// Warning Event carry; nothing is retried or left waiting.
#[tokio::test]
async fn an_ordinary_pod_refused_by_the_namespaces_quota_is_failed_at_once_with_its_message() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(0, false)).await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    create_record(&mut server, &name).await;
    tier_policy(&mut server).await;
    expect(
        &mut server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/secrets"),
        201,
        secret(NS, &name, "t1-token"),
    )
    .await;
    let quota = "pods \"x\" is forbidden: exceeded quota: team-quota, requested: pods=1, used: pods=2, limited: pods=2";
    expect(
        &mut server,
        "POST",
        &format!("/api/v1/namespaces/{NS}/pods"),
        403,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": quota, "reason": "Forbidden", "code": 403}),
    )
    .await;
    // Its Secret would serve nothing: deleted.
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        200,
        secret(NS, &name, "t1-token"),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        session(None),
    )
    .await;
    let status = patch_session_status(&mut server).await;
    let esc = &status.body["status"]["conditions"][0];
    assert_eq!(
        (
            esc["type"].as_str(),
            esc["status"].as_str(),
            esc["reason"].as_str()
        ),
        (
            Some("Escalated"),
            Some("False"),
            Some(reasons::TIER1_FAILED)
        ),
        "{esc}"
    );
    let message = esc["message"].as_str().unwrap();
    assert!(
        message.contains("QuotaExceeded") && message.contains("exceeded quota: team-quota"),
        "{message}"
    );
    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(events[0]["type"], "Warning");
    let (code, body) = reply.await.unwrap();
    assert_eq!(
        (code, body["phase"].as_str(), body["reason"].as_str()),
        (200, Some("Failed"), Some(reasons::QUOTA_EXCEEDED)),
        "{body}"
    );
    assert!(
        body["message"].as_str().unwrap().contains("team-quota"),
        "{body}"
    );
}

#[tokio::test]
async fn an_empty_pool_is_stock_empty_and_an_unobserved_one_unreported() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, true)).await;
    // Only a pod that is not ready: nothing to claim.
    list_pool(
        &mut server,
        vec![t1_pod(
            "t1-aaa",
            json!({"kubeharness.dev/pool": "rust"}),
            json!({}),
            json!({"phase": "Pending"}),
            "10",
        )],
    )
    .await;
    ordinary_answer(&mut server, reply, "stock_empty").await;

    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, false)).await;
    ordinary_answer(&mut server, reply, "unreported").await;
}

#[tokio::test]
async fn an_uncertain_claim_is_503_and_creates_nothing() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(1, true)).await;
    list_pool(
        &mut server,
        vec![t1_pod(
            "t1-aaa",
            json!({"kubeharness.dev/pool": "rust"}),
            json!({}),
            ready_status("10.0.0.1"),
            "10",
        )],
    )
    .await;
    patch_pod(
        &mut server,
        "t1-aaa",
        500,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
    )
    .await;
    // The reads that went with the claim patch.
    read_t1_secret(&mut server, "t1-aaa", "pool-token").await;
    read_session(&mut server, session(None)).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 503, "{body}");
    assert!(
        body["error"]["code"] == "unavailable"
            && body["error"]["message"]
                .as_str()
                .unwrap()
                .contains("uncertain claim of warm pod t1-aaa"),
        "{body}"
    );
    // Nothing further was asked of the API server.
    let next =
        tokio::time::timeout(std::time::Duration::from_millis(200), server.next_request()).await;
    assert!(
        next.is_err() || next.unwrap().is_none(),
        "a request after the uncertain claim"
    );
}

async fn get_failed(status: Value) -> Value {
    let (base, mut server, ctx) = start_with_context().await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    let reply = call(&base, reqwest::Method::GET, "turn-1").await;
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(
        &mut server,
        vec![t1_pod(
            &name,
            turn_labels(json!({"kubeharness.dev/tier": "rust"})),
            json!({"kubeharness.dev/tier-level": "1"}),
            status,
            "3",
        )],
    )
    .await;
    read_record(&mut server, Some(&name)).await;
    read_session(&mut server, session(None)).await;
    let patch = patch_session_status(&mut server).await;
    let esc = &patch.body["status"]["conditions"][0];
    assert_eq!(
        (esc["status"].as_str(), esc["reason"].as_str()),
        (Some("False"), Some(reasons::TIER1_FAILED)),
        "{esc}"
    );
    assert_eq!(patch.body["status"]["currentTier"], 0);
    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(
        (events[0]["type"].as_str(), events[0]["reason"].as_str()),
        (Some("Warning"), Some(reasons::TIER1_FAILED))
    );
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["phase"].as_str(), &body["token"], &body["endpoint"]),
        (Some("Failed"), &Value::Null, &Value::Null),
        "{body}"
    );
    let reason = body["reason"].as_str().unwrap();
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains(&format!(
            "kube_harness_tier1_failures_total{{reason=\"{reason}\"}} 1"
        )),
        "{metrics}"
    );
    body
}

#[tokio::test]
async fn get_reports_unschedulable_and_missing_images_as_failed_at_once() {
    let body = get_failed(
        json!({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False",
        "reason": "Unschedulable", "message": "0/1 nodes are available: 1 Insufficient memory."}]}),
    )
    .await;
    assert_eq!(body["reason"], "Unschedulable");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("Insufficient memory"),
        "{body}"
    );

    let body = get_failed(json!({"phase": "Pending", "containerStatuses": [{"name": "agent", "image": "localhost/nope:dev",
        "imageID": "", "ready": false, "restartCount": 0,
        "state": {"waiting": {"reason": "ErrImageNeverPull", "message": "Container image \"localhost/nope:dev\" is not present with pull policy of Never"}}}]})).await;
    assert_eq!(body["reason"], "ImagePullFailed");
    assert!(
        body["message"]
            .as_str()
            .unwrap()
            .contains("ErrImageNeverPull"),
        "{body}"
    );
}

/// The turn's record made a tombstone by server-side apply (answered with `reply`); returns
/// what was sent.
async fn tombstone(server: &mut Handle, path: &str, reply: Value) -> Seen {
    let seen = expect(server, "PATCH", path, 200, reply).await;
    assert_eq!(seen.content_type, "application/apply-patch+yaml");
    let at = seen.body["metadata"]["annotations"]["kubeharness.dev/turn-ended"]
        .as_str()
        .unwrap_or_else(|| panic!("a tombstone: {}", seen.body));
    at.parse::<k8s_openapi::jiff::Timestamp>().unwrap();
    assert_eq!(
        seen.body["spec"]["ended"], true,
        "a tombstone: {}",
        seen.body
    );
    seen
}

/// What the DELETE of turn-1 reads first: the token, then together the session and the turn's
/// record (naming `holder`, or none); then the record becomes a tombstone (naming the same
/// holder) and only then are the session's pods listed (answered with `pods`).
async fn end_turn_1(server: &mut Handle, holder: Option<&str>, pods: Vec<Value>) {
    session_token(server).await;
    read_session(server, session(None)).await;
    read_record(server, holder).await;
    let mut ended = match holder {
        Some(h) => lease(h),
        None => json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
                       "metadata": {"name": record::name(NS, "demo", "turn-1"), "namespace": NS},
                       "spec": {"session": "demo", "turn": "turn-1"}}),
    };
    ended["metadata"]["annotations"] = json!({"kubeharness.dev/turn-ended": in_seconds(0)});
    ended["spec"]["ended"] = json!(true);
    let sent = tombstone(server, &record_path(), ended).await;
    assert_eq!(
        (
            sent.body["metadata"]["labels"]["kubeharness.dev/session-uid"].as_str(),
            sent.body["metadata"]["labels"]["kubeharness.dev/turn"].as_str(),
            sent.body["spec"]["turn"].as_str()
        ),
        (
            Some("s-uid"),
            Some(pod::turn_label("turn-1").as_str()),
            Some("turn-1")
        ),
        "{}",
        sent.body
    );
    find_turn(server, pods).await;
}

#[tokio::test]
async fn delete_removes_pod_and_secret_and_ends_the_escalation() {
    let (base, mut server) = start().await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    let reply = call(&base, reqwest::Method::DELETE, "turn-1").await;
    let serving = t1_pod(
        &name,
        turn_labels(json!({"kubeharness.dev/tier": "rust"})),
        json!({}),
        ready_status("10.0.0.9"),
        "3",
    );
    end_turn_1(&mut server, Some(&name), vec![serving]).await;
    // The tier keeps no pod idle (idleTimeoutSeconds 0): deleted, that very pod (its uid).
    let mut no_idle = tier(0, false);
    no_idle["spec"]["idleTimeoutSeconds"] = json!(0);
    read_tier(&mut server, no_idle).await;
    let deleted = expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        200,
        t1_pod(&name, json!({}), json!({}), json!({}), "4"),
    )
    .await;
    assert_eq!(
        deleted.body["preconditions"],
        json!({"uid": format!("uid-{name}")})
    );
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        404,
        not_found("secrets", &name),
    )
    .await;
    // The record stays, a tombstone (the sweep deletes it later).
    read_session(&mut server, session(Some(("True", reasons::TIER1_READY)))).await;
    let patch = patch_session_status(&mut server).await;
    let esc = &patch.body["status"]["conditions"][0];
    assert_eq!(
        (esc["status"].as_str(), esc["reason"].as_str()),
        (Some("False"), Some(reasons::TURN_ENDED)),
        "{esc}"
    );
    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(events[0]["reason"], reasons::TURN_ENDED);
    let (code, _) = reply.await.unwrap();
    assert_eq!(code, 204);

    // Already gone: the tombstone is written all the same (an open may still be under way),
    // and nothing else is touched.
    let (base, mut server) = start().await;
    let reply = call(&base, reqwest::Method::DELETE, "turn-1").await;
    end_turn_1(&mut server, None, vec![]).await;
    assert_eq!(reply.await.unwrap().0, 204);
}

#[tokio::test]
async fn a_bad_or_missing_token_is_401_and_no_escalation_tier_is_409() {
    let (base, mut server) = start().await;
    let reply = post(&base, "not-the-token", json!({"turn": "turn-1"})).await;
    session_token(&mut server).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 401, "{body}");
    assert_eq!(body["error"]["code"], "unauthorized", "{body}");
    assert!(body["error"]["message"].is_string());

    // An unknown session has no token Secret: 401 as well, revealing nothing.
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/secrets/demo-token"),
        404,
        not_found("secrets", "demo-token"),
    )
    .await;
    assert_eq!(reply.await.unwrap().0, 401);

    // A session whose escalation tier is level 0.
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let mut level0 = tier(0, false);
    level0["spec"]["level"] = json!(0);
    auth_session_tier(&mut server, vec![], level0).await;
    worker_pod(&mut server).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 409, "{body}");

    // Bad input is 400 before anything is looked up beyond the token.
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": ""})).await;
    session_token(&mut server).await;
    assert_eq!(reply.await.unwrap().0, 400);
}

/// A session's token past its allowance of new turns (docs/tier1.md "Limits"): 429 with the
/// wait and `Retry-After`, once the turn is known to be new and before anything is written;
/// other sessions and the metric are told apart.
#[tokio::test]
async fn a_session_opening_too_fast_is_429_before_anything_is_written() {
    let (base, mut server, ctx) = start_with_context().await;
    for _ in 0..kube_harness_operator::tier1::limit::OPENS_BURST {
        assert!(ctx.opens.check(NS, "demo").is_ok());
    }
    let url = format!("{base}/v1/namespaces/{NS}/sessions/demo/sandboxes");
    let reply = tokio::spawn(async move {
        reqwest::Client::new()
            .post(url)
            .bearer_auth(TOKEN)
            .json(&json!({"turn": "turn-1"}))
            .send()
            .await
            .unwrap()
    });
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(&mut server, vec![]).await;
    list_records(&mut server, vec![]).await;
    let answer = reply.await.unwrap();
    assert_eq!(answer.status().as_u16(), 429);
    let retry: u64 = answer.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!((1..=5).contains(&retry), "Retry-After {retry}");
    let body: Value = answer.json().await.unwrap();
    assert_eq!(body["error"]["code"], "too-many-opens", "{body}");
    let message = body["error"]["message"].as_str().unwrap();
    assert!(message.contains("try again in"), "{message}");
    // Nothing after the reads: no tier read, no record, no pod.
    let more = tokio::time::timeout(std::time::Duration::from_millis(300), server.next_request());
    assert!(more.await.is_err(), "a request after the 429");
    assert!(ctx
        .metrics
        .encode()
        .contains("kube_harness_tier1_opens_limited_total 1"));
    // A bad token spends nothing and is still 401, not 429.
    let reply = post(&base, "not-the-token", json!({"turn": "turn-2"})).await;
    session_token(&mut server).await;
    assert_eq!(reply.await.unwrap().0, 401);
    // Another session of the namespace has its own allowance.
    assert!(ctx.opens.check(NS, "other").is_ok());
}

/// Takes the next `want.len()` requests before answering any: they were sent together (a handler
/// that waited for one answer before the next request fails here). Checks each method and path,
/// in order, and answers each with its status and reply.
async fn together(server: &mut Handle, want: Vec<(&str, String, u16, Value)>) -> Vec<Value> {
    let mut pending = Vec::new();
    for (method, path, _, _) in &want {
        let (request, send) = tokio::time::timeout(
            std::time::Duration::from_secs(2),
            server.next_request(),
        )
        .await
        .unwrap_or_else(|_| {
            panic!("{method} {path} was not asked before the requests ahead of it were answered")
        })
        .unwrap();
        assert_eq!(
            (request.method().as_str(), request.uri().path()),
            (*method, path.as_str()),
            "the requests of one round, in order"
        );
        pending.push((request, send));
    }
    let mut bodies = Vec::new();
    for ((request, send), (_, _, status, reply)) in pending.into_iter().zip(want) {
        let bytes = request.into_body().collect_bytes().await.unwrap();
        bodies.push(serde_json::from_slice(&bytes).unwrap_or(Value::Null));
        send.send_response(
            http::Response::builder()
                .status(status)
                .body(kube::client::Body::from(
                    serde_json::to_vec(&reply).unwrap(),
                ))
                .unwrap(),
        );
    }
    bodies
}

#[tokio::test]
async fn a_warm_open_asks_together_what_does_not_depend_on_each_other_and_answers_before_its_events(
) {
    let (base, mut server, ctx) = start_with_context().await;
    // The leader's tier cache knows the tier keeps a pool: its pods are asked for with the tier.
    let mut writers = ctx.caches.take_writers().unwrap();
    writers
        .tiers
        .apply_watcher_event(&kube::runtime::watcher::Event::Apply(tier_obj(2)));
    let reply = post(
        &base,
        TOKEN,
        json!({"turn": "turn-1", "workspaceBytes": 4096}),
    )
    .await;
    // Nothing before the bearer is checked.
    session_token(&mut server).await;
    let pods = format!("/api/v1/namespaces/{NS}/pods");
    together(
        &mut server,
        vec![
            (
                "GET",
                format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
                200,
                session(None),
            ),
            ("GET", pods.clone(), 200, list(vec![])),
            ("GET", records_path(), 200, record_list(vec![])),
        ],
    )
    .await;
    let hash = pod::template_hash(&tier_obj(2), &config());
    let pool_labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                             "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    let idle = t1_pod(
        "t1-aaa",
        pool_labels.clone(),
        json!({"kubeharness.dev/tier-level": "1"}),
        ready_status("10.0.0.1"),
        "10",
    );
    together(
        &mut server,
        vec![
            (
                "GET",
                "/apis/kubeharness.dev/v1alpha1/sandboxtiers/rust".into(),
                200,
                tier(2, true),
            ),
            (
                "GET",
                format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
                200,
                json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS, "uid": "w-uid"}}),
            ),
            ("GET", pods.clone(), 200, list(vec![idle.clone()])),
        ],
    )
    .await;
    let mut claimed = idle;
    claimed["metadata"]["labels"]["kubeharness.dev/claimed"] = json!("true");
    claimed["metadata"]["resourceVersion"] = json!("11");
    let sent = together(
        &mut server,
        vec![
            ("PATCH", format!("{pods}/t1-aaa"), 200, claimed),
            (
                "GET",
                format!("/api/v1/namespaces/{NS}/secrets/t1-aaa"),
                200,
                secret(NS, "t1-aaa", "pool-token"),
            ),
            (
                "GET",
                format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
                200,
                session(None),
            ),
        ],
    )
    .await;
    assert_eq!(
        sent[0]["metadata"]["resourceVersion"], "10",
        "the claim stays conditioned"
    );
    create_record(&mut server, "t1-aaa").await;
    let status = patch_session_status(&mut server).await;
    assert_eq!(
        status.body["status"]["conditions"][0]["reason"],
        reasons::TIER1_READY
    );
    // The answer does not wait for the Events.
    let (code, body) = tokio::time::timeout(std::time::Duration::from_secs(2), reply)
        .await
        .expect("answered before its Events were published")
        .unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["pod"].as_str(),
            body["phase"].as_str(),
            body["token"].as_str(),
            body["source"].as_str()
        ),
        (
            Some("t1-aaa"),
            Some("Ready"),
            Some("pool-token"),
            Some("prepared")
        ),
        "{body}"
    );
    let events = drain_events(&mut server, NS, 2).await;
    assert_eq!(
        (events[0]["reason"].as_str(), events[1]["reason"].as_str()),
        (Some("Tier1Opened"), Some(reasons::TIER1_READY))
    );
}

#[tokio::test]
async fn a_claimed_pod_whose_token_cannot_be_read_is_503_and_its_open_is_still_an_event() {
    let (base, mut server) = start().await;
    let reply = post(
        &base,
        TOKEN,
        json!({"turn": "turn-1", "workspaceBytes": 4096}),
    )
    .await;
    new_turn(&mut server, tier(2, true)).await;
    let hash = pod::template_hash(&tier_obj(2), &config());
    let pool_labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                             "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    let idle = t1_pod(
        "t1-aaa",
        pool_labels,
        json!({"kubeharness.dev/tier-level": "1"}),
        ready_status("10.0.0.1"),
        "10",
    );
    list_pool(&mut server, vec![idle.clone()]).await;
    let mut claimed = idle;
    claimed["metadata"]["labels"]["kubeharness.dev/claimed"] = json!("true");
    patch_pod(&mut server, "t1-aaa", 200, claimed).await;
    let unavailable = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                             "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500});
    let secret_path = format!("/api/v1/namespaces/{NS}/secrets/t1-aaa");
    // Beside the claim, then once more by the answer: both fail.
    expect(&mut server, "GET", &secret_path, 500, unavailable.clone()).await;
    read_session(&mut server, session(None)).await;
    create_record(&mut server, "t1-aaa").await;
    expect(&mut server, "GET", &secret_path, 500, unavailable).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 503, "{body}");
    let events = drain_events(&mut server, NS, 1).await;
    assert_eq!(events[0]["reason"], "Tier1Opened");
}

/// A tier whose pods are kept idle for `idle` seconds after their turn.
fn keeping_tier(pool: u32, idle: u32) -> Value {
    let mut t = tier(pool, true);
    t["spec"]["idleTimeoutSeconds"] = json!(idle);
    t
}

/// A pod kept idle for session demo: Ready, built from the current template, opened by the
/// current worker (`w-uid/2`), idle until `until`; `labels` override its labels.
fn kept_pod(name: &str, labels: Value, until: &str) -> Value {
    let hash = pod::template_hash(&tier_obj(0), &config());
    let mut l = json!({"kubeharness.dev/role": "tier1", "kubeharness.dev/tier": "rust",
        "kubeharness.dev/session-namespace": NS, "kubeharness.dev/session": "demo",
        "kubeharness.dev/session-uid": "s-uid", "kubeharness.dev/template-hash": hash});
    for (k, v) in labels.as_object().unwrap() {
        l[k] = v.clone();
    }
    t1_pod(
        name,
        l,
        json!({"kubeharness.dev/tier-level": "1", "kubeharness.dev/worker-uid": "w-uid/2",
               "kubeharness.dev/idle-until": until}),
        ready_status("10.0.0.7"),
        "30",
    )
}

fn in_seconds(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() + secs,
    )
    .unwrap()
    .to_string()
}

#[tokio::test]
async fn a_pod_kept_from_the_sessions_last_turn_serves_its_next_turn_and_is_recorded() {
    let (base, mut server, ctx) = start_with_context().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let kept = kept_pod("t1-kept", json!({}), &in_seconds(120));
    auth_session_tier(&mut server, vec![kept.clone()], keeping_tier(0, 300)).await;
    worker_pod(&mut server).await;
    // The kept pod is claimed like a pool pod: conditioned on its resourceVersion, labelled with
    // the turn, marked reused, its idle time cleared; its token read beside.
    let mut claimed = kept.clone();
    claimed["metadata"]["labels"]["kubeharness.dev/turn"] = json!(pod::turn_label("turn-1"));
    claimed["metadata"]["annotations"]["kubeharness.dev/reused"] = json!("true");
    claimed["metadata"]["resourceVersion"] = json!("31");
    let claim = patch_pod(&mut server, "t1-kept", 200, claimed).await;
    assert_eq!(claim.body["metadata"]["resourceVersion"], "30");
    assert_eq!(
        claim.body["metadata"]["labels"]["kubeharness.dev/turn"],
        pod::turn_label("turn-1")
    );
    assert_eq!(
        claim.body["metadata"]["labels"]["kubeharness.dev/session-uid"],
        "s-uid"
    );
    assert!(claim.body["metadata"]["labels"]
        .get("kubeharness.dev/claimed")
        .is_none());
    assert_eq!(
        claim.body["metadata"]["annotations"]["kubeharness.dev/reused"],
        "true"
    );
    assert_eq!(
        claim.body["metadata"]["annotations"]["kubeharness.dev/idle-until"],
        Value::Null
    );
    read_t1_secret(&mut server, "t1-kept", "kept-token").await;
    create_record(&mut server, "t1-kept").await;
    read_session(&mut server, session(None)).await;
    patch_session_status(&mut server).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["pod"].as_str(),
            body["phase"].as_str(),
            body["token"].as_str(),
            body["reused"].as_bool()
        ),
        (
            Some("t1-kept"),
            Some("Ready"),
            Some("kept-token"),
            Some(true)
        ),
        "{body}"
    );
    let events = drain_events(&mut server, NS, 2).await;
    assert!(
        events[0]["note"]
            .as_str()
            .unwrap()
            .contains("kept from an earlier turn"),
        "{}",
        events[0]
    );
    let metrics = ctx.metrics.encode();
    assert!(
        metrics
            .contains("kube_harness_tier1_opens_total{source=\"reused\",miss_reason=\"none\"} 1"),
        "{metrics}"
    );
}

/// The attack: a list that (whatever its selector asked) holds pods another session kept, one a
/// session of the same name kept before it was deleted and created again, one another worker
/// opened, one past its idle time, one of an old template, one not ready. None is taken: the open
/// creates the turn's own ordinary pod.
#[tokio::test]
async fn no_kept_pod_of_another_session_worker_template_or_past_its_idle_time_is_ever_taken() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let soon = in_seconds(120);
    let mut other_worker = kept_pod("t1-e", json!({}), &soon);
    other_worker["metadata"]["annotations"]["kubeharness.dev/worker-uid"] = json!("w-old/0");
    let mut starting = kept_pod("t1-g", json!({}), &soon);
    starting["status"] = json!({"phase": "Pending"});
    let mut deleting = kept_pod("t1-h", json!({}), &soon);
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let pods = vec![
        kept_pod("t1-a", json!({"kubeharness.dev/session": "other"}), &soon),
        kept_pod(
            "t1-b",
            json!({"kubeharness.dev/session-namespace": "team-b"}),
            &soon,
        ),
        kept_pod(
            "t1-c",
            json!({"kubeharness.dev/session-uid": "old-uid"}),
            &soon,
        ),
        kept_pod("t1-d", json!({"kubeharness.dev/tier": "python"}), &soon),
        other_worker,
        kept_pod(
            "t1-f",
            json!({"kubeharness.dev/template-hash": "stale"}),
            &soon,
        ),
        starting,
        deleting,
        kept_pod("t1-i", json!({}), &in_seconds(-1)),
        // Serving another turn.
        kept_pod(
            "t1-j",
            json!({"kubeharness.dev/turn": "0123456789abcdef"}),
            &soon,
        ),
    ];
    auth_session_tier(&mut server, pods.clone(), keeping_tier(0, 300)).await;
    worker_pod(&mut server).await;
    // The session's other serving turn ends first (one serving turn per session): listed
    // again, its pod is deleted, and no other.
    find_turn(&mut server, pods).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/t1-j"),
        200,
        t1_pod("t1-j", json!({}), json!({}), json!({}), "31"),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/t1-j"),
        404,
        not_found("secrets", "t1-j"),
    )
    .await;
    // Then straight to the turn's own pod: its record, Secret, pod.
    let (_, p) = ordinary(&mut server, None).await;
    assert_eq!(
        p["metadata"]["name"],
        pod::ordinary_name(NS, "demo", "turn-1")
    );
    drain_events(&mut server, NS, 1).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert!(body.get("reused").is_none(), "{body}");
}

/// Two opens of one turn raced: this one claimed pool pod t1-bbb, but the other recorded t1-aaa
/// for the turn first. This one gives t1-bbb up (deleted, with its Secret: nothing was bound to
/// it) and answers with t1-aaa, so both get the same pod.
#[tokio::test]
async fn an_open_that_loses_the_turns_record_gives_its_claimed_pod_up_and_answers_the_recorded_one()
{
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(2, true)).await;
    let hash = pod::template_hash(&tier_obj(2), &config());
    let pool_labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                             "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    list_pool(
        &mut server,
        vec![t1_pod(
            "t1-bbb",
            pool_labels.clone(),
            json!({}),
            ready_status("10.0.0.2"),
            "41",
        )],
    )
    .await;
    let mut claimed = pool_labels.clone();
    claimed["kubeharness.dev/claimed"] = json!("true");
    patch_pod(
        &mut server,
        "t1-bbb",
        200,
        t1_pod("t1-bbb", claimed, json!({}), ready_status("10.0.0.2"), "42"),
    )
    .await;
    read_t1_secret(&mut server, "t1-bbb", "pool-token-b").await;
    read_session(&mut server, session(None)).await;
    record_name_taken(&mut server, lease("t1-aaa")).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/t1-bbb"),
        200,
        t1_pod("t1-bbb", json!({}), json!({}), json!({}), "43"),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/t1-bbb"),
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
    .await;
    let winner = t1_pod(
        "t1-aaa",
        turn_labels(
            json!({"kubeharness.dev/tier": "rust", "kubeharness.dev/pool": "rust",
                            "kubeharness.dev/claimed": "true"}),
        ),
        json!({"kubeharness.dev/tier-level": "1"}),
        ready_status("10.0.0.1"),
        "12",
    );
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/t1-aaa"),
        200,
        winner,
    )
    .await;
    read_t1_secret(&mut server, "t1-aaa", "pool-token-a").await;
    read_session(&mut server, session(None)).await;
    patch_session_status(&mut server).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (body["pod"].as_str(), body["token"].as_str()),
        (Some("t1-aaa"), Some("pool-token-a")),
        "{body}"
    );
}

/// The unpooled race: the other open recorded a pool pod... or any pod; this one, about to
/// create the turn's ordinary pod, records first and creates nothing when it loses.
#[tokio::test]
async fn an_ordinary_open_that_loses_the_turns_record_creates_nothing() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    new_turn(&mut server, tier(0, false)).await;
    record_name_taken(&mut server, lease("t1-other")).await;
    // The recorded pod, not there (deleted): Failed, and nothing was created.
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/t1-other"),
        404,
        not_found("pods", "t1-other"),
    )
    .await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        (
            body["pod"].as_str(),
            body["phase"].as_str(),
            body["reason"].as_str()
        ),
        (Some("t1-other"), Some("Failed"), Some("PodDeleted")),
        "{body}"
    );
    let next =
        tokio::time::timeout(std::time::Duration::from_millis(200), server.next_request()).await;
    assert!(
        next.is_err() || next.unwrap().is_none(),
        "nothing is created after losing the record"
    );
}

/// An operator stopped between claiming a pod for the turn and recording it: the worker's next
/// open finds the pod by its turn label, records it and answers with it.
#[tokio::test]
async fn an_open_records_a_turns_pod_that_an_earlier_open_claimed_but_never_recorded() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let claimed = t1_pod(
        "t1-ccc",
        turn_labels(
            json!({"kubeharness.dev/tier": "rust", "kubeharness.dev/pool": "rust",
                           "kubeharness.dev/claimed": "true"}),
        ),
        json!({"kubeharness.dev/tier-level": "1"}),
        json!({"phase": "Pending"}),
        "9",
    );
    auth_session_tier(&mut server, vec![claimed], tier(2, true)).await;
    create_record(&mut server, "t1-ccc").await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(
        (code, body["pod"].as_str(), body["phase"].as_str()),
        (200, Some("t1-ccc"), Some("Pending")),
        "{body}"
    );
}

#[tokio::test]
async fn an_ended_turn_keeps_its_ready_pod_idle_for_the_sessions_next_turn() {
    let (base, mut server) = start().await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    let reply = call(&base, reqwest::Method::DELETE, "turn-1").await;
    let serving = t1_pod(
        &name,
        turn_labels(json!({"kubeharness.dev/tier": "rust"})),
        json!({"kubeharness.dev/turn-id": "turn-1"}),
        ready_status("10.0.0.9"),
        "3",
    );
    end_turn_1(&mut server, Some(&name), vec![serving]).await;
    read_tier(&mut server, keeping_tier(0, 45)).await;
    let release = expect(
        &mut server,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        200,
        t1_pod(&name, json!({}), json!({}), ready_status("10.0.0.9"), "4"),
    )
    .await;
    let meta = &release.body["metadata"];
    assert_eq!(meta["resourceVersion"], "3", "conditioned");
    assert_eq!(meta["labels"]["kubeharness.dev/turn"], Value::Null);
    assert_eq!(meta["annotations"]["kubeharness.dev/turn-id"], Value::Null);
    assert_eq!(
        meta["annotations"]["kubeharness.dev/turn-deadline"],
        Value::Null
    );
    let until: k8s_openapi::jiff::Timestamp = meta["annotations"]["kubeharness.dev/idle-until"]
        .as_str()
        .unwrap()
        .parse()
        .unwrap();
    let left = until.as_second() - k8s_openapi::jiff::Timestamp::now().as_second();
    assert!(
        (40..=46).contains(&left),
        "idle for the tier's 45 s: {left}"
    );
    // Not deleted; the turn's record stays a tombstone.
    read_session(&mut server, session(Some(("True", reasons::TIER1_READY)))).await;
    let patch = patch_session_status(&mut server).await;
    let esc = &patch.body["status"]["conditions"][0];
    assert_eq!(esc["reason"], reasons::TURN_ENDED);
    assert!(esc["message"].as_str().unwrap().contains("kept"), "{esc}");
    drain_events(&mut server, NS, 1).await;
    assert_eq!(reply.await.unwrap().0, 204);
}

/// Issue 30, item 2: the token is checked on the request's head, before any body byte is read.
/// A POST that sends its headers with a bad token and never its body got no answer for as long
/// as its client liked (the JSON extractor waited for the body first); now the token Secret is
/// read at once and the answer is 401. A good token's body that never comes is 408 at the pace
/// every body keeps, not held (checked in service-kit's pace tests).
#[tokio::test]
async fn the_token_is_checked_before_the_body_is_read() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (base, mut server) = start().await;
    let mut stream = tokio::net::TcpStream::connect(base.trim_start_matches("http://"))
        .await
        .unwrap();
    let head = format!(
        "POST /v1/namespaces/{NS}/sessions/demo/sandboxes HTTP/1.1\r\nHost: x\r\n\
         Authorization: Bearer not-the-token\r\nContent-Type: application/json\r\n\
         Content-Length: 100\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    tokio::time::timeout(
        std::time::Duration::from_secs(3),
        session_token(&mut server),
    )
    .await
    .expect("the token is read before the body comes");
    let mut answer = [0u8; 64];
    let n = tokio::time::timeout(std::time::Duration::from_secs(3), stream.read(&mut answer))
        .await
        .expect("answered without the body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer[..n]).to_string();
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
}

/// Issue 30, item 2: a client that keeps failing token checks is refused with 429 and a wait
/// before its token is looked at, so a flood of bad tokens costs the API server a bounded number
/// of Secret reads; another client is checked as usual.
#[tokio::test]
async fn a_client_failing_token_checks_is_429_without_a_secret_read() {
    let (client, mut server) = super::support::client();
    let mut ctx = Context::new(client, config());
    ctx.tier_auth = kube_harness_operator::tier1::auth::TierAuth::new(60, 2);
    let ctx = Arc::new(ctx);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    // Served as the operator serves it (the kit's server gives handlers the client's address).
    let app = api::router(ctx.clone());
    tokio::spawn(kube_harness_service_kit::serve(
        listener,
        app,
        std::future::pending(),
    ));
    let base = format!("http://{addr}");
    // Three failures spend the burst of two and one more: three Secret reads.
    for _ in 0..3 {
        let reply = post(&base, "not-the-token", json!({"turn": "turn-1"})).await;
        session_token(&mut server).await;
        assert_eq!(reply.await.unwrap().0, 401);
    }
    let reply = post(&base, "not-the-token", json!({"turn": "turn-1"})).await;
    assert_eq!(reply.await.unwrap().0, 429);
    let more = tokio::time::timeout(std::time::Duration::from_millis(300), server.next_request());
    assert!(more.await.is_err(), "a Secret read for a refused client");
}
