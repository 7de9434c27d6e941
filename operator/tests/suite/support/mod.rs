//! A mocked API server for reconcile unit tests (the kube-rs/controller-rs pattern): the test
//! states the exact requests it expects, in order, and what the "server" answers. Any request
//! out of order or missing fails the test.

use http::{Request, Response};
use kube::client::Body;
use kube::Client;
use serde_json::{json, Value};

pub type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub fn client() -> (Client, Handle) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), handle)
}

/// One request seen by the mock server.
pub struct Seen {
    pub query: String,
    pub body: Value,
    pub content_type: String,
}

/// A request taken from the mock server, not answered yet.
pub struct Arrived {
    pub method: String,
    pub path: String,
    pub seen: Seen,
    send: tower_test::mock::SendResponse<Response<Body>>,
}

/// The next request, unanswered (`expected` names it for the timeout's message).
pub async fn next(handle: &mut Handle, expected: &str) -> Arrived {
    let (request, send) =
        tokio::time::timeout(std::time::Duration::from_secs(5), handle.next_request())
            .await
            .unwrap_or_else(|_| panic!("no request arrived; expected {expected}"))
            .unwrap_or_else(|| panic!("client gone; expected {expected}"));
    let method = request.method().to_string();
    let path = request.uri().path().to_string();
    let query = request.uri().query().unwrap_or_default().to_string();
    let content_type = request
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let bytes = request.into_body().collect_bytes().await.unwrap();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap_or(Value::Null)
    };
    Arrived {
        method,
        path,
        seen: Seen {
            query,
            body,
            content_type,
        },
        send,
    }
}

/// Whether a request is the one expected. Events the recorder already posted come back as
/// PATCHes of their series.
fn matches(arrived: &Arrived, method: &str, path: &str) -> bool {
    if path.contains("/apis/events.k8s.io/") {
        arrived.path.starts_with(path) && (arrived.method == "POST" || arrived.method == "PATCH")
    } else {
        arrived.method == method && arrived.path == path
    }
}

/// Answers a request taken with [`next`].
pub fn answer(arrived: Arrived, status: u16, reply: &Value) -> Seen {
    let response = Response::builder()
        .status(status)
        .body(Body::from(serde_json::to_vec(reply).unwrap()))
        .unwrap();
    arrived.send.send_response(response);
    arrived.seen
}

/// Waits for the next request, checks its method and path, answers `status` with `reply`.
pub async fn expect(
    handle: &mut Handle,
    method: &str,
    path: &str,
    status: u16,
    reply: Value,
) -> Seen {
    let arrived = next(handle, &format!("{method} {path}")).await;
    assert!(
        matches(&arrived, method, path),
        "unexpected request: {} {}, expected {method} {path} (body: {})",
        arrived.method,
        arrived.path,
        arrived.seen.body
    );
    answer(arrived, status, &reply)
}

/// One request of a group the operator makes at once.
pub struct Want {
    pub method: &'static str,
    pub path: String,
    pub status: u16,
    pub reply: Value,
}

impl Want {
    pub fn new(method: &'static str, path: impl Into<String>, status: u16, reply: Value) -> Self {
        Want {
            method,
            path: path.into(),
            status,
            reply,
        }
    }
}

/// Requests the operator makes concurrently (one `tokio::join!`): each of `wants` exactly once,
/// in whatever order they come (a request may follow another's answer, as the Secret's read
/// follows its create's 409). Returns what was seen, in the order of `wants`.
pub async fn expect_all(handle: &mut Handle, wants: Vec<Want>) -> Vec<Seen> {
    let mut seen: Vec<Option<Seen>> = wants.iter().map(|_| None).collect();
    for _ in 0..wants.len() {
        let left: Vec<String> = wants
            .iter()
            .zip(&seen)
            .filter(|(_, s)| s.is_none())
            .map(|(w, _)| format!("{} {}", w.method, w.path))
            .collect();
        let arrived = next(handle, &left.join(", ")).await;
        let i = wants
            .iter()
            .zip(&seen)
            .position(|(w, s)| s.is_none() && matches(&arrived, w.method, &w.path))
            .unwrap_or_else(|| {
                panic!(
                    "unexpected request: {} {}, expected one of {left:?} (body: {})",
                    arrived.method, arrived.path, arrived.seen.body
                )
            });
        seen[i] = Some(answer(arrived, wants[i].status, &wants[i].reply));
    }
    seen.into_iter().map(Option::unwrap).collect()
}

/// The API server's 404 body.
pub fn not_found(kind: &str, name: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{kind} \"{name}\" not found"), "reason": "NotFound",
        "details": {"name": name, "kind": kind}, "code": 404
    })
}

/// A 409 AlreadyExists answer to a create.
pub fn already_exists(kind: &str, name: &str) -> Value {
    json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("{kind} \"{name}\" already exists"), "reason": "AlreadyExists",
        "details": {"name": name, "kind": kind}, "code": 409
    })
}

/// The session's token Secret exists already: the reconcile's create meets a 409, and it reads
/// the Secret (token "tok"). Two requests of the group the reconcile makes at once.
pub fn existing_token_secret(ns: &str, name: &str) -> Vec<Want> {
    let base = format!("/api/v1/namespaces/{ns}");
    vec![
        Want::new(
            "POST",
            format!("{base}/secrets"),
            409,
            already_exists("secrets", name),
        ),
        Want::new(
            "GET",
            format!("{base}/secrets/{name}"),
            200,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "uid": "secret-uid-1",
                "ownerReferences": owned_by_demo()}, "data": {"token": "dG9r"}}),
        ),
    ]
}

/// The controller owner reference of what session `demo` (uid `uid-1`) owns.
pub fn owned_by_demo() -> Value {
    json!([{"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession", "name": "demo",
        "uid": "uid-1", "controller": true, "blockOwnerDeletion": true}])
}

/// The cleanup deletes session `demo`'s children by name (Service, NetworkPolicy, token Secret,
/// workspace PVC), each answered with `status` (404: already gone).
pub async fn expect_children_deleted(handle: &mut Handle, ns: &str, status: u16) {
    for (path, kind) in [
        (
            format!("/api/v1/namespaces/{ns}/services/demo-worker"),
            "services",
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{ns}/networkpolicies/demo-worker"),
            "networkpolicies",
        ),
        (
            format!("/api/v1/namespaces/{ns}/secrets/demo-token"),
            "secrets",
        ),
        (
            format!("/api/v1/namespaces/{ns}/persistentvolumeclaims/demo-workspace"),
            "persistentvolumeclaims",
        ),
    ] {
        let reply = if status == 404 {
            not_found(kind, "demo")
        } else {
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
        };
        expect(handle, "DELETE", &path, status, reply).await;
    }
}

/// Answers the next `n` Event requests (new Events, or PATCHes of a repeated Event's series) and
/// returns their bodies.
pub async fn drain_events(handle: &mut Handle, ns: &str, n: usize) -> Vec<Value> {
    let mut out = Vec::new();
    for _ in 0..n {
        let seen = expect(
            handle,
            "POST",
            &format!("/apis/events.k8s.io/v1/namespaces/{ns}/events"),
            201,
            json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": "e", "namespace": ns}, "eventTime": "2026-01-01T00:00:00.000000Z", "reportingController": "x", "reportingInstance": "x", "action": "x", "reason": "x", "type": "Normal"}),
        )
        .await;
        out.push(seen.body);
    }
    out
}

/// A worker pod's status as the kubelet reports one running and Ready at 127.0.0.1, where the
/// tests serve their fake worker.
pub fn running_ready_on_loopback() -> k8s_openapi::api::core::v1::PodStatus {
    serde_json::from_value(json!({
        "phase": "Running", "podIP": "127.0.0.1",
        "conditions": [{"type": "Ready", "status": "True"}],
        "containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": true,
            "restartCount": 0, "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}}}]
    }))
    .unwrap()
}

/// The proof-of-origin key of the tests' contexts ([`with_origin`]).
pub fn origin_key() -> kube_harness_operator::origin::OriginKey {
    kube_harness_operator::origin::OriginKey::from_bytes([42; 32])
}

/// `ctx` proving pods with [`origin_key`], so fixtures made with [`proven`] are the operator's.
pub fn with_origin(mut ctx: kube_harness_operator::Context) -> kube_harness_operator::Context {
    ctx.origin = origin_key();
    ctx
}

/// A pod (as JSON) carrying the operator's proof of origin for its namespace, name and uid.
pub fn proven(mut pod: Value) -> Value {
    let m = &pod["metadata"];
    let proof = origin_key().proof(
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        m["uid"].as_str().unwrap_or_default(),
    );
    if !pod["metadata"]["annotations"].is_object() {
        pod["metadata"]["annotations"] = json!({});
    }
    pod["metadata"]["annotations"][kube_harness_operator::origin::ANNOTATION] = json!(proof);
    pod
}

/// A turn record (HarnessTurn, as JSON) carrying the operator's proof for its namespace, name and
/// session uid label.
pub fn proven_turn(mut turn: Value) -> Value {
    let m = &turn["metadata"];
    let proof = origin_key().turn_proof(
        m["namespace"].as_str().unwrap_or_default(),
        m["name"].as_str().unwrap_or_default(),
        m["labels"]["kubeharness.dev/session-uid"]
            .as_str()
            .unwrap_or_default(),
    );
    if !turn["metadata"]["annotations"].is_object() {
        turn["metadata"]["annotations"] = json!({});
    }
    turn["metadata"]["annotations"][kube_harness_operator::origin::ANNOTATION] = json!(proof);
    turn
}

/// Expects the operator to delete the planted pod `ns/name` (only that uid: `tenants-uid`) and to
/// publish a Warning Event `PodOriginUnproven` about it; returns the Event.
pub async fn expect_unproven_pod_deleted(handle: &mut Handle, ns: &str, name: &str) -> Value {
    let deleted = expect(
        handle,
        "DELETE",
        &format!("/api/v1/namespaces/{ns}/pods/{name}"),
        200,
        json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
    )
    .await;
    assert_eq!(deleted.body["preconditions"], json!({"uid": "tenants-uid"}));
    let event = drain_events(handle, ns, 1).await.remove(0);
    assert_eq!(
        event["reason"],
        kube_harness_crds::condition::reasons::POD_ORIGIN_UNPROVEN
    );
    assert_eq!(event["type"], "Warning");
    event
}

/// The condition of type `type_` in a status (as JSON); panics naming the status when it is
/// missing.
pub fn condition<'a>(status: &'a Value, type_: &str) -> &'a Value {
    status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {status}"))
}
