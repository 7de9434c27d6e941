//! Classifying a script: tree-sitter-bash parses it, the walk judges every command it would run.

mod getopt;
mod hidden;
mod inner;
mod kinds;
mod literal;
mod parse;
mod walk;
mod wrappers;

pub use parse::{MAX_SCRIPT_BYTES, PARSE_BUDGET};
pub use walk::MAX_NESTING;

use crate::matrix;
use crate::{Classification, ClassifyOptions, Reason, UNJUDGED};
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
        walker.script(script, walk::Scope::TOP);
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
