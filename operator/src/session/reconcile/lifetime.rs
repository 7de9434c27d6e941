//! How long a session lives and when it sleeps: its TTL, hibernation (idle or `spec.suspend`) and
//! waking, and idleness. Pure: the caller reads the clock and passes `now`, so tests use fixed
//! times.

use crate::labels;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube_harness_crds::condition::{reasons, types};
use kube_harness_crds::session::TtlAction;
use kube_harness_crds::{HarnessSession, HarnessSessionStatus, Phase};
use std::time::Duration;

/// Whether the session's TTL has passed (never without a TTL).
pub fn ttl_expired(session: &HarnessSession, now: Timestamp) -> bool {
    ttl_left(session, now).is_none() && ttl_end(session).is_some()
}

/// When the session's TTL ends: its creation plus `lifetime.ttlSeconds`.
pub fn ttl_end(session: &HarnessSession) -> Option<Timestamp> {
    let ttl = session.spec.lifetime.as_ref()?.ttl_seconds?;
    let created = session.metadata.creation_timestamp.as_ref()?.0;
    created
        .checked_add(SignedDuration::from_secs(ttl.min(i64::MAX as u64) as i64))
        .ok()
}

/// How long until the TTL ends (a second past it, so that the reconcile then sees it passed);
/// `None` without a TTL or once it passed.
pub fn ttl_left(session: &HarnessSession, now: Timestamp) -> Option<Duration> {
    let left = now.duration_until(ttl_end(session)?);
    (left > SignedDuration::ZERO).then(|| Duration::from_secs(left.as_secs() as u64 + 1))
}

/// What the TTL does when it passes (Release unless the session asks for Delete).
pub fn ttl_action(session: &HarnessSession) -> TtlAction {
    session
        .spec
        .lifetime
        .as_ref()
        .map(|l| l.action())
        .unwrap_or_default()
}

/// Whether the session is to be deleted now: its TTL passed and its ttlAction is Delete.
pub fn ttl_deletes(session: &HarnessSession, now: Timestamp) -> bool {
    ttl_expired(session, now) && ttl_action(session) == TtlAction::Delete
}

/// Suspended by `spec.suspend`, or hibernated and no wake request since. A session suspended
/// until now wakes as soon as `spec.suspend` is false, with no wake request.
pub fn hibernating(session: &HarnessSession, status: &HarnessSessionStatus) -> bool {
    if session.spec.suspend {
        return true;
    }
    if status.phase != Some(Phase::Hibernated) {
        return false;
    }
    let hibernated = status
        .conditions
        .iter()
        .find(|c| c.type_ == types::HIBERNATED && c.status == "True");
    if hibernated.is_some_and(|c| c.reason == reasons::SUSPENDED) {
        return false;
    }
    let since = hibernated.map(|c| c.last_transition_time.0);
    match (since, wake_requested(session)) {
        (Some(since), Some(wake)) => wake <= since,
        _ => true,
    }
}

/// The latest wake request (the `kubeharness.dev/wake` annotation), if it is a time.
pub fn wake_requested(session: &HarnessSession) -> Option<Timestamp> {
    session.annotations().get(labels::WAKE)?.parse().ok()
}

/// Idle past idleHibernateSeconds at `now`, by the worker's `last_activity` and the latest wake
/// request.
pub fn idle_expired(session: &HarnessSession, last_activity: &str, now: Timestamp) -> bool {
    let idle = session
        .spec
        .lifetime
        .as_ref()
        .and_then(|l| l.idle_hibernate_seconds);
    let last = last_activity.parse::<Timestamp>().ok();
    // A wake request counts as activity: a session woken a moment ago is not idle.
    let last = match (last, wake_requested(session)) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    match (idle, last) {
        (Some(idle), Some(last)) => {
            now.duration_since(last) > SignedDuration::from_secs(idle as i64)
        }
        _ => false,
    }
}

/// Seconds from the session's creation, or from its latest wake request, to `now`.
pub fn provisioning_started(session: &HarnessSession, now: Timestamp) -> Option<f64> {
    let created = session.metadata.creation_timestamp.as_ref()?.0;
    let from = wake_requested(session).map_or(created, |w| w.max(created));
    Some(now.duration_since(from).as_secs_f64())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    use kube_harness_crds::condition;
    use kube_harness_crds::session::Lifetime;
    use serde_json::json;

    fn at(t: &str) -> Timestamp {
        t.parse().unwrap()
    }

    /// A session created at 10:00:00, with this lifetime and wake request.
    fn session(lifetime: Option<Lifetime>, wake: Option<&str>) -> HarnessSession {
        let mut s: HarnessSession = serde_json::from_value(json!({
            "apiVersion": "kubeharness.dev/v1alpha1",
            "kind": "HarnessSession",
            "metadata": {"name": "s", "namespace": "ns"},
            "spec": {"workerTier": "tier0"}
        }))
        .unwrap();
        s.metadata.creation_timestamp = Some(Time(at("2026-12-03T10:00:00Z")));
        s.spec.lifetime = lifetime;
        if let Some(w) = wake {
            s.annotations_mut().insert(labels::WAKE.into(), w.into());
        }
        s
    }

    fn ttl(seconds: u64, action: Option<TtlAction>) -> Option<Lifetime> {
        Some(Lifetime {
            ttl_seconds: Some(seconds),
            ttl_action: action,
            idle_hibernate_seconds: None,
        })
    }

    fn idle(seconds: u64) -> Option<Lifetime> {
        Some(Lifetime {
            ttl_seconds: None,
            ttl_action: None,
            idle_hibernate_seconds: Some(seconds),
        })
    }

    #[test]
    fn the_ttl_ends_ttl_seconds_after_creation_and_comes_back_a_second_past_it() {
        let s = session(ttl(600, None), None);
        assert_eq!(ttl_end(&s), Some(at("2026-12-03T10:10:00Z")));
        assert_eq!(
            ttl_left(&s, at("2026-12-03T10:09:00Z")),
            Some(Duration::from_secs(61))
        );
        assert!(!ttl_expired(&s, at("2026-12-03T10:09:59Z")));
        assert!(ttl_expired(&s, at("2026-12-03T10:10:00Z")));
        assert_eq!(ttl_left(&s, at("2026-12-03T10:10:01Z")), None);
        assert_eq!(ttl_action(&s), TtlAction::Release);
        assert!(!ttl_deletes(&s, at("2026-12-03T11:00:00Z")));
        let delete = session(ttl(600, Some(TtlAction::Delete)), None);
        assert!(!ttl_deletes(&delete, at("2026-12-03T10:05:00Z")));
        assert!(ttl_deletes(&delete, at("2026-12-03T10:10:00Z")));
    }

    #[test]
    fn a_session_without_a_ttl_never_expires() {
        let s = session(None, None);
        assert_eq!(ttl_end(&s), None);
        assert_eq!(ttl_left(&s, at("2099-01-01T00:00:00Z")), None);
        assert!(!ttl_expired(&s, at("2099-01-01T00:00:00Z")));
        let huge = session(ttl(u64::MAX, Some(TtlAction::Delete)), None);
        assert!(!ttl_deletes(&huge, at("2099-01-01T00:00:00Z")));
    }

    #[test]
    fn idleness_counts_from_the_last_command_or_the_latest_wake_request() {
        let s = session(idle(60), None);
        let now = at("2026-12-03T10:05:00Z");
        assert!(idle_expired(&s, "2026-12-03T10:03:59Z", now));
        assert!(!idle_expired(&s, "2026-12-03T10:04:00Z", now));
        assert!(!idle_expired(&s, "not a time", now), "no activity known");
        // A wake request a moment ago counts as activity.
        let woken = session(idle(60), Some("2026-12-03T10:04:30Z"));
        assert!(!idle_expired(&woken, "2026-12-03T10:00:00Z", now));
        assert!(idle_expired(
            &woken,
            "2026-12-03T10:00:00Z",
            at("2026-12-03T10:05:31Z")
        ));
        assert!(!idle_expired(&woken, "", now), "the wake request alone");
        assert!(!idle_expired(
            &session(None, None),
            "2026-12-03T09:00:00Z",
            now
        ));
    }

    fn hibernated(reason: &str, since: &str) -> HarnessSessionStatus {
        let mut status = HarnessSessionStatus {
            phase: Some(Phase::Hibernated),
            ..Default::default()
        };
        condition::set(
            &mut status.conditions,
            types::HIBERNATED,
            true,
            reason,
            "m",
            None,
        );
        status.conditions[0].last_transition_time = Time(at(since));
        status
    }

    #[test]
    fn a_hibernated_session_sleeps_until_a_wake_request_after_it_hibernated() {
        let status = hibernated(reasons::IDLE_TIMEOUT, "2026-12-03T10:10:00Z");
        assert!(hibernating(&session(None, None), &status));
        assert!(hibernating(
            &session(None, Some("2026-12-03T10:09:00Z")),
            &status
        ));
        assert!(!hibernating(
            &session(None, Some("2026-12-03T10:11:00Z")),
            &status
        ));
        assert!(!hibernating(
            &session(None, None),
            &HarnessSessionStatus::default()
        ));
        // Suspended: asleep while spec.suspend says so, awake once it no longer does.
        let mut suspended = session(None, None);
        suspended.spec.suspend = true;
        assert!(hibernating(&suspended, &HarnessSessionStatus::default()));
        let was_suspended = hibernated(reasons::SUSPENDED, "2026-12-03T10:10:00Z");
        assert!(!hibernating(&session(None, None), &was_suspended));
    }

    #[test]
    fn provisioning_is_timed_from_creation_or_the_latest_wake_request() {
        let now = at("2026-12-03T10:00:30Z");
        assert_eq!(provisioning_started(&session(None, None), now), Some(30.0));
        let woken = session(None, Some("2026-12-03T10:00:20Z"));
        assert_eq!(provisioning_started(&woken, now), Some(10.0));
        // A wake request older than the session: from its creation.
        let old_wake = session(None, Some("2026-12-03T09:00:00Z"));
        assert_eq!(provisioning_started(&old_wake, now), Some(30.0));
    }
}
