//! What a reconcile costs at scale (docs/performance.md, "Scale"): with the tier and the worker pod
//! in the caches, a session reconciled again makes no request at all; a child changed behind the
//! operator's back is applied again, alone; a session already gone is no error; the sessions-by-
//! phase gauges keep the same counts when updated per session instead of recounted.

use super::support::{drain_events, existing_token_secret, expect, expect_all, Handle, Want};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::runtime::controller::Action;
use kube::runtime::watcher;
use kube_harness_crds::{HarnessSession, Phase, SandboxTier};
use kube_harness_operator::{session, Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const NS: &str = "team-a";

fn session_obj() -> HarnessSession {
    serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1",
        "kind": "HarnessSession",
        "metadata": {"name": "demo", "namespace": NS, "uid": "uid-1", "generation": 3,
                     "resourceVersion": "10", "finalizers": ["kubeharness.dev/cleanup"]},
        "spec": {},
        // What the operator recorded when it made the pod and the Secret.
        "status": {"workerPod": "demo-worker", "workerPodUid": "pod-uid-1",
                   "tokenSecret": "demo-token", "tokenSecretUid": "secret-uid-1"},
    }))
    .unwrap()
}

/// A worker answering `/v1/status` on 127.0.0.1; returns its port.
async fn worker() -> u16 {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let (mut conn, _) = listener.accept().await.unwrap();
            tokio::spawn(async move {
                let mut buf = vec![0u8; 4096];
                let _ = conn.read(&mut buf).await;
                let body = r#"{"session":"demo","ready":true,"busy":false,"tier":0,"turns":1,"commands":{"tier0":2,"tier1":0},"refusals":0,"lastActivity":"2026-01-01T00:00:00Z"}"#;
                let reply = format!(
                    "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = conn.write_all(reply.as_bytes()).await;
            });
        }
    });
    port
}

/// A context whose caches hold the level-0 tier and a Ready worker pod at 127.0.0.1, with the
/// worker API on `port`.
fn cached_context(client: kube::Client, port: u16) -> Arc<Context> {
    let config = OperatorConfig {
        worker_port: port,
        ..OperatorConfig::for_namespace("kube-harness")
    };
    let mut ctx = Context::new(client, config);
    // Long enough for the local worker's answer on a loaded machine.
    ctx.report_wait = Duration::from_secs(5);
    let ctx = Arc::new(ctx);
    let mut writers = ctx.caches.take_writers().unwrap();
    let tier: SandboxTier = serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "SandboxTier",
        "metadata": {"name": "tier0", "uid": "t0", "generation": 1, "resourceVersion": "1"},
        "spec": {"namespaceSelector": {}, "level": 0, "template": {"image": "example.org/kh:1"}, "capabilities": ["python"]}
    }))
    .unwrap();
    writers
        .tiers
        .apply_watcher_event(&watcher::Event::Apply(tier));
    // The pod the operator would build, so its spec hash matches.
    let desired = session::resources::worker_pod_with(
        &session_obj(),
        &ctx.caches.tier("tier0").unwrap().spec,
        &ctx.config,
        &[],
        "demo-workspace",
        session::resources::worker_uid(&session_obj()),
    );
    let mut pod: Pod = desired;
    pod.metadata.resource_version = Some("5".into());
    pod.metadata.uid = Some("pod-uid-1".into());
    pod.status = Some(super::support::running_ready_on_loopback());
    writers
        .pods
        .apply_watcher_event(&watcher::Event::Apply(pod));
    ctx
}

/// Seconds until the requeue an Action asks for (it has no accessor; its Debug shows it).
fn requeue_secs(action: &Action) -> f64 {
    let text = format!("{action:?}");
    let inner = text
        .split("Some(")
        .nth(1)
        .and_then(|t| t.split(')').next())
        .unwrap_or_else(|| panic!("no requeue in {text}"));
    let (value, scale) = match inner.strip_suffix("ms") {
        Some(v) => (v, 1e-3),
        None => (inner.trim_end_matches('s'), 1.0),
    };
    value.parse::<f64>().unwrap_or_else(|_| panic!("{text}")) * scale
}

/// The first reconcile of a session whose pod runs: the token Secret read, the three children
/// applied, the status written (Ready, with the worker's figures), an Event for Ready (the initial conditions are none).
async fn first_reconcile(server: &mut Handle, ctx: &Arc<Context>) -> Value {
    first_reconcile_of(server, ctx, session_obj()).await
}

/// [`first_reconcile`] of `session`; a session without the cleanup finalizer gets it patched in
/// beside the children (the patch answers with [`session_obj`], which has it).
async fn first_reconcile_of(
    server: &mut Handle,
    ctx: &Arc<Context>,
    session: HarnessSession,
) -> Value {
    let adding = session.metadata.finalizers.is_none();
    let run = tokio::spawn(session::reconcile(Arc::new(session), ctx.clone()));
    let base = format!("/api/v1/namespaces/{NS}");
    let mut wants = existing_token_secret(NS, "demo-token");
    if adding {
        wants.push(Want::new(
            "PATCH",
            format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
            200,
            json!(session_obj()),
        ));
    }
    for (path, kind) in [
        (
            format!("{base}/persistentvolumeclaims/demo-workspace"),
            "PersistentVolumeClaim",
        ),
        (
            format!("/apis/networking.k8s.io/v1/namespaces/{NS}/networkpolicies/demo-worker"),
            "NetworkPolicy",
        ),
        (format!("{base}/services/demo-worker"), "Service"),
    ] {
        let api_version = if kind == "NetworkPolicy" {
            "networking.k8s.io/v1"
        } else {
            "v1"
        };
        wants.push(Want::new("PATCH", path, 200,
            json!({"apiVersion": api_version, "kind": kind, "metadata": {"name": "x", "resourceVersion": "20"}})));
    }
    // The Secret and the children are made at once.
    expect_all(server, wants).await;
    let mut written = session_obj();
    written.metadata.resource_version = Some("11".into());
    let status = expect(
        server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo/status"),
        200,
        json!(written),
    )
    .await;
    drain_events(server, NS, 1).await;
    let action = tokio::time::timeout(Duration::from_secs(5), run)
        .await
        .expect("the reconcile waits for no further request")
        .unwrap()
        .expect("reconcile");
    let after = requeue_secs(&action);
    assert!(
        (14.0..=15.0).contains(&after),
        "a Ready worker that answers is polled again in 15 s: {action:?}"
    );
    status.body["status"].clone()
}

#[tokio::test]
async fn a_ready_session_reconciled_again_makes_no_request() {
    let (client, mut server) = super::support::client();
    let ctx = cached_context(client, worker().await);
    let st = first_reconcile(&mut server, &ctx).await;
    assert_eq!(st["phase"], "Ready");
    assert_eq!(
        st["usage"]["commandsTier0"], 2,
        "the worker's answer, waited for: {st}"
    );

    // The watch has not brought the status write back yet: the same (stale) session again. Tier
    // and pod from the caches, tokens remembered, children unchanged, the worker not due for a
    // poll, the status the same as written: nothing to ask. A request would block this reconcile
    // (nobody answers it) and the timeout would fail the test.
    let again = tokio::spawn(session::reconcile(Arc::new(session_obj()), ctx.clone()));
    let action = tokio::time::timeout(Duration::from_secs(5), again)
        .await
        .expect("a second reconcile that asks the API server nothing")
        .unwrap()
        .expect("reconcile");
    assert!(requeue_secs(&action) > 10.0, "{action:?}");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), server.next_request())
            .await
            .is_err(),
        "no request"
    );
}

#[tokio::test]
async fn a_new_sessions_copy_from_before_its_finalizer_patch_does_not_patch_it_again() {
    let (client, mut server) = super::support::client();
    let ctx = cached_context(client, worker().await);
    let mut created = session_obj();
    created.metadata.finalizers = None;
    created.metadata.resource_version = Some("9".into());
    let st = first_reconcile_of(&mut server, &ctx, created.clone()).await;
    assert_eq!(st["phase"], "Ready");
    // The watch still shows the session as it was created (version 9, no finalizer): the
    // operator's own status write, made after its finalizer patch, says the finalizer is there.
    // Patching again from the stale list would fail its test with 422; here a request would
    // block the reconcile (nobody answers) and the timeout fail the test.
    let again = tokio::spawn(session::reconcile(Arc::new(created), ctx.clone()));
    tokio::time::timeout(Duration::from_secs(5), again)
        .await
        .expect("a second reconcile that asks the API server nothing")
        .unwrap()
        .expect("reconcile");
    assert!(
        tokio::time::timeout(Duration::from_millis(100), server.next_request())
            .await
            .is_err(),
        "no request"
    );
}

/// A session reconciled once; then someone edits its Service (its watch shows a version the
/// operator did not write), and a second reconcile starts. Returns the context and that reconcile.
async fn reconcile_after_a_service_edit(
    server: &mut Handle,
    client: kube::Client,
) -> (
    Arc<Context>,
    tokio::task::JoinHandle<kube_harness_operator::Result<Action>>,
) {
    let ctx = cached_context(client, worker().await);
    first_reconcile(server, &ctx).await;
    let edited: Service = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "demo-worker", "namespace": NS, "resourceVersion": "33"}
    }))
    .unwrap();
    ctx.caches
        .observe_event("Service", &watcher::Event::Apply(edited));
    let again = tokio::spawn(session::reconcile(Arc::new(session_obj()), ctx.clone()));
    (ctx, again)
}

#[tokio::test]
async fn a_child_changed_behind_the_operators_back_is_applied_again_alone() {
    let (client, mut server) = super::support::client();
    let (ctx, again) = reconcile_after_a_service_edit(&mut server, client).await;
    let svc = expect(
        &mut server,
        "PATCH",
        &format!("/api/v1/namespaces/{NS}/services/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "demo-worker", "resourceVersion": "34"}}),
    )
    .await;
    assert_eq!(svc.body["spec"]["ports"][0]["port"], ctx.config.worker_port);
    tokio::time::timeout(Duration::from_secs(5), again)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("reconcile");
}

#[tokio::test]
async fn a_service_with_a_cluster_ip_from_an_older_operator_is_made_again_headless() {
    let (client, mut server) = super::support::client();
    let (_ctx, again) = reconcile_after_a_service_edit(&mut server, client).await;
    let path = format!("/api/v1/namespaces/{NS}/services/demo-worker");
    let refused = expect(&mut server, "PATCH", &path, 422, json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Invalid", "code": 422,
        "message": "Service \"demo-worker\" is invalid: spec.clusterIPs[0]: Invalid value: [\"None\"]: may not change once set"
    }))
    .await;
    assert_eq!(refused.body["spec"]["clusterIP"], "None");
    expect(
        &mut server,
        "DELETE",
        &path,
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &path,
        404,
        super::support::not_found("services", "demo-worker"),
    )
    .await;
    let made = expect(&mut server, "PATCH", &path, 200,
        json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "demo-worker", "resourceVersion": "40"}})).await;
    assert_eq!(made.body["spec"]["clusterIP"], "None");
    tokio::time::timeout(Duration::from_secs(5), again)
        .await
        .expect("nothing else is asked")
        .unwrap()
        .expect("the reconcile succeeds with the Service made again");
}

#[tokio::test]
async fn a_session_deleted_while_its_cleanup_ran_is_no_error() {
    let (client, mut server) = super::support::client();
    let ctx = Arc::new(Context::new(
        client,
        OperatorConfig::for_namespace("kube-harness"),
    ));
    let mut obj = session_obj();
    obj.metadata.deletion_timestamp =
        Some(serde_json::from_value(json!("2026-11-30T10:00:00Z")).unwrap());
    let run = tokio::spawn(session::reconcile(Arc::new(obj), ctx.clone()));
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        404,
        super::support::not_found("pods", "demo-worker"),
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
    // The children by name, not left to the garbage collector (already gone here).
    super::support::expect_children_deleted(&mut server, NS, 404).await;
    drain_events(&mut server, NS, 1).await;
    // Another reconcile (from a cached copy) already removed the finalizer and the session went.
    expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        404,
        super::support::not_found("harnesssessions", "demo"),
    )
    .await;
    let result = run.await.unwrap();
    assert_eq!(
        result.expect("a session that is gone is done"),
        Action::await_change()
    );
    assert!(
        !ctx.metrics.encode().contains("reconcile_errors_total{"),
        "{}",
        ctx.metrics.encode()
    );
}

#[test]
fn sessions_by_phase_follow_each_update_without_a_recount() {
    let m = kube_harness_operator::metrics::Metrics::default();
    let gauge = |m: &kube_harness_operator::metrics::Metrics, phase: &str| -> i64 {
        let text = m.encode();
        let line = text
            .lines()
            .find(|l| l.starts_with(&format!("kube_harness_sessions{{phase=\"{phase}\"}}")))
            .unwrap_or_else(|| panic!("no {phase} gauge in {text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    for i in 0..1000 {
        m.session(
            &format!("session/ns/s{i}"),
            Some((Phase::Provisioning, 0, 0)),
        );
    }
    assert_eq!(gauge(&m, "Provisioning"), 1000);
    assert_eq!(gauge(&m, "Failed"), 0, "every phase is exported");
    for i in 0..600 {
        m.session(&format!("session/ns/s{i}"), Some((Phase::Ready, i % 2, 1)));
    }
    // The same figures again change nothing.
    m.session("session/ns/s0", Some((Phase::Ready, 0, 1)));
    for i in 0..100 {
        m.session(&format!("session/ns/s{i}"), None);
    }
    m.session("session/ns/never-seen", None);
    assert_eq!(gauge(&m, "Provisioning"), 400);
    assert_eq!(gauge(&m, "Ready"), 500);
    // 500 Ready sessions, 250 of them with their one command on Tier-0.
    assert!(
        m.encode().contains("kube_harness_tier0_share 0.5"),
        "{}",
        m.encode()
    );
}
