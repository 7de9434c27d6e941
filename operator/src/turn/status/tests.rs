use super::*;
use crate::tier1::pod as t1pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use serde_json::json;

const NOW: &str = "2026-12-07T12:00:00Z";

fn now() -> Timestamp {
    NOW.parse().unwrap()
}

fn turn(pod: Option<&str>, ended: bool, age_secs: i64) -> HarnessTurn {
    let created: Timestamp = now() - k8s_openapi::jiff::SignedDuration::from_secs(age_secs);
    let mut t: HarnessTurn = serde_json::from_value(json!({
        "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessTurn",
        "metadata": {"name": "demo-turn-1", "namespace": "team-a", "generation": 3,
                     "labels": {"kubeharness.dev/session-uid": "s-uid"},
                     "annotations": {"kubeharness.dev/turn-ended": "2026-12-07T11:59:00Z"}},
        "spec": {"session": "demo", "turn": "turn-1", "tier": "rust", "pod": pod, "ended": ended},
    }))
    .unwrap();
    t.metadata.creation_timestamp = Some(Time(created));
    t
}

fn pod(name: &str, turn: &str, uid: &str, status: serde_json::Value) -> Pod {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "team-a",
                     "labels": {"kubeharness.dev/session": "demo", "kubeharness.dev/session-uid": uid,
                                "kubeharness.dev/turn": t1pod::turn_label(turn), "kubeharness.dev/pool": "rust"},
                     "annotations": {"kubeharness.dev/turn-deadline": "2026-12-07T13:00:00Z",
                                     "kubeharness.dev/miss-reason": "x"}},
        "status": status,
    }))
    .unwrap()
}

fn ready() -> serde_json::Value {
    json!({"phase": "Running", "podIP": "10.0.0.7", "conditions": [{"type": "Ready", "status": "True"}]})
}

fn ready_condition(s: &HarnessTurnStatus) -> (&str, &str) {
    let c = s.conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    (c.status.as_str(), c.reason.as_str())
}

#[test]
fn a_ready_pod_makes_the_turn_ready_with_its_source_and_deadline() {
    let t = turn(Some("t1-abc"), false, 5);
    let s = status(&t, Some(&pod("t1-abc", "turn-1", "s-uid", ready())), now());
    assert_eq!(s.phase, Some(TurnPhase::Ready));
    assert_eq!(ready_condition(&s), ("True", reasons::TIER1_READY));
    assert_eq!(s.pod_ip.as_deref(), Some("10.0.0.7"));
    assert_eq!(s.source.as_deref(), Some("prepared"));
    assert_eq!(s.deadline.as_deref(), Some("2026-12-07T13:00:00Z"));
    assert_eq!(s.observed_generation, Some(3));
}

#[test]
fn a_starting_pod_is_pending_and_a_dead_one_failed() {
    let t = turn(Some("t1-abc"), false, 5);
    let s = status(
        &t,
        Some(&pod(
            "t1-abc",
            "turn-1",
            "s-uid",
            json!({"phase": "Pending"}),
        )),
        now(),
    );
    assert_eq!(s.phase, Some(TurnPhase::Pending));
    assert_eq!(ready_condition(&s), ("False", reasons::TIER1_PROVISIONING));
    let dead = json!({"phase": "Failed", "reason": "Evicted", "message": "node pressure"});
    let s = status(&t, Some(&pod("t1-abc", "turn-1", "s-uid", dead)), now());
    assert_eq!(s.phase, Some(TurnPhase::Failed));
    assert_eq!(ready_condition(&s), ("False", reasons::TIER1_FAILED));
}

#[test]
fn a_missing_pod_is_pending_for_its_grace_then_failed() {
    let young = turn(Some("t1-abc"), false, 5);
    assert_eq!(status(&young, None, now()).phase, Some(TurnPhase::Pending));
    let old = turn(
        Some("t1-abc"),
        false,
        POD_MISSING_GRACE.as_secs() as i64 + 1,
    );
    let s = status(&old, None, now());
    assert_eq!(s.phase, Some(TurnPhase::Failed));
    assert!(ready_condition(&s).1 == reasons::TIER1_FAILED);
}

#[test]
fn a_pod_serving_another_turn_or_session_object_does_not_count() {
    let t = turn(
        Some("t1-abc"),
        false,
        POD_MISSING_GRACE.as_secs() as i64 + 1,
    );
    let other_turn = pod("t1-abc", "turn-2", "s-uid", ready());
    assert_eq!(
        status(&t, Some(&other_turn), now()).phase,
        Some(TurnPhase::Failed)
    );
    let other_session = pod("t1-abc", "turn-1", "older-uid", ready());
    assert_eq!(
        status(&t, Some(&other_session), now()).phase,
        Some(TurnPhase::Failed)
    );
    let other_name = pod("t1-xyz", "turn-1", "s-uid", ready());
    assert_eq!(
        status(&t, Some(&other_name), now()).phase,
        Some(TurnPhase::Failed)
    );
}

#[test]
fn an_ended_turn_is_ended_whatever_its_pod_says() {
    let t = turn(Some("t1-abc"), true, 5);
    let s = status(&t, Some(&pod("t1-abc", "turn-1", "s-uid", ready())), now());
    assert_eq!(s.phase, Some(TurnPhase::Ended));
    assert_eq!(ready_condition(&s), ("False", reasons::TURN_ENDED));
    assert_eq!(s.ended_at.as_deref(), Some("2026-12-07T11:59:00Z"));
    assert_eq!(s.pod_ip, None);
}

#[test]
fn the_same_observation_gives_the_same_status_so_nothing_is_written_again() {
    let mut t = turn(Some("t1-abc"), false, 5);
    let p = pod("t1-abc", "turn-1", "s-uid", ready());
    let first = status(&t, Some(&p), now());
    t.status = Some(first.clone());
    assert_eq!(status(&t, Some(&p), now()), first);
}
