//! How a merge-back's outcome reaches the turn: every change the worker did not take becomes a
//! problem of the tier's dispose report, and so a `harness.runtime.dispose.failed` event. The
//! local Tier-1 and a pod's merge say the same things in the same words.

use kube_harness_workspace::ApplyReport;

/// The problems of a merge: each rejected change (a conflict, a read-only path, …) and each
/// entry the higher tier left out of its change archive (a symlink pointing out of the
/// workspace, a special file), which would otherwise be gone without a word.
pub(crate) fn problems(report: &ApplyReport) -> Vec<String> {
    let rejected = report.rejected.iter().map(|r| {
        format!(
            "merge rejected {}: {}",
            r.harness_path.display(),
            serde_json::to_string(&r.reason).unwrap_or_default()
        )
    });
    let left_out = report
        .left_out
        .iter()
        .map(|line| format!("not merged back (left out by the higher tier): {line}"));
    rejected.chain(left_out).collect()
}
