//! Classification before execution: every script is parsed with tree-sitter-bash and each command
//! it would run is judged against the versioned Tier-0 capability matrix, so a turn escalates
//! before its first side effect (the seed's `rm -rf build && cargo build`).

mod gap;
mod hidden;
mod kinds;
mod literal;
pub mod matrix;
mod options;
mod parse;
mod reason;
mod walk;
mod wrappers;

pub use gap::{detect_emulation_gap, Gap, GapSignal, RunOutput};
pub use options::{ClassifyOptions, CommandUse, Policy, PolicyRule, RuntimeToggles};
pub use parse::{MAX_SCRIPT_BYTES, PARSE_BUDGET};
pub use reason::{Classification, Decision, RealExecReason, Reason, Toggle};
pub use walk::MAX_NESTING;

use std::panic::{catch_unwind, AssertUnwindSafe};

/// Classifies `script` without running anything.
///
/// Never panics and never blocks for long: oversized, over-deep or unparseable scripts and an
/// unknown pinned matrix version all come back as reasons that escalate.
pub fn classify(script: &str, options: &ClassifyOptions) -> Classification {
    let Some(matrix) = matrix::get(options.matrix.as_deref()) else {
        let wanted = options.matrix.clone().unwrap_or_default();
        let reason = Reason::ClassifierUnavailable {
            detail: format!(
                "unknown capability matrix version {wanted:?} (known: {})",
                matrix::versions().join(", ")
            ),
        };
        return Classification::from_reasons(fail_closed(vec![reason], options), &wanted);
    };
    let walked = catch_unwind(AssertUnwindSafe(|| {
        let mut walker = walk::Walker::new(matrix, options);
        walker.script(script, 0, &[]);
        walker.finish()
    }));
    let reasons = walked.unwrap_or_else(|_| {
        vec![Reason::ClassifierUnavailable {
            detail: "internal classifier error".into(),
        }]
    });
    Classification::from_reasons(fail_closed(reasons, options), matrix.version())
}

/// With a policy in force (`denyCommands` or a rule), a script the classifier could not judge
/// (`parse-failed`, `classifier-unavailable`), or one that runs a command it cannot name
/// (`dynamic-command`: `x=git; $x`, `"$@"`, `g{i,}t`; `opaque-script`: `bash <(…)`, `./x.sh`,
/// `source f`) is refused rather than escalated: escalating would run it on a tier with every
/// program, where nothing checks the policy again.
fn fail_closed(mut reasons: Vec<Reason>, options: &ClassifyOptions) -> Vec<Reason> {
    let policy = &options.policy;
    if policy.deny_commands.is_empty() && policy.rule.is_none() {
        return reasons;
    }
    if reasons
        .iter()
        .any(|r| matches!(r, Reason::PolicyBlocked { .. }))
    {
        return reasons;
    }
    let unjudged = reasons.iter().find_map(|r| match r {
        Reason::ParseFailed { .. }
        | Reason::ClassifierUnavailable { .. }
        | Reason::DynamicCommand { .. }
        | Reason::OpaqueScript { .. } => Some(r.kind()),
        _ => None,
    });
    if let Some(kind) = unjudged {
        let rule = if policy.deny_commands.is_empty() {
            "policy"
        } else {
            "denyCommands"
        };
        reasons.insert(
            0,
            Reason::PolicyBlocked {
                command: UNJUDGED.into(),
                rule: format!("{rule} (fail closed: {kind})"),
            },
        );
    }
    reasons
}

/// The `command` of the `policy-blocked` reason that refuses a script the classifier could not
/// judge while a policy is in force.
pub const UNJUDGED: &str = "(unclassified script)";
