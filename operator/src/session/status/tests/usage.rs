//! The usage a session shows: carried over worker processes, never counted twice, and the last
//! figures of a worker that idled out.

use super::*;

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
