//! `cargo +nightly fuzz run classify` (from classify/): any bytes, as a script, never panic the
//! classifier, and the decision always follows from the reasons.
#![no_main]

use kube_harness_classify::{classify, ClassifyOptions, Decision, Reason};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let script = String::from_utf8_lossy(data);
    let mut options = ClassifyOptions::default();
    if data.first().is_some_and(|b| b % 2 == 0) {
        options.policy.deny_commands.push("git".into());
    }
    let got = classify(&script, &options);
    assert!(!got.reasons.is_empty());
    for reason in &got.reasons {
        if let Reason::ClassifierUnavailable { detail } = reason {
            assert_ne!(detail, "internal classifier error", "the walk panicked");
        }
    }
    let only_tier0 = got
        .reasons
        .iter()
        .all(|r| matches!(r, Reason::Tier0Supported { .. } | Reason::EmptyScript));
    assert_eq!(got.decision == Decision::Tier0, only_tier0);
});
