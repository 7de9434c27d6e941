//! What the operator takes from objects in a tenant's namespace (issue 30): a tenant with `edit`
//! there can delete the session's worker pod and make one of the same name, labels and hash, or
//! make the token Secret before the session exists. Only the pod the operator created (the uid
//! it recorded, and a controller reference to the session) is the session's worker, only the
//! Secret it created holds the session's tokens, and what a worker reports is bounded before it
//! reaches the status. Pure, so tests feed it objects.

use super::usage::WorkerReport;
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube_harness_crds::session::{Usage, MAX_COUNTER};
use kube_harness_crds::{HarnessSession, HarnessSessionStatus};

/// Whether `pod` is one the operator made for `session`: its uid is one the operator recorded
/// (in the status, or remembered since its create), and it names the session as its controller.
pub fn owned_pod(pod: &Pod, session: &HarnessSession, recorded: &[Option<&str>]) -> bool {
    let uid = pod.uid();
    let recorded = uid.is_some() && recorded.iter().any(|r| r.is_some() && *r == uid.as_deref());
    recorded && controlled_by(pod.owner_references(), session)
}

fn controlled_by(
    owners: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference],
    session: &HarnessSession,
) -> bool {
    let uid = session.uid();
    owners.iter().any(|o| {
        o.controller == Some(true) && o.kind == "HarnessSession" && Some(&o.uid) == uid.as_ref()
    })
}

/// Whether an existing Secret of the token Secret's name may be used as the session's: `Ok`
/// when the operator created it (the uid its status records; for a status an older operator
/// wrote, which records none, a Secret that names the session as its controller and was made
/// after it), else why not. `session_log`: whether the operator has a session log, whose token
/// the Secret must then hold.
pub fn owned_secret(
    secret: &Secret,
    session: &HarnessSession,
    old: &HarnessSessionStatus,
    session_log: bool,
) -> Result<(), String> {
    let name = secret.name_any();
    let refused = |why: &str| {
        Err(format!(
            "Secret {name} {why}; it is not used: delete it and the operator makes the session's own"
        ))
    };
    let ours = match (&old.token_secret_uid, &old.token_secret) {
        (Some(uid), _) => secret.uid().as_ref() == Some(uid),
        // Written by an operator that recorded no uid: the Secret it made is owned by the
        // session and younger than it.
        (None, Some(_)) => {
            let created =
                |t: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>| t.map(|t| t.0);
            controlled_by(secret.owner_references(), session)
                && matches!(
                    (
                        created(secret.metadata.creation_timestamp.as_ref()),
                        created(session.metadata.creation_timestamp.as_ref())
                    ),
                    (Some(s), Some(h)) if s >= h
                )
        }
        // A session the operator never made a Secret for: someone else did.
        (None, None) => false,
    };
    if !ours {
        return refused("was not created by the operator for this session");
    }
    let has = |key: &str| {
        secret
            .data
            .as_ref()
            .and_then(|d| d.get(key))
            .is_some_and(|v| !v.0.is_empty())
    };
    if !has("token") {
        return refused("has no key `token`");
    }
    if session_log && !has("session-log-token") {
        return refused("has no key `session-log-token`");
    }
    Ok(())
}

/// The most commands (and turns, refusals) a worker is believed to run per second of its pod's
/// life: far above what one session's queue can do (a command costs milliseconds end to end),
/// low enough that one tenant's report cannot move the cluster-wide Tier-0 share.
pub const MAX_RATE: u64 = 1000;

/// `report` bounded by what a worker could have done since its pod started (`pod_started`):
/// every counter at most [`MAX_RATE`] per second of the pod's life (and [`MAX_COUNTER`]); the
/// last activity no later than `now` and no earlier than the pod's start (a time it cannot read
/// counts as the pod's start, so an idle session still hibernates); the instance id and start
/// time short, the start time a time or nothing. A worker that lies gets no further than one
/// that works flat out, and its status write can never fail on what it said.
pub fn bounded(
    report: WorkerReport,
    pod_started: Option<Timestamp>,
    now: Timestamp,
) -> WorkerReport {
    let alive = pod_started
        .map(|s| now.duration_since(s).as_secs().max(0) as u64)
        .unwrap_or(0);
    let cap = alive
        .saturating_add(1)
        .saturating_mul(MAX_RATE)
        .min(MAX_COUNTER);
    let u = &report.usage;
    let usage = Usage::new(
        u.turns.min(cap),
        u.commands_tier0.min(cap),
        u.commands_tier1.min(cap),
        u.refusals.min(cap),
    );
    let floor = pod_started.unwrap_or(Timestamp::UNIX_EPOCH).min(now);
    let last = report
        .last_activity
        .parse::<Timestamp>()
        .map(|t| t.clamp(floor, now))
        .unwrap_or(floor);
    let started_at = report
        .started_at
        .as_deref()
        .and_then(|t| t.parse::<Timestamp>().ok())
        .map(|t| t.min(now).to_string());
    let short = |s: Option<String>| s.filter(|s| s.len() <= 128);
    WorkerReport {
        usage,
        instance: short(report.instance),
        started_at,
        last_activity: last.to_string(),
        settings: short(report.settings),
        ..report
    }
}

/// When `pod` started (its status's startTime, else its creation).
pub fn pod_started(pod: &Pod) -> Option<Timestamp> {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .or(pod.metadata.creation_timestamp.as_ref())
        .map(|t| t.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(n: u64, last: &str) -> WorkerReport {
        WorkerReport {
            usage: Usage::new(n, n, n, n),
            instance: Some("i".repeat(300)),
            started_at: Some("not a time".into()),
            tier: 0,
            busy: false,
            last_activity: last.into(),
            ready: true,
            settings: None,
        }
    }

    fn secret(uid: &str, keys: &[&str]) -> Secret {
        let data: serde_json::Map<String, serde_json::Value> = keys
            .iter()
            .map(|k| (k.to_string(), "eA==".into()))
            .collect();
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "demo-token", "uid": uid}, "data": data
        }))
        .unwrap()
    }

    fn demo() -> HarnessSession {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "kubeharness.dev/v1alpha1", "kind": "HarnessSession",
            "metadata": {"name": "demo", "namespace": "team-a", "uid": "uid-1"}, "spec": {}
        }))
        .unwrap()
    }

    /// Item 7: a token Secret made before the session (the tenant's token) was used as it was,
    /// and one without `session-log-token` crash-looped the worker. Both are refused now.
    #[test]
    fn only_the_secret_the_operator_made_with_its_keys_is_used() {
        let recorded = HarnessSessionStatus {
            token_secret: Some("demo-token".into()),
            token_secret_uid: Some("ours".into()),
            ..HarnessSessionStatus::default()
        };
        let both = ["token", "session-log-token"];
        let ok = owned_secret(&secret("ours", &both), &demo(), &recorded, true);
        assert_eq!(ok, Ok(()));
        let planted = owned_secret(
            &secret("tenants", &both),
            &demo(),
            &HarnessSessionStatus::default(),
            true,
        );
        assert!(planted.unwrap_err().contains("not created by the operator"));
        let replaced = owned_secret(&secret("tenants", &both), &demo(), &recorded, true);
        assert!(replaced.is_err(), "another uid than the one recorded");
        let no_log = owned_secret(&secret("ours", &["token"]), &demo(), &recorded, true);
        assert!(no_log.unwrap_err().contains("session-log-token"));
        assert_eq!(
            owned_secret(&secret("ours", &["token"]), &demo(), &recorded, false),
            Ok(()),
            "without a session log the key is not needed"
        );
    }

    #[test]
    fn a_report_is_bounded_by_the_pods_life_and_the_clock() {
        let now: Timestamp = "2026-12-03T10:00:00Z".parse().unwrap();
        let started: Timestamp = "2026-12-03T09:59:50Z".parse().unwrap();
        let b = bounded(report(u64::MAX, "2030-01-01T00:00:00Z"), Some(started), now);
        assert_eq!(b.usage.commands_tier0, 11 * MAX_RATE);
        assert_eq!(b.usage.turns, 11 * MAX_RATE);
        assert_eq!(b.last_activity, now.to_string(), "not in the future");
        assert_eq!((b.instance, b.started_at), (None, None));
        let b = bounded(report(7, "garbage"), Some(started), now);
        assert_eq!(b.usage.commands_tier1, 7, "plausible figures are kept");
        assert_eq!(
            b.last_activity,
            started.to_string(),
            "unreadable: the pod's start"
        );
        let b = bounded(report(7, "2000-01-01T00:00:00Z"), Some(started), now);
        assert_eq!(b.last_activity, started.to_string());
    }
}
