//! The classifier's findings as the trace and the worker API write them
//! (`kube_harness_protocol::trace::{Reason, EmulationGap, Classification}`). The matches are
//! exhaustive: a reason the classifier adds does not compile until the wire has it too.

use kube_harness_classify as classify;
use kube_harness_protocol::trace::{
    Classification, Decision, EmulationGap, GapKind, GapSignal, RealExecReason, Reason, Toggle,
};

/// An explained exec's `classification`.
pub fn classification(c: &classify::Classification) -> Classification {
    Classification {
        decision: match c.decision {
            classify::Decision::Tier0 => Decision::Tier0,
            classify::Decision::Escalate => Decision::Escalate,
            classify::Decision::Refuse => Decision::Refuse,
        },
        reasons: reasons(&c.reasons),
        matrix_version: c.matrix_version.clone(),
    }
}

/// The reasons of `harness.tier.escalated` and `harness.tier.refused`.
pub fn reasons(reasons: &[classify::Reason]) -> Vec<Reason> {
    reasons.iter().map(reason).collect()
}

fn reason(r: &classify::Reason) -> Reason {
    use classify::Reason as R;
    match r.clone() {
        R::Tier0Supported { commands } => Reason::Tier0Supported { commands },
        R::EmptyScript => Reason::EmptyScript,
        R::UnknownCommand { command } => Reason::UnknownCommand { command },
        R::NeedsRealExec { command, reason } => Reason::NeedsRealExec {
            command,
            reason: match reason {
                classify::RealExecReason::VersionControl => RealExecReason::VersionControl,
                classify::RealExecReason::Containers => RealExecReason::Containers,
                classify::RealExecReason::BuildToolchain => RealExecReason::BuildToolchain,
                classify::RealExecReason::PackageManager => RealExecReason::PackageManager,
                classify::RealExecReason::NetworkClient => RealExecReason::NetworkClient,
            },
        },
        R::CapabilityDisabled { command, toggle } => Reason::CapabilityDisabled {
            command,
            toggle: match toggle {
                classify::Toggle::Network => Toggle::Network,
                classify::Toggle::Python => Toggle::Python,
                classify::Toggle::Javascript => Toggle::Javascript,
            },
        },
        R::PolicyBlocked { command, rule } => Reason::PolicyBlocked { command, rule },
        R::DynamicCommand { command, detail } => Reason::DynamicCommand { command, detail },
        R::OpaqueScript { command } => Reason::OpaqueScript { command },
        R::ParseFailed { detail } => Reason::ParseFailed { detail },
        R::ClassifierUnavailable { detail } => Reason::ClassifierUnavailable { detail },
    }
}

/// The gap of an emulation-gap escalation or refusal.
pub fn gap(g: &classify::Gap) -> EmulationGap {
    EmulationGap {
        kind: GapKind::EmulationGap,
        signal: match g.signal {
            classify::GapSignal::CommandNotFound => GapSignal::CommandNotFound,
            classify::GapSignal::UnsupportedOption => GapSignal::UnsupportedOption,
        },
        command: g.command.clone(),
        option: g.option.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wire writes what the classifier's own types serialize to.
    #[test]
    fn the_wire_types_write_what_the_classifier_writes() {
        let options = classify::ClassifyOptions::default();
        for script in [
            "echo hi | grep h",
            "",
            "git status; make; ./x.sh; $CMD; frobnicate",
            "curl https://example.com",
            "python3 -c 'print(1)'",
            "eval \"$x\"",
        ] {
            let c = classify::classify(script, &options);
            assert_eq!(
                serde_json::to_value(classification(&c)).ok(),
                serde_json::to_value(&c).ok(),
                "{script}"
            );
        }
        for line in [
            "bash: line 1: make: command not found",
            "sed: unsupported option -- z",
        ] {
            if let Some(g) = classify::detect_emulation_gap(line) {
                assert_eq!(
                    serde_json::to_value(gap(&g)).ok(),
                    serde_json::to_value(&g).ok()
                );
            }
        }
    }
}
