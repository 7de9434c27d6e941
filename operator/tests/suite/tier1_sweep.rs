//! The leader's Tier-1 sweep against a mocked API server: lifetimes (a kept pod past its idle
//! time, a turn past its bound) and orphans (a turn record whose pod never came, with the
//! ordinary pod's token Secret it left; a pod claimed for a turn that nothing recorded; a pod of a
//! session created again under the same name). Each thing deleted is an Event and a metric.

use super::support::{drain_events, expect, not_found, proven_turn, Handle};
use kube_harness_crds::condition::reasons;
use kube_harness_operator::tier1::{pod, record, sweep};
use kube_harness_operator::{Context, OperatorConfig};
use serde_json::{json, Value};
use std::sync::Arc;

const NS: &str = "team-a";
const OP: &str = "kube-harness";

fn context() -> (Arc<Context>, Handle) {
    let (client, server) = super::support::client();
    let config = OperatorConfig {
        tier_api_url: Some("http://kh-operator.kube-harness.svc:8081".into()),
        ..OperatorConfig::for_namespace(OP)
    };
    (
        Arc::new(super::support::with_origin(Context::new(client, config))),
        server,
    )
}

fn at(secs: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(
        k8s_openapi::jiff::Timestamp::now().as_second() + secs,
    )
    .unwrap()
    .to_string()
}

fn ok() -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"})
}

/// A Tier-1 pod of session demo, Ready, opened by worker `w-uid/0`.
fn t1(name: &str, labels: Value, annotations: Value) -> Value {
    let mut l = json!({"kubeharness.dev/role": "tier1", "kubeharness.dev/tier": "rust",
        "kubeharness.dev/session-namespace": NS, "kubeharness.dev/session": "demo",
        "kubeharness.dev/session-uid": "s-uid"});
    for (k, v) in labels.as_object().unwrap() {
        l[k] = v.clone();
    }
    let mut a = json!({"kubeharness.dev/worker-uid": "w-uid/0"});
    for (k, v) in annotations.as_object().unwrap() {
        a[k] = v.clone();
    }
    json!({"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": name, "namespace": NS, "uid": format!("uid-{name}"), "resourceVersion": "1",
                        "creationTimestamp": at(-3600), "labels": l, "annotations": a},
           "spec": {"containers": [{"name": "agent", "image": "x"}]},
           "status": {"phase": "Running", "podIP": "10.0.0.1", "conditions": [{"type": "Ready", "status": "True"}]}})
}

/// A pod in namespace `tenant-a` carrying this session's labels (see [`t1`]); without the
/// session's uid unless `with_uid`.
fn planted(name: &str, labels: Value, annotations: Value, with_uid: bool) -> Value {
    let mut p = t1(name, labels, annotations);
    p["metadata"]["namespace"] = json!("tenant-a");
    if !with_uid {
        let l = p["metadata"]["labels"].as_object_mut().unwrap();
        l.remove("kubeharness.dev/session-uid");
    }
    p
}

/// The record of session demo's turn `turn`, naming `holder`, written `written` seconds from now.
fn lease(holder: &str, turn: &str, written: i64) -> Value {
    proven_turn(
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
           "metadata": {"name": record::name(NS, "demo", turn), "namespace": NS, "creationTimestamp": at(written),
                        "labels": {"kubeharness.dev/role": "tier1", "kubeharness.dev/session-namespace": NS,
                                   "kubeharness.dev/session": "demo", "kubeharness.dev/session-uid": "s-uid",
                                   "kubeharness.dev/turn": pod::turn_label(turn)}},
           "spec": {"session": "demo", "turn": turn, "pod": holder}}),
    )
}

/// The path of the turn records of every namespace, and of one in the session's.
fn records_path(name: Option<&str>) -> String {
    match name {
        None => "/apis/kubeharness.dev/v1alpha1/harnessturns".into(),
        Some(n) => format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnessturns/{n}"),
    }
}

fn record_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurnList", "metadata": {}, "items": items})
}

fn session() -> Value {
    json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
           "metadata": {"name": "demo", "namespace": NS, "uid": "s-uid", "generation": 1},
           "spec": {"escalation": {"tier": "rust"}},
           "status": {"conditions": [{"type": "Escalated", "status": "True", "reason": reasons::TIER1_READY,
                      "message": "m", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
}

async fn deleted_pod(server: &mut Handle, name: &str) {
    expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        200,
        ok(),
    )
    .await;
    expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        200,
        ok(),
    )
    .await;
}

/// One sweep over: a kept pod past its idle time; a turn past its bound (recorded); a pod claimed
/// for a turn that nothing recorded, 10 minutes ago; a pod of the session's earlier incarnation; a
/// turn's pod still within every bound; a turn record whose pod never came (written 5 minutes
/// ago) with its ordinary Secret; and a fresh record whose pod is being created.
#[tokio::test]
async fn the_sweep_ends_lifetimes_and_orphans_with_an_event_and_a_metric_each() {
    let (ctx, mut server) = context();
    let run = {
        let ctx = ctx.clone();
        tokio::spawn(async move { sweep::sweep(&ctx).await })
    };
    let turn = |t: &str| pod::turn_label(t);
    let records = vec![
        lease("t1-timed", "t-timed", -4000),
        lease("t1-live", "t-live", -100),
        lease("t1-never", "t-orphan", -300),
        lease("t1-coming", "t-fresh", -5),
    ];
    // The ordinary pods' (and Secrets') names of the timed-out and the orphaned turn.
    let timed_ordinary = pod::ordinary_name(NS, "demo", "t-timed");
    let never_ordinary = pod::ordinary_name(NS, "demo", "t-orphan");
    let (timed_record, orphan_record) = (
        record::name(NS, "demo", "t-timed"),
        record::name(NS, "demo", "t-orphan"),
    );
    let listed = expect(
        &mut server,
        "GET",
        &records_path(None),
        200,
        record_list(records),
    )
    .await;
    assert!(
        listed.query.contains("kubeharness.dev%2Frole%3Dtier1"),
        "{}",
        listed.query
    );
    let pods = vec![
        t1(
            "t1-idle",
            json!({}),
            json!({"kubeharness.dev/idle-until": at(-2)}),
        ),
        t1(
            "t1-timed",
            json!({"kubeharness.dev/turn": turn("t-timed")}),
            json!({"kubeharness.dev/turn-id": "t-timed", "kubeharness.dev/turn-deadline": at(-1),
                   "kubeharness.dev/turn-started": at(-4000)}),
        ),
        t1(
            "t1-unrecorded",
            json!({"kubeharness.dev/turn": turn("t-lost")}),
            json!({"kubeharness.dev/turn-id": "t-lost", "kubeharness.dev/turn-deadline": at(3600),
                   "kubeharness.dev/turn-started": at(-600)}),
        ),
        t1(
            "t1-old",
            json!({"kubeharness.dev/session-uid": "old-uid", "kubeharness.dev/turn": turn("t-old")}),
            json!({}),
        ),
        t1(
            "t1-live",
            json!({"kubeharness.dev/turn": turn("t-live")}),
            json!({"kubeharness.dev/turn-id": "t-live", "kubeharness.dev/turn-deadline": at(40),
                   "kubeharness.dev/turn-started": at(-100)}),
        ),
        // Planted by a tenant of another namespace, labelled for this session: one past its
        // bound with a message of the tenant's (it would write demo's status and a Warning
        // Event), one newer than t1-live with demo's uid (it would supersede t1-live). Neither
        // is judged: no request below is theirs, and t1-live stays.
        planted(
            "t1-planted-timed",
            json!({"kubeharness.dev/turn": turn("t-evil")}),
            json!({"kubeharness.dev/turn-id": "click here", "kubeharness.dev/turn-deadline": at(-1)}),
            false,
        ),
        planted(
            "t1-planted-newer",
            json!({"kubeharness.dev/turn": turn("t-newer")}),
            json!({"kubeharness.dev/turn-started": at(36000)}),
            true,
        ),
    ];
    expect(
        &mut server,
        "GET",
        "/api/v1/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}),
    )
    .await;
    // The session and its worker, once.
    expect(
        &mut server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        session(),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS, "uid": "w-uid"},
               "status": {"containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}}),
    )
    .await;
    // The kept pod past its idle time: deleted, an Event on it and one on its session.
    deleted_pod(&mut server, "t1-idle").await;
    let on_pod = drain_events(&mut server, NS, 1).await;
    assert_eq!(on_pod[0]["reason"], "Tier1Swept");
    assert_eq!(on_pod[0]["regarding"]["name"], "t1-idle");
    let on_session = drain_events(&mut server, NS, 1).await;
    assert_eq!(on_session[0]["reason"], "Tier1IdleExpired");
    // The turn past its bound: deleted; the session's Escalated becomes TurnTimedOut, with a
    // Warning Event.
    deleted_pod(&mut server, "t1-timed").await;
    drain_events(&mut server, NS, 1).await;
    expect(
        &mut server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        session(),
    )
    .await;
    let status = expect(
        &mut server,
        "PATCH",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo/status"),
        200,
        session(),
    )
    .await;
    let esc = &status.body["status"]["conditions"][0];
    assert_eq!(
        (esc["status"].as_str(), esc["reason"].as_str()),
        (Some("False"), Some(reasons::TURN_TIMED_OUT)),
        "{esc}"
    );
    assert!(
        esc["message"].as_str().unwrap().contains("t1-timed"),
        "{esc}"
    );
    let timed_out = drain_events(&mut server, NS, 1).await;
    assert_eq!(
        (
            timed_out[0]["reason"].as_str(),
            timed_out[0]["type"].as_str()
        ),
        (Some("Tier1TurnTimedOut"), Some("Warning"))
    );
    // The pod whose turn was never recorded, and the old incarnation's pod.
    deleted_pod(&mut server, "t1-unrecorded").await;
    drain_events(&mut server, NS, 1).await;
    deleted_pod(&mut server, "t1-old").await;
    drain_events(&mut server, NS, 1).await;
    // The timed-out turn's record (its pod just went, and it is old), then the orphaned record
    // and its ordinary Secret; the live and the fresh records stay.
    expect(
        &mut server,
        "DELETE",
        &records_path(Some(&timed_record)),
        200,
        ok(),
    )
    .await;
    drain_events(&mut server, NS, 1).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{timed_ordinary}"),
        404,
        not_found("secrets", &timed_ordinary),
    )
    .await;
    expect(
        &mut server,
        "DELETE",
        &records_path(Some(&orphan_record)),
        200,
        ok(),
    )
    .await;
    drain_events(&mut server, NS, 1).await;
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{never_ordinary}"),
        200,
        ok(),
    )
    .await;
    let secret_event = drain_events(&mut server, NS, 1).await;
    assert_eq!(secret_event[0]["regarding"]["kind"], "Secret");
    let report = tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let swept: Vec<(&str, &str, &str)> = report
        .swept
        .iter()
        .map(|s| (s.kind, s.name.as_str(), s.reason))
        .collect();
    assert_eq!(
        swept,
        vec![
            ("pod", "t1-idle", "idle_timeout"),
            ("pod", "t1-timed", "turn_timeout"),
            ("pod", "t1-unrecorded", "unrecorded"),
            ("pod", "t1-old", "session_gone"),
            ("record", timed_record.as_str(), "no_pod"),
            ("record", orphan_record.as_str(), "no_pod"),
            ("secret", never_ordinary.as_str(), "no_pod"),
        ]
    );
    // The live turn's bound is 40 s away: the next sweep comes no later.
    let next = report.next.expect("a lifetime due");
    assert!(next <= std::time::Duration::from_secs(40), "{next:?}");
    let metrics = ctx.metrics.encode();
    for (kind, reason, n) in [
        ("pod", "idle_timeout", 1),
        ("pod", "turn_timeout", 1),
        ("pod", "unrecorded", 1),
        ("pod", "session_gone", 1),
        ("record", "no_pod", 2),
        ("secret", "no_pod", 1),
    ] {
        let line =
            format!("kube_harness_tier1_swept_total{{kind=\"{kind}\",reason=\"{reason}\"}} {n}");
        assert!(metrics.contains(&line), "{line} in {metrics}");
    }
    assert!(
        metrics.contains("kube_harness_tier1_pods{tier=\"rust\",state=\"serving\"} 1"),
        "{metrics}"
    );
}

/// A turn whose record names another pod: the pod that lost the race (its open stopped before
/// giving it up) goes at once.
#[test]
fn a_pod_whose_turn_another_pod_holds_goes_and_one_recorded_stays() {
    let pod: k8s_openapi::api::core::v1::Pod = serde_json::from_value(t1(
        "t1-b",
        json!({"kubeharness.dev/turn": pod::turn_label("t")}),
        json!({"kubeharness.dev/turn-started": at(-1)}),
    ))
    .unwrap();
    let now = k8s_openapi::jiff::Timestamp::now();
    assert_eq!(
        sweep::lifetime(&pod, Some("t1-a"), now).map(|v| v.reason),
        Some("lost_race")
    );
    assert_eq!(sweep::lifetime(&pod, Some("t1-b"), now), None);
    // Not recorded yet, but just opened: the open may still record it.
    assert_eq!(sweep::lifetime(&pod, None, now), None);
}

/// The record of session demo's turn `turn` (uid `uid-<alias>`), naming `holder`, written
/// `written` seconds from now; ended since `ended` seconds from now when given.
fn record(alias: &str, holder: &str, turn: &str, written: i64, ended: Option<i64>) -> Value {
    let mut annotations = json!({});
    if let Some(at_) = ended {
        annotations["kubeharness.dev/turn-ended"] = json!(at(at_));
    }
    proven_turn(
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
           "metadata": {"name": record::name(NS, "demo", turn), "namespace": NS, "uid": format!("uid-{alias}"), "resourceVersion": "4",
                        "creationTimestamp": at(written),
                        "labels": {"kubeharness.dev/role": "tier1", "kubeharness.dev/session-namespace": NS,
                                   "kubeharness.dev/session": "demo", "kubeharness.dev/session-uid": "s-uid",
                                   "kubeharness.dev/turn": pod::turn_label(turn)},
                        "annotations": annotations},
           "spec": {"session": "demo", "turn": turn, "pod": holder, "ended": ended.is_some()}}),
    )
}

/// `r` moved to namespace tenant-a as its own session x's record (proven there), keeping its
/// labels of session demo's turn.
fn relabelled(mut r: Value) -> Value {
    let turn = r["spec"]["turn"].as_str().unwrap().to_string();
    r["metadata"]["namespace"] = json!("tenant-a");
    r["metadata"]["name"] = json!(record::name("tenant-a", "x", &turn));
    r["spec"]["session"] = json!("x");
    proven_turn(r)
}

/// One sweep over: a pod whose turn's record is a tombstone (the turn ended, and an open still
/// under way made it: deleted); two serving turns of one session (two opens of new turns at
/// once: the older goes); a kept pod no longer Ready (its agent gave it up: deleted); a kept pod
/// past its idle time that was claimed between the list and the delete (the resourceVersion
/// precondition fails: left); a pod of another session that cannot be read (a failed request:
/// counted, and the sweep goes on); a tombstone past its time (deleted quietly) and a fresh one
/// (kept).
#[tokio::test]
async fn the_sweep_ends_ended_and_superseded_turns_and_unready_kept_pods_and_goes_on_after_errors()
{
    let (ctx, mut server) = context();
    let run = {
        let ctx = ctx.clone();
        tokio::spawn(async move { sweep::sweep(&ctx).await })
    };
    let turn = |t: &str| pod::turn_label(t);
    let records = vec![
        record("t1-turn-end", "t1-ended", "t-end", -60, Some(-30)),
        record("t1-turn-gone", "t1-gone", "t-gone", -900, Some(-700)),
        record("t1-turn-a", "t1-older", "t-a", -10, None),
        record("t1-turn-b", "t1-newer", "t-b", -10, None),
        // Another namespace's proven record relabelled as demo's turn t-b (a tenant that may
        // write turn objects can change their labels): its turn is read from its namespace and
        // spec, so it never makes t1-newer a pod that lost its turn's race.
        relabelled(record("t1-turn-evil", "t1-evil", "t-b", -10, None)),
    ];
    expect(
        &mut server,
        "GET",
        &records_path(None),
        200,
        record_list(records),
    )
    .await;
    let serving = |name: &str, t: &str, started: i64| {
        t1(
            name,
            json!({"kubeharness.dev/turn": turn(t)}),
            json!({"kubeharness.dev/turn-id": t, "kubeharness.dev/turn-started": at(started),
                   "kubeharness.dev/turn-deadline": at(3600)}),
        )
    };
    let mut broken = t1(
        "t1-broken",
        json!({}),
        json!({"kubeharness.dev/idle-until": at(100)}),
    );
    broken["status"]["conditions"][0]["status"] = json!("False");
    broken["metadata"]["creationTimestamp"] = json!(at(-60));
    let mut other = serving("t1-other", "t-o", -5);
    other["metadata"]["labels"]["kubeharness.dev/session"] = json!("other");
    let pods = vec![
        serving("t1-ended", "t-end", -60),
        serving("t1-older", "t-a", -50),
        serving("t1-newer", "t-b", -10),
        broken,
        t1(
            "t1-changed",
            json!({}),
            json!({"kubeharness.dev/idle-until": at(-5)}),
        ),
        other,
    ];
    expect(
        &mut server,
        "GET",
        "/api/v1/pods",
        200,
        json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/demo"),
        200,
        session(),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &format!("/api/v1/namespaces/{NS}/pods/demo-worker"),
        200,
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "demo-worker", "namespace": NS, "uid": "w-uid"},
               "status": {"containerStatuses": [{"name": "worker", "image": "x", "imageID": "", "ready": true, "restartCount": 0}]}}),
    )
    .await;
    for name in ["t1-ended", "t1-older", "t1-broken"] {
        let seen = expect(
            &mut server,
            "DELETE",
            &format!("/api/v1/namespaces/{NS}/pods/{name}"),
            200,
            ok(),
        )
        .await;
        assert_eq!(
            seen.body["preconditions"],
            json!({"uid": format!("uid-{name}"), "resourceVersion": "1"}),
            "the pod as listed"
        );
        expect(
            &mut server,
            "DELETE",
            &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
            200,
            ok(),
        )
        .await;
        drain_events(&mut server, NS, 1).await;
    }
    let claimed = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": "Precondition failed: ResourceVersion in precondition: 1, ResourceVersion in object meta: 2",
        "reason": "Conflict", "code": 409});
    expect(
        &mut server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/t1-changed"),
        409,
        claimed,
    )
    .await;
    expect(
        &mut server,
        "GET",
        &format!("/apis/kubeharness.dev/v1alpha1/namespaces/{NS}/harnesssessions/other"),
        500,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
               "message": "etcdserver: request timed out", "reason": "InternalError", "code": 500}),
    )
    .await;
    let seen = expect(
        &mut server,
        "DELETE",
        &records_path(Some(&record::name(NS, "demo", "t-gone"))),
        200,
        ok(),
    )
    .await;
    assert_eq!(
        seen.body["preconditions"],
        json!({"uid": "uid-t1-turn-gone", "resourceVersion": "4"})
    );
    let report = tokio::time::timeout(std::time::Duration::from_secs(5), run)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let swept: Vec<(&str, &str, &str)> = report
        .swept
        .iter()
        .map(|s| (s.kind, s.name.as_str(), s.reason))
        .collect();
    assert_eq!(
        swept,
        vec![
            ("pod", "t1-ended", "turn_ended"),
            ("pod", "t1-older", "superseded"),
            ("pod", "t1-broken", "not_ready"),
        ]
    );
    assert_eq!(report.errors, 1);
    let metrics = ctx.metrics.encode();
    assert!(
        metrics.contains("kube_harness_tier1_sweep_errors_total 1"),
        "{metrics}"
    );
}
