//! The series the registry exports: their labels, an escalation timed once, bounded memory, and
//! Tier-1 snapshots. `dashboard` checks the chart's dashboard against them.

mod dashboard;

use super::escalation::OBSERVED_KEPT;
use super::*;

/// A registry with every recording method called, so every family has series.
fn exercised() -> Metrics {
    let m = Metrics::default();
    m.reconciled("harnesssession", 0.004);
    m.reconciled("sandboxtier", 0.002);
    m.failed("harnesssession", "conflict");
    m.failed("sandboxtier", "api");
    m.provisioned(true, 0.04);
    m.provisioned(false, 1.7);
    m.session("session/a/one", Some((Phase::Ready, 3, 4)));
    m.session("session/a/two", Some((Phase::Provisioning, 0, 0)));
    m.tier1_opened("prepared", None);
    m.tier1_opened("ordinary", Some("stock_empty"));
    m.tier1_failed("Unschedulable");
    m.session_started(true, None);
    m.session_started(false, Some("stock-empty"));
    m.session_started(false, None);
    m.warm_pool("tier0", 2);
    m.warm_pool("rust", 1);
    m.escalation_opened("uid-prepared");
    assert!(m.escalation_ready("uid-prepared", "prepared", None));
    assert!(m.escalation_ready("uid-ordinary", "ordinary", Some(3.0)));
    m.tier1_idle("rust", 2);
    m.tier1_pods(&HashMap::from([
        (("rust".to_string(), "idle"), 2),
        (("rust".to_string(), "serving"), 1),
    ]));
    m.leader.set(1);
    m
}

#[test]
fn the_new_series_appear_with_their_labels() {
    let text = exercised().encode();
    for want in [
        "kube_harness_session_provisioning_seconds_count{source=\"warm\"} 1",
        "kube_harness_session_provisioning_seconds_count{source=\"cold\"} 1",
        "kube_harness_escalation_seconds_count{source=\"prepared\"} 1",
        "kube_harness_escalation_seconds_count{source=\"ordinary\"} 1",
        "kube_harness_escalation_seconds_sum{source=\"ordinary\"} 3.0",
        "kube_harness_tier1_pods{tier=\"rust\",state=\"idle\"} 2",
        "kube_harness_tier1_pods{tier=\"rust\",state=\"serving\"} 1",
        "kube_harness_warm_pool_ready{tier=\"rust\"} 1",
        "kube_harness_warm_pool_ready{tier=\"tier0\"} 2",
        "kube_harness_tier1_opens_total{source=\"ordinary\",miss_reason=\"stock_empty\"} 1",
        "kube_harness_session_starts_total{source=\"cold\",miss_reason=\"stock-empty\"} 1",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    // A warm start of 40 ms lands in the 50 ms bucket, not only in +Inf.
    assert!(
        text.contains(
            "kube_harness_session_provisioning_seconds_bucket{le=\"0.05\",source=\"warm\"} 1"
        ),
        "{text}"
    );
}

#[test]
fn an_escalation_is_observed_once_per_pod() {
    let m = Metrics::default();
    m.escalation_opened("a");
    assert!(m.escalation_ready("a", "prepared", None));
    // Answered Ready again (a repeated open or show): not a second escalation.
    assert!(!m.escalation_ready("a", "prepared", None));
    // Not opened here and no creation time: nothing to time it from.
    assert!(!m.escalation_ready("b", "prepared", None));
    assert!(!m.escalation_ready("c", "ordinary", Some(f64::NAN)));
    assert!(!m.escalation_ready("c", "ordinary", Some(-1.0)));
    // Opened by another replica: timed from the pod's creation.
    assert!(m.escalation_ready("c", "ordinary", Some(2.0)));
    assert!(!m.escalation_ready("c", "ordinary", Some(9.0)));
    let text = m.encode();
    assert!(
        text.contains("kube_harness_escalation_seconds_count{source=\"prepared\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("kube_harness_escalation_seconds_sum{source=\"ordinary\"} 2.0"),
        "{text}"
    );
    // Timed from this replica's open: well under a second here.
    let sum = text
        .lines()
        .find_map(|l| l.strip_prefix("kube_harness_escalation_seconds_sum{source=\"prepared\"} "))
        .and_then(|v| v.parse::<f64>().ok())
        .expect("the prepared sum");
    assert!((0.0..1.0).contains(&sum), "{sum}");
}

#[test]
fn the_memory_of_escalations_is_bounded() {
    let m = Metrics::default();
    for i in 0..(OBSERVED_KEPT * 2 + 10) {
        let uid = format!("pod-{i}");
        m.escalation_opened(&uid);
        if i % 2 == 0 {
            m.escalation_ready(&uid, "ordinary", None);
        }
    }
    let clock = m.escalations.lock().unwrap();
    assert!(
        clock.opened.len() <= OBSERVED_KEPT,
        "{}",
        clock.opened.len()
    );
    assert!(clock.observed.len() <= OBSERVED_KEPT);
    assert_eq!(clock.observed.len(), clock.observed_set.len());
}

#[test]
fn a_tier1_snapshot_zeroes_what_it_no_longer_sees_and_drops_tiers_with_no_pods() {
    let m = Metrics::default();
    m.tier1_pods(&HashMap::from([
        (("rust".to_string(), "serving"), 3),
        (("go".to_string(), "idle"), 1),
    ]));
    m.tier1_idle("rust", 2);
    m.tier1_pods(&HashMap::from([(("rust".to_string(), "idle"), 1)]));
    let text = m.encode();
    for want in [
        "kube_harness_tier1_pods{tier=\"rust\",state=\"serving\"} 0",
        "kube_harness_tier1_pods{tier=\"rust\",state=\"idle\"} 1",
    ] {
        assert!(text.contains(want), "missing {want:?} in\n{text}");
    }
    assert!(
        !text.contains("tier=\"go\""),
        "a tier with no pods left:\n{text}"
    );
}

#[test]
fn planted_tier_labels_do_not_grow_the_series_forever() {
    let m = Metrics::default();
    for i in 0..1000 {
        m.tier1_pods(&HashMap::from([((format!("planted-{i}"), "kept"), 1)]));
    }
    m.tier1_pods(&HashMap::new());
    let text = m.encode();
    assert!(!text.contains("planted-"), "{text}");
    assert!(m.tier1_known.lock().unwrap().is_empty());
}
