//! The tier API's hold on turns (docs/tier1.md, "Lifetimes"): one serving turn per session (a
//! new turn ends the others first), an ended turn stays ended (an open still under way when the
//! turn's DELETE came gives up what it made), and only this session object's turns count (not
//! those of an earlier session of the same name).

use super::super::support::{drain_events, expect, proven_turn, Handle};
use super::{
    call, config, create_record, find_turn, in_seconds, list_pool, list_records, ordinary,
    patch_pod, post, read_record, read_session, read_t1_secret, read_tier, ready_status,
    record_name_taken, record_path, records_path, session, session_token, start, t1_pod, tier,
    tier_obj, tombstone, worker_pod, NS, TOKEN,
};
use kube_harness_operator::tier1::{pod, record};
use serde_json::{json, Value};

/// Labels of a pod or record of session demo's turn `turn`, of session object `uid`.
fn of_turn(turn: &str, uid: &str) -> Value {
    json!({"kubeharness.dev/role": "tier1", "kubeharness.dev/tier": "rust",
           "kubeharness.dev/session-namespace": NS, "kubeharness.dev/session": "demo",
           "kubeharness.dev/session-uid": uid, "kubeharness.dev/turn": pod::turn_label(turn)})
}

/// The record of `turn` naming `holder`, of session object `uid`; `ended`: a tombstone.
fn record_of(turn: &str, holder: &str, uid: &str, ended: bool) -> Value {
    let mut annotations = json!({});
    if ended {
        annotations["kubeharness.dev/turn-ended"] = json!(in_seconds(-1));
    }
    proven_turn(
        json!({"apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
           "metadata": {"name": record::name(NS, "demo", turn), "namespace": NS, "uid": format!("uid-rec-{turn}"),
                        "resourceVersion": "8", "labels": of_turn(turn, uid), "annotations": annotations},
           "spec": {"session": "demo", "turn": turn, "pod": holder, "ended": ended}}),
    )
}

/// The delete of Tier-1 pod `name` and then its Secret; checks the pod's uid precondition.
async fn pod_deleted(server: &mut Handle, name: &str) {
    let seen = expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/pods/{name}"),
        200,
        t1_pod(name, json!({}), json!({}), json!({}), "9"),
    )
    .await;
    assert_eq!(
        seen.body["preconditions"],
        json!({"uid": format!("uid-{name}")}),
        "that very pod"
    );
    expect(
        server,
        "DELETE",
        &format!("/api/v1/namespaces/{NS}/secrets/{name}"),
        200,
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}),
    )
    .await;
}

/// Nothing more is asked of the API server.
async fn nothing_more(server: &mut Handle) {
    let next =
        tokio::time::timeout(std::time::Duration::from_millis(200), server.next_request()).await;
    assert!(
        next.is_err() || next.unwrap().is_none(),
        "a request after the answer"
    );
}

/// One serving turn per session: turn-0's pod still serves (its worker's DELETE was lost, or a
/// token holder opens turn after turn). Opening turn-1 first ends turn-0: its record becomes a
/// tombstone, then its pod, listed again after that, is deleted; only then is turn-1's own pod
/// made.
#[tokio::test]
async fn a_new_turn_ends_the_sessions_other_serving_turn_first() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    let older = t1_pod(
        "t1-older",
        of_turn("turn-0", "s-uid"),
        json!({"kubeharness.dev/turn-id": "turn-0"}),
        ready_status("10.0.0.3"),
        "5",
    );
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(&mut server, vec![older.clone()]).await;
    list_records(
        &mut server,
        vec![record_of("turn-0", "t1-older", "s-uid", false)],
    )
    .await;
    read_tier(&mut server, tier(0, false)).await;
    worker_pod(&mut server).await;
    let path = format!("{}/{}", records_path(), record::name(NS, "demo", "turn-0"));
    let sent = tombstone(
        &mut server,
        &path,
        record_of("turn-0", "t1-older", "s-uid", true),
    )
    .await;
    assert_eq!(sent.body["spec"]["turn"], "turn-0");
    find_turn(&mut server, vec![older]).await;
    pod_deleted(&mut server, "t1-older").await;
    let (_, made) = ordinary(&mut server, None).await;
    drain_events(&mut server, NS, 1).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["pod"], made["metadata"]["name"]);
}

/// An ended turn stays ended: the open of turn-1 recorded the turn's ordinary pod, then the
/// worker's DELETE of turn-1 made the record a tombstone and found no pod (it was not made yet),
/// then the open made the pod. Reading the record again, the open finds the tombstone: it deletes
/// the pod it made and answers 409. A later open of turn-1 is 409 at once and makes nothing.
#[tokio::test]
async fn an_open_that_completes_after_its_turn_ended_deletes_what_it_made() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    super::new_turn(&mut server, tier(0, false)).await;
    let name = pod::ordinary_name(NS, "demo", "turn-1");
    create_record(&mut server, &name).await;
    super::tier_policy(&mut server).await;
    let pods = format!("/api/v1/namespaces/{NS}");
    expect(
        &mut server,
        "POST",
        &format!("{pods}/secrets"),
        201,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}),
    )
    .await;
    expect(
        &mut server,
        "POST",
        &format!("{pods}/pods"),
        201,
        t1_pod(&name, json!({}), json!({}), json!({}), "1"),
    )
    .await;
    // Its proof of origin.
    expect(
        &mut server,
        "PATCH",
        &format!("{pods}/pods/{name}"),
        200,
        t1_pod(&name, json!({}), json!({}), json!({}), "2"),
    )
    .await;
    expect(
        &mut server,
        "PATCH",
        &format!("{pods}/secrets/{name}"),
        200,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": NS}}),
    )
    .await;
    expect(
        &mut server,
        "GET",
        &record_path(),
        200,
        record_of("turn-1", &name, "s-uid", true),
    )
    .await;
    pod_deleted(&mut server, &name).await;
    let (code, body) = reply.await.unwrap();
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["error"]["code"], "turn-ended", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("has ended"),
        "{body}"
    );
    nothing_more(&mut server).await;

    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(&mut server, vec![]).await;
    list_records(&mut server, vec![record_of("turn-1", &name, "s-uid", true)]).await;
    assert_eq!(reply.await.unwrap().0, 409);
    nothing_more(&mut server).await;
}

/// The same race on a pooled tier: the pool pod was claimed for turn-1, and recording it meets
/// the tombstone the turn's DELETE wrote meanwhile. The claimed pod is given up (deleted: nothing
/// was bound to it) and the answer is 409.
#[tokio::test]
async fn a_claim_whose_turn_ended_meanwhile_gives_the_pod_up() {
    let (base, mut server) = start().await;
    let reply = post(&base, TOKEN, json!({"turn": "turn-1"})).await;
    super::new_turn(&mut server, tier(1, true)).await;
    let hash = pod::template_hash(&tier_obj(1), &config());
    let pool_labels = json!({"kubeharness.dev/pool": "rust", "kubeharness.dev/claimed": "false",
                             "kubeharness.dev/template-hash": hash, "kubeharness.dev/tier": "rust"});
    let idle = t1_pod(
        "t1-aaa",
        pool_labels.clone(),
        json!({}),
        ready_status("10.0.0.2"),
        "41",
    );
    list_pool(&mut server, vec![idle.clone()]).await;
    patch_pod(&mut server, "t1-aaa", 200, idle).await;
    read_t1_secret(&mut server, "t1-aaa", "pool-token").await;
    read_session(&mut server, session(None)).await;
    record_name_taken(&mut server, record_of("turn-1", "", "s-uid", true)).await;
    pod_deleted(&mut server, "t1-aaa").await;
    assert_eq!(reply.await.unwrap().0, 409);
    nothing_more(&mut server).await;
}

/// Session demo was deleted and created again under the same name (uid `s-uid` now, `old-uid`
/// before): the earlier session's turn-1 pod and record are not this session's. Its GET does not
/// see the pod (404) and is 409 on the record; its DELETE touches neither (204, nothing asked
/// after the record); the sweep deletes them.
#[tokio::test]
async fn the_turn_of_an_earlier_session_of_the_same_name_is_never_this_sessions() {
    let theirs = t1_pod(
        "t1-theirs",
        of_turn("turn-1", "old-uid"),
        json!({"kubeharness.dev/turn-id": "turn-1"}),
        ready_status("10.0.0.4"),
        "6",
    );
    let (base, mut server) = start().await;
    let reply = call(&base, reqwest::Method::GET, "turn-1").await;
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(&mut server, vec![theirs.clone()]).await;
    read_record(&mut server, None).await;
    assert_eq!(reply.await.unwrap().0, 404);

    let (base, mut server) = start().await;
    let reply = call(&base, reqwest::Method::GET, "turn-1").await;
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    find_turn(&mut server, vec![theirs]).await;
    expect(
        &mut server,
        "GET",
        &record_path(),
        200,
        record_of("turn-1", "t1-theirs", "old-uid", false),
    )
    .await;
    let (code, body): (u16, Value) = reply.await.unwrap();
    assert_eq!(code, 409, "{body}");

    let (base, mut server) = start().await;
    let reply = call(&base, reqwest::Method::DELETE, "turn-1").await;
    session_token(&mut server).await;
    read_session(&mut server, session(None)).await;
    expect(
        &mut server,
        "GET",
        &record_path(),
        200,
        record_of("turn-1", "t1-theirs", "old-uid", false),
    )
    .await;
    assert_eq!(reply.await.unwrap().0, 204);
    nothing_more(&mut server).await;
}
