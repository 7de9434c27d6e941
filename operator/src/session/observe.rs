//! Reading a worker pod: is it ready, starting, or failing, and why. Pure, so tests can feed it
//! pod statuses.

use crate::kube_util::{is_failing_wait, pod_condition, ready_ip};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube_harness_crds::condition::{self, types};
use kube_harness_crds::{HarnessSessionStatus, Phase};

/// The starting reason of an adopted warm pod that is Ready but whose worker has not (yet)
/// answered with this session's adoption.
pub const ADOPTION_UNCONFIRMED: &str = "AdoptionUnconfirmed";

/// What the worker pod says about itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerState {
    /// Running and passing its readiness probe; the endpoint is `ip:port`.
    Ready { ip: String },
    /// Scheduled or starting; the reason says what it waits for.
    Starting { reason: String },
    /// Will not become ready without help (image missing, crash loop, unschedulable).
    Failing { reason: String, message: String },
    /// Finished or being deleted: it must be replaced.
    Gone,
}

pub fn worker_state(pod: &Pod) -> WorkerState {
    if pod.metadata.deletion_timestamp.is_some() {
        return WorkerState::Gone;
    }
    let Some(status) = &pod.status else {
        return WorkerState::Starting {
            reason: "PodPending".into(),
        };
    };
    match status.phase.as_deref() {
        Some("Succeeded") | Some("Failed") => return WorkerState::Gone,
        _ => {}
    }
    for cs in status.container_statuses.iter().flatten() {
        if let Some(waiting) = cs.state.as_ref().and_then(|s| s.waiting.as_ref()) {
            let reason = waiting.reason.clone().unwrap_or_default();
            if is_failing_wait(&reason) {
                return WorkerState::Failing {
                    message: waiting.message.clone().unwrap_or_else(|| reason.clone()),
                    reason,
                };
            }
        }
    }
    if let Some(unschedulable) = pod_condition(status, "PodScheduled", "False") {
        return WorkerState::Starting {
            reason: unschedulable
                .reason
                .clone()
                .unwrap_or_else(|| "Unschedulable".into()),
        };
    }
    match ready_ip(status) {
        Some(ip) => WorkerState::Ready { ip: ip.clone() },
        None => WorkerState::Starting {
            reason: "WorkerStarting".into(),
        },
    }
}

/// The pod's IP once every container runs (none waiting or ended), whether or not the kubelet's
/// readiness probe has passed yet: the address at which the operator can ask the worker itself.
pub fn started_ip(pod: &Pod) -> Option<String> {
    let status = pod.status.as_ref()?;
    let statuses = status.container_statuses.as_ref()?;
    let all_running = !statuses.is_empty()
        && statuses
            .iter()
            .all(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()));
    all_running.then(|| status.pod_ip.clone()).flatten()
}

/// How long after its containers start a worker may wait for the kubelet's first passing
/// readiness probe (the worker pod's probe runs every second).
pub const FIRST_PROBE: std::time::Duration = std::time::Duration::from_secs(20);

/// Whether every container of `pod` runs and the latest of them started less than `within`
/// before `now` (a restart in place starts the window again).
pub fn just_started(pod: &Pod, within: std::time::Duration, now: Timestamp) -> bool {
    let Some(statuses) = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
    else {
        return false;
    };
    let started: Option<Vec<Timestamp>> = statuses
        .iter()
        .map(|c| {
            c.state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.as_ref())
                .map(|t| t.0)
        })
        .collect();
    match started.and_then(|s| s.into_iter().max()) {
        Some(latest) => now.duration_since(latest).as_secs_f64() < within.as_secs_f64(),
        None => false,
    }
}

/// Whether the session's status already records `pod` at `ip:port` as Ready: the worker answered
/// once, so a later slow answer while the kubelet's probe has not passed yet does not demote it.
/// A replaced pod has another IP or no IP yet, so it earns Ready again.
pub fn confirmed_ready(status: &HarnessSessionStatus, pod: &str, ip: &str, port: u16) -> bool {
    status.worker_pod.as_deref() == Some(pod)
        && status.worker_endpoint.as_deref() == Some(format!("{ip}:{port}").as_str())
        && status.phase == Some(Phase::Ready)
        && condition::is_true(&status.conditions, types::READY)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn session(pod: &str, endpoint: &str, ready: bool) -> HarnessSessionStatus {
        let mut status = HarnessSessionStatus {
            worker_pod: Some(pod.into()),
            worker_endpoint: Some(endpoint.into()),
            phase: Some(if ready {
                Phase::Ready
            } else {
                Phase::Provisioning
            }),
            ..Default::default()
        };
        condition::set(&mut status.conditions, types::READY, ready, "R", "m", None);
        status
    }

    fn running_since(started: &[Option<&str>]) -> Pod {
        serde_json::from_value(serde_json::json!({
            "status": {"containerStatuses": started.iter().enumerate().map(|(i, s)| {
                let state = match s {
                    Some(t) => serde_json::json!({"running": {"startedAt": t}}),
                    None => serde_json::json!({"waiting": {"reason": "CrashLoopBackOff"}}),
                };
                serde_json::json!({"name": format!("c{i}"), "image": "x", "imageID": "", "ready": false, "restartCount": 0, "state": state})
            }).collect::<Vec<_>>()}
        }))
        .unwrap()
    }

    #[test]
    fn just_started_is_the_window_after_the_latest_container_start() {
        let now: Timestamp = "2026-12-03T10:00:30Z".parse().unwrap();
        let window = std::time::Duration::from_secs(20);
        assert!(just_started(
            &running_since(&[Some("2026-12-03T10:00:20Z")]),
            window,
            now
        ));
        assert!(
            !just_started(&running_since(&[Some("2026-12-03T10:00:00Z")]), window, now),
            "hung for 30 s"
        );
        // A restart in place starts the window again; one container not running: no.
        assert!(just_started(
            &running_since(&[Some("2026-12-03T09:00:00Z"), Some("2026-12-03T10:00:25Z")]),
            window,
            now
        ));
        assert!(!just_started(
            &running_since(&[Some("2026-12-03T10:00:25Z"), None]),
            window,
            now
        ));
        assert!(!just_started(&Pod::default(), window, now));
        // A clock behind the kubelet's: started "in the future" counts as just started.
        assert!(just_started(
            &running_since(&[Some("2026-12-03T10:00:40Z")]),
            window,
            now
        ));
    }

    #[test]
    fn only_the_same_pod_at_the_same_address_keeps_its_ready() {
        let s = session("s-worker", "10.0.0.5:8080", true);
        assert!(confirmed_ready(&s, "s-worker", "10.0.0.5", 8080));
        assert!(
            !confirmed_ready(&s, "s-worker", "10.0.0.6", 8080),
            "a replaced pod"
        );
        assert!(!confirmed_ready(&s, "other", "10.0.0.5", 8080));
        let starting = session("s-worker", "10.0.0.5:8080", false);
        assert!(!confirmed_ready(&starting, "s-worker", "10.0.0.5", 8080));
        assert!(!confirmed_ready(
            &HarnessSessionStatus::default(),
            "s-worker",
            "10.0.0.5",
            8080
        ));
    }
}
