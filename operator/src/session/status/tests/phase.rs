//! Phase, conditions, endpoint and requeue as each observation calls for them, and the same again
//! for the same observations.

use super::*;

struct Want {
    phase: Option<Phase>,
    ready: Option<(String, String)>,
    degraded: Option<(String, String)>,
    hibernated: Option<(String, String)>,
    escalated: Option<(String, String)>,
    endpoint: Option<&'static str>,
    worker_pod: Option<&'static str>,
    current_tier: Option<u8>,
    requeue: Option<Duration>,
}

#[test]
fn status_follows_the_observations() {
    let hibernated_before = with(&[(types::HIBERNATED, true, reasons::IDLE_TIMEOUT, "idle")]);
    let cases: Vec<(&str, HarnessSessionStatus, Observed, Want)> = vec![
        (
            "worker tier missing: Pending, not Ready, Degraded; nothing else touched",
            HarnessSessionStatus::default(),
            Observed::NoWorkerTier(WorkerTierProblem::NotFound {
                tier: "w".into(),
                namespace: "ns".into(),
            }),
            Want {
                phase: Some(Phase::Pending),
                ready: f(reasons::WORKER_TIER_NOT_FOUND),
                degraded: t(reasons::WORKER_TIER_NOT_FOUND),
                hibernated: None,
                escalated: None,
                endpoint: None,
                worker_pod: None,
                current_tier: None,
                requeue: Some(WAIT_REQUEUE),
            },
        ),
        (
            "worker tier of level 1",
            HarnessSessionStatus::default(),
            Observed::NoWorkerTier(WorkerTierProblem::NotLevelZero {
                tier: "w".into(),
                level: 1,
            }),
            Want {
                phase: Some(Phase::Pending),
                ready: f(reasons::WORKER_TIER_NOT_LEVEL_ZERO),
                degraded: t(reasons::WORKER_TIER_NOT_LEVEL_ZERO),
                hibernated: None,
                escalated: None,
                endpoint: None,
                worker_pod: None,
                current_tier: None,
                requeue: Some(WAIT_REQUEUE),
            },
        ),
        (
            "ready worker that answered: Ready, its tier and endpoint",
            HarnessSessionStatus::default(),
            seen(Escalation::NoTier, running(ready(), Some(report(0, false)))),
            Want {
                phase: Some(Phase::Ready),
                ready: t(reasons::WORKER_READY),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: Some("10.0.0.7:8080"),
                worker_pod: Some("s-worker"),
                current_tier: Some(0),
                requeue: Some(READY_REQUEUE),
            },
        ),
        (
            "ready worker that did not answer: still Ready, tier 0",
            HarnessSessionStatus::default(),
            seen(Escalation::NoTier, running(ready(), None)),
            Want {
                phase: Some(Phase::Ready),
                ready: t(reasons::WORKER_READY),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: Some("10.0.0.7:8080"),
                worker_pod: Some("s-worker"),
                current_tier: Some(0),
                requeue: Some(READY_REQUEUE),
            },
        ),
        (
            "starting worker: Provisioning, no endpoint",
            HarnessSessionStatus::default(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Starting {
                        reason: "PodPending".into(),
                    },
                    None,
                ),
            ),
            Want {
                phase: Some(Phase::Provisioning),
                ready: f(reasons::WORKER_STARTING),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: Some("s-worker"),
                current_tier: None,
                requeue: Some(STARTING_REQUEUE),
            },
        ),
        (
            "adopted worker that has not confirmed: asked again soon, no pod event will come",
            HarnessSessionStatus::default(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Starting {
                        reason: ADOPTION_UNCONFIRMED.into(),
                    },
                    None,
                ),
            ),
            Want {
                phase: Some(Phase::Provisioning),
                ready: f(reasons::WORKER_STARTING),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: Some("s-worker"),
                current_tier: None,
                requeue: Some(WAIT_REQUEUE),
            },
        ),
        (
            "worker pod refused by the namespace's quota: Pending, Degraded, asked again",
            HarnessSessionStatus::default(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Failing {
                        reason: reasons::QUOTA_EXCEEDED.into(),
                        message:
                            "exceeded quota: q, requested: pods=1, used: pods=1, limited: pods=1"
                                .into(),
                    },
                    None,
                ),
            ),
            Want {
                phase: Some(Phase::Pending),
                ready: f(reasons::QUOTA_EXCEEDED),
                degraded: t(reasons::QUOTA_EXCEEDED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: Some("s-worker"),
                current_tier: None,
                requeue: Some(WAIT_REQUEUE),
            },
        ),
        (
            "failing worker: Failed and Degraded",
            HarnessSessionStatus::default(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Failing {
                        reason: "ImagePullBackOff".into(),
                        message: "no such image".into(),
                    },
                    None,
                ),
            ),
            Want {
                phase: Some(Phase::Failed),
                ready: f(reasons::WORKER_FAILING),
                degraded: t(reasons::WORKER_FAILING),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: Some("s-worker"),
                current_tier: None,
                requeue: Some(WAIT_REQUEUE),
            },
        ),
        (
            "worker gone: replaced soon, Degraded left as it was",
            HarnessSessionStatus::default(),
            seen(Escalation::NoTier, running(WorkerState::Gone, None)),
            Want {
                phase: Some(Phase::Provisioning),
                ready: f(reasons::WORKER_STARTING),
                degraded: None,
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: Some("s-worker"),
                current_tier: None,
                requeue: Some(REPLACE_REQUEUE),
            },
        ),
        (
            "hibernating: no pod, no endpoint, no requeue, Hibernated kept",
            hibernated_before.clone(),
            seen(
                Escalation::NoTier,
                Worker::Hibernating {
                    suspended: false,
                    pod_left: false,
                },
            ),
            Want {
                phase: Some(Phase::Hibernated),
                ready: f(reasons::HIBERNATED),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: t(reasons::IDLE_TIMEOUT),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: None,
                current_tier: None,
                requeue: None,
            },
        ),
        (
            "woken: Awake again",
            hibernated_before,
            seen(Escalation::NoTier, running(ready(), None)),
            Want {
                phase: Some(Phase::Ready),
                ready: t(reasons::WORKER_READY),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: Some("10.0.0.7:8080"),
                worker_pod: Some("s-worker"),
                current_tier: Some(0),
                requeue: Some(READY_REQUEUE),
            },
        ),
        (
            "idled out: Hibernated, not Ready, the last figures kept",
            HarnessSessionStatus::default(),
            seen(
                Escalation::NoTier,
                Worker::IdledOut {
                    report: report(0, false),
                },
            ),
            Want {
                phase: Some(Phase::Hibernated),
                ready: f(reasons::HIBERNATED),
                degraded: None,
                hibernated: t(reasons::IDLE_TIMEOUT),
                escalated: f(reasons::NO_ESCALATION_TIER),
                endpoint: None,
                worker_pod: None,
                current_tier: Some(0),
                requeue: None,
            },
        ),
        (
            "a serving Tier-1 pod: Escalated, currentTier is its level",
            HarnessSessionStatus::default(),
            seen(
                usable(vec![(
                    "p1",
                    Tier1Phase::Ready {
                        ip: "10.0.0.9".into(),
                    },
                )]),
                running(ready(), Some(report(0, true))),
            ),
            Want {
                phase: Some(Phase::Ready),
                ready: t(reasons::WORKER_READY),
                degraded: f(reasons::AS_EXPECTED),
                hibernated: f(reasons::AWAKE),
                escalated: t(reasons::TIER1_READY),
                endpoint: Some("10.0.0.7:8080"),
                worker_pod: Some("s-worker"),
                current_tier: Some(1),
                requeue: Some(READY_REQUEUE),
            },
        ),
    ];
    for (name, old, observed, want) in cases {
        let (got, requeue) = status(&old, Some(3), &observed);
        assert_eq!(got.phase, want.phase, "{name}: phase");
        assert_eq!(cond(&got, types::READY), want.ready, "{name}: Ready");
        assert_eq!(
            cond(&got, types::DEGRADED),
            want.degraded,
            "{name}: Degraded"
        );
        assert_eq!(
            cond(&got, types::HIBERNATED),
            want.hibernated,
            "{name}: Hibernated"
        );
        assert_eq!(
            cond(&got, types::ESCALATED),
            want.escalated,
            "{name}: Escalated"
        );
        assert_eq!(
            got.worker_endpoint.as_deref(),
            want.endpoint,
            "{name}: endpoint"
        );
        // The Service's address is shown exactly when the pod's endpoint is.
        assert_eq!(
            got.address.as_deref(),
            want.endpoint.map(|_| ADDRESS),
            "{name}: address"
        );
        assert_eq!(got.worker_pod.as_deref(), want.worker_pod, "{name}: pod");
        assert_eq!(got.current_tier, want.current_tier, "{name}: currentTier");
        assert_eq!(requeue, want.requeue, "{name}: requeue");
        assert_eq!(got.observed_generation, Some(3), "{name}: generation");
        // kstatus: Reconciling and Stalled are always there, of this generation, never both True.
        let (r, st) = (
            get(&got, types::RECONCILING).expect("Reconciling"),
            get(&got, types::STALLED).expect("Stalled"),
        );
        assert_eq!(
            r.observed_generation,
            Some(3),
            "{name}: Reconciling generation"
        );
        assert_eq!(
            st.observed_generation,
            Some(3),
            "{name}: Stalled generation"
        );
        assert!(
            !(r.status == "True" && st.status == "True"),
            "{name}: Reconciling and Stalled both True"
        );
        let secret = matches!(observed, Observed::Session(_)).then_some("s-token");
        assert_eq!(got.token_secret.as_deref(), secret, "{name}: tokenSecret");
        // Conditions set by this pass carry its generation.
        for c in &got.conditions {
            let untouched = old.conditions.contains(c);
            assert!(
                untouched || c.observed_generation == Some(3),
                "{name}: {} generation",
                c.type_
            );
        }
    }
}

/// A second pass over the same observations changes nothing, so no status write and no Event
/// follow; transition times stay.
#[test]
fn the_same_observations_give_the_same_status() {
    let observations = [
        seen(Escalation::NoTier, running(ready(), Some(report(0, false)))),
        seen(
            usable(vec![("p1", Tier1Phase::Pending)]),
            running(
                WorkerState::Starting {
                    reason: "PodPending".into(),
                },
                None,
            ),
        ),
        seen(
            Escalation::NoTier,
            Worker::Hibernating {
                suspended: false,
                pod_left: false,
            },
        ),
        Observed::NoWorkerTier(WorkerTierProblem::NotFound {
            tier: "w".into(),
            namespace: "ns".into(),
        }),
    ];
    for observed in observations {
        let (first, _) = status(&HarnessSessionStatus::default(), Some(2), &observed);
        let (second, _) = status(&first, Some(2), &observed);
        assert_eq!(first, second, "{observed:?}");
    }
}
