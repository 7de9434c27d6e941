//! kstatus's Reconciling and Stalled beside Ready, for every state a session can be in.

use super::*;

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
