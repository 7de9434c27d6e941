//! Expiry and suspension: what a released or suspended session keeps and shows.

use super::*;

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
