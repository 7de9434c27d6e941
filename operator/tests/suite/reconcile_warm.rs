//! A warm start against the mocked API server and a fake pooled worker: the session's children
//! and the claim of a warm pod are requested at once, then the PVC is handed over while the worker
//! is bound, and the session is Ready on the worker's own report of the adoption
//! (docs/performance.md, "Warm start").

use super::support::{answer, drain_events, expect, next};
use axum::routing::{get, post};
use axum::{Json, Router};
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::watcher;
use kube_harness_crds::{HarnessSession, SandboxTier};
use kube_harness_operator::warm::{self, objects};
use kube_harness_operator::{labels, session, Context, OperatorConfig};
use kube_harness_protocol::worker_api::{adoption_settings, AdoptRequest};
use serde_json::{json, Value};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const NS: &str = "team-a";
const POOL_POD: &str = "tier0-warm-abc12";

fn session_obj() -> HarnessSession {
    serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "metadata": {"name": "demo", "namespace": NS, "uid": "uid-1", "generation": 1,
                     "resourceVersion": "10", "finalizers": ["kubeharness.dev/cleanup"]},
        "spec": {},
    }))
    .unwrap()
}

/// A pooled worker on 127.0.0.1: `POST /v1/adopt` binds it (the request is kept), and
/// `/v1/status` then reports the adoption's digest. Returns its port and the adoption it got.
async fn pooled_worker() -> (u16, Arc<Mutex<Option<AdoptRequest>>>) {
    let adopted: Arc<Mutex<Option<AdoptRequest>>> = Arc::default();
    let (a, b) = (adopted.clone(), adopted.clone());
    let app = Router::new()
        .route(
            "/v1/adopt",
            post(move |Json(req): Json<AdoptRequest>| async move {
                let settings = adoption_settings(&req);
                *a.lock().unwrap() = Some(req);
                Json(json!({"session": "demo", "settings": settings}))
            }),
        )
        .route(
            "/v1/status",
            get(move || async move {
                let settings = b.lock().unwrap().as_ref().map(adoption_settings);
                Json(
                    json!({"session": "demo", "ready": settings.is_some(), "busy": false,
                    "tier": 0, "turns": 0, "commands": {"tier0": 0, "tier1": 0}, "refusals": 0,
                    "lastActivity": "2026-01-01T00:00:00Z", "settings": settings}),
                )
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (port, adopted)
}

/// A context whose caches hold a level-0 tier with a warm pool of one in NS, and that pool's idle,
/// Ready pod at 127.0.0.1 (returned), and no other pod.
fn warm_context(client: kube::Client, port: u16) -> (Arc<Context>, Pod) {
    warm_context_with(client, port, false)
}

/// As [`warm_context`]; `planted`: the pool's pod is a tenant's, made with the pool's labels and
/// template hash and the operator's proof of another pod (its real one's) copied on it.
fn warm_context_with(client: kube::Client, port: u16, planted: bool) -> (Arc<Context>, Pod) {
    let config = OperatorConfig {
        worker_port: port,
        ..OperatorConfig::for_namespace("kube-harness")
    };
    let mut ctx = super::support::with_origin(Context::new(client, config));
    ctx.report_wait = Duration::from_secs(5);
    let ctx = Arc::new(ctx);
    let mut writers = ctx.caches.take_writers().unwrap();
    let tier: SandboxTier = serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "tier0", "uid": "t0", "generation": 1, "resourceVersion": "1"},
        "spec": {"namespaceSelector": {}, "level": 0, "template": {"image": "example.org/kh:1"}, "capabilities": ["python"],
                 "warmPool": {"size": 1, "namespaces": [NS]}}
    }))
    .unwrap();
    let mut pod = objects::pool_pod(&tier, POOL_POD, NS, &ctx.config);
    pod.metadata.resource_version = Some("7".into());
    pod.metadata.uid = Some("warm-uid-1".into());
    // The operator's own warm pod: proven at its creation.
    let mut pod = ctx.origin.stamped(pod);
    if planted {
        pod.metadata.uid = Some("tenants-uid".into());
    }
    pod.status = Some(super::support::running_ready_on_loopback());
    writers
        .tiers
        .apply_watcher_event(&watcher::Event::Apply(tier));
    // A pod cache that has synced: it knows the session has no worker pod yet.
    for event in [
        watcher::Event::Init,
        watcher::Event::InitApply(pod.clone()),
        watcher::Event::InitDone,
    ] {
        writers.pods.apply_watcher_event(&event);
    }
    (ctx, pod)
}

/// The claimed pod as the API server answers the claim: the patch's metadata merged in.
fn claimed(pool: &Pod, patch: &Value) -> Value {
    let mut pod = serde_json::to_value(pool).unwrap();
    for key in ["labels", "annotations"] {
        for (k, v) in patch["metadata"][key].as_object().unwrap() {
            pod["metadata"][key][k] = v.clone();
        }
    }
    pod["metadata"]["ownerReferences"] = patch["metadata"]["ownerReferences"].clone();
    pod["metadata"]["resourceVersion"] = json!("8");
    pod
}

#[tokio::test]
async fn a_warm_start_claims_its_pod_while_it_makes_its_children() {
    let (client, mut server) = super::support::client();
    let (port, adopted) = pooled_worker().await;
    let (ctx, pool) = warm_context(client, port);
    let run = tokio::spawn(session::reconcile(Arc::new(session_obj()), ctx.clone()));
    let api = format!("/api/v1/namespaces/{NS}");

    // Five requests in flight before the API server has answered any: the token Secret, the
    // NetworkPolicy, the Service, the claim and the pool's token.
    let mut arrived = Vec::new();
    for _ in 0..5 {
        arrived.push(next(&mut server, "the warm start's first requests, at once").await);
    }
    let mut paths: Vec<String> = arrived
        .iter()
        .map(|a| format!("{} {}", a.method, a.path))
        .collect();
    paths.sort();
    let pool_secret = objects::pool_object_name("tier0");
    let mut want = vec![
        format!("POST {api}/secrets"),
        format!("PATCH /apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/demo-worker"),
        format!("PATCH {api}/services/demo-worker"),
        format!("PATCH {api}/pods/{POOL_POD}"),
        format!("GET {api}/secrets/{pool_secret}"),
    ];
    want.sort();
    assert_eq!(paths, want, "no PVC of its own: the warm pod brings one");
    for a in arrived {
        let reply = match (a.method.as_str(), a.path.as_str()) {
            ("PATCH", p) if p.ends_with(POOL_POD) => {
                // Conditioned on the resourceVersion the pod cache showed.
                assert_eq!(a.seen.body["metadata"]["resourceVersion"], "7");
                assert_eq!(a.seen.body["metadata"]["labels"][labels::CLAIMED], "true");
                claimed(&pool, &a.seen.body)
            }
            ("GET", _) => json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": pool_secret}, "data": {"token": "cG9vbC10b2tlbg=="}}),
            ("POST", _) => {
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "demo-token"}})
            }
            (_, p) if p.contains("networkpolicies") => json!({"apiVersion": "networking.k8s.io/v1",
                "kind": "NetworkPolicy", "metadata": {"name": "demo-worker"}}),
            _ => {
                json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "demo-worker"}})
            }
        };
        let status = if a.method == "POST" { 201 } else { 200 };
        answer(a, status, &reply);
    }

    // The warm pod's PVC is handed to the session while the worker is bound.
    let pvc = expect(
        &mut server,
        "PATCH",
        &format!(
            "{api}/persistentvolumeclaims/{}",
            objects::claim_name(POOL_POD)
        ),
        200,
        json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "x"}}),
    )
    .await;
    assert_eq!(pvc.body["metadata"]["ownerReferences"][0]["uid"], "uid-1");

    let status = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo/status"),
        200,
        serde_json::to_value(session_obj()).unwrap(),
    )
    .await;
    let st = &status.body["status"];
    assert_eq!(st["phase"], "Ready", "{st}");
    assert_eq!(st["workerPod"], POOL_POD);
    let req = adopted
        .lock()
        .unwrap()
        .clone()
        .expect("the worker was bound");
    assert_eq!(
        req.token.len(),
        64,
        "the session's own token, sent at the bind"
    );
    drain_events(&mut server, NS, 1).await;
    tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the reconcile waits for no further request")
        .unwrap()
        .expect("reconcile");
}

/// Issue 30: a tenant's pod with the pool's labels, template hash and a copy of the operator's
/// proof of origin from another pod, Ready in the session's namespace, is never claimed nor sent
/// the session's tokens (`POST /v1/adopt`): it is deleted (that uid) with a Warning Event, and
/// the session starts cold.
#[tokio::test]
async fn a_planted_warm_pod_without_the_operators_proof_is_never_adopted() {
    let (client, mut server) = super::support::client();
    let (port, adopted) = pooled_worker().await;
    let (ctx, planted) = warm_context_with(client, port, true);
    assert!(planted
        .metadata
        .annotations
        .as_ref()
        .unwrap()
        .contains_key(kube_harness_operator::origin::ANNOTATION));
    let tier = ctx.caches.tier("tier0").unwrap();
    let claim = tokio::spawn({
        let ctx = ctx.clone();
        async move {
            warm::adopt::claim(&session_obj(), &tier, &ctx, &[], |_, _| "h".into())
                .await
                .map(|c| match c {
                    warm::adopt::Claim::Done(o) => format!("{o:?}"),
                    warm::adopt::Claim::Claimed(_) => "claimed".into(),
                })
        }
    });
    let event = super::support::expect_unproven_pod_deleted(&mut server, NS, POOL_POD).await;
    assert_eq!(event["regarding"]["name"], POOL_POD);
    let outcome = tokio::time::timeout(Duration::from_secs(5), claim)
        .await
        .expect("the claim asks nothing more")
        .unwrap()
        .expect("claim");
    assert_eq!(outcome, r#"Miss("pool-empty")"#, "a cold start");
    assert!(
        adopted.lock().unwrap().is_none(),
        "the planted pod was never sent the session's tokens"
    );
}
