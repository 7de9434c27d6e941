//! The Escalated condition: the escalation tier and its Tier-1 pods, and the tier API's message.

use super::*;

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
