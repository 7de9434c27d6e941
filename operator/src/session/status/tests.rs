//! The status a reconcile computes, case by case: observations in, phase, conditions, fields and
//! requeue out. No API server.

use super::*;
use kube_harness_crds::session::Usage;
use kube_harness_crds::Condition;

const PORT: u16 = 8080;

fn report(tier: u8, busy: bool) -> WorkerReport {
    WorkerReport {
        usage: Usage {
            turns: 2,
            commands_tier0: 9,
            commands_tier1: 1,
            refusals: 0,
            tier0_share: Some("90.0%".into()),
        },
        tier,
        busy,
        last_activity: "2025-01-01T00:00:00Z".into(),
        ready: true,
        settings: None,
        instance: None,
        started_at: None,
    }
}

/// A report of `tier0` Tier-0 commands from worker process `instance`, started at `started`.
fn from_worker(instance: &str, started: &str, tier0: u64) -> WorkerReport {
    WorkerReport {
        usage: Usage::new(1, tier0, 0, 0),
        instance: Some(instance.into()),
        started_at: Some(started.into()),
        ..report(0, false)
    }
}

#[test]
fn usage_survives_a_new_worker_process_and_a_stale_report_is_not_counted_twice() {
    let mut status = HarnessSessionStatus::default();
    let tier0 = |s: &HarnessSessionStatus| s.usage.as_ref().unwrap().commands_tier0;
    apply_report(&mut status, &from_worker("wa", "2026-12-02T10:00:00Z", 3));
    apply_report(&mut status, &from_worker("wa", "2026-12-02T10:00:00Z", 5));
    assert_eq!(tier0(&status), 5);
    // The pod was replaced: the new process counts from zero, the session does not.
    apply_report(&mut status, &from_worker("wb", "2026-12-02T10:05:00Z", 1));
    assert_eq!(tier0(&status), 6);
    assert_eq!(status.usage.as_ref().unwrap().turns, 2);
    assert_eq!(
        status.usage.as_ref().unwrap().tier0_share.as_deref(),
        Some("100.0%")
    );
    // A cached report of the replaced process changes nothing.
    apply_report(&mut status, &from_worker("wa", "2026-12-02T10:00:00Z", 5));
    assert_eq!(tier0(&status), 6);
    apply_report(&mut status, &from_worker("wb", "2026-12-02T10:05:00Z", 3));
    assert_eq!(tier0(&status), 8);
    let carried = status.usage_carried.as_ref().unwrap();
    assert_eq!(
        (carried.worker.as_str(), carried.usage.commands_tier0),
        ("wb", 5)
    );
    // A worker that does not say which process it is: its counters as reported (9).
    apply_report(&mut status, &report(0, false));
    assert_eq!(tier0(&status), report(0, false).usage.commands_tier0);
}

const ADDRESS: &str = "http://s-worker.ns.svc:8080";

fn running(state: WorkerState, report: Option<WorkerReport>) -> Worker {
    Worker::Running { state, report }
}

fn ready() -> WorkerState {
    WorkerState::Ready {
        ip: "10.0.0.7".into(),
    }
}

fn seen(escalation: Escalation, worker: Worker) -> Observed {
    Observed::Session(Box::new(Seen {
        token_secret: "s-token".into(),
        token_secret_uid: None,
        worker_pod_uid: None,
        worker_pod: "s-worker".into(),
        workspace_claim: "s-workspace".into(),
        worker_port: PORT,
        address: ADDRESS.into(),
        escalation,
        worker,
    }))
}

fn usable(pods: Vec<(&str, Tier1Phase)>) -> Escalation {
    Escalation::Usable {
        tier: "t1".into(),
        level: 1,
        pods: pods.into_iter().map(|(n, p)| (n.to_string(), p)).collect(),
    }
}

/// A status holding these conditions, as an earlier reconcile or the tier API left it.
fn with(conditions: &[(&str, bool, &str, &str)]) -> HarnessSessionStatus {
    let mut status = HarnessSessionStatus::default();
    for (type_, value, reason, message) in conditions {
        condition::set(
            &mut status.conditions,
            type_,
            *value,
            reason,
            *message,
            Some(1),
        );
    }
    status
}

fn get<'a>(status: &'a HarnessSessionStatus, type_: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == type_)
}

/// (status, reason) of a condition, `None` when it is absent.
fn cond(status: &HarnessSessionStatus, type_: &str) -> Option<(String, String)> {
    get(status, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn t(reason: &str) -> Option<(String, String)> {
    Some(("True".into(), reason.into()))
}

fn f(reason: &str) -> Option<(String, String)> {
    Some(("False".into(), reason.into()))
}

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

/// (name, status before, observed escalation, Escalated (status, reason) after).
type EscalationCase = (
    &'static str,
    HarnessSessionStatus,
    Escalation,
    Option<(String, String)>,
);

#[test]
fn escalated_follows_the_tier_and_its_pods() {
    let pending = || vec![("p1", Tier1Phase::Pending)];
    let failed = || {
        vec![(
            "p1",
            Tier1Phase::Failed {
                reason: "ImagePullFailed".into(),
                message: "no image".into(),
            },
        )]
    };
    let was = |reason: &str, value: bool| with(&[(types::ESCALATED, value, reason, "earlier")]);
    let none = HarnessSessionStatus::default;
    let cases: Vec<EscalationCase> = vec![
        (
            "no tier",
            none(),
            Escalation::NoTier,
            f(reasons::NO_ESCALATION_TIER),
        ),
        (
            "tier missing",
            none(),
            Escalation::TierNotFound {
                tier: "x".into(),
                namespace: "ns".into(),
            },
            f(reasons::ESCALATION_TIER_NOT_FOUND),
        ),
        (
            "tier of level 0",
            none(),
            Escalation::TierIsLevelZero { tier: "x".into() },
            f(reasons::ESCALATION_TIER_IS_LEVEL_ZERO),
        ),
        (
            "no tier API URL",
            none(),
            Escalation::NotConfigured { tier: "x".into() },
            f(reasons::ESCALATION_NOT_CONFIGURED),
        ),
        (
            "usable, never escalated",
            none(),
            usable(vec![]),
            f(reasons::TIER1_AVAILABLE),
        ),
        (
            "pod starting",
            none(),
            usable(pending()),
            f(reasons::TIER1_PROVISIONING),
        ),
        (
            "pod failed",
            none(),
            usable(failed()),
            f(reasons::TIER1_FAILED),
        ),
        (
            "serving pod gone",
            was(reasons::TIER1_READY, true),
            usable(vec![]),
            f(reasons::TURN_ENDED),
        ),
        (
            "starting pod gone",
            was(reasons::TIER1_PROVISIONING, false),
            usable(vec![]),
            f(reasons::TURN_ENDED),
        ),
        (
            "ended turn stays ended",
            was(reasons::TURN_ENDED, false),
            usable(vec![]),
            f(reasons::TURN_ENDED),
        ),
        (
            "failure stays after its pod is deleted",
            was(reasons::TIER1_FAILED, false),
            usable(vec![]),
            f(reasons::TIER1_FAILED),
        ),
    ];
    for (name, old, escalation, want) in cases {
        let observed = seen(escalation, running(ready(), None));
        let (got, _) = status(&old, Some(1), &observed);
        assert_eq!(cond(&got, types::ESCALATED), want, "{name}");
    }
}

#[test]
fn the_tier_api_message_is_kept_while_status_and_reason_agree() {
    let old = with(&[(
        types::ESCALATED,
        true,
        reasons::TIER1_READY,
        "turn t-1 runs on Tier-1 pod p1",
    )]);
    let serving = usable(vec![(
        "p1",
        Tier1Phase::Ready {
            ip: "10.0.0.9".into(),
        },
    )]);
    let (got, _) = status(&old, Some(1), &seen(serving, running(ready(), None)));
    let escalated = get(&got, types::ESCALATED).unwrap();
    assert_eq!(escalated.message, "turn t-1 runs on Tier-1 pod p1");

    // A refusal is the reconcile's own: its message follows the reconcile.
    let old = with(&[(
        types::ESCALATED,
        false,
        reasons::NO_ESCALATION_TIER,
        "older",
    )]);
    let (got, _) = status(
        &old,
        Some(1),
        &seen(Escalation::NoTier, running(ready(), None)),
    );
    let escalated = get(&got, types::ESCALATED).unwrap();
    assert!(escalated.message.contains("exit 126"), "{escalated:?}");
}

#[test]
fn idled_out_reports_the_workers_last_figures() {
    let (got, _) = status(
        &HarnessSessionStatus::default(),
        Some(1),
        &seen(
            Escalation::NoTier,
            Worker::IdledOut {
                report: report(0, false),
            },
        ),
    );
    assert_eq!(got.usage, Some(report(0, false).usage));
    assert_eq!(
        got.last_activity_time.as_deref(),
        Some("2025-01-01T00:00:00Z")
    );
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

/// (name, status before, observation, phase, Ready, Reconciling, Stalled, requeue).
type KstatusCase = (
    &'static str,
    HarnessSessionStatus,
    Observed,
    Phase,
    Option<(String, String)>,
    Option<(String, String)>,
    Option<(String, String)>,
    Option<Duration>,
);

/// The kstatus pair for every state a session can be in: Reconciling True while the operator
/// works toward the spec (a worker starting, waking or being replaced; pods being released to
/// hibernate, suspend or expire), Stalled True when only a change can help (a missing or unusable
/// tier, a quota or admission refusal, a worker that cannot start), both False when the session
/// is what its spec asks for (Ready, hibernated, suspended, expired).
#[test]
fn reconciling_and_stalled_follow_kstatus() {
    let none = HarnessSessionStatus::default;
    let hibernating = |suspended, pod_left| {
        seen(
            Escalation::NoTier,
            Worker::Hibernating {
                suspended,
                pod_left,
            },
        )
    };
    let failing = |reason: &str| {
        seen(
            Escalation::NoTier,
            running(
                WorkerState::Failing {
                    reason: reason.into(),
                    message: "m".into(),
                },
                None,
            ),
        )
    };
    let idle = with(&[(types::HIBERNATED, true, reasons::IDLE_TIMEOUT, "idle")]);
    let cases: Vec<KstatusCase> = vec![
        (
            "ready: Current",
            none(),
            seen(Escalation::NoTier, running(ready(), None)),
            Phase::Ready,
            t(reasons::WORKER_READY),
            f(reasons::RECONCILED),
            f(reasons::AS_EXPECTED),
            Some(READY_REQUEUE),
        ),
        (
            "provisioning",
            none(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Starting {
                        reason: "PodPending".into(),
                    },
                    None,
                ),
            ),
            Phase::Provisioning,
            f(reasons::WORKER_STARTING),
            t(reasons::WORKER_STARTING),
            f(reasons::AS_EXPECTED),
            Some(STARTING_REQUEUE),
        ),
        (
            "waking from hibernation",
            idle.clone(),
            seen(
                Escalation::NoTier,
                running(
                    WorkerState::Starting {
                        reason: "WorkerStarting".into(),
                    },
                    None,
                ),
            ),
            Phase::Provisioning,
            f(reasons::WORKER_STARTING),
            t(reasons::WORKER_STARTING),
            f(reasons::AS_EXPECTED),
            Some(STARTING_REQUEUE),
        ),
        (
            "worker replaced",
            none(),
            seen(Escalation::NoTier, running(WorkerState::Gone, None)),
            Phase::Provisioning,
            f(reasons::WORKER_STARTING),
            t(reasons::WORKER_STARTING),
            f(reasons::AS_EXPECTED),
            Some(REPLACE_REQUEUE),
        ),
        (
            "missing tier: Stalled",
            none(),
            Observed::NoWorkerTier(WorkerTierProblem::NotFound {
                tier: "w".into(),
                namespace: "ns".into(),
            }),
            Phase::Pending,
            f(reasons::WORKER_TIER_NOT_FOUND),
            f(reasons::RECONCILED),
            t(reasons::WORKER_TIER_NOT_FOUND),
            Some(WAIT_REQUEUE),
        ),
        (
            "tier of level 1: Stalled",
            none(),
            Observed::NoWorkerTier(WorkerTierProblem::NotLevelZero {
                tier: "w".into(),
                level: 1,
            }),
            Phase::Pending,
            f(reasons::WORKER_TIER_NOT_LEVEL_ZERO),
            f(reasons::RECONCILED),
            t(reasons::WORKER_TIER_NOT_LEVEL_ZERO),
            Some(WAIT_REQUEUE),
        ),
        (
            "quota: Stalled",
            none(),
            failing(reasons::QUOTA_EXCEEDED),
            Phase::Pending,
            f(reasons::QUOTA_EXCEEDED),
            f(reasons::RECONCILED),
            t(reasons::QUOTA_EXCEEDED),
            Some(WAIT_REQUEUE),
        ),
        (
            "admission: Stalled",
            none(),
            failing(reasons::ADMISSION_REFUSED),
            Phase::Pending,
            f(reasons::ADMISSION_REFUSED),
            f(reasons::RECONCILED),
            t(reasons::ADMISSION_REFUSED),
            Some(WAIT_REQUEUE),
        ),
        (
            "a Persistent Dir's source missing: Pending and Stalled, asked again",
            none(),
            failing(reasons::PERSISTENT_DIR_SOURCE_MISSING),
            Phase::Pending,
            f(reasons::PERSISTENT_DIR_SOURCE_MISSING),
            f(reasons::RECONCILED),
            t(reasons::PERSISTENT_DIR_SOURCE_MISSING),
            Some(WAIT_REQUEUE),
        ),
        (
            "bad image: Stalled",
            none(),
            failing("ErrImagePull"),
            Phase::Failed,
            f(reasons::WORKER_FAILING),
            f(reasons::RECONCILED),
            t(reasons::WORKER_FAILING),
            Some(WAIT_REQUEUE),
        ),
        (
            "idled out: the pod is being deleted",
            none(),
            seen(
                Escalation::NoTier,
                Worker::IdledOut {
                    report: report(0, false),
                },
            ),
            Phase::Hibernated,
            f(reasons::HIBERNATED),
            t(reasons::HIBERNATING),
            f(reasons::AS_EXPECTED),
            None,
        ),
        (
            "hibernating, pod terminating",
            idle.clone(),
            hibernating(false, true),
            Phase::Hibernated,
            f(reasons::HIBERNATED),
            t(reasons::HIBERNATING),
            f(reasons::AS_EXPECTED),
            Some(WAIT_REQUEUE),
        ),
        (
            "hibernated: Current",
            idle.clone(),
            hibernating(false, false),
            Phase::Hibernated,
            f(reasons::HIBERNATED),
            f(reasons::RECONCILED),
            f(reasons::AS_EXPECTED),
            None,
        ),
        (
            "suspending",
            none(),
            hibernating(true, true),
            Phase::Hibernated,
            f(reasons::SUSPENDED),
            t(reasons::HIBERNATING),
            f(reasons::AS_EXPECTED),
            Some(WAIT_REQUEUE),
        ),
        (
            "suspended: Current",
            none(),
            hibernating(true, false),
            Phase::Hibernated,
            f(reasons::SUSPENDED),
            f(reasons::RECONCILED),
            f(reasons::AS_EXPECTED),
            None,
        ),
        (
            "suspended after failing: Degraded and Stalled cleared",
            with(&[
                (types::DEGRADED, true, reasons::WORKER_FAILING, "x"),
                (types::STALLED, true, reasons::WORKER_FAILING, "x"),
            ]),
            hibernating(true, false),
            Phase::Hibernated,
            f(reasons::SUSPENDED),
            f(reasons::RECONCILED),
            f(reasons::AS_EXPECTED),
            None,
        ),
        (
            "expiring",
            none(),
            Observed::Expired { releasing: true },
            Phase::Expired,
            f(reasons::EXPIRED),
            t(reasons::EXPIRING),
            f(reasons::AS_EXPECTED),
            Some(WAIT_REQUEUE),
        ),
        (
            "expired: Current",
            none(),
            Observed::Expired { releasing: false },
            Phase::Expired,
            f(reasons::EXPIRED),
            f(reasons::RECONCILED),
            f(reasons::AS_EXPECTED),
            None,
        ),
    ];
    for (name, old, observed, phase, ready, reconciling, stalled, requeue) in cases {
        let (got, again) = status(&old, Some(4), &observed);
        assert_eq!(got.phase, Some(phase), "{name}: phase");
        assert_eq!(cond(&got, types::READY), ready, "{name}: Ready");
        assert_eq!(
            cond(&got, types::RECONCILING),
            reconciling,
            "{name}: Reconciling"
        );
        assert_eq!(cond(&got, types::STALLED), stalled, "{name}: Stalled");
        assert_eq!(again, requeue, "{name}: requeue");
        assert_eq!(
            got.observed_generation,
            Some(4),
            "{name}: observedGeneration"
        );
        for type_ in [types::READY, types::RECONCILING, types::STALLED] {
            assert_eq!(
                get(&got, type_).unwrap().observed_generation,
                Some(4),
                "{name}: {type_} generation"
            );
        }
        // Stalled True exactly when Degraded is True: one cause, two readers.
        assert_eq!(
            cond(&got, types::STALLED).map(|c| c.0 == "True"),
            Some(condition::is_true(&got.conditions, types::DEGRADED)),
            "{name}: Stalled and Degraded"
        );
    }
}

#[test]
fn an_expired_session_forgets_its_claim_once_it_is_gone() {
    let (awake, _) = status(
        &HarnessSessionStatus::default(),
        Some(1),
        &seen(Escalation::NoTier, running(ready(), None)),
    );
    let (releasing, _) = status(&awake, Some(1), &Observed::Expired { releasing: true });
    // Still named while it is being deleted, so the next pass checks that it went.
    assert_eq!(releasing.workspace_claim.as_deref(), Some("s-workspace"));
    let (released, _) = status(&releasing, Some(1), &Observed::Expired { releasing: false });
    assert_eq!(released.workspace_claim, None);
    assert_eq!(released.worker_pod, None);
}

#[test]
fn a_suspended_session_says_so_in_hibernated_and_shows_no_worker() {
    let before = seen(Escalation::NoTier, running(ready(), Some(report(0, false))));
    let (awake, _) = status(&HarnessSessionStatus::default(), Some(1), &before);
    let (got, _) = status(
        &awake,
        Some(2),
        &seen(
            Escalation::NoTier,
            Worker::Hibernating {
                suspended: true,
                pod_left: false,
            },
        ),
    );
    assert_eq!(cond(&got, types::HIBERNATED), t(reasons::SUSPENDED));
    assert_eq!(got.worker_pod, None);
    assert_eq!(got.address, None);
    assert_eq!(got.worker_endpoint, None);
    // The usage counted so far stays.
    assert_eq!(got.usage, awake.usage);
}

#[test]
fn a_session_suspended_before_its_first_worker_keeps_no_claim_so_waking_it_is_a_first_start() {
    let suspended = seen(
        Escalation::NoTier,
        Worker::Hibernating {
            suspended: true,
            pod_left: false,
        },
    );
    let (at_creation, _) = status(&HarnessSessionStatus::default(), Some(1), &suspended);
    assert_eq!(at_creation.phase, Some(Phase::Hibernated));
    assert_eq!(
        at_creation.workspace_claim, None,
        "nothing is in a claim yet"
    );
    let (again, _) = status(&at_creation, Some(1), &suspended);
    assert_eq!(again.workspace_claim, None);
    // One that ran keeps its claim through the suspension: its files are there.
    let (awake, _) = status(
        &HarnessSessionStatus::default(),
        Some(1),
        &seen(Escalation::NoTier, running(ready(), None)),
    );
    let (asleep, _) = status(&awake, Some(2), &suspended);
    assert_eq!(asleep.workspace_claim.as_deref(), Some("s-workspace"));
}
